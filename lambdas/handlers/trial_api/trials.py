"""/trials: submit, list, read, report, cancel."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse

from lambdas.domain.trial import TrialInvalid, TrialSpec, check_rules
from lambdas.handlers.trial_api.models import (
    CancelBody,
    Cancelled,
    ErrorBody,
    ReportLinks,
    Submission,
    TrialPage,
    TrialStatus,
    TrialSummary,
)
from lambdas.services import trial_submission as service
from lambdas.services.cache_resolution import now_iso
from lambdas.services.trial_submission import TrialNotFound

router = Router()

TrialId = Annotated[str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,80}$", description="trial id (name-hash)")]


class BadPageToken(ValueError):
    pass


class ReportNotReady(LookupError):
    pass


def _inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """A model's JSON schema with its ``$defs`` written in place, so it stands alone inside the OpenAPI document
    (a response schema that is not a route's return type is not registered under ``components``)."""
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return resolve(dict(defs[ref.removeprefix("#/$defs/")]))
            return {k: resolve(v) for k, v in node.items()}
        return [resolve(v) for v in node] if isinstance(node, list) else node

    return resolve(schema)  # type: ignore[no-any-return]


ERROR_SCHEMA = _inlined(ErrorBody.model_json_schema())


def _error(description: str) -> OpenAPIResponse:
    return {"description": description, "content": {"application/json": {"schema": ERROR_SCHEMA}}}


# Answers every route can give, declared so the OpenAPI document lists each status the function returns.
COMMON: dict[int, OpenAPIResponse] = {
    422: _error("invalid request (field paths and fixes)"),
    503: _error("could not be completed, nothing half-stored: send it again"),
}
WITH_BODY: dict[int, OpenAPIResponse] = {
    **COMMON,
    400: _error("JSON nested too deeply to parse"),
    413: _error("body too large"),
    415: _error("body not sent as application/json"),
}
NOT_FOUND: dict[int, OpenAPIResponse] = {404: _error("no such trial")}


def api() -> Any:
    """The function's composition, which the handler puts in the router context for every request."""
    return router.context["api"]


@router.post(
    "/",
    summary="Submit a trial",
    responses={
        200: {"description": "already submitted: the same trial, no second execution"},
        201: {"description": "trial stored and its workflow started"},
        **WITH_BODY,
        409: _error("refused by triage"),
        422: _error("invalid trial (field paths and fixes)"),
    },
)
def submit_trial(trial: Annotated[TrialSpec, Body(description="the trial")]) -> Response[Submission]:
    app = api()
    problems = check_rules(trial)  # the catalogue's rules: instance types, layouts, limits
    if problems:
        raise TrialInvalid(problems)
    settings = app.settings
    done = service.submit(
        trial, trials=app.trials, artifacts=app.artifacts, workflow=app.workflow, prices=app.prices,
        region=settings.PRICE_REGION, now=now_iso(), attempt_timeout_s=settings.ATTEMPT_TIMEOUT_S,
        data_buckets=settings.DATA_BUCKETS, artifacts_bucket=settings.ARTIFACTS_BUCKET, targets=settings.JOB_TARGETS,
    )
    body = Submission.model_validate(done.body)
    return Response(status_code=201 if done.created else 200, content_type=content_types.APPLICATION_JSON,
                    body=body, headers={"Location": body.status_url})


@router.get("/", summary="List trials",
            responses={200: {"description": "a page of trials"}, **COMMON,
                       400: _error("next_token is not one this API returned")})
def list_trials(
    limit: Annotated[int, Query(ge=1, le=100)] = 25,
    next_token: Annotated[str | None, Query(max_length=2048)] = None,
) -> TrialPage:
    try:
        items, token = api().trials.list(limit, next_token)
    except ValueError as exc:  # an undecodable token (UnicodeDecodeError, binascii.Error, JSON): the caller's
        raise BadPageToken(str(exc)) from None
    return TrialPage(trials=[TrialSummary.model_validate(i) for i in items], next_token=token)


@router.get("/<trial_id>", summary="Trial status per run, attempts and current costs",
            responses={200: {"description": "the trial's status"}, **NOT_FOUND, **COMMON})
def get_trial(trial_id: TrialId) -> TrialStatus:
    app = api()
    return TrialStatus.model_validate(service.trial_status(trial_id, trials=app.trials, ledger=app.ledger,
                                                           settlement=app.settlement, metrics=app.metrics))


@router.get("/<trial_id>/report", summary="The trial report (presigned URL, or the JSON itself)",
            responses={200: {"description": "where to fetch the report (url), or the report itself (json)"},
                       **NOT_FOUND, **COMMON})
def get_report(
    trial_id: TrialId, format: Annotated[str, Query(pattern="^(url|json)$")] = "url"
) -> ReportLinks | dict[str, Any]:
    app = api()
    if app.trials.get(trial_id) is None:
        raise TrialNotFound(trial_id)
    key = f"trials/{trial_id}/report/report.json"
    report = app.artifacts.get_json(key)
    if report is None:
        raise ReportNotReady(trial_id)
    if format == "json":
        return dict(report)
    expires = app.settings.REPORT_URL_EXPIRES_S
    return ReportLinks(report_uri=app.artifacts.uri(key), url=app.artifacts.presigned_get(key, expires),
                       html_url=app.artifacts.presigned_get(f"trials/{trial_id}/report/report.html", expires),
                       expires_in_s=expires, verdict=report["comparison"]["verdict"])


@router.post("/<trial_id>/cancel", summary="Cancel a trial (stops its workflow and Batch jobs)",
             responses={200: {"description": "cancelled (or already finished)"}, **NOT_FOUND, **WITH_BODY})
def cancel_trial(trial_id: TrialId, body: Annotated[CancelBody | None, Body()] = None) -> Cancelled:
    app = api()
    reason = (body or CancelBody()).reason
    return Cancelled.model_validate(service.cancel(trial_id, trials=app.trials, workflow=app.workflow, now=now_iso(),
                                                   reason=reason))
