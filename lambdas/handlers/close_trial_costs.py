"""Workflow task after the tracks: close each run's cost from its ledger and total the trial."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from lambdas.adapters.batch_jobs import BatchJobsApi
from lambdas.adapters.run_metrics import CloudWatchRunMetrics
from lambdas.domain.json_types import JsonObject
from lambdas.domain.trial.branches import BranchOutput, runs_to_settle
from lambdas.runtime.composition import settlement
from lambdas.runtime.function import lambda_handler
from lambdas.runtime.observability import count_run_outcomes, logger, record_trial_cost
from lambdas.runtime.settings import LedgerSettings, per_environment, settings_for
from lambdas.services.run_settlement import RunSettlement
from lambdas.services.trial_costs import close_trial_costs

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext


class CloseRequest(BaseModel):
    """The workflow's input to this task: the trial and what each track's branch returned."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    trial_id: str = Field(min_length=1)
    runs: list[BranchOutput | list[BranchOutput]] = Field(default_factory=list)

    def branches(self) -> list[BranchOutput]:
        flat: list[BranchOutput] = []
        for item in self.runs:
            flat += item if isinstance(item, list) else [item]
        return flat

    def run_names(self) -> list[str]:
        return runs_to_settle(self.branches())


@per_environment
def compose() -> RunSettlement:
    return settlement(settings_for(LedgerSettings), metrics=CloudWatchRunMetrics(), jobs=BatchJobsApi())


@lambda_handler(LedgerSettings)
def handler(event: JsonObject, context: LambdaContext) -> JsonObject:
    request = CloseRequest.model_validate(event)
    job_ids = [b.job_id for b in request.branches() if b.job_id]
    closed = close_trial_costs(compose(), request.trial_id, request.run_names(), job_ids)
    count_run_outcomes(closed.new_terminal_statuses)
    record_trial_cost(float(closed.total_usd))
    logger.info("trial costs closed", extra={"trial_id": request.trial_id, "total_usd": str(closed.total_usd)})
    runs: JsonObject = {run: cost.model_dump(mode="json") for run, cost in closed.runs.items()}
    return {"trial_id": request.trial_id, "runs": runs, "total_usd": str(closed.total_usd)}
