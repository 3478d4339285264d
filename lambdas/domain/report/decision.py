"""The whole-trial decision: what moving this workload to Trainium2 costs once, what it costs per step, when it pays
back, and the answer at each price basis.

The steady-state cost per step says which track is cheaper to keep training on; it says nothing about what the
move costs. A compile that serves one short job is that job's real cost (the source document's compile-cache rule),
so the decision splits each side's five-component total into:

* **one-time** costs, paid once for this migration and not again for the next trial of the same shape: compiling
  the graphs (the compile cache serves them afterwards), the warm-up compile stage, and reruns (failed attempts'
  steps and, on the Trainium2 side, the GPU fallback);
* **recurring** costs: the rest (effective training, queueing and environment start, checkpoint storage), what a
  repeat of this trial would cost.

Trainium2 pays back its extra one-time cost after ``delta one-time / (GPU per-step - Trainium2 per-step)`` steps at
the steady-state cost per step, or after ``delta one-time / delta recurring`` repeats of this trial's shape. With no
extra one-time cost there is nothing to pay back: a trial that still cost more on Trainium2 cost more in its
recurring costs, so a repeat would too, and the answer is "not cheaper" outright.

Each price basis reprices every instance-second (the four instance components) at that basis's hourly rate for the
instance type the run was billed for, and leaves checkpoint storage at its S3 rates. The bases: the on-demand list
price (the shipped table), a negotiated override table (where the deployment overrides a rate the runs used), and a
Capacity Block and a Savings Plan rate where the price table has one. A basis that prices the GPU's instance at
$0/h gives no ratio (every trn2/gpu ratio would divide by zero) and so no answer; the decision says why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal

from lambdas.domain.evidence.evidence import Interval
from lambdas.domain.money.cost import RunCost
from lambdas.domain.money.prices import PriceMissing, PriceTable
from lambdas.domain.report.model import (
    BasisDecision,
    BreakEven,
    Decision,
    IntervalView,
    OneTimeCosts,
    PriceBasis,
    SideCosts,
    TrackRecord,
    Verdict,
)
from lambdas.domain.vocabulary import COMPILE_RUN

# Each side's runs by name, never by ``track_of``: a scaling run (``gpu-n1``, the track at another node count) is on
# neither side, for it answers how the track scales, not what moving the workload costs (the cost table has it).
SIDES: dict[str, tuple[str, ...]] = {"trn2": ("trn2", "gpu-fallback", COMPILE_RUN), "gpu": ("gpu",)}
INSTANCE_PARTS = ("effective_training_usd", "compile_usd", "failed_reruns_usd", "queue_environment_usd")
LABELS: dict[PriceBasis, str] = {
    "on_demand": "on-demand list price",
    "override": "negotiated rates (price overrides)",
    "capacity_block": "Capacity Block",
    "savings_plan": "Savings Plan",
}
ANSWERS: dict[Verdict, str] = {
    "trn2_viable_cheaper": "cheaper",
    "trn2_viable_pays_back": "pays back",
    "trn2_viable_not_cheaper": "not cheaper",
    "inconclusive": "inconclusive",
    "stay_on_gpu": "stay on GPU",
}
CENT = Decimal("0.01")


def _usd(value: Decimal) -> str:
    return f"{value.quantize(Decimal('0.000001'))}"


def _money(value: Decimal) -> str:
    return f"${value.quantize(CENT):,}"


@dataclass(frozen=True)
class _Side:
    runs: tuple[str, ...]
    total: Decimal
    compile: Decimal
    stage: Decimal
    reruns: Decimal
    per_step: Decimal | None

    @property
    def one_time(self) -> Decimal:
        return self.compile + self.stage + self.reruns

    @property
    def recurring(self) -> Decimal:
        return self.total - self.one_time

    def view(self) -> SideCosts:
        return SideCosts(runs=list(self.runs), total_usd=_usd(self.total),
                         one_time=OneTimeCosts(compile_usd=_usd(self.compile), warm_up_stage_usd=_usd(self.stage),
                                               reruns_usd=_usd(self.reruns), total_usd=_usd(self.one_time)),
                         recurring_usd=_usd(self.recurring),
                         per_step_usd=None if self.per_step is None else f"{self.per_step.quantize(Decimal('1e-10'))}")


def _repriced(cost: RunCost, factor: Decimal) -> dict[str, Decimal]:
    """The run's components with every instance-second at ``factor`` times the rate it was billed at."""
    parts = {name: amount * factor if name in INSTANCE_PARTS else amount
             for name, amount in cost.amounts().items() if name != "total_usd"}
    parts["total_usd"] = sum(parts.values(), Decimal(0))
    return parts


def _side(name: str, costs: Mapping[str, RunCost], factors: Mapping[str, Decimal],
          per_step: Decimal | None) -> _Side:
    runs = tuple(run for run in SIDES[name] if run in costs)
    total = compile_ = stage = reruns = Decimal(0)
    for run in runs:
        parts = _repriced(costs[run], factors[run])
        total += parts["total_usd"]
        if run == COMPILE_RUN:
            stage += parts["total_usd"]  # the warm-up compile stage is all one-time
        elif run == "gpu-fallback":
            reruns += parts["total_usd"]  # the fallback reruns what Trainium2 did not finish
        else:
            compile_ += parts["compile_usd"]
            reruns += parts["failed_reruns_usd"]
    return _Side(runs, total, compile_, stage, reruns, per_step)


def _per_step(track: TrackRecord | None) -> Decimal | None:
    interval = track.uncertainty.cost_per_effective_step_usd if track and track.uncertainty else None
    return None if interval is None else Decimal(str(interval.estimate))


def _scaled(amount: Decimal | None, factor: Decimal) -> Decimal | None:
    return None if amount is None else amount * factor


def _step_time(track: TrackRecord | None) -> float | None:
    interval = track.uncertainty.step_time_s if track and track.uncertainty else None
    return None if interval is None else interval.estimate


def _basis_rates(basis: PriceBasis, primary: PriceBasis, costs: Mapping[str, RunCost], table: PriceTable,
                 shipped: PriceTable) -> dict[str, Decimal] | str:
    """Hourly rate by instance type at ``basis``, or why the basis has none for an instance type the runs used. The
    basis the runs were billed at keeps their rates (the table may have moved since)."""
    rates: dict[str, Decimal] = {}
    for cost in costs.values():
        itype, region = cost.price.instance_type, cost.price.region
        if basis == primary:
            rates[itype] = cost.price.hourly_usd
            continue
        try:
            row = (shipped if basis == "on_demand" else table).instance_price(itype, region)
        except PriceMissing:
            return f"the price table has no {LABELS[basis]} rate for {itype} in {region}"
        rate = row.rate(basis)
        if rate is None:
            return (f"no {LABELS[basis]} rate for {itype} in the price table (add {basis}_hourly_usd to its row "
                    "in a price override)")
        rates[itype] = rate
    return rates


def _bases(costs: Mapping[str, RunCost], table: PriceTable) -> list[PriceBasis]:
    """The bases to decide at: on-demand always, the override table where a run was priced at an override,
    Capacity Block always (named as missing when the table has no rate), a Savings Plan where the table has one."""
    bases: list[PriceBasis] = ["on_demand"]
    if any(c.price.confidence == "override" for c in costs.values()):
        bases.append("override")
    bases.append("capacity_block")
    rows = []
    for cost in costs.values():
        try:
            rows.append(table.instance_price(cost.price.instance_type, cost.price.region))
        except PriceMissing:
            continue
    if any(row.savings_plan_hourly_usd is not None for row in rows):
        bases.append("savings_plan")
    return bases


def _primary(costs: Mapping[str, RunCost]) -> PriceBasis:
    """The basis the runs were billed at: a Capacity Block where the stage runs on one, else a negotiated rate
    where one was used, else the on-demand list price."""
    if any(c.price.capacity == "capacity_block" for c in costs.values()):
        return "capacity_block"
    return "override" if any(c.price.confidence == "override" for c in costs.values()) else "on_demand"


def _answer(steady: Interval, trial_ratio: float | None, extra_one_time: Decimal) -> Verdict:
    """Cheaper or not only when the steady-state interval excludes parity; cheaper per step but dearer on this
    trial is "pays back" (after the break-even point) only when Trainium2 paid more once (``extra_one_time``):
    otherwise its recurring costs made the trial dearer, a repeat would be dearer too, and it is not cheaper."""
    if steady.high < 1:
        if trial_ratio is not None and trial_ratio <= 1:
            return "trn2_viable_cheaper"
        return "trn2_viable_pays_back" if extra_one_time > 0 else "trn2_viable_not_cheaper"
    if steady.low > 1:
        return "trn2_viable_not_cheaper"
    return "inconclusive"


def _break_even(trn2: _Side, gpu: _Side, step_time_s: float | None) -> BreakEven | None:
    """Steps (and hours, and repeats of this trial) after which Trainium2's one-time costs are paid back; None
    when its steady-state step is not cheaper (they never are), or when it paid no more once and still cost more
    on this trial (there is nothing to pay back, and the recurring costs never catch up)."""
    if trn2.per_step is None or gpu.per_step is None or trn2.per_step >= gpu.per_step:
        return None
    extra = trn2.one_time - gpu.one_time
    if extra <= 0 and trn2.total > gpu.total:
        return None
    steps = 0 if extra <= 0 else int((extra / (gpu.per_step - trn2.per_step)).to_integral_value(ROUND_CEILING))
    saved_per_trial = gpu.recurring - trn2.recurring
    trials = 0.0 if extra <= 0 else (float(extra / saved_per_trial) if saved_per_trial > 0 else None)
    return BreakEven(steps=steps, hours=None if step_time_s is None else round(steps * step_time_s / 3600, 3),
                     trials=None if trials is None else round(trials, 2), already=trn2.total <= gpu.total)


def _sentence(basis: PriceBasis, answer: Verdict, trn2: _Side, gpu: _Side, ratio: float | None,
              steady: Interval, break_even: BreakEven | None) -> str:
    per_step = (f"{steady.estimate:.2f}x per steady-state step ({steady.confidence:.0%} interval "
                f"{steady.low:.2f}-{steady.high:.2f})")
    whole = (f"this trial cost {ratio:.2f}x the GPU's ({_money(trn2.total)} vs {_money(gpu.total)}, one-time costs "
             f"included)") if ratio is not None else "the GPU track has no cost to compare with"
    if answer == "trn2_viable_pays_back" and break_even is not None:
        parts = [f"{break_even.steps:,} steps"]
        if break_even.hours is not None:
            parts.append(f"{break_even.hours:.3g} h of training")
        if break_even.trials is not None:
            parts.append(f"{break_even.trials:.3g} trials of this shape")
        one_time = trn2.one_time - gpu.one_time
        return (f"Trainium2 pays back after {', '.join(parts)}: {whole}, because of {_money(one_time)} more in "
                f"one-time costs ({_one_time_parts(trn2)}); it costs {per_step}")
    if answer == "trn2_viable_cheaper":
        return f"Trainium2 is cheaper: {whole}, and it costs {per_step}"
    if answer == "trn2_viable_not_cheaper" and steady.high < 1:
        # Cheaper per step and no dearer once: the recurring costs outside the steady-state steps made it dearer.
        return (f"Trainium2 is not cheaper: {whole}, with no more in one-time costs than the GPU "
                f"({_money(trn2.one_time)} vs {_money(gpu.one_time)}) but more in recurring costs "
                f"({_money(trn2.recurring)} vs {_money(gpu.recurring)}: training, queueing and environment start, "
                f"checkpoint storage), so a repeat of this trial would cost more too, though it costs {per_step}")
    if answer == "trn2_viable_not_cheaper":
        return f"Trainium2 is not cheaper: it costs {per_step}, so its one-time costs never pay back; {whole}"
    return (f"Inconclusive: the cost per steady-state step includes parity ({per_step}); {whole}; more steps (or a "
            "quieter host) would narrow it")


def _one_time_parts(side: _Side) -> str:
    named = [("compile", side.compile), ("warm-up compile stage", side.stage), ("reruns", side.reruns)]
    return ", ".join(f"{name} {_money(amount)}" for name, amount in named if amount > 0) or "none"


def _no_ratio(basis: PriceBasis, rates: Mapping[str, Decimal], costs: Mapping[str, RunCost]) -> str | None:
    """Why ``basis`` gives no answer although it has every rate: the GPU's instance costs nothing there, so every
    Trainium2/GPU ratio would divide by zero. None when it can."""
    itype = costs["gpu"].price.instance_type
    if rates[itype] > 0:
        return None
    return (f"no answer at the {LABELS[basis]}: it prices the GPU's {itype} at $0/h, so the GPU side costs nothing "
            "there and no Trainium2/GPU cost ratio exists")


def _unanswered(basis: PriceBasis, why: str, rates: Mapping[str, Decimal] | None = None) -> BasisDecision:
    return BasisDecision(basis=basis, label=LABELS[basis], rates={k: str(v) for k, v in sorted((rates or {}).items())},
                         answer=None, trn2_usd=None, gpu_usd=None, trial_ratio=None, sentence=why)


def _at_basis(basis: PriceBasis, rates: Mapping[str, Decimal], costs: Mapping[str, RunCost],
              tracks: Mapping[str, TrackRecord], steady: Interval) -> tuple[BasisDecision, dict[str, _Side]]:
    """The answer at one basis whose GPU rate is above zero (``_no_ratio``), and each side's costs there."""
    used = {run: cost.price.hourly_usd for run, cost in costs.items()}
    # A run billed at $0/h has no instance amounts to scale: it keeps them.
    factors = {run: (rates[cost.price.instance_type] / used[run]) if used[run] else Decimal(1)
               for run, cost in costs.items()}
    sides = {name: _side(name, costs, factors, _scaled(_per_step(tracks.get(name)), factors[name]))
             for name in SIDES}
    trn2, gpu = sides["trn2"], sides["gpu"]
    ratio = float(trn2.total / gpu.total) if gpu.total else None
    scaled = steady.scaled(float(factors["trn2"] / factors["gpu"]))
    answer = _answer(scaled, ratio, trn2.one_time - gpu.one_time)
    break_even = _break_even(trn2, gpu, _step_time(tracks.get("trn2")))
    view = BasisDecision(
        basis=basis, label=LABELS[basis], rates={k: str(v) for k, v in sorted(rates.items())}, answer=answer,
        trn2_usd=_usd(trn2.total), gpu_usd=_usd(gpu.total), trial_ratio=None if ratio is None else round(ratio, 6),
        steady_cost_ratio=IntervalView.model_validate(scaled.as_json()), break_even=break_even,
        sentence=_sentence(basis, answer, trn2, gpu, ratio, scaled, break_even))
    return view, sides


def decide(tracks: Mapping[str, TrackRecord], costs: Mapping[str, RunCost], steady: Interval, table: PriceTable,
           shipped: PriceTable) -> Decision | None:
    """The decision at every basis, for a trial whose Trainium2 and GPU runs both succeeded, passed every check and
    have a steady-state cost per step (``steady``: trn2 / gpu at the rates the runs were billed at). ``table`` is
    the deployment's price table (overrides applied), ``shipped`` the on-demand table. None when the GPU side has
    no cost, or the basis the runs were billed at gives no answer."""
    costs = {run: cost for run, cost in costs.items() if run in SIDES["trn2"] + SIDES["gpu"]}
    if "gpu" not in costs or "trn2" not in costs:
        return None
    primary = _primary(costs)
    views: list[BasisDecision] = []
    sides: dict[str, _Side] = {}
    for basis in _bases(costs, table):
        rates = _basis_rates(basis, primary, costs, table, shipped)
        if isinstance(rates, str):
            views.append(_unanswered(basis, rates))
            continue
        why = _no_ratio(basis, rates, costs)
        if why is not None:
            views.append(_unanswered(basis, why, rates))
            continue
        view, priced = _at_basis(basis, rates, costs, tracks, steady)
        views.append(view)
        if basis == primary:
            sides = priced
    if not sides:
        return None
    answered = [v for v in views if v.answer is not None]
    flips = len({v.answer for v in answered}) > 1
    note = None
    if flips:
        note = "The answer changes with the price basis: " + "; ".join(
            f"{ANSWERS[v.answer]} at {v.label}" for v in answered if v.answer is not None) + "."
    return Decision(primary=primary, trn2=sides["trn2"].view(), gpu=sides["gpu"].view(), bases=views, flips=flips,
                    flip_note=note)


def primary_of(decision: Decision) -> BasisDecision:
    return next(v for v in decision.bases if v.basis == decision.primary)

