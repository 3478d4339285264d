"""Workflow task: record the trial's status (and why) in the trials table."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from lambdas.domain.vocabulary import TrialStatus
from lambdas.runtime.observability import logger
from lambdas.runtime.settings import LedgerSettings


class StatusRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    trial_id: str = Field(min_length=1)
    status: TrialStatus
    cause: str | None = Field(default=None, max_length=4000)


def set_status(event: dict[str, Any]) -> dict[str, Any]:
    from lambdas.adapters import wiring
    from lambdas.services.cache_resolution import now_iso

    request = StatusRequest.model_validate(event)
    trials = wiring.trials(LedgerSettings)
    current = trials.get(request.trial_id)
    if current is None:
        raise LookupError(f"unknown trial {request.trial_id!r}: submit it through POST /trials first")
    if current.get("status") == "CANCELLED" and request.status != "CANCELLED":
        # A cancelled trial stays cancelled; late workflow steps do not revive it.
        return {"trial_id": request.trial_id, "status": "CANCELLED", "changed": False}
    trials.update(request.trial_id, status=request.status, status_cause=request.cause, updated_at=now_iso())
    logger.info("trial status", extra={"trial_id": request.trial_id, "status": request.status})
    return {"trial_id": request.trial_id, "status": request.status, "changed": True}
