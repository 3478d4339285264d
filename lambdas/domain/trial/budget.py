"""A trial's worst case against its own ``limits.max_usd``: the one check the API makes at submission and
``dualtrack validate`` makes before it, so the two never disagree about a trial's budget."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from lambdas.domain.trial.rules import Problem
from lambdas.domain.trial.spec import TrialSpec
from lambdas.domain.vocabulary import COMPILE_RUN


def priced_runs(spec: TrialSpec, worst: Mapping[str, Decimal]) -> str:
    """The runs beside the main runs that the worst case counts, for its message."""
    extra = ["fallback", *(["warm-up compile stage"] if COMPILE_RUN in worst else []),
             *([f"scaling runs {', '.join(spec.scaling_runs())}"] if spec.scaling_runs() else [])]
    return ", ".join(extra[:-1]) + (" and " if len(extra) > 1 else "") + extra[-1]


def budget_problem(spec: TrialSpec, worst: Mapping[str, Decimal], attempts: int) -> Problem | None:
    """Why the trial's worst case (``lambdas.domain.money.prices.worst_case_usd`` at ``attempts`` per run) does not fit
    its ``limits.max_usd``, with the figure and the fix; None when it fits or the trial sets no max_usd."""
    limits = spec.limits
    if limits is None or limits.max_usd is None:
        return None
    if not worst:
        return Problem("limits.max_hours", "required when limits.max_usd is set, so the worst case "
                                           "(price x nodes x max_hours) can be checked")
    if worst["total"] <= Decimal(str(limits.max_usd)):
        return None
    return Problem("limits.max_usd", (
        f"worst case {worst['total']:.2f} USD (price x nodes x max_hours x {attempts} attempt(s) per run, "
        f"{priced_runs(spec, worst)} included) exceeds limits.max_usd {limits.max_usd}; raise max_usd, lower "
        f"max_hours, or use fewer nodes{' or fewer scaling runs' if spec.scaling_runs() else ''}"))
