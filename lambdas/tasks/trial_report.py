"""Workflow task: build the trial report (JSON, Markdown, HTML) in S3 next to the trial."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from lambdas.runtime.observability import logger
from lambdas.runtime.settings import LedgerSettings


class ReportRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    trial_id: str = Field(min_length=1)


def build_report(event: dict[str, Any]) -> dict[str, Any]:
    from lambdas.adapters import wiring
    from lambdas.services.cache_resolution import load_spec, now_iso
    from lambdas.services.trial_reporting import write_report

    request = ReportRequest.model_validate(event)
    artifacts = wiring.artifacts(LedgerSettings)
    spec = load_spec(artifacts, artifacts.uri(f"trials/{request.trial_id}/spec.json"))
    out = write_report(request.trial_id, spec, artifacts, wiring.ledger(LedgerSettings), now_iso())
    logger.info("trial report written", extra={"trial_id": request.trial_id, "verdict": out["verdict"]})
    return out
