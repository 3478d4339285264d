"""Workflow task before the Trn2 track: the trial's compile-cache URL and whether it is warm (or failed before).

The same function collects entries unused for CACHE_RETENTION_DAYS when invoked with
``{"action": "collect_garbage"}`` (from a schedule), never touching an entry an active trial uses.
"""

from __future__ import annotations

from typing import Any

from lambdas.runtime.entry import require_settings
from lambdas.runtime.observability import logger, metrics, tracer


@require_settings("CacheSettings")
@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    from lambdas.tasks.compile_cache import process

    return process(event)
