"""EventBridge "Batch Job State Change" -> ledger facts for the attempt; on a terminal state, the run's cost."""

from __future__ import annotations

from typing import Any

from lambdas.runtime.entry import require_settings
from lambdas.runtime.observability import logger, metrics, tracer


@require_settings("RunEventSettings")
@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    from lambdas.tasks.job_state import record_event

    return record_event(event, context)
