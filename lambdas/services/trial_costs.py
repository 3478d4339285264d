"""Closing a trial's costs after its tracks: every run's cost from its ledger, and the trial's total."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from pydantic import ConfigDict

from lambdas.domain.money.cost import RunCost, compute_run_cost
from lambdas.services.run_settlement import RunSettlement


class ClosedRunCost(RunCost):
    """A run's cost as the trial's close reports it: ``complete`` is False while a terminal event is missing (the
    cost is then priced from what is known)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    complete: bool


@dataclass(frozen=True)
class ClosedCosts:
    trial_id: str
    runs: dict[str, ClosedRunCost]
    total_usd: Decimal
    new_terminal_statuses: list[str]  # the outcome of each run this call made terminal (from DescribeJobs)


def close_trial_costs(settlement: RunSettlement, trial_id: str, runs: list[str], job_ids: list[str]) -> ClosedCosts:
    """Reconcile the jobs the workflow ran with DescribeJobs, then settle each run (collecting what the trainer
    left in S3). A run whose terminal event has not arrived yet is priced from what is known, marked incomplete."""
    terminal = settlement.reconcile_jobs(trial_id, job_ids)
    closed: dict[str, ClosedRunCost] = {}
    total = Decimal(0)
    for run in runs:
        settled = settlement.settle_run(trial_id, run, collect=True)
        stored = settled.cost
        if stored is not None:
            cost, complete = stored.cost, stored.complete
        else:
            # Terminal events can trail the workflow by seconds: price what is known and say it is provisional.
            fold = settlement.fold(trial_id, run, settled.entries)
            cost, complete = compute_run_cost(fold.usage, settlement.prices), False
        closed[run] = ClosedRunCost(**cost.model_dump(), complete=complete)
        total += cost.total_usd
    return ClosedCosts(trial_id, closed, total, terminal)
