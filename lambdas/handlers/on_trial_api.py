"""API Gateway REST (AWS_IAM) -> the trial API: submit, list, read, report, cancel, compile-cache view.

The routers (``lambdas.handlers.trial_api``) hold one resource each; this module is the function: its settings,
its composition (handed to the routers as the resolver's context), the body-size and media-type gates, and the
one place where errors become HTTP answers.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from functools import cache
from http import HTTPStatus
from typing import TYPE_CHECKING, TypeAlias

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError

from lambdas.adapters.cache_registry import DynamoCacheRegistry
from lambdas.adapters.ledger_table import DynamoLedger
from lambdas.adapters.objects import S3Objects
from lambdas.adapters.run_metrics import CloudWatchRunMetrics
from lambdas.adapters.trials_table import DynamoTrials
from lambdas.adapters.workflow import StepFunctionsWorkflow
from lambdas.domain.json_types import JsonObject
from lambdas.domain.money.prices import PriceTable, load_price_table
from lambdas.domain.trial.governance import NotPermitted
from lambdas.domain.trial.rules import TrialInvalid, duplicate_key_problems, problems_from_errors
from lambdas.handlers.trial_api import compile_cache, reports, trials
from lambdas.handlers.trial_api.models import ErrorBody, Problem
from lambdas.runtime.api_settings import ApiSettings
from lambdas.runtime.function import lambda_handler
from lambdas.runtime.observability import logger
from lambdas.runtime.settings import per_environment, settings_for
from lambdas.services.ports import CacheRegistry, Ledger, Objects, RunMetrics, Trials, Workflow
from lambdas.services.run_folds import RunFolds
from lambdas.services.trial_submission import (
    DecisionConflict,
    QuotaExceeded,
    SubmissionRefused,
    TrialClosed,
    TrialNotFound,
)

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext


@dataclass(frozen=True)
class Composition:
    settings: ApiSettings
    trials: Trials
    ledger: Ledger
    artifacts: Objects
    registry: CacheRegistry
    workflow: Workflow
    prices: PriceTable
    settlement: RunFolds
    metrics: RunMetrics


@per_environment
def compose() -> Composition:
    settings = settings_for(ApiSettings)
    trials, ledger = DynamoTrials(settings.TRIALS_TABLE, settings.USAGE_TABLE), DynamoLedger(settings.LEDGER_TABLE)
    artifacts, prices = S3Objects(settings.ARTIFACTS_BUCKET), load_price_table(settings.PRICE_OVERRIDES)
    # The API reads runs' costs (a trial's status) and never records or settles them.
    return Composition(settings, trials, ledger, artifacts, DynamoCacheRegistry(settings.CACHE_REGISTRY_TABLE),
                       StepFunctionsWorkflow(settings.STATE_MACHINE_ARN), prices,
                       RunFolds(ledger, trials, artifacts, prices, settings.PRICE_REGION), CloudWatchRunMetrics())


app = APIGatewayRestResolver(enable_validation=True,
                             response_validation_error_http_code=HTTPStatus.INTERNAL_SERVER_ERROR)
app.configure_openapi(title="dualtrack trial API", version="1.0.0",
                      description="Submit and follow dual-track fine-tuning trials.")
app.include_router(trials.router, prefix="/trials")
app.include_router(compile_cache.router, prefix="/compile-cache")
app.include_router(reports.router, prefix="/reports")


# An HTTP answer this module makes: a JSON object body.
Answer: TypeAlias = Response[JsonObject]


def _json(status: int, body: JsonObject, headers: dict[str, str] | None = None) -> Answer:
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON,
                    body=json.loads(json.dumps(body, default=str)), headers=headers)


def _error(status: int, message: str, errors: list[dict[str, str]] | None = None,
           headers: dict[str, str] | None = None) -> Answer:
    return _json(status, ErrorBody.model_validate({"message": message, "errors": errors or []}).model_dump(),
                 headers)


@app.exception_handler(TrialInvalid)
def _invalid(exc: TrialInvalid) -> Answer:
    return _error(422, "the trial is invalid; nothing was stored", exc.as_dicts())


@app.exception_handler(RequestValidationError)
def _request_invalid(exc: RequestValidationError) -> Answer:
    errors = [{**err, "loc": tuple(p for p in err.get("loc", ()) if p != "body")} for err in exc.errors()]
    problems = [{"path": p.path, "message": p.message} for p in problems_from_errors(errors)]
    is_trial = app.current_event.http_method.upper() == "POST" and app.current_event.path.rstrip("/") == "/trials"
    what = "the trial" if is_trial else "the request"
    return _error(422, f"{what} is invalid; nothing was stored", problems)


@app.exception_handler(SubmissionRefused)
def _refused(exc: SubmissionRefused) -> Answer:
    status = 409 if exc.reason == "triage" else 422
    detail = dict(exc.detail)
    listed = detail.pop("errors", [])
    errors = list(listed) if isinstance(listed, list) else []
    if "message" in detail:  # the triage's sentence is a problem of the trial, not the answer's own message
        errors = [{"path": exc.reason, "message": detail.pop("message")}, *errors]
    return _json(status, {"message": f"submission refused ({exc.reason}); nothing was started", "errors": errors,
                          **detail})


@app.exception_handler(NotPermitted)
def _not_permitted(exc: NotPermitted) -> Answer:
    return _error(403, f"not permitted ({exc.role}); nothing was changed", [{"path": exc.role, "message": str(exc)}])


@app.exception_handler(QuotaExceeded)
def _over_quota(exc: QuotaExceeded) -> Answer:
    """429 when every quota exceeded frees by itself (a running trial ends, a month turns); 409 when the trial
    itself must change (a per-trial limit)."""
    frees = all(b.quota in ("concurrent_trials", "usd_per_month") for b in exc.breaches)
    waits = [b.retry_after_s for b in exc.breaches if b.retry_after_s is not None]
    headers = {"Retry-After": str(max(waits))} if frees and waits else None
    return _json(429 if frees else 409, {
        "message": "submission refused (quota); nothing was stored",
        "errors": [{"path": f"quota.{b.quota}", "message": b.message} for b in exc.breaches],
        "quotas": [b.model_dump() for b in exc.breaches]}, headers)


@app.exception_handler(DecisionConflict)
def _decided(exc: DecisionConflict) -> Answer:
    return _error(409, str(exc), [{"path": "status", "message": f"the trial is {exc.status}"}])


@app.exception_handler(TrialClosed)
def _closed(exc: TrialClosed) -> Answer:
    return _json(409, {"message": f"{exc}; nothing was started", "status": exc.status, "status_cause": exc.cause,
                       "errors": [{"path": "status", "message": f"the trial is {exc.status}"}]})


@app.exception_handler(TrialNotFound)
def _missing(exc: TrialNotFound) -> Answer:
    return _error(404, f"no trial {exc.args[0]!r}; list trials with GET /trials")


@app.exception_handler(trials.ReportNotReady)
def _no_report(exc: trials.ReportNotReady) -> Answer:
    return _error(404, f"trial {exc.args[0]} has no report yet; it is written when the trial settles")


@app.exception_handler(reports.CostReportNotReady)
def _no_cost_report(exc: reports.CostReportNotReady) -> Answer:
    return _error(404, "no cost report yet: the first is written after the stage's first whole reporting period "
                  "(cost_report_period)")


@app.exception_handler(trials.BadPageToken)
def _bad_token(exc: trials.BadPageToken) -> Answer:
    return _error(400, "next_token is not a token this API returned; omit it to start over",
                  [{"path": "next_token", "message": "use the next_token of a previous page"}])


@app.exception_handler(RecursionError)
def _too_deep(exc: RecursionError) -> Answer:
    # Retrying can never help, so this is the client's error, not a 503.
    return _error(400, "the JSON body is nested too deeply to parse; nothing was stored",
                  [{"path": "", "message": "send a trial document (a few levels deep)"}])


@app.exception_handler(Exception)
def _unexpected(exc: Exception) -> Answer:
    logger.exception("request failed")
    return _error(503, "the request could not be completed and nothing was left half-stored; "
                       "send it again (submissions are idempotent)")


@cache
def routes() -> dict[str, set[str]]:
    """Path template -> methods, from the routes the routers registered (the route table exists once)."""
    table: dict[str, set[str]] = {}
    for path, item in (app.get_openapi_schema().paths or {}).items():
        table[path] = {m.upper() for m in ("get", "put", "post", "delete", "patch") if getattr(item, m, None)}
    return table


@app.not_found
def _not_found(exc: NotFoundError) -> Answer:
    path, method = app.current_event.path, app.current_event.http_method.upper()
    for template, methods in routes().items():
        if re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", template), path):
            if method in methods:  # the route exists; the path's trial id is not one this API could issue
                return _error(404, f"no trial at {path}; trial ids are name-hash, see GET /trials")
            allowed = ", ".join(sorted(methods))
            return _error(405, f"{method} is not allowed on {template}; use {allowed}", headers={"Allow": allowed})
    return _error(404, f"no route {method} {path}; see the OpenAPI document for the routes")


def refused_before_parsing(event: JsonObject, max_body_bytes: int) -> JsonObject | None:
    """A 413 for a body over the limit, a 415 for a body type other than JSON, a 400 for a body flagged base64 that
    does not decode to text: answered before the resolver parses and validates the body. Validation would otherwise
    parse form and multipart bodies into fields (this API takes JSON only), fail outright on a multipart type without
    its boundary, and read a huge body before refusing it. A request without a body is never refused for its
    Content-Type: there is nothing of that type to parse (a GET whose client sends one by habit)."""
    size = len(_raw_body(event).encode())
    if size > max_body_bytes:
        return _answer(413, f"request body is {size} bytes; the limit is {max_body_bytes}", "",
                       f"send at most {max_body_bytes} bytes")
    if not size:
        return None
    media = _media_type(event)
    if _is_json(media):
        text = _text_body(event)
        if text is None:
            return _answer(400, "the body is flagged base64-encoded (isBase64Encoded) but is not base64 of UTF-8 "
                                "text; nothing was stored", "body", "send the JSON document as UTF-8 text")
        twice = duplicate_key_problems(text)
        if twice:
            return _answer(422, "the body gives a field more than once; JSON keeps the last silently, so the "
                                "request is ambiguous. Nothing was stored", twice[0].path, twice[0].message)
        return None
    return _answer(415, f"Content-Type {media} is not accepted; send JSON ({JSON_TYPES}). Nothing was stored",
                   "Content-Type", f"use {JSON_TYPES}")


JSON_TYPES = "application/json, or a structured-syntax type ending in +json such as application/vnd.api+json"


def _raw_body(event: JsonObject) -> str:
    body = event.get("body")
    return body if isinstance(body, str) else ""


def _media_type(event: JsonObject) -> str:
    """The body's media type without parameters, lowercased (type and subtype are case-insensitive: RFC 9110,
    8.3.1)."""
    given = event.get("headers")
    headers = {str(k).lower(): str(v) for k, v in given.items()} if isinstance(given, dict) else {}
    return headers.get("content-type", "").split(";", 1)[0].strip().lower()


def _is_json(media: str) -> bool:
    """No type (a body-less request), application/json, or a ``+json`` type (RFC 6839: its body is JSON)."""
    return not media or media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def _text_body(event: JsonObject) -> str | None:
    """The body as text: decoded when API Gateway base64-encoded it, None when that does not decode to UTF-8."""
    body = _raw_body(event)
    if not event.get("isBase64Encoded"):
        return body
    try:
        return base64.b64decode(body, validate=True).decode("utf-8")
    except ValueError:  # binascii.Error (not base64), UnicodeDecodeError (not UTF-8), non-ASCII input
        return None


def as_json_request(event: JsonObject) -> JsonObject:
    """The event as the resolver parses it: a base64 body decoded, and a JSON body's Content-Type written
    ``application/json`` (the resolver matches that spelling only, and would fail on any other with no answer a
    client can act on). Called on an event ``refused_before_parsing`` let through."""
    out = {**event, "body": _text_body(event), "isBase64Encoded": False} if event.get("isBase64Encoded") else event
    if not _media_type(event):
        return out
    out = dict(out)
    for field in ("headers", "multiValueHeaders"):
        given = event.get(field)
        if isinstance(given, dict) and given:
            kept: JsonObject = {k: v for k, v in given.items() if str(k).lower() != "content-type"}
            kept["Content-Type"] = [content_types.APPLICATION_JSON] if field == "multiValueHeaders" else (
                content_types.APPLICATION_JSON)
            out[field] = kept
    return out


def _answer(status: int, message: str, path: str, fix: str) -> JsonObject:
    body = ErrorBody(message=message, errors=[Problem(path=path, message=fix)])
    return {"statusCode": status, "headers": {"Content-Type": content_types.APPLICATION_JSON},
            "body": body.model_dump_json(), "isBase64Encoded": False}


def openapi_document() -> str:
    return app.get_openapi_json_schema()


@lambda_handler(ApiSettings, correlation_id_path="requestContext.requestId")
def handler(event: JsonObject, context: LambdaContext) -> JsonObject:
    api = compose()
    refused = refused_before_parsing(event, api.settings.MAX_BODY_BYTES)
    if refused is not None:
        return refused
    app.append_context(api=api)
    return app.resolve(as_json_request(event), context)
