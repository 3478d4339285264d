"""Whether a run summary is physically possible: the figures a report may build a verdict on. A summary comes from a
job (a bug or a forgery could write anything the schema accepts), so each attempt is checked against what training
can produce: steps within the run's own bounds, a time for each step that ran and no more, positive and finite
times and rates, finite losses. A run that fails is "unusable evidence": the report shows why and gives no verdict on
it."""

from __future__ import annotations

import math
from collections.abc import Sequence

from lambdas.domain.evidence.run_summary import RunSummary


def _bad(value: float | None) -> bool:
    return value is not None and (not math.isfinite(value) or value <= 0)


def physics_problems(summary: RunSummary) -> list[str]:
    """What is impossible about one attempt's summary (empty: nothing)."""
    problems: list[str] = []
    ran = summary.global_step - summary.start_step
    if summary.global_step > summary.max_steps:
        problems.append(f"global_step {summary.global_step} is past max_steps {summary.max_steps}")
    if ran < 0:
        problems.append(f"global_step {summary.global_step} is before start_step {summary.start_step}")
    if summary.status == "succeeded" and summary.global_step == 0:
        problems.append("it succeeded without training a step (global_step 0)")
    times = summary.throughput.step_times_s
    if len(times) > max(0, ran):
        problems.append(f"{len(times)} step times for {max(0, ran)} step(s) run")
    if any(not math.isfinite(t) or t <= 0 for t in times):
        problems.append("a step time is zero, negative or not a number")
    throughput = summary.throughput
    for name in ("step_time_s", "tokens_per_s", "samples_per_s"):
        value = getattr(throughput, name)
        if _bad(value):
            problems.append(f"throughput.{name} is {value}: a time or rate must be positive")
    loss = summary.loss
    values = [loss.initial, loss.final, summary.validation_loss,
              *(p.loss for p in loss.per_step), *(p.loss for p in loss.eval)]
    if any(v is not None and not math.isfinite(v) for v in values):
        problems.append("a loss is not a finite number")
    return problems


def run_problems(summaries: Sequence[RunSummary]) -> list[str]:
    """What is impossible about any attempt of one run, each named by its attempt."""
    return [f"attempt {s.attempt}: {p}" for s in summaries for p in physics_problems(s)]
