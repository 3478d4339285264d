"""EventBridge S3 "Object Created" -> checkpoint manifests and run summaries into the ledger; compile-cache
objects into the registry. A checkpoint is its manifest: shards without one are not recorded."""

from __future__ import annotations

from typing import Any

from lambdas.runtime.entry import require_settings
from lambdas.runtime.observability import logger, metrics, tracer


@require_settings("ArtifactEventSettings")
@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    from lambdas.tasks.artifact_objects import record_event

    return record_event(event, context)
