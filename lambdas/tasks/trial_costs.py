"""Workflow task after the tracks: close each run's cost from its ledger and total the trial."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from lambdas.runtime.observability import count_run_outcomes, logger, record_trial_cost
from lambdas.runtime.settings import LedgerSettings


class BranchOutput(BaseModel):
    model_config = ConfigDict(extra="ignore")

    run: str = Field(pattern=r"^(gpu|trn2|gpu-fallback)$")
    status: str = "SUCCEEDED"
    job_id: str | None = None
    fallback: bool = False


class CloseRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    trial_id: str = Field(min_length=1)
    runs: list[BranchOutput | list[BranchOutput]] = Field(default_factory=list)

    def branches(self) -> list[BranchOutput]:
        flat: list[BranchOutput] = []
        for item in self.runs:
            flat += item if isinstance(item, list) else [item]
        return flat

    def run_names(self) -> list[str]:
        """Runs to settle: every branch that ran, plus the trn2 run a GPU fallback replaced (it ran and failed)."""
        ran = [b for b in self.branches() if b.status != "SKIPPED"]
        names = {b.run for b in ran}
        if any(b.fallback for b in ran):
            names.add("trn2")
        return sorted(names)


def reconcile_jobs(settlement: Any, request: CloseRequest) -> list[str]:
    """Record each finished job's facts from DescribeJobs, so settling never waits on a late EventBridge event.

    Returns the terminal statuses this call was first to record (their run-outcome metrics are published here)."""
    from aws_lambda_powertools.utilities.parser import parse

    from lambdas.adapters.batch_jobs import job_state_event, queue_instance_type
    from lambdas.runtime.events import BatchJobStateChangeEvent
    from lambdas.services.run_settlement import identify_job, job_facts

    terminal: list[str] = []
    for branch in request.branches():
        raw = job_state_event(branch.job_id) if branch.job_id else None
        if raw is None:
            continue
        event = parse(event=raw, model=BatchJobStateChangeEvent)
        detail = event.detail
        identity = identify_job(detail.environment(), detail.tags, detail.job_name)
        if identity is None or identity.trial_id != request.trial_id:
            continue
        instance_type = queue_instance_type(detail.job_queue) if detail.job_queue else None
        added = settlement.record(job_facts(identity, detail, event.time, instance_type))
        terminal += [fact.body["status"] for fact in added if fact.kind == "transition" and detail.terminal]
    return terminal


def close_costs(event: dict[str, Any]) -> dict[str, Any]:
    from lambdas.adapters import wiring
    from lambdas.domain.cost import compute_run_cost

    request = CloseRequest.model_validate(event)
    settlement = wiring.settlement(LedgerSettings)
    count_run_outcomes(reconcile_jobs(settlement, request))
    runs: dict[str, Any] = {}
    total = Decimal(0)
    for run in request.run_names():
        settled = settlement.settle_run(request.trial_id, run, collect=True)
        stored = settled.cost
        if stored is None:
            # Terminal events can trail the workflow by seconds: price what is known and say it is provisional.
            fold = settlement.fold(request.trial_id, run, settled.entries)
            stored = {
                "cost": compute_run_cost(fold.usage, settlement.prices).model_dump(mode="json"),
                "complete": False,
                "facts": fold.facts,
            }
        runs[run] = {**stored["cost"], "complete": bool(stored.get("complete"))}
        total += Decimal(str(stored["cost"]["total_usd"]))
    record_trial_cost(float(total))
    logger.info("trial costs closed", extra={"trial_id": request.trial_id, "total_usd": str(total)})
    return {"trial_id": request.trial_id, "runs": runs, "total_usd": str(total)}
