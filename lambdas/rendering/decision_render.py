"""The whole-trial decision as the report shows it, right under the headline: each side's one-time and recurring
costs, then the answer at each price basis with its break-even point (Markdown lines, and rows for the HTML
template)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from lambdas.domain.report.decision import ANSWERS
from lambdas.domain.report.model import BasisDecision, Decision, SideCosts
from lambdas.rendering.figures import significant
from lambdas.rendering.markdown_table import md_row

MISSING = "\u2014"
SIDE_NAMES = {"trn2": "Trainium2 side", "gpu": "GPU side"}
RUN_WORDS = {"trn2": "trn2", "gpu": "gpu", "gpu-fallback": "GPU fallback", "trn2-compile": "warm-up compile stage"}


def _money(value: str | None, places: int = 2) -> str:
    if value is None:
        return MISSING
    return f"${Decimal(value).quantize(Decimal(1).scaleb(-places)):,}"


def _per_step(value: str | None) -> str:
    """A cost per step keeps four significant figures (it is often well under a cent)."""
    if value is None:
        return MISSING
    amount = float(value)
    return f"${significant(amount)}" if amount < 1 else f"${amount:,.2f}"


@dataclass(frozen=True)
class SideRow:
    side: str
    runs: str
    compile: str
    warm_up_stage: str
    reruns: str
    one_time: str
    recurring: str
    per_step: str
    total: str


@dataclass(frozen=True)
class BasisRow:
    basis: str
    primary: bool
    rates: str
    answer: str
    trial: str
    per_step_ratio: str
    break_even: str
    sentence: str
    unanswered: bool  # no answer at this basis: ``sentence`` says why


@dataclass(frozen=True)
class DecisionView:
    sides: list[SideRow]
    bases: list[BasisRow]
    flip_note: str | None


def _side(name: str, side: SideCosts) -> SideRow:
    one = side.one_time
    return SideRow(side=SIDE_NAMES[name], runs=", ".join(RUN_WORDS.get(r, r) for r in side.runs),
                   compile=_money(one.compile_usd), warm_up_stage=_money(one.warm_up_stage_usd),
                   reruns=_money(one.reruns_usd), one_time=_money(one.total_usd), recurring=_money(side.recurring_usd),
                   per_step=_per_step(side.per_step_usd), total=_money(side.total_usd))


def _break_even(view: BasisDecision) -> str:
    found = view.break_even
    if found is None:
        return "never" if view.answer == "trn2_viable_not_cheaper" else MISSING
    if found.already:
        return "reached on this trial"
    parts = [f"{found.steps:,} steps"]
    if found.hours is not None:
        parts.append(f"{found.hours:.3g} h")
    if found.trials is not None:
        parts.append(f"{found.trials:.3g} trials")
    return " · ".join(parts)


def _basis(view: BasisDecision, primary: bool) -> BasisRow:
    steady = view.steady_cost_ratio
    return BasisRow(
        basis=view.label, primary=primary,
        rates=", ".join(f"{itype} ${rate}/h" for itype, rate in view.rates.items()) or MISSING,
        # No answer: either a rate is missing, or the rates give no ratio (the sentence says which).
        answer=ANSWERS[view.answer] if view.answer else ("no ratio" if view.rates else "no rate"),
        trial=(f"{_money(view.trn2_usd)} vs {_money(view.gpu_usd)} ({view.trial_ratio:.2f}x)"
               if view.trial_ratio is not None else MISSING),
        per_step_ratio=(f"{steady.estimate:.3f}x ({steady.confidence:.0%} interval {steady.low:.3f} to "
                        f"{steady.high:.3f})" if steady else MISSING),
        break_even=_break_even(view), sentence=view.sentence, unanswered=view.answer is None)


def decision_view(decision: Decision | None) -> DecisionView | None:
    if decision is None:
        return None
    return DecisionView(sides=[_side("trn2", decision.trn2), _side("gpu", decision.gpu)],
                        bases=[_basis(v, v.basis == decision.primary) for v in decision.bases],
                        flip_note=decision.flip_note)


def decision_markdown(decision: Decision | None) -> list[str]:
    view = decision_view(decision)
    if view is None:
        return []
    out = ["## Decision: the whole trial", "",
           "One-time costs are paid once for this migration (compiling the graphs, which the cache serves afterwards; "
           "the warm-up compile stage; reruns and the GPU fallback); recurring costs are what a repeat of this trial "
           "would cost.", "",
           "| side | runs | compile | warm-up compile stage | reruns | one-time | recurring | per steady-state step "
           "| total |", "|---|---|---|---|---|---|---|---|---|"]
    out += [md_row([s.side, s.runs, s.compile, s.warm_up_stage, s.reruns, s.one_time, s.recurring, s.per_step,
                    s.total]) for s in view.sides]
    out += ["", "| price basis | rates | answer | this trial, Trainium2 vs GPU | per steady-state step, trn2/gpu "
                "| break-even |", "|---|---|---|---|---|---|"]
    out += [md_row([f"{b.basis}{' (billed)' if b.primary else ''}", b.rates, f"**{b.answer}**", b.trial,
                    b.per_step_ratio, b.break_even]) for b in view.bases]
    out += [""] + ([f"> {view.flip_note}", ""] if view.flip_note else [])
    missing = [b for b in view.bases if b.unanswered]
    out += [f"- {b.basis}: {b.sentence}" for b in missing] + ([""] if missing else [])
    return out
