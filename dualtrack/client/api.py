"""The trial API's routes as methods (see lambdas/openapi.json); each returns the API's JSON body."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from dualtrack.client.endpoint import Endpoint, session
from dualtrack.client.errors import ConfigFailure
from dualtrack.client.http import RetryPolicy, SignedClient
from lambdas.domain.json_types import JsonObject


@dataclass(frozen=True)
class Submission:
    created: bool  # False: the API already had this trial (200) and started nothing new
    body: dict[str, Any]


class TrialApi:
    def __init__(self, http: SignedClient) -> None:
        self.http = http

    def submit(self, trial: dict[str, Any]) -> Submission:
        got = self.http.request("POST", "/trials", body=trial, ok=(200, 201, 202))
        return Submission(created=got.status in (201, 202), body=_object(got.body, "POST /trials"))

    def list(self, limit: int = 25, next_token: str | None = None) -> dict[str, Any]:
        got = self.http.request("GET", "/trials", query={"limit": limit, "next_token": next_token})
        return _object(got.body, "GET /trials")

    def get(self, trial_id: str) -> dict[str, Any]:
        return _object(self.http.request("GET", f"/trials/{_id(trial_id)}").body, "GET /trials/{id}")

    def report(self, trial_id: str) -> JsonObject:
        """The report JSON as stored (``lambdas.domain.report.model.TrialReport.model_validate`` reads it for
        ``lambdas.rendering``'s Markdown and HTML)."""
        got = self.http.request("GET", f"/trials/{_id(trial_id)}/report", query={"format": "json"})
        return _object(got.body, "GET /trials/{id}/report")

    def report_links(self, trial_id: str) -> dict[str, Any]:
        got = self.http.request("GET", f"/trials/{_id(trial_id)}/report", query={"format": "url"})
        return _object(got.body, "GET /trials/{id}/report")

    def cancel(self, trial_id: str, reason: str | None = None) -> dict[str, Any]:
        body = {"reason": reason} if reason else {}
        return _object(self.http.request("POST", f"/trials/{_id(trial_id)}/cancel", body=body).body,
                       "POST /trials/{id}/cancel")

    def decide(self, trial_id: str, *, approve: bool, comment: str) -> dict[str, Any]:
        """Approve or reject a PENDING_APPROVAL trial (an approver of its team other than its submitter)."""
        action = "approve" if approve else "reject"
        got = self.http.request("POST", f"/trials/{_id(trial_id)}/{action}", body={"comment": comment})
        return _object(got.body, f"POST /trials/{{id}}/{action}")

    def cost_report(self, team: str | None = None) -> dict[str, Any]:
        """The newest scheduled cost report: ``team``'s section (default: the caller's team), or every team's for a
        platform admin who names none."""
        got = self.http.request("GET", "/reports/costs", query={"team": team})
        return _object(got.body, "GET /reports/costs")

    def compile_cache(self, model: str | None = None, compiler_version: str | None = None) -> dict[str, Any]:
        got = self.http.request("GET", "/compile-cache", query={"model": model, "compiler_version": compiler_version})
        return _object(got.body, "GET /compile-cache")


def connect(endpoint: Endpoint, *, on_retry: Callable[[str], None] | None = None,
            retry: RetryPolicy | None = None) -> TrialApi:
    """A client signing with the user's credentials (boto3's chain: env, profile, SSO, instance role)."""
    credentials = session(endpoint.profile, endpoint.region).get_credentials()
    if credentials is None:
        raise ConfigFailure("no AWS credentials found: run `aws configure` or `aws sso login`, set AWS_PROFILE, "
                            "or export AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY")
    policy = retry or RetryPolicy(max_attempts=endpoint.max_attempts)
    return TrialApi(SignedClient(endpoint.url, endpoint.region, credentials, timeout_s=endpoint.timeout_s,
                                 retry=policy, on_retry=on_retry))


def _id(trial_id: str) -> str:
    return quote(trial_id, safe="")


def _object(body: Any, route: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ConfigFailure(f"{route} answered {type(body).__name__}, not a JSON object: is the endpoint the "
                            "dualtrack API? (check --endpoint or the stack output)")
    return body
