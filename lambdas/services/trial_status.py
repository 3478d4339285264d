"""The trial's status as the workflow moves it on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lambdas.services.ports import Trials, Workflow


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


def stop_trial(item: dict[str, Any], *, trials: Trials, workflow: Workflow, statuses: tuple[str, ...], cause: str,
               now: str, **fields: Any) -> dict[str, Any]:
    """The cancel path: mark the trial CANCELLED (only from ``statuses``: of two racing stops one is recorded) and
    stop its execution, which terminates its running Batch jobs."""
    trial_id = item["trial_id"]
    if not trials.transition(trial_id, statuses, status="CANCELLED", status_cause=cause, updated_at=now, **fields):
        current = trials.get(trial_id) or item
        return {"trial_id": trial_id, "status": current.get("status"), "changed": False}
    arn = item.get("execution_arn") or (trials.get(trial_id) or {}).get("execution_arn")
    execution = workflow.stop(arn, cause) if arn else "NOT_STARTED"
    return {"trial_id": trial_id, "status": "CANCELLED", "execution_status": execution, "changed": True}
