"""How far each run has got, for the trial status: global step and loss, from the best source there is.

A finished attempt's summary (in the ledger) is authoritative. While an attempt is still running it has no summary
yet, so its newest published step and loss come from the trainer's CloudWatch metrics; without those (metrics not
yet flushed, or unreadable), the newest checkpoint manifest in the ledger is a lower bound on the step.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal, TypedDict

from lambdas.domain.money.ledger import CheckpointFact, LedgerEntry, SummaryFact, TransitionFact, facts_of
from lambdas.services.ports import RunMetrics


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


class RunProgress(TypedDict, total=False):
    """How far a run got: its global step and loss, from its newest summary, its live metrics or its newest
    checkpoint (``progress_source``), and why metrics could not be read when they could not."""

    step: int | None
    loss: float | None
    attempt: int | None
    progress_source: Literal["summary", "metrics", "checkpoint"] | None
    progress_error: str


def run_progress(
    entries: list[LedgerEntry], *, trial_id: str, run: str, terminal: bool, metrics: RunMetrics | None,
    now: datetime,
) -> RunProgress:
    summaries = sorted(facts_of(entries, SummaryFact), key=lambda f: f.attempt)
    transitions = facts_of(entries, TransitionFact)
    checkpoints = [f.step for f in facts_of(entries, CheckpointFact)]
    attempt = max((t.attempt for t in transitions), default=None)
    out: RunProgress = {"step": None, "loss": None, "attempt": attempt, "progress_source": None}
    if summaries:
        last = summaries[-1]
        out.update({"step": last.global_step, "loss": last.final_loss, "progress_source": "summary"})
    running = not terminal and attempt is not None and (not summaries or summaries[-1].attempt < attempt)
    if running and metrics is not None and attempt is not None:
        started = min(_at(t.at) for t in transitions)
        try:
            step, loss = metrics.progress(trial_id, run, attempt, started, now)
        except Exception as exc:  # a status read must not fail because metrics are unreadable
            out["progress_error"] = f"{type(exc).__name__}: {exc}"[:300]
        else:
            if step is not None and (out["step"] is None or step >= out["step"]):
                out.update({"step": step, "loss": loss, "progress_source": "metrics"})
    if checkpoints and (out["step"] is None or max(checkpoints) > out["step"]):
        out.update({"step": max(checkpoints), "loss": None, "progress_source": "checkpoint"})
    return out
