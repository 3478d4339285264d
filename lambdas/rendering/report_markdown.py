"""The Markdown rendering of a trial report."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lambdas.domain.money.cost import COMPONENTS
from lambdas.domain.report.model import (
    STAND_IN_EVIDENCE,
    BaselineCompared,
    BaselineUnread,
    BaselineView,
    Comparison,
    IntervalView,
    TrackRecord,
    TrialReport,
)
from lambdas.rendering.decision_render import decision_markdown
from lambdas.rendering.figures import significant as _number
from lambdas.rendering.markdown_table import md_cell, md_row
from lambdas.rendering.pilot_render import pilot_markdown
from lambdas.rendering.report_text import _AMOUNT_NAMES, COMPONENT_NAMES, _cell, _percent, _record_groups, _spread
from lambdas.rendering.scaling_render import scaling_markdown


def _baseline_line(baseline: BaselineView | None, pilot: bool = False) -> str:
    """What the report says of the trial's GPU baseline, in one line (a Trainium2 pilot compares its trn2 run
    with it, in the pilot section)."""
    if pilot and baseline is not None and not isinstance(baseline, BaselineUnread):
        return (f"{baseline.format} at {baseline.uri}; this pilot has no GPU track: its trn2 run is compared with the "
                "baseline in the pilot section")
    if baseline is None:
        return "none declared (baseline_logs_uri): the GPU track is not checked against the team's own GPU logs"
    if isinstance(baseline, BaselineUnread):
        return f"{baseline.uri} could not be used: {baseline.error}"
    if not isinstance(baseline, BaselineCompared):
        return f"{baseline.format} at {baseline.uri}; no gpu run reported losses to compare with it"
    verdict = {True: "reproduced", False: "NOT reproduced", None: "not evidenced"}[baseline.reproduced]
    return f"{verdict}: {baseline.format} at {baseline.uri}; {baseline.detail}"


def _compile_lines(report: TrialReport) -> list[str]:
    """The warm-up compile stage (when it ran) and the trial's cache hit rate."""
    view = report.compile
    stage = view.stage
    rate = view.hit_rate
    out = ["## Compile", "",
           f"Cache hit rate: {'-' if rate is None else f'{rate:.0%}'} ({view.hits} of {view.lookups} lookups; "
           f"{view.basis})", ""]
    if view.entries:
        out += ["| cache entry | status | hits | compiles | failed compiles | last failure |",
                "|---|---|---|---|---|---|"]
        out += [md_row([f"`{e.cache_key[:16]}`", e.status, str(e.hits), str(e.misses), str(e.failures),
                        _cell(e.failure_reason)]) for e in view.entries] + [""]
    if not stage:
        return [*out, "Warm-up compile stage: not run (the cache key was warm, or the trial has no trn2 track).", ""]
    booking = stage.booking
    out += [f"Warm-up compile stage (`{stage.run}`, {stage.instance_type} x {stage.nodes}"
            f"{', stand-in ' + str(stage.backend) if stage.stand_in else ''}): **{stage.status}**, "
            f"{_cell(stage.compile_s)} s compiling over {stage.attempts} attempt(s), cache "
            f"{', '.join(stage.cache_by_attempt) or '-'}, cost {stage.cost.total_usd} USD (all compile)"
            + (f", booked as {'shared infrastructure' if booking.shared else 'this trial'} "
               f"({booking.basis})" if booking and booking.basis else "") + ".", ""]
    if stage.error or stage.detail:
        out += [f"> Compiler: {md_cell(_cell(stage.error or stage.detail))}", ""]  # one line, as in the table
    return out


def render_markdown(report: TrialReport) -> str:
    return "\n".join([*_summary_lines(report), *decision_markdown(report.decision), *pilot_markdown(report.pilot),
                      *_record_lines(report), *scaling_markdown(report.scaling),
                      *_cost_lines(report), *_compile_lines(report), *_resume_lines(report.tracks),
                      *_comparison_lines(report.comparison)])


def _summary_lines(report: TrialReport) -> list[str]:
    """The heading, the verdict with its facts and reasons, the stacks, the baseline and unreadable summaries."""
    out = [
        f"# Trial {report.trial_id}",
        "",
        f"Owner `{report.owner}` · model `{report.model.id}@{report.model.revision}` "
        f"({report.model.method}) · spec sha256 `{report.spec_hash[:12]}`",
        "",
    ]
    if report.stand_in:
        out += [
            "> Figures marked stand-in come from a stand-in backend; prices are at the declared instance's rate.",
            "",
        ]
    stopped = report.stopped_by
    if stopped:
        out += [f"> **Stopped at limit `{stopped.limit}`** ({stopped.source}): limit {stopped.value}, "
                f"observed {stopped.observed}" + (f" on run {stopped.run}" if stopped.run else "")
                + f" at {stopped.at}.", ""]
    comparison = report.comparison
    if comparison.headline:
        out += [f"**{comparison.headline}**", ""] + [f"- {f}" for f in comparison.facts] + [""]
    out += [f"> Fidelity caveat: {c}" for c in comparison.caveats] + ([""] if comparison.caveats else [])
    code = (f"Rehearsal: `{comparison.rehearsal}` (stand-ins: no verdict)" if comparison.rehearsal
            else f"Verdict code: `{comparison.verdict}`")
    out += [code, ""] + [f"- {r}" for r in comparison.reasons] + [""]
    stacks = [f"{run}: {t.stack or t.backend}, PyTorch {t.torch or 'unknown'}, {t.execution}"
              for run, t in report.tracks.items()]
    out += ["Training stacks: " + "; ".join(stacks), ""]
    out += [f"GPU baseline: {_baseline_line(report.baseline, report.pilot is not None)}", ""]
    unreadable = report.unreadable_summaries or []
    if unreadable:
        out += ["> Summaries the report could not read (their attempts are missing from the figures below):", ""]
        out += [f"- `{u.key}`: {_cell(u.error)}" for u in unreadable] + [""]
    return out


def _record_lines(report: TrialReport) -> list[str]:
    """How each job ended, the record table, the acceptance checks and the parallel layout."""
    tracks = report.tracks
    runs = list(tracks)
    out = ["## How each job ended", "", "| run | outcome | Batch status reason |", "|---|---|---|"]
    out += [md_row([run, t.outcome, _cell(t.status_reason)]) for run, t in tracks.items()] + [""]
    out += ["## Record table", "", md_row(["item", "figure", *runs]), "|---|---|" + "---|" * len(runs)]
    for group in _record_groups(report, "-"):
        out += [md_row([group.item if i == 0 else "", row.label, *row.cells]) for i, row in enumerate(group.rows)]
    out += ["", "## Acceptance checks", "", "| check | status | detail |", "|---|---|---|"]
    out += [md_row([c.check, c.status, c.detail]) for c in report.acceptance]
    parallel = {run: t.parallel for run, t in tracks.items() if t.parallel}
    if parallel:
        out += ["", "## Parallel layout", ""]
        out += [f"- {run}: {p.description}" for run, p in parallel.items() if p.description]
        out += ["", "| run | nodes | devices billed | training ranks | utilisation | processes | communication_s | "
                "communication share | sync wait median_s | basis |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        out += [md_row([run, str(p.nodes), str(p.devices_billed), str(p.layout_ranks), _cell(p.device_utilisation),
                        str(p.processes), _cell(p.communication_s), _cell(p.communication_share),
                        _cell(p.sync_wait_median_s), p.basis])
                for run, p in parallel.items()]
    return out


def _cost_lines(report: TrialReport) -> list[str]:
    """Each run's cost by component and the trial's, the price basis and how each run's compile is booked."""
    tracks = report.tracks
    by_run = report.cost.by_run
    out = [
        "",
        "## Cost (USD)",
        "",
        "Each run's cost (the warm-up compile stage's included), and the trial's: their sum.",
        "",
        md_row(["component (USD)", *by_run, "trial"]),
        "|---|" + "---|" * (len(by_run) + 1),
    ]
    for name in (*COMPONENTS, "total_usd", "cost_per_effective_step_usd", "cost_per_1m_tokens_usd"):
        trial = report.cost.trial.get(name) or "-"
        out.append(md_row([_AMOUNT_NAMES.get(name) or COMPONENT_NAMES[name],
                           *(_cell(cost.amounts()[name]) for cost in by_run.values()), trial]))
    out += ["", "Price basis: " + "; ".join(f"{run}: {cost.price_basis}" for run, cost in by_run.items()), ""]
    for run, t in tracks.items():
        booking = t.compile.booking
        if booking and booking.basis:
            out += [f"Compile cost of {run}: {'shared infrastructure' if booking.shared else 'this trial'}"
                    f" ({booking.basis})", ""]
    return out


def _resume_lines(tracks: Mapping[str, TrackRecord]) -> list[str]:
    out = [
        "## Resume evidence",
        "",
        "| run | fault at step | resumed from step | rerun steps | rerun share | global step continuous | "
        "loss continuous |",
        "|---|---|---|---|---|---|---|",
    ]
    for run, t in tracks.items():
        r = t.resume
        out.append(md_row([run, _cell(r.injected_at_step), _cell(r.resumed_from_step), str(r.rerun_steps),
                           _cell(r.rerun_share), _cell(r.global_step_continuous), _cell(r.loss_continuous)]))
    return out


@dataclass(frozen=True)
class ComparisonItem:
    """One figure the comparison rests on: what it compares, its value and how it was computed."""

    name: str
    value: str
    basis: str


def _ratio(view: IntervalView | None) -> str:
    if view is None:
        return "not measured"
    estimate, low, high = _spread(view.estimate, view.low, view.high, 3)
    return f"{estimate}\u00d7 ({view.confidence:.0%} interval {low} to {high})"


def comparison_items(comparison: Comparison) -> list[ComparisonItem]:
    """The loss delta against its tolerance, the steady-state cost ratio with its interval and the whole-trial
    cost ratio, each as a value."""
    delta, tolerance = comparison.final_loss_delta, comparison.loss_tolerance
    within = {True: "within", False: "outside", None: "not judged against"}[comparison.within_tolerance]
    steady = comparison.steady_cost_ratio
    # A rehearsal's cost ratios are shown as what they are: evidence that the pipeline costed the runs.
    evidence = [STAND_IN_EVIDENCE] if comparison.rehearsal else []
    return [
        ComparisonItem("final validation loss, trn2 vs gpu",
                       "not measured" if delta is None
                       else f"{_percent(delta, '+')} ({within} the tolerance of \u00b1{_percent(tolerance)})",
                       "relative difference of the final validation losses"),
        ComparisonItem("steady-state cost per training step, trn2 / gpu",
                       _ratio(steady),
                       "; ".join(part for part in (comparison.steady_cost_ratio_basis, steady and steady.method,
                                                   *evidence) if part)),
        ComparisonItem("whole-trial cost, trn2 side / gpu",
                       "not measured" if comparison.cost_ratio is None
                       else f"{_number(comparison.cost_ratio, 3)}\u00d7",
                       "; ".join([comparison.cost_ratio_basis, *evidence])),
    ]


def _comparison_lines(comparison: Comparison) -> list[str]:
    return ["", "## Comparison", "",
            *(f"- {item.name}: **{item.value}** ({item.basis})" for item in comparison_items(comparison)), ""]
