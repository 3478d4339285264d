"""A Trainium2 pilot judged against the team's GPU baseline.

A trial routed ``trn2_trial`` runs only a trn2 track; the GPU side of its comparison is the baseline it declares
(``baseline_logs_uri``, ``lambdas.domain.evidence.baseline``). Every figure says where it comes from: ``measured``
on the trn2 run, or ``from_baseline``.

The rule, in order (the first that applies gives the verdict):

1. the trn2 run is unusable evidence, or its job never ran: ``inconclusive``;
2. the trn2 run did not succeed: ``stay_on_gpu``;
3. an acceptance check failed (its losses outside ``loss_tolerance`` of the baseline's at the shared steps among
   them): ``stay_on_gpu``; one not evidenced: ``inconclusive``. The checks that compare with a GPU track of this
   trial (there is none) are left out: the baseline comparison stands in for them;
4. no cost per step on either side (the baseline carries no per-step time or throughput, its instance type is
   unknown, or the trn2 run has too few steady-state steps to bound): ``inconclusive``, naming what is missing;
5. otherwise the trn2 run's steady-state cost-per-step interval over the baseline's cost per step. The baseline's
   figure is a point estimate with no interval, so only the trn2 side's interval counts: wholly below 1 is
   ``trn2_viable_cheaper``, wholly above 1 ``trn2_viable_not_cheaper``, and one that includes parity
   ``inconclusive`` (the same reading as a two-track trial's steady-state ratio). One-time costs are not weighed:
   the baseline has none to weigh them against.

The baseline's cost per step is its per-step time at the price of the GPU instance it ran on: the trial's
``baseline_instance_type`` (x ``baseline_nodes``), else its declared GPU track's; with neither, the baseline's cost
per step is not evidenced rather than guessed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lambdas.domain.evidence.baseline import Baseline, compare
from lambdas.domain.money.cost import RunCost
from lambdas.domain.money.prices import PriceMissing, PriceTable
from lambdas.domain.report.model import (
    NEVER_RAN,
    BaselineCompared,
    Check,
    IntervalView,
    PilotComparison,
    PilotFigure,
    PilotRow,
    TrackRecord,
    Verdict,
)
from lambdas.domain.trial.spec import TrialSpec

PILOT_CHECK = "trn2 run reproduces the baseline"
# Acceptance checks that compare the trn2 run with a GPU track of the same trial: a pilot has none to compare with.
AGAINST_GPU_TRACK = frozenset({"final outputs consistent with GPU", "perplexity consistent with GPU",
                               "fixed prompts complete identically"})
RULE = ("the trn2 run's steady-state cost-per-step interval over the baseline's cost per step (a point estimate: "
        "no interval on the baseline's side, so only the trn2 side's interval counts): below 1 throughout is "
        "cheaper, above 1 throughout is not cheaper, one that includes parity is inconclusive; every acceptance "
        "check must pass first, losses within loss_tolerance of the baseline's at the shared steps among them")
# On stand-ins the pilot judges the pipeline, not the cost: its trn2 figures describe the machine that ran it.
STAND_IN_RULE = ("on stand-ins the pilot gives no verdict: the trn2 run's figures, its cost per step among them, are "
                 "pipeline evidence from a stand-in, not measurements of Trainium2, so they are not judged against "
                 "the baseline's; its losses are, as on real devices")
STAND_IN_COST = ("the trn2 run ran on a stand-in: its cost per step is pipeline evidence, not a measurement of "
                 "Trainium2")
NO_STEP_TIME = ("the baseline carries no per-step time or throughput (step_time_s, tokens_per_s, "
                "train_steps_per_second, train_samples_per_second or train_runtime)")
NO_INSTANCE = ("not evidenced (the baseline's instance type is unknown: declare baseline_instance_type, or a gpu "
               "track)")


def is_pilot(tracks: Mapping[str, TrackRecord], baseline: Baseline | str | None) -> bool:
    """A trn2 run, no gpu run and a readable baseline: the trial is judged against the baseline."""
    return "trn2" in tracks and "gpu" not in tracks and isinstance(baseline, Baseline)


def pilot_check(loss: BaselineCompared) -> Check:
    status = "pass" if loss.reproduced else ("not_evidenced" if loss.reproduced is None else "fail")
    return Check(check=PILOT_CHECK, status=status, detail=f"{loss.format} at {loss.uri}: {loss.detail}")


def _baseline_step_time(spec: TrialSpec, baseline: Baseline) -> tuple[float | None, str]:
    """The baseline's seconds per step: as logged, else from its throughput at the trial's (frozen) batch shape."""
    if baseline.step_time_s:
        return baseline.step_time_s, baseline.throughput_basis
    if baseline.tokens_per_s:
        tokens = spec.effective_batch_size * spec.sequence_length
        return tokens / baseline.tokens_per_s, (f"{tokens} tokens per step (effective batch x sequence length) "
                                                "over the baseline's tokens per second")
    if baseline.samples_per_s:
        return spec.effective_batch_size / baseline.samples_per_s, ("the effective batch size over the baseline's "
                                                                     "samples per second")
    return None, NO_STEP_TIME


def _baseline_cost(spec: TrialSpec, step_time: float | None, trn2_cost: RunCost | None,
                   prices: PriceTable) -> tuple[float | None, str]:
    """USD per step of the baseline: its step time at the price of the instance it ran on (all its nodes): the
    trial's ``baseline_instance_type`` and ``baseline_nodes``, else its declared GPU track's."""
    if step_time is None:
        return None, "not evidenced (the baseline's per-step time is unknown)"
    gpu = spec.tracks.gpu
    if spec.baseline_instance_type is not None:
        instance_type, nodes = spec.baseline_instance_type, spec.baseline_nodes or 1
        source = "baseline_instance_type, as the trial declares it"
    elif gpu is not None:
        instance_type, nodes = gpu.instance_type, spec.baseline_nodes or gpu.nodes
        source = "the trial's declared GPU track, taken as what the baseline ran on"
    else:
        return None, NO_INSTANCE
    region = trn2_cost.price.region if trn2_cost is not None else None
    try:
        price = prices.instance_price(instance_type, region)
    except PriceMissing as exc:
        return None, f"not evidenced ({exc})"
    usd = step_time * float(price.hourly_usd) * nodes / 3600
    return usd, f"{step_time:.4g} s/step x {instance_type} at {price.hourly_usd} USD/h x {nodes} node(s): {source}"


def _measured(value: float | None, interval: IntervalView | None = None, note: str = "",
              missing: str = "not reported by the trn2 run") -> PilotFigure:
    return PilotFigure(value=interval.estimate if interval else value, source="measured", interval=interval,
                       note=note if value is not None or interval else missing)


def _logged(value: float | None, note: str = "") -> PilotFigure:
    return PilotFigure(value=value, source="from_baseline",
                       note=note if value is not None or note else "not in the baseline's logs")


def _ratio(trn2: IntervalView | None, baseline_usd: float | None) -> IntervalView | None:
    if trn2 is None or not baseline_usd:
        return None
    return IntervalView(estimate=round(trn2.estimate / baseline_usd, 6), low=round(trn2.low / baseline_usd, 6),
                        high=round(trn2.high / baseline_usd, 6), samples=trn2.samples, confidence=trn2.confidence,
                        method="the trn2 run's cost-per-step interval over the baseline's point estimate")


def _judge(trn2: TrackRecord, checks: Sequence[Check], ratio: IntervalView | None, missing: str
           ) -> tuple[Verdict, list[str]]:
    counted = [c for c in checks if c.check not in AGAINST_GPU_TRACK]
    reasons = [f"{c.check}: {c.status} ({c.detail})" for c in counted if c.status != "pass"]
    if trn2.unusable:
        return "inconclusive", [f"unusable evidence: trn2 {'; trn2 '.join(trn2.unusable)}", *reasons]
    if trn2.outcome in NEVER_RAN:
        return "inconclusive", [f"the trn2 run had {trn2.detail}", *reasons]
    if trn2.status != "succeeded":
        return "stay_on_gpu", [f"the trn2 run ended {trn2.status or 'without a summary'}", *reasons]
    if any(c.status == "fail" for c in counted):
        return "stay_on_gpu", reasons
    if any(c.status == "not_evidenced" for c in counted):
        return "inconclusive", reasons
    if ratio is None:
        return "inconclusive", [f"all acceptance checks pass, but there is no cost per step to compare: {missing}"]
    text = (f"trn2 costs {ratio.estimate:.3f}x the GPU baseline per steady-state training step ({ratio.confidence:.0%}"
            f" interval {ratio.low:.3f}-{ratio.high:.3f}, from the trn2 run's side alone: the baseline's figure has "
            "no interval)")
    if ratio.high < 1:
        return "trn2_viable_cheaper", [f"all acceptance checks pass against the GPU baseline; {text}"]
    if ratio.low > 1:
        return "trn2_viable_not_cheaper", [f"all acceptance checks pass against the GPU baseline, but {text}"]
    return "inconclusive", [f"all acceptance checks pass against the GPU baseline, but the interval includes parity: "
                            f"{text}"]


def build_pilot(spec: TrialSpec, trn2: TrackRecord, baseline: Baseline, checks: Sequence[Check],
                trn2_cost: RunCost | None, prices: PriceTable, stand_in: bool = False) -> PilotComparison:
    """The pilot section: the trn2 run (``trn2``, costed by ``trn2_cost``) against ``baseline``, gated on the
    trial's other acceptance ``checks``; ``prices`` prices the GPU instance the baseline is taken to have run on.
    On stand-ins (``stand_in``) no verdict: the costs are shown, never compared."""
    comparison = compare(baseline, {p.step: p.loss for p in trn2.loss.per_step},
                         {p.step: p.loss for p in trn2.loss.eval}, spec.evaluation.loss_tolerance)
    loss = BaselineCompared.model_validate({"uri": spec.baseline_logs_uri or "", **comparison.model_dump(mode="json")})
    step_time, step_note = _baseline_step_time(spec, baseline)
    baseline_usd, cost_note = _baseline_cost(spec, step_time, trn2_cost, prices)
    bounds = trn2.uncertainty
    step_bounds = bounds.step_time_s if bounds else None
    cost_bounds = bounds.cost_per_effective_step_usd if bounds else None
    unbounded = bounds.basis if bounds else "no steady-state step times recorded"
    figures = [
        PilotRow(figure="step time", unit="s", trn2=_measured(trn2.throughput.step_time_s, step_bounds,
                                                              "steady-state median"),
                 baseline=_logged(step_time, step_note)),
        PilotRow(figure="throughput", unit="tokens/s", trn2=_measured(trn2.throughput.tokens_per_s),
                 baseline=_logged(baseline.tokens_per_s)),
        PilotRow(figure="throughput", unit="samples/s", trn2=_measured(trn2.throughput.samples_per_s),
                 baseline=_logged(baseline.samples_per_s)),
        PilotRow(figure="peak memory", unit="MiB", trn2=_measured(trn2.memory_peak_mib),
                 baseline=_logged(baseline.memory_mib)),
        PilotRow(figure="cost per effective step", unit="USD",
                 trn2=_measured(None, cost_bounds, "steady-state step time x the run's price per second (all its "
                                "nodes)", unbounded),
                 baseline=_logged(baseline_usd, cost_note)),
    ]
    ratio = _ratio(cost_bounds, baseline_usd)
    missing = []
    if step_time is None:
        missing.append(NO_STEP_TIME)
    elif baseline_usd is None:
        missing.append(f"the baseline's cost per step is {cost_note}")
    if cost_bounds is None:
        missing.append(f"the trn2 run's cost per step has no interval ({unbounded})")
    if stand_in:  # the gates still apply; the cost is never compared
        _, reasons = _judge(trn2, [*checks, pilot_check(loss)], None, STAND_IN_COST)
        return PilotComparison(loss=loss, figures=figures, cost_ratio=ratio, verdict=None, reasons=reasons,
                               rule=STAND_IN_RULE)
    verdict, reasons = _judge(trn2, [*checks, pilot_check(loss)], ratio, "; ".join(missing))
    return PilotComparison(loss=loss, figures=figures, cost_ratio=ratio, verdict=verdict, reasons=reasons, rule=RULE)
