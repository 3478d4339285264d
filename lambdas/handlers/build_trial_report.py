"""Workflow task: build the trial report (JSON, Markdown, HTML) in S3 next to the trial."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from lambdas.runtime.observability import logger, metrics, tracer
from lambdas.runtime.settings import LedgerSettings, require_settings


class ReportRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)

    trial_id: str = Field(min_length=1)


def build(request: ReportRequest) -> dict[str, Any]:
    from lambdas.adapters import wiring
    from lambdas.adapters.cache_resolution import load_spec, now_iso
    from lambdas.adapters.trial_reporting import write_report

    artifacts = wiring.artifacts(LedgerSettings)
    spec = load_spec(artifacts, artifacts.uri(f"trials/{request.trial_id}/spec.json"))
    out = write_report(request.trial_id, spec, artifacts, wiring.ledger(LedgerSettings), now_iso())
    logger.info("trial report written", extra={"trial_id": request.trial_id, "verdict": out["verdict"]})
    return out


@require_settings(LedgerSettings)
@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return build(ReportRequest.model_validate(event))
