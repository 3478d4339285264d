"""The trial's status as the workflow moves it on."""

from __future__ import annotations

from dataclasses import dataclass

from lambdas.services.ports import Trials


@dataclass(frozen=True)
class StatusSet:
    trial_id: str
    status: str
    changed: bool


def set_status(trials: Trials, trial_id: str, status: str, cause: str | None, now: str) -> StatusSet:
    """Record the status (and why). A cancelled trial stays cancelled: late workflow steps do not revive it."""
    current = trials.get(trial_id)
    if current is None:
        raise LookupError(f"unknown trial {trial_id!r}: submit it through POST /trials first")
    if current.get("status") == "CANCELLED" and status != "CANCELLED":
        return StatusSet(trial_id, "CANCELLED", changed=False)
    trials.update(trial_id, status=status, status_cause=cause, updated_at=now)
    return StatusSet(trial_id, status, changed=True)
