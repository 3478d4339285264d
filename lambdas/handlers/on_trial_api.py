"""API Gateway REST (AWS_IAM) -> the trial API: submit, list, read, report, cancel, compile-cache view."""

from __future__ import annotations

from typing import Any

from lambdas.runtime.entry import require_settings
from lambdas.runtime.observability import logger, metrics, tracer

_app: list[Any] = []


def app() -> Any:
    if not _app:
        from lambdas.handlers._trial_api_routes import build_app

        _app.append(build_app())
    return _app[0]


@require_settings("ApiSettings")
@logger.inject_lambda_context(correlation_id_path="requestContext.requestId")
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    from lambdas.handlers._trial_api_routes import foreign_media_type

    return foreign_media_type(event) or app().resolve(event, context)  # type: ignore[no-any-return]
