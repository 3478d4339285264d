"""Workflow task: record the trial's status (and why) in the trials table."""

from __future__ import annotations

from typing import Any

from lambdas.runtime.entry import require_settings
from lambdas.runtime.observability import logger, metrics, tracer


@require_settings("LedgerSettings")
@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    from lambdas.tasks.trial_status import set_status

    return set_status(event)
