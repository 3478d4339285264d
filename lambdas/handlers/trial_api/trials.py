"""/trials: submit, list, read, report, cancel."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse

from lambdas.domain.trial.governance import Caller, NotPermitted
from lambdas.domain.trial.spec import TrialSpec
from lambdas.handlers.trial_api.models import (
    CancelBody,
    Cancelled,
    DecisionBody,
    ErrorBody,
    ReportLinks,
    Submission,
    TrialPage,
    TrialStatus,
    TrialSummary,
)
from lambdas.services import trial_submission as service
from lambdas.services.baseline_sources import baseline_refused
from lambdas.services.clock import now_iso
from lambdas.services.trial_status import Stopper

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
    400: _error("JSON nested too deeply to parse, or a body flagged base64 that is not base64 of UTF-8 text"),
    413: _error("body too large"),
    415: _error("body not sent as JSON (application/json, or a type ending in +json)"),
}
NOT_FOUND: dict[int, OpenAPIResponse] = {404: _error("no such trial")}


def api() -> Any:
    """The function's composition, which the handler puts in the router context for every request."""
    return router.context["api"]


def caller() -> Caller:
    """The IAM principal API Gateway authenticated for this request, as the stage's governance sees it."""
    context = router.current_event.raw_event.get("requestContext") or {}
    arn = (context.get("identity") or {}).get("userArn")
    if not arn:
        raise NotPermitted("the request carries no IAM principal (requestContext.identity.userArn); call the API "
                           "with SigV4-signed requests (AWS_IAM authorisation)", role="team")
    return api().settings.GOVERNANCE.identify(arn, context.get("accountId"))


def stage() -> service.Stage:
    settings = api().settings
    return service.Stage(region=settings.PRICE_REGION, attempt_timeout_s=settings.ATTEMPT_TIMEOUT_S,
                         data_buckets=settings.DATA_BUCKETS, artifacts_bucket=settings.ARTIFACTS_BUCKET,
                         targets=settings.JOB_TARGETS, governance=settings.GOVERNANCE,
                         max_attempts=settings.MAX_ATTEMPTS, image_versions=settings.IMAGE_VERSIONS,
                         compile_timeout_s=settings.COMPILE_TIMEOUT_S)


def plane() -> service.Plane:
    app = api()
    return service.Plane(trials=app.trials, artifacts=app.artifacts, workflow=app.workflow, prices=app.prices)




@router.post(
    "/",
    summary="Submit a trial",
    responses={
        200: {"description": "already submitted: the same trial, no second execution"},
        201: {"description": "trial stored and its workflow started"},
        202: {"description": "trial stored PENDING_APPROVAL: an approver of the team must approve it"},
        **WITH_BODY,
        403: _error("the caller's principal is in no team, or owner names another team"),
        409: _error("refused by triage, or over a per-trial quota"),
        422: _error("invalid trial (field paths and fixes)"),
        429: _error("over a team quota that frees later (Retry-After where it frees with time)"),
    },
)
def submit_trial(trial: Annotated[TrialSpec, Body(description="the trial")]) -> Response[Submission]:
    who, where, ports = caller(), stage(), plane()
    # The team first (NotPermitted for a caller of no team, or an owner of another), then where its baseline is.
    team = service.submitting_team(trial, who, where.governance)
    refused = baseline_refused(trial, team, ports.trials, artifacts_root=f"s3://{where.artifacts_bucket}/",
                               data_buckets=where.data_buckets)
    if refused is not None:
        raise service.SubmissionRefused("baseline", {"errors": [{"path": "baseline_logs_uri", "message": refused}]})
    done = service.submit(trial, caller=who, stage=where, plane=ports, now=datetime.now(UTC))
    body = Submission.model_validate(done.body)
    status = 202 if body.status == "PENDING_APPROVAL" and done.created else 201 if done.created else 200
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON,
                    body=body, headers={"Location": body.status_url})


@router.get("/", summary="List the caller's team's trials (every team's for a platform admin), newest first",
            responses={200: {"description": "a page of trials"}, **COMMON,
                       400: _error("next_token is not one this API returned for the caller's listing"),
                       403: _error("the caller's principal is in no team")})
def list_trials(
    limit: Annotated[int, Query(ge=1, le=100)] = 25,
    next_token: Annotated[str | None, Query(max_length=2048)] = None,
) -> TrialPage:
    who = caller()
    if not who.admin and who.team is None:
        raise NotPermitted(f"principal {who.principal} is a member of no team on this stage; ask a platform admin "
                           "to add it to governance.teams.<team>.members (or a member_roles pattern)", role="team")
    try:
        items, token = api().trials.list(limit, next_token, None if who.admin else who.team)
    except ValueError as exc:  # undecodable (binascii.Error, UnicodeDecodeError, JSON) or not a key of this listing
        raise BadPageToken(str(exc)) from None
    return TrialPage(trials=[TrialSummary.model_validate(i.model_dump(mode="json")) for i in items],
                     next_token=token)


@router.get("/<trial_id>", summary="Trial status per run, attempts and current costs",
            responses={200: {"description": "the trial's status"}, **NOT_FOUND, **COMMON})
def get_trial(trial_id: TrialId) -> TrialStatus:
    app = api()
    return TrialStatus.model_validate(service.trial_status(trial_id, caller=caller(), trials=app.trials,
                                                           ledger=app.ledger, settlement=app.settlement,
                                                           metrics=app.metrics))


@router.get("/<trial_id>/report", summary="The trial report (presigned URL, or the JSON itself)",
            responses={200: {"description": "where to fetch the report (url), or the report itself (json)"},
                       **NOT_FOUND, **COMMON})
def get_report(
    trial_id: TrialId, format: Annotated[str, Query(pattern="^(url|json)$")] = "url"
) -> ReportLinks | dict[str, Any]:
    app = api()
    item = service.visible(app.trials, trial_id, caller())
    key = f"trials/{trial_id}/report/report.json"
    report = app.artifacts.get_json(key)
    if report is None and item.stopped_after_start:
        # A stopped workflow never reaches its report step: the report is written here once the runs have settled.
        # The one path of this function that builds a report: its modules load here, so the routes every request
        # takes never pay for them at cold start.
        from lambdas.adapters.sources import UriSources  # noqa: PLC0415
        from lambdas.services.trial_reporting import report_stopped_trial  # noqa: PLC0415

        if report_stopped_trial(item, app.artifacts, app.ledger, now_iso(), UriSources(), app.registry,
                                app.prices, app.trials) is not None:
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
             responses={200: {"description": "CANCELLED once nothing of it runs, STOPPING while its execution or "
                                             "jobs are still ending (send it again, or let the reconciler finish "
                                             "it), or its status if it had already finished"},
                        **NOT_FOUND, **WITH_BODY})
def cancel_trial(trial_id: TrialId, body: Annotated[CancelBody | None, Body()] = None) -> Cancelled:
    app = api()
    reason = (body or CancelBody()).reason
    stopper = Stopper(app.trials, app.workflow, app.ledger)
    return Cancelled.model_validate(service.cancel(trial_id, caller=caller(), stopper=stopper, now=now_iso(),
                                                   reason=reason))


DECISION: dict[int, OpenAPIResponse] = {
    **NOT_FOUND, **WITH_BODY,
    403: _error("the caller is not an approver of the trial's team, or submitted the trial"),
    409: _error("the trial is not PENDING_APPROVAL (decided, cancelled or never pending)"),
}


@router.post("/<trial_id>/approve", summary="Approve a pending trial (an approver of its team, not its submitter)",
             responses={200: {"description": "approved: the workflow started"}, **DECISION})
def approve_trial(trial_id: TrialId, body: Annotated[DecisionBody, Body()]) -> Submission:
    return Submission.model_validate(service.decide(trial_id, approve=True, comment=body.comment, caller=caller(),
                                                    plane=plane(), now=datetime.now(UTC)))


@router.post("/<trial_id>/reject", summary="Reject a pending trial (an approver of its team, not its submitter)",
             responses={200: {"description": "rejected: nothing was started"}, **DECISION})
def reject_trial(trial_id: TrialId, body: Annotated[DecisionBody, Body()]) -> Submission:
    return Submission.model_validate(service.decide(trial_id, approve=False, comment=body.comment, caller=caller(),
                                                    plane=plane(), now=datetime.now(UTC)))
