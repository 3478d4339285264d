"""The report's scaling section: a track trained at several node counts (``nodes: [1, 2]``), each count's step time,
throughput, communication share and cost per effective step beside the smallest count's.

Every count trains the same trial with the same effective batch per optimizer step (gradient accumulation takes up
the difference in data-parallel ranks), so step times at different counts compare directly (strong scaling):

* step time = the run's steady-state step time (compile and warm-up steps left out), throughput = the tokens of
  one optimizer step (effective batch x sequence length) over it;
* speed-up = the smallest count's step time / this count's;
* scaling efficiency = speed-up / (this count / the smallest count): 1.0 is linear scaling;
* cost ratio = this count's cost per effective step / the smallest count's, where a run's cost per effective step
  is its effective-training cost (instance time x price x nodes) over its effective steps.

A figure is shown only where the run left usable evidence for it: a run that failed, never ran, left no summary or
whose evidence is unusable (impossible figures, no sign of learning: ``TrackRecord.unusable``) has none, and the
sentence says why; a figure is never made up, and never one that is not positive and finite. Scaling runs never
enter the verdict (``lambdas.domain.report`` judges the main runs only); on stand-ins (CPU processes simulating the
devices) the section is pipeline evidence, and its sentence says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from decimal import Decimal

from lambdas.domain.money.cost import RunCost
from lambdas.domain.report.model import NEVER_RAN, Outcome, ScalingPoint, ScalingView, TrackRecord
from lambdas.domain.trial.layout import track_layout
from lambdas.domain.trial.spec import TrackName, TrialSpec
from lambdas.domain.vocabulary import scaling_run

# A run's outcome from its last summary, where the ledger recorded no terminal transition.
_FROM_STATUS: dict[str, Outcome] = {"succeeded": "succeeded", "failed": "failed", "faulted": "failed"}


def nodes_text(count: int) -> str:
    """A node count in words: "1 node", "2 nodes"."""
    return f"{count} node{'' if count == 1 else 's'}"


def _positive(value: float | Decimal | None) -> float | None:
    """A time, rate, price or ratio as a figure: None unless it is positive and finite."""
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) and number > 0 else None


def _share(value: float | None) -> float | None:
    """A share of the step time: None unless it is within 0-1 (0: a single process calls no collective)."""
    return value if value is not None and math.isfinite(value) and 0 <= value <= 1 else None


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None:
        return None
    found = _positive(numerator / denominator)
    return None if found is None else round(found, 6)


def _outcome(record: TrackRecord | None) -> Outcome:
    """How the run's Batch job ended (the ledger's, as the report's job table shows it), else its last summary's
    status; ``unknown`` without either."""
    if record is None:
        return "unknown"
    return record.outcome if record.outcome != "unknown" else _FROM_STATUS.get(record.status, "unknown")


def _gap(run: str, nodes: int, record: TrackRecord | None, outcome: Outcome) -> str | None:
    """Why the run has no figures (None: it has them)."""
    who = f"{run} ({nodes_text(nodes)})"
    if record is None:
        return f"{who} left no evidence (no summary, no cost)"
    if outcome in NEVER_RAN:
        return f"{who} never ran ({NEVER_RAN[outcome].split(':')[0]}: the queue cancelled it)"
    if outcome == "failed" or record.status in ("failed", "faulted"):
        return f"{who} failed" + ("" if record.backend else " and left no summary")
    if record.backend is None:  # the backend comes from the run's last summary
        return f"{who} has no summary"
    if record.status != "succeeded":
        return f"{who} ended {record.status}"
    if record.unusable:
        return f"{who} is unusable evidence ({record.unusable[0]})"
    return None


def cost_per_effective_step(cost: RunCost | None) -> float | None:
    """The run's effective-training cost (instance time x price x nodes) over its effective steps."""
    if cost is None or cost.effective_steps <= 0:
        return None
    return _positive(cost.effective_training_usd / cost.effective_steps)


def steady_step_time(record: TrackRecord) -> float | None:
    """The run's steady-state step time: the median of its steady steps over every attempt (compile and warm-up
    left out), which its uncertainty interval is centred on; the median of the last attempt's steps where too few
    steps were steady to bound."""
    steady = record.uncertainty.step_time_s if record.uncertainty else None
    return _positive(steady.estimate if steady else record.throughput.step_time_s)


def _point(spec: TrialSpec, track: TrackName, run: str, nodes: int, record: TrackRecord | None,
           cost: RunCost | None) -> tuple[ScalingPoint, str | None]:
    """One count's own figures (the comparisons with the smallest count come after) and why it has none. Step time
    and throughput are one measurement: every count trains the same tokens per optimizer step, so the throughput is
    those tokens over the steady-state step time, and the speed-up reads the same from either."""
    world = track_layout(spec, track, run=run).world_size
    outcome = _outcome(record)
    gap = _gap(run, nodes, record, outcome)
    measured = record if gap is None else None
    parallel = measured.parallel if measured else None
    step = steady_step_time(measured) if measured else None
    return ScalingPoint(
        run=run, nodes=nodes, world_size=world, outcome=outcome, step_time_s=step,
        tokens_per_s=_ratio(float(spec.effective_batch_size * spec.sequence_length), step),
        communication_share=(_share(parallel.communication_share)
                             if parallel and parallel.communication_measured else None),
        cost_per_step_usd=cost_per_effective_step(cost) if measured else None,
        speedup=None, efficiency=None, cost_per_step_ratio=None), gap


def _against_base(points: Sequence[ScalingPoint]) -> list[ScalingPoint]:
    base = points[0]
    out = []
    for point in points:
        speedup = _ratio(base.step_time_s, point.step_time_s)
        out.append(point.model_copy(update={
            "speedup": speedup,
            "efficiency": _ratio(speedup, point.nodes / base.nodes),
            "cost_per_step_ratio": _ratio(point.cost_per_step_usd, base.cost_per_step_usd)}))
    return out


def _pace(point: ScalingPoint, base: ScalingPoint) -> str | None:
    """A count against the smallest, in words (None: no speed-up to state)."""
    if point.speedup is None:
        return None
    than = nodes_text(base.nodes)
    pace = (f"train {point.speedup:.2f}x faster than {than}" if point.speedup >= 1
            else f"train slower than {than} ({point.speedup:.2f}x its speed)")
    efficiency = f" (scaling efficiency {point.efficiency:.0%})" if point.efficiency is not None else ""
    cost = (f" at {point.cost_per_step_ratio:.2f}x the cost per effective step" if point.cost_per_step_ratio
            is not None else " (cost per effective step not evidenced)")
    return f"{nodes_text(point.nodes)} {pace}{efficiency}{cost}"


def _summary(track: str, instance_type: str, points: Sequence[ScalingPoint], gaps: Sequence[str],
             stand_ins: Sequence[str]) -> str:
    base = points[0]
    paces = [pace for point in points[1:] if (pace := _pace(point, base))]
    if paces:
        parts = [*paces, *gaps]
    else:
        parts = ["no speed-up to compare: " + ("; ".join(gaps) if gaps else "a node count recorded no step time")]
    shared = [p for p in points if p.communication_share is not None]
    if shared:
        widest = max(shared, key=lambda p: p.nodes)
        parts.insert(len(paces) or 1, f"communication takes {widest.communication_share:.0%} of a step at "
                                 f"{nodes_text(widest.nodes)}")
    if not stand_ins:
        return f"{track} ({instance_type}): {'; '.join(parts)}."
    return (f"{track} ({instance_type}), pipeline evidence from stand-ins ({', '.join(stand_ins)}), not an answer: "
            f"{'; '.join(parts)}. Stand-ins simulate the devices with CPU processes, so these figures say nothing "
            f"about how {instance_type} scales.")


def _view(spec: TrialSpec, track: TrackName, tracks: Mapping[str, TrackRecord], costs: Mapping[str, RunCost],
          stand_in: bool) -> ScalingView:
    declared = spec.track(track)
    counts = sorted({*(declared.scaling_nodes or []), declared.nodes})
    # The main run is the track's own (``gpu``), at the largest count; the others are its scaling runs (``gpu-n1``).
    runs = {nodes: track if nodes == declared.nodes else scaling_run(track, nodes) for nodes in counts}
    found = [_point(spec, track, run, nodes, tracks.get(run), costs.get(run)) for nodes, run in runs.items()]
    points = _against_base([point for point, _ in found])
    gaps = [gap for _, gap in found if gap]
    records = [tracks[run] for run in runs.values() if run in tracks]
    stand_ins = sorted({str(r.backend) for r in records if r.stand_in})
    if stand_in and not stand_ins:
        stand_ins = ["stand-in backend"]
    return ScalingView(track=track, instance_type=declared.instance_type, base_nodes=counts[0], points=points,
                       summary=_summary(track, declared.instance_type, points, gaps, stand_ins))


def build_scaling(spec: TrialSpec, tracks: Mapping[str, TrackRecord], costs: Mapping[str, RunCost], *,
                  stand_in: bool = False) -> list[ScalingView] | None:
    """One view per track that declared several node counts, a point per count (its runs' records ``tracks`` and
    costs ``costs`` by run name, the main run's and the scaling runs'); None when no track did. ``stand_in``: the
    report is a rehearsal on stand-ins, whose figures are labelled pipeline evidence."""
    views = [_view(spec, name, tracks, costs, stand_in) for name in spec.track_names()
             if spec.track(name).scaling_nodes]
    return views or None
