"""Whether a run learned: the gate before any verdict. A training loop can run to its last step, report a loss at
each one and raise nothing while its optimizer updates never reach the weights (seen on Trainium2); the losses then
stay where the untrained model put them and the run's times and costs describe no training at all. So each run must
show both that its weights changed (the trainer's ``learning`` record of every attempt) and that its training loss
fell by the trial's declared margin by its declared step (``evaluation.learning``). A run that does not is
"unusable evidence": the report names why and gives no verdict on it, as for a physically impossible summary
(``lambdas.domain.evidence.physics``).

The loss is judged on medians of a few steps at each end, so one noisy batch neither fails a run that learned nor
passes one that did not. It is judged from the run's own first steps: a run that began from another run's
checkpoint (the GPU fallback) did its first steps elsewhere, and only its weights are checked. A run that stopped
before the declared step is not judged on its loss here: how it ended is reported on its own."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from lambdas.domain.evidence.run_summary import RunSummary
from lambdas.domain.trial.spec import TrialSpec

# Steps in each median: a quarter of the steps up to the declared one, at least 1, at most WINDOW_STEPS.
WINDOW_STEPS = 10
NO_UPDATE = "the failure mode of a loop whose optimizer step never reached the weights"


def _merged_loss(summaries: Sequence[RunSummary]) -> dict[int, float]:
    """The run's training loss by step, a later attempt's re-run of a step replacing the earlier one's."""
    merged: dict[int, float] = {}
    for summary in sorted(summaries, key=lambda s: s.attempt):
        merged.update((p.step, p.loss) for p in summary.loss.per_step)
    return merged


def weight_problems(summary: RunSummary) -> list[str]:
    """What one attempt's learning record says against it (empty: its weights changed, or it trained no step, or
    it failed, which may leave no second reading)."""
    ran = summary.global_step - summary.start_step
    record = summary.learning
    if record is None:
        if ran > 0 and summary.status != "failed":
            return ["recorded no learning evidence (weights_changed)"]
        return []
    if record.steps > 0 and not record.weights_changed:
        return [f"did not learn: its weights did not change over {record.steps} step(s) ({NO_UPDATE})"]
    return []


def loss_problems(summaries: Sequence[RunSummary], min_loss_drop: float, by_step: int) -> list[str]:
    """Whether the run's training loss fell by ``min_loss_drop`` (relative) by ``by_step`` (empty: it did, or the
    run cannot be judged on its loss: it began from another run's checkpoint or stopped before ``by_step``)."""
    if not summaries or min(summaries, key=lambda s: s.attempt).start_step > 0:
        return []
    if max(s.global_step for s in summaries) < by_step:
        return []
    points = sorted((step, loss) for step, loss in _merged_loss(summaries).items() if step <= by_step)
    if len(points) < 2:
        return [f"recorded too few training losses up to step {by_step} to tell whether it learned (loss.per_step)"]
    window = max(1, min(WINDOW_STEPS, len(points) // 4))
    first, last = points[:window], points[-window:]
    start = statistics.median(loss for _, loss in first)
    end = statistics.median(loss for _, loss in last)
    drop = (start - end) / abs(start) if start else 0.0
    if not math.isfinite(drop) or drop >= min_loss_drop:  # a loss that is not a number is physics' to name
        return []
    moved = f"fell {drop:.1%}" if drop >= 0 else f"rose {-drop:.1%}"
    return [f"did not learn: the training loss {moved} by step {by_step} (median {end:.4g} over steps "
            f"{_span(last)} against {start:.4g} over steps {_span(first)}), less than the declared "
            f"{min_loss_drop:.1%} (evaluation.learning.min_loss_drop)"]


def _span(points: Sequence[tuple[int, float]]) -> str:
    return f"{points[0][0]}-{points[-1][0]}" if len(points) > 1 else str(points[0][0])


def learning_problems(summaries: Sequence[RunSummary], spec: TrialSpec) -> list[str]:
    """Why one run's attempts do not show that it learned under ``spec``'s declared requirement (empty: they do);
    a problem of one attempt is named by its attempt."""
    requirement = spec.evaluation.learning_requirement()
    by_step = requirement.by_step or spec.max_steps
    problems = [f"attempt {s.attempt}: {p}" for s in summaries for p in weight_problems(s)]
    return problems + loss_problems(summaries, requirement.min_loss_drop, by_step)
