"""EventBridge schedule -> cost report over a period for all trials, to S3 (reports/cost/<period>/) and SNS."""

from __future__ import annotations

from typing import Any

from lambdas.runtime.entry import require_settings
from lambdas.runtime.observability import logger, metrics, tracer


@require_settings("CostReportSettings")
@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    from lambdas.tasks.cost_report import publish_report

    return publish_report(event)
