"""Routes of the trial API (the resolver behind ``on_trial_api``). Built on first request, not at import:
the validating resolver is the heaviest import a function here has."""

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from pydantic import BaseModel, Field

from lambdas.domain.trial import TrialInvalid
from lambdas.runtime.settings import ApiSettings, settings_for
from lambdas.services.trial_submission import SubmissionRefused, TrialNotFound

TITLE = "dualtrack trial API"
VERSION = "1.0.0"
ROUTES = {
    "/trials": {"GET", "POST"},
    "/trials/{id}": {"GET"},
    "/trials/{id}/report": {"GET"},
    "/trials/{id}/cancel": {"POST"},
    "/compile-cache": {"GET"},
}
TrialId = Annotated[str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,80}$", description="trial id (name-hash)")]


class Problem(BaseModel):
    path: str
    message: str


class ErrorBody(BaseModel):
    message: str
    errors: list[Problem] = Field(default_factory=list)


class CancelBody(BaseModel):
    reason: str = Field(default="cancelled through the API", max_length=1000)


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> Response[dict[str, Any]]:
    import json

    return Response(
        status_code=status,
        content_type=content_types.APPLICATION_JSON,
        body=json.loads(json.dumps(body, default=str)),
        headers=headers,
    )


def _now() -> str:
    from lambdas.services.cache_resolution import now_iso

    return now_iso()


# Answers every route can give, declared so the OpenAPI document lists each status the function returns.
_JSON: Any = {"application/json": {"schema": {}}}
COMMON: dict[int, OpenAPIResponse] = {
    422: {"description": "invalid request (field paths and fixes)", "content": _JSON},
    503: {"description": "could not be completed, nothing half-stored: send it again", "content": _JSON},
}
WITH_BODY: dict[int, OpenAPIResponse] = {
    **COMMON,
    400: {"description": "JSON nested too deeply to parse", "content": _JSON},
    413: {"description": "body too large", "content": _JSON},
    415: {"description": "body not sent as application/json", "content": _JSON},
}
NOT_FOUND: dict[int, OpenAPIResponse] = {404: {"description": "no such trial", "content": _JSON}}


class BadPageToken(ValueError):
    pass


def foreign_media_type(event: dict[str, Any]) -> dict[str, Any] | None:
    """A 415 answer when the request declares a body type other than JSON, before validation parses the body.

    The resolver's validation would otherwise parse form and multipart bodies into fields (this API takes JSON
    only), and fails outright on a multipart type without its boundary."""
    headers = {str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()}
    media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if not media or media == "application/json" or (media.startswith("application/") and media.endswith("+json")):
        return None
    import json

    body = {"message": f"Content-Type {media} is not accepted; send JSON (application/json). Nothing was stored",
            "errors": [{"path": "Content-Type", "message": "use application/json"}]}
    return {"statusCode": 415, "headers": {"Content-Type": content_types.APPLICATION_JSON},
            "body": json.dumps(body), "isBase64Encoded": False}


def build_app() -> APIGatewayRestResolver:
    from lambdas.adapters import wiring
    from lambdas.services import trial_submission as service

    app = APIGatewayRestResolver(enable_validation=True)

    def limit_body(app: APIGatewayRestResolver, next_middleware: Any) -> Response[dict[str, Any]]:
        body = app.current_event.body or ""
        limit = settings_for(ApiSettings).MAX_BODY_BYTES
        if len(body.encode()) > limit:
            return _json(
                413,
                {
                    "message": f"request body is {len(body.encode())} bytes; the limit is {limit}",
                    "errors": [{"path": "", "message": f"send at most {limit} bytes"}],
                },
            )
        return next_middleware(app)  # type: ignore[no-any-return]

    app.use(middlewares=[limit_body])

    @app.exception_handler(TrialInvalid)
    def _invalid(exc: TrialInvalid) -> Response[dict[str, Any]]:
        return _json(422, {"message": "the trial is invalid; nothing was stored", "errors": exc.as_dicts()})

    @app.exception_handler(RequestValidationError)
    def _request_invalid(exc: RequestValidationError) -> Response[dict[str, Any]]:
        errors = []
        for err in exc.errors():
            loc = [str(p) for p in err.get("loc", ()) if p not in ("body",)]
            message = err.get("msg", "invalid")
            if err.get("type") == "json_invalid":
                message = "malformed JSON: send one JSON object"
            errors.append({"path": ".".join(loc), "message": message})
        return _json(422, {"message": "the request is invalid; nothing was stored", "errors": errors})

    @app.exception_handler(SubmissionRefused)
    def _refused(exc: SubmissionRefused) -> Response[dict[str, Any]]:
        status = 409 if exc.reason == "triage" else 422
        return _json(status, {"message": f"submission refused ({exc.reason}); nothing was started", **exc.detail})

    @app.exception_handler(TrialNotFound)
    def _missing(exc: TrialNotFound) -> Response[dict[str, Any]]:
        return _json(404, {"message": f"no trial {exc.args[0]!r}; list trials with GET /trials"})

    @app.exception_handler(BadPageToken)
    def _bad_token(exc: BadPageToken) -> Response[dict[str, Any]]:
        return _json(400, {"message": "next_token is not a token this API returned; omit it to start over",
                           "errors": [{"path": "next_token", "message": "use the next_token of a previous page"}]})

    @app.exception_handler(RecursionError)
    def _too_deep(exc: RecursionError) -> Response[dict[str, Any]]:
        # Retrying can never help, so this is the client's error, not a 503.
        return _json(400, {"message": "the JSON body is nested too deeply to parse; nothing was stored",
                           "errors": [{"path": "", "message": "send a trial document (a few levels deep)"}]})

    @app.exception_handler(Exception)
    def _unexpected(exc: Exception) -> Response[dict[str, Any]]:
        from lambdas.runtime.observability import logger

        logger.exception("request failed")
        return _json(
            503,
            {
                "message": "the request could not be completed and nothing was left half-stored; "
                "send it again (submissions are idempotent)"
            },
        )

    @app.not_found
    def _not_found(exc: NotFoundError) -> Response[dict[str, Any]]:
        import re

        path, method = app.current_event.path, app.current_event.http_method.upper()
        for template, methods in ROUTES.items():
            if re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", template), path):
                if method in methods:  # the route exists; the path's trial id is not one this API could issue
                    return _json(404, {"message": f"no trial at {path}; trial ids are name-hash, see GET /trials"})
                allowed = ", ".join(sorted(methods))
                return _json(
                    405, {"message": f"{method} is not allowed on {template}; use {allowed}"}, {"Allow": allowed}
                )
        return _json(404, {"message": f"no route {method} {path}; see the OpenAPI document for the routes"})

    @app.post(
        "/trials",
        summary="Submit a trial",
        responses={
            200: {"description": "already submitted: the same trial, no second execution"},
            201: {"description": "trial stored and its workflow started"},
            **WITH_BODY,
            409: {"description": "refused by triage", "content": _JSON},
            422: {"description": "invalid trial (field paths and fixes)", "content": _JSON},
        },
    )
    def submit_trial(trial: Annotated[dict[str, Any], Body(description="the trial JSON")]) -> Response[dict[str, Any]]:
        from lambdas.domain.trial import parse_trial

        settings = settings_for(ApiSettings)
        spec = parse_trial(trial)
        done = service.submit(
            spec,
            trials=wiring.trials(ApiSettings),
            artifacts=wiring.artifacts(ApiSettings),
            workflow=wiring.workflow(),
            prices=wiring.prices(ApiSettings),
            region=settings.PRICE_REGION,
            now=_now(),
            attempt_timeout_s=settings.ATTEMPT_TIMEOUT_S,
            data_buckets=settings.DATA_BUCKETS,
            artifacts_bucket=settings.ARTIFACTS_BUCKET,
            targets=settings.JOB_TARGETS,
        )
        return _json(201 if done.created else 200, done.body, {"Location": done.body["status_url"]})

    @app.get("/trials", summary="List trials",
             responses={200: {"description": "a page of trials"}, **COMMON,
                        400: {"description": "next_token is not one this API returned", "content": _JSON}})
    def list_trials(
        limit: Annotated[int, Query(ge=1, le=100)] = 25,
        next_token: Annotated[str | None, Query(max_length=2048)] = None,
    ) -> dict[str, Any]:
        try:
            items, token = wiring.trials(ApiSettings).list(limit, next_token)
        except ValueError as exc:  # an undecodable token (UnicodeDecodeError, binascii.Error, JSON): the caller's
            raise BadPageToken(str(exc)) from None
        return {
            "trials": [{k: i.get(k) for k in ("trial_id", "name", "owner", "status", "created_at")} for i in items],
            "next_token": token,
        }

    @app.get("/trials/<trial_id>", summary="Trial status per run, attempts and current costs",
             responses={200: {"description": "the trial's status"}, **NOT_FOUND, **COMMON})
    def get_trial(trial_id: TrialId) -> dict[str, Any]:
        return service.trial_status(
            trial_id,
            trials=wiring.trials(ApiSettings),
            ledger=wiring.ledger(ApiSettings),
            settlement=wiring.settlement(ApiSettings, False),
            metrics=wiring.run_metrics(),
        )

    @app.get("/trials/<trial_id>/report", summary="The trial report (presigned URL, or the JSON itself)",
             responses={200: {"description": "the report (JSON) or where to fetch it (url)"}, **NOT_FOUND, **COMMON})
    def get_report(
        trial_id: TrialId, format: Annotated[str, Query(pattern="^(url|json)$")] = "url"
    ) -> Response[dict[str, Any]]:
        artifacts = wiring.artifacts(ApiSettings)
        if wiring.trials(ApiSettings).get(trial_id) is None:
            raise TrialNotFound(trial_id)
        key = f"trials/{trial_id}/report/report.json"
        report = artifacts.get_json(key)
        if report is None:
            return _json(404, {"message": f"trial {trial_id} has no report yet; it is written when the trial settles"})
        if format == "json":
            return _json(200, report)
        expires = settings_for(ApiSettings).REPORT_URL_EXPIRES_S
        return _json(
            200,
            {
                "report_uri": artifacts.uri(key),
                "url": artifacts.presigned_get(key, expires),
                "html_url": artifacts.presigned_get(f"trials/{trial_id}/report/report.html", expires),
                "expires_in_s": expires,
                "verdict": report["comparison"]["verdict"],
            },
        )

    @app.post("/trials/<trial_id>/cancel", summary="Cancel a trial (stops its workflow and Batch jobs)",
              responses={200: {"description": "cancelled (or already finished)"}, **NOT_FOUND, **WITH_BODY})
    def cancel_trial(trial_id: TrialId, body: Annotated[CancelBody | None, Body()] = None) -> dict[str, Any]:
        reason = (body or CancelBody()).reason
        return service.cancel(
            trial_id, trials=wiring.trials(ApiSettings), workflow=wiring.workflow(), now=_now(), reason=reason
        )

    @app.get("/compile-cache", summary="Compile-cache entries by model and compiler version, with hit rates",
             responses={200: {"description": "entries and per-model statistics"}, **COMMON})
    def compile_cache(
        model: Annotated[str | None, Query(max_length=200)] = None,
        compiler_version: Annotated[str | None, Query(max_length=64)] = None,
    ) -> dict[str, Any]:
        from lambdas.services.cache_retention import entry_view, group_stats

        items = [
            e
            for e in wiring.registry(ApiSettings).iter_all()
            if (model is None or e.get("model_slug") == model)
            and (compiler_version is None or e.get("compiler_version") == compiler_version)
        ]
        return {
            "entries": sorted((entry_view(e) for e in items), key=lambda v: (str(v["model"]), v["cache_key"])),
            "groups": group_stats(items),
        }

    return app


def openapi_document() -> str:
    return build_app().get_openapi_json_schema(
        title=TITLE,
        version=VERSION,  # type: ignore[no-any-return]
        description="Submit and follow dual-track fine-tuning trials.",
    )
