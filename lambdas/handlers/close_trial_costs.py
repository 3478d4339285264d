"""Workflow task after the tracks: close each run's cost from its ledger and total the trial."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from lambdas.adapters.batch_jobs import BatchJobsApi
from lambdas.adapters.run_metrics import CloudWatchRunMetrics
from lambdas.domain.vocabulary import COMPILE_RUN, RunName
from lambdas.runtime.composition import settlement
from lambdas.runtime.function import lambda_handler
from lambdas.runtime.observability import count_run_outcomes, logger, record_trial_cost
from lambdas.runtime.settings import LedgerSettings, per_environment, settings_for
from lambdas.services.run_settlement import RunSettlement
from lambdas.services.trial_costs import close_trial_costs


class BranchOutput(BaseModel):
    model_config = ConfigDict(extra="ignore")

    run: RunName
    status: str = "SUCCEEDED"
    job_id: str | None = None
    fallback: bool = False


class CloseRequest(BaseModel):
    """The workflow's input to this task: the trial and what each track's branch returned."""

    model_config = ConfigDict(extra="ignore")

    trial_id: str = Field(min_length=1)
    runs: list[BranchOutput | list[BranchOutput]] = Field(default_factory=list)

    def branches(self) -> list[BranchOutput]:
        flat: list[BranchOutput] = []
        for item in self.runs:
            flat += item if isinstance(item, list) else [item]
        return flat

    def run_names(self) -> list[str]:
        """Runs to settle: every run that ran, plus the trn2 run a GPU fallback replaced (it ran and failed), unless
        the warm-up compile stage failed first (then the training job never started)."""
        ran = [b for b in self.branches() if b.status != "SKIPPED"]
        names = {b.run for b in ran}
        compile_failed = any(b.run == COMPILE_RUN and b.status == "FAILED" for b in ran)
        if any(b.fallback for b in ran) and not compile_failed:
            names.add("trn2")
        return sorted(names)


@per_environment
def compose() -> RunSettlement:
    return settlement(settings_for(LedgerSettings), metrics=CloudWatchRunMetrics(), jobs=BatchJobsApi())


@lambda_handler(LedgerSettings)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    request = CloseRequest.model_validate(event)
    job_ids = [b.job_id for b in request.branches() if b.job_id]
    closed = close_trial_costs(compose(), request.trial_id, request.run_names(), job_ids)
    count_run_outcomes(closed.new_terminal_statuses)
    record_trial_cost(float(closed.total_usd))
    logger.info("trial costs closed", extra={"trial_id": request.trial_id, "total_usd": str(closed.total_usd)})
    return {"trial_id": request.trial_id, "runs": closed.runs, "total_usd": str(closed.total_usd)}
