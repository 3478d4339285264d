"""Markdown and self-contained HTML renderings of a trial report (inline SVG charts, no external assets).

Python computes each chart's geometry (dataclasses in SVG user units) and every figure's text; the template only
places them. Figures read the same in both renderings: four significant figures written out (0.00001443, never
1.443e-05), money in USD to the cent, yes/no for a flag and a dash where nothing was measured."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from functools import lru_cache
from typing import TypedDict

from jinja2 import Environment, PackageLoader, select_autoescape

from lambdas.domain.cost import COMPONENTS
from lambdas.domain.decision_render import DecisionView, decision_markdown, decision_view
from lambdas.domain.figures import fixed as _fixed
from lambdas.domain.figures import places as _places
from lambdas.domain.figures import significant as _number
from lambdas.domain.markdown_table import md_cell, md_row
from lambdas.domain.pilot import pilot_markdown, pilot_rows
from lambdas.domain.report_model import (
    STAND_IN_EVIDENCE,
    BaselineCompared,
    BaselineUnread,
    BaselineView,
    Booking,
    CacheEntryView,
    Comparison,
    CompileStage,
    CostView,
    Figure,
    IntervalView,
    ParallelView,
    Startup,
    TimelineRow,
    TrackRecord,
    TrialReport,
)
from lambdas.domain.scaling import SCALING_COLUMNS, ScalingTable, nodes_text, scaling_markdown, scaling_tables
from lambdas.domain.vocabulary import COMPILE_RUN, scaling_nodes, track_of

# What a person calls each run; a label adds the instance type, as in "GPU (p5.48xlarge)".
RUN_NAMES = {"gpu": "GPU", "trn2": "Trainium2", "gpu-fallback": "GPU fallback",
             COMPILE_RUN: "Trainium2 warm-up compile"}
COMPONENT_NAMES = {"effective_training_usd": "effective training", "compile_usd": "compile",
                   "failed_reruns_usd": "failed reruns", "checkpoint_storage_usd": "checkpoint storage",
                   "queue_environment_usd": "queue and environment"}
_AMOUNT_NAMES = {"total_usd": "total", "cost_per_effective_step_usd": "per effective step",
                 "cost_per_1m_tokens_usd": "per 1M tokens"}
# Nothing measured: an em dash in HTML, a hyphen in Markdown (one terminal column wherever it is shown).
MISSING = "\u2014"
COLOURS = {"gpu": "#1f77b4", "trn2": "#d62728", "gpu-fallback": "#2ca02c", COMPILE_RUN: "#9467bd"}
# Two tracks that train alike draw one curve over the other: each run has its own dash, so both stay visible.
DASHES = {"gpu": "", "trn2": "6 4", "gpu-fallback": "2 3"}
LINE_STYLES = {"": "solid", "6 4": "dashed", "2 3": "dotted"}  # each dash as the legend's CSS border draws it
MARKER_ROW = 16  # px between the rows of marker names above the loss plot: more than a 12 px line of text
COMPONENT_COLOURS = dict(zip(COMPONENTS, ("#4c78a8", "#f58518", "#e45756", "#72b7b2", "#b279a2"), strict=True))
VERDICT_COLOURS = {"trn2_viable_cheaper": "#1a7f37", "trn2_viable_pays_back": "#4d7f1a",
                   "trn2_viable_not_cheaper": "#9a6700", "stay_on_gpu": "#d62728"}
# A rehearsal on stand-ins is not a verdict: its own colour, passed or failed, never the verdicts' green or red.
REHEARSAL_COLOUR = "#3b6ea5"


def _spread(estimate: float, low: float, high: float, digits: int = 4) -> tuple[str, str, str]:
    """An estimate and its interval at the estimate's precision, so the three line up: 0.495, 0.490 and 0.500."""
    places = _places(estimate, digits)
    return _fixed(estimate, places), _fixed(low, places), _fixed(high, places)


def _cell(value: Figure, missing: str = "-") -> str:
    """A figure in a table: yes or no for a flag, numbers to four significant figures, a list joined, ``missing``
    where nothing was measured."""
    if value is None:
        return missing
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, list):
        return ", ".join(value) or missing
    return value


def _html_cell(value: Figure) -> str:
    return _cell(value, MISSING)


def _size(count: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(count) >= scale:
            return f"{_number(count / scale, 3)} {unit}"
    return f"{_number(count)} B"


def run_label(run: str, instance_type: str | None, stand_in: str | None = None) -> str:
    """A run as a person reads it: "GPU (p5.48xlarge)", "Trainium2 (trn2.48xlarge, stand-in cpu)"."""
    where = ", ".join(part for part in (instance_type, stand_in and f"stand-in {stand_in}") if part)
    nodes = scaling_nodes(run)
    name = (RUN_NAMES.get(run, run) if nodes is None  # a scaling run: "GPU at 1 node"
            else f"{RUN_NAMES[track_of(run)]} at {nodes_text(nodes)}")
    return f"{name} ({where})" if where else name


def _run_labels(report: TrialReport) -> dict[str, str]:
    """Each run's label, the warm-up compile stage's included."""
    labels = {run: run_label(run, t.instance_type, t.backend if t.stand_in else None)
              for run, t in report.tracks.items()}
    stage = report.compile.stage
    if stage:
        labels[stage.run] = run_label(stage.run, stage.instance_type, stage.backend if stage.stand_in else None)
    return labels


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


def _percent(fraction: float, sign: str = "") -> str:
    return f"{sign if fraction > 0 else ''}{_number(fraction * 100, 3)}%"


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


def _ticks(low: float, high: float, count: int = 6) -> list[float]:
    """About ``count`` round tick values covering [low, high] (1, 2 or 5 times a power of ten apart)."""
    span = (high - low) or abs(high) or 1.0
    raw = span / max(1, count - 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(low / step) * step
    return [round(first + i * step, 10) for i in range(int((high - first) / step + 1e-9) + 1)]


@dataclass(frozen=True)
class Tick:
    at: float
    label: str


@dataclass(frozen=True)
class Marker:
    """A vertical line at a step: ``short`` is drawn above the plot, ``label`` says it in the legend."""

    at: float
    colour: str
    label: str
    short: str
    row: int
    anchor: str


@dataclass(frozen=True)
class EvalMark:
    x: float
    y: float
    step: float
    loss: float


@dataclass(frozen=True)
class Series:
    run: str
    label: str
    colour: str
    dash: str
    line: str
    points: str
    evals: list[EvalMark]


@dataclass(frozen=True)
class LossChart:
    """The loss chart's geometry in SVG user units (no series: nothing to draw)."""

    series: list[Series] = field(default_factory=list)
    width: int = 0
    height: int = 0
    left: int = 0
    right: int = 0
    top: int = 0
    bottom: int = 0
    x_ticks: list[Tick] = field(default_factory=list)
    y_ticks: list[Tick] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    marker_row: int = MARKER_ROW


def loss_chart(tracks: Mapping[str, TrackRecord], labels: Mapping[str, str] | None = None, width: int = 1200,
               height: int = 320) -> LossChart:
    """The loss chart's geometry: one line per run, its validation points, and the fault, retry, resume and
    fallback marked where they happened (their short names in rows above the plot, so none overlaps another)."""
    labels = labels or {}
    left, right, top, bottom = 56, width - 16, 16 + MARKER_ROW * len(_marker_steps(tracks)), height - 40
    series: dict[str, list[tuple[float, float]]] = {
        run: [(p.step, p.loss) for p in t.loss.per_step] for run, t in tracks.items()}
    evals: dict[str, list[tuple[float, float]]] = {
        run: [(p.step, p.loss) for p in t.loss.eval] for run, t in tracks.items()}
    points = [p for s in (*series.values(), *evals.values()) for p in s]
    if not points:
        return LossChart()
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
    y0, y1 = min(p[1] for p in points), max(p[1] for p in points)
    pad = (y1 - y0) * 0.05 or 0.05
    y0, y1 = y0 - pad, y1 + pad

    def sx(x: float) -> float:
        return round(left + (x - x0) / ((x1 - x0) or 1) * (right - left), 1)

    def sy(y: float) -> float:
        return round(bottom - (y - y0) / ((y1 - y0) or 1) * (bottom - top), 1)

    return LossChart(
        width=width, height=height, left=left, right=right, top=top, bottom=bottom,
        series=[Series(run=run, label=labels.get(run, run), colour=_colour(run),
                       dash=DASHES.get(run, "3 3"), line=LINE_STYLES.get(DASHES.get(run, "3 3"), "dashed"),
                       points=" ".join(f"{sx(x)},{sy(y)}" for x, y in pts),
                       evals=[EvalMark(x=sx(x), y=sy(y), step=x, loss=round(y, 4)) for x, y in evals[run]])
                for run, pts in series.items() if pts or evals[run]],
        x_ticks=[Tick(at=sx(v), label=f"{v:g}") for v in _ticks(x0, x1) if x0 <= v <= x1],
        y_ticks=[Tick(at=sy(v), label=f"{v:.3g}") for v in _ticks(y0, y1) if y0 <= v <= y1],
        markers=_markers(tracks, sx, right),
    )


def _colour(run: str) -> str:
    """A run's colour in the charts: a scaling run takes its track's (its dash tells them apart)."""
    return COLOURS.get(run) or (COLOURS[track_of(run)] if scaling_nodes(run) is not None else "#555")


def _marker_steps(tracks: Mapping[str, TrackRecord]) -> list[tuple[str, str, int]]:
    """(run, what, step) for each run's injected fault and each retry or fallback that resumed."""
    found = []
    for run, t in tracks.items():
        resume = t.resume
        if resume.injected_at_step:
            found.append((run, "fault", resume.injected_at_step))
        if resume.resumed_from_step is not None:
            found.append((run, "fallback resumed" if run == "gpu-fallback" else "retry resumed",
                          resume.resumed_from_step))
    return found


def _markers(tracks: Mapping[str, TrackRecord], sx: Callable[[float], float], right: float) -> list[Marker]:
    """Where each run's fault was injected and where a retry or the fallback resumed (``sx``: step to x), one row
    of the space above the plot each; a name near the right edge ends at its line instead of starting there."""
    markers = []
    # Rows from the left: a name runs right, over the space where only later (lower) rows' lines start.
    for row, (run, what, step) in enumerate(sorted(_marker_steps(tracks), key=lambda found: found[2])):
        name = RUN_NAMES.get(run, run)
        label = (f"{name}: fault after step {step}" if what == "fault"
                 else f"{name}: {what} from step {step}")
        at = sx(step)
        short = f"{name} {what}"
        markers.append(Marker(at=at, colour="#d62728" if what == "fault" else _colour(run),
                              label=label, short=short, row=row,
                              anchor="end" if at + _text_width(short) > right else "start"))
    return markers


def _text_width(text: str, size: float = 12) -> int:
    """A generous estimate of ``text``'s width in a sans-serif face at ``size`` px (layout margins; the page's
    rendering tests measure the real thing)."""
    return math.ceil(len(text) * size * 0.62)


@dataclass(frozen=True)
class Segment:
    x: float
    width: float
    colour: str
    title: str


@dataclass(frozen=True)
class CostBar:
    label: str
    y: int
    segments: list[Segment]
    end: float
    total: str


@dataclass(frozen=True)
class CostChart:
    """One bar per run (the warm-up compile stage's included), stacked by cost component."""

    bars: list[CostBar]
    width: int
    height: int
    left: int
    bar_height: int = 22


def cost_chart(costs: Mapping[str, CostView], labels: Mapping[str, str], width: int = 1200) -> CostChart:
    """Each run's five components end to end on one scale, its total beside the bar; its label left of it."""
    left = 16 + max((_text_width(labels.get(run, run)) for run in costs), default=0)
    room = width - left - 96
    top = max((float(cost.total_usd) for cost in costs.values()), default=0.0) or 1.0
    bars = []
    for i, (run, cost) in enumerate(costs.items()):
        x, segments = float(left), []
        for name in COMPONENTS:
            amount = cost.components()[name]
            w = float(amount) / top * room
            segments.append(Segment(x=round(x, 1), width=round(w, 1), colour=COMPONENT_COLOURS[name],
                                    title=f"{COMPONENT_NAMES[name]}: {_usd(amount)}"))
            x += w
        bars.append(CostBar(label=labels.get(run, run), y=8 + 34 * i, segments=segments, end=round(x + 6, 1),
                            total=_usd(cost.total_usd)))
    return CostChart(bars=bars, width=width, height=16 + 34 * len(bars), left=left)


def _stamp(at: str) -> float:
    return datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()


def _elapsed(seconds: float) -> str:
    return f"{_number(seconds / 60, 3)} min" if seconds >= 120 else f"{_number(seconds, 3)} s"


@dataclass(frozen=True)
class TransitionMark:
    x: float
    title: str


@dataclass(frozen=True)
class AttemptBar:
    """One attempt from its first Batch transition to its last, coloured by how it ended."""

    label: str
    y: int
    x: float
    width: float
    colour: str
    title: str
    marks: list[TransitionMark]


@dataclass(frozen=True)
class TimelineChart:
    bars: list[AttemptBar] = field(default_factory=list)
    width: int = 0
    height: int = 0
    left: int = 0
    right: int = 0
    axis_y: int = 0
    ticks: list[Tick] = field(default_factory=list)
    axis_label: str = ""


ENDED_COLOURS = {"SUCCEEDED": "#2ca02c", "FAILED": "#d62728"}
RUNNING_COLOUR = "#8c8c8c"


def timeline_chart(timeline: Sequence[TimelineRow], labels: Mapping[str, str], width: int = 1200) -> TimelineChart:
    """A bar per attempt on a time axis from the trial's first Batch transition (minutes when the trial took two
    or more, else seconds), each transition a tick on its bar."""
    if not timeline:
        return TimelineChart()
    rows = sorted(timeline, key=lambda row: _stamp(row.at))
    start = _stamp(rows[0].at)
    span = (_stamp(rows[-1].at) - start) or 1.0
    attempts: dict[tuple[str, int], list[TimelineRow]] = {}
    for row in rows:
        attempts.setdefault((row.run, row.attempt), []).append(row)
    names = {key: f"{labels.get(key[0], key[0])}, attempt {key[1]}" for key in attempts}
    left, right = 16 + max(_text_width(name) for name in names.values()), width - 24
    unit, scale = ("min", 60.0) if span >= 120 else ("s", 1.0)

    def sx(seconds: float) -> float:
        return round(left + seconds / span * (right - left), 1)

    bars = []
    for i, (key, steps) in enumerate(attempts.items()):
        first, last = _stamp(steps[0].at) - start, _stamp(steps[-1].at) - start
        ended = steps[-1].status
        bars.append(AttemptBar(
            label=names[key], y=8 + 26 * i, x=sx(first), width=max(sx(last) - sx(first), 3.0),
            colour=ENDED_COLOURS.get(ended, RUNNING_COLOUR),
            title=f"{names[key]}: {steps[0].status} at {_elapsed(first)}, {ended} at {_elapsed(last)} "
                  f"({_elapsed(last - first)})",
            marks=[TransitionMark(x=sx(_stamp(step.at) - start),
                                  title=f"{step.status} at {_elapsed(_stamp(step.at) - start)} ({step.at})"
                                        + (f": {step.status_reason}" if step.status_reason else ""))
                   for step in steps]))
    axis_y = 8 + 26 * len(bars)
    return TimelineChart(
        bars=bars, width=width, height=axis_y + 40, left=left, right=right, axis_y=axis_y,
        ticks=[Tick(at=sx(v * scale), label=f"{v:g} {unit}") for v in _ticks(0, span / scale) if v * scale <= span],
        axis_label=f"{'minutes' if unit == 'min' else 'seconds'} from the trial's first Batch transition")


def _usd(value: str | None, digits: int | None = None) -> str:
    """Money for people: an amount to the cent; a unit price (``digits`` given) below a dollar to that many
    significant figures ($0.03518, $0.00001443). Full precision stays in report.json."""
    if not value:
        return MISSING
    amount = Decimal(value)
    if digits is None or abs(amount) >= 1:
        return f"${amount:,.2f}"
    return f"${_number(float(amount), digits)}"


def _unbroken(text: str) -> str:
    """A column title whose hyphen the browser must not wrap at ("speed-up"): a non-breaking hyphen (U+2011)."""
    return text.replace("-", "\u2011")


@dataclass(frozen=True)
class IntervalCell:
    """A figure and, on a line of its own under it, its interval (so a column of them stays narrow)."""

    value: str
    interval: str | None = None


def _interval(view: IntervalView | None, money: bool = False) -> IntervalCell:
    if not view:
        return IntervalCell(MISSING)
    unit = "$" if money else ""
    estimate, low, high = _spread(view.estimate, view.low, view.high)
    return IntervalCell(f"{unit}{estimate}", f"{view.confidence:.0%}: {unit}{low} to {unit}{high}")


@dataclass(frozen=True)
class CostRow:
    """A run's components, total and unit costs; the last row is the trial's sums."""

    label: str
    cells: list[str]
    trial: bool = False


@dataclass(frozen=True)
class PriceRow:
    label: str
    instance_type: str
    rate: str
    confidence: str
    table: str


@dataclass(frozen=True)
class UncertaintyRow:
    run: str
    steps: int | str
    step_time: IntervalCell
    tokens: IntervalCell
    cost: IntervalCell
    on: str


@dataclass(frozen=True)
class FigureRow:
    label: str
    cells: list[str]


@dataclass(frozen=True)
class RecordGroup:
    """One item of the record table: a row per figure, a cell per run."""

    item: str
    rows: list[FigureRow]


@dataclass(frozen=True)
class AttemptRow:
    run: str
    attempt: int
    cache: str
    compile_s: str
    startup_s: str


@dataclass(frozen=True)
class VersionRow:
    run: str
    image: str
    digest: str
    versions: str


@dataclass(frozen=True)
class RecoveryRow:
    run: str
    cells: list[str]


@dataclass(frozen=True)
class SampleRow:
    """A prompt's completion by each run (None: the run has none for it; "": it answered nothing) and whether
    they are the same: "empty" when one is empty, which is not agreement."""

    prompt: str
    completions: list[str | None]
    same: str


class HtmlContext(TypedDict):
    """What ``templates/report.html`` reads."""

    r: TrialReport
    c: Comparison
    runs: list[str]
    labels: dict[str, str]
    cost_columns: list[str]
    cost_rows: list[CostRow]
    prices: list[PriceRow]
    estimates: list[str]
    uncertainty: list[UncertaintyRow]
    record_groups: list[RecordGroup]
    attempts: list[AttemptRow]
    hit_rates: list[tuple[str, str]]
    versions: list[VersionRow]
    bookings: list[tuple[str, Booking]]
    stage: CompileStage | None
    cache_entries: list[CacheEntryView]
    recovery: list[RecoveryRow]
    samples: list[SampleRow]
    sample_runs: list[str]
    baseline_line: str
    comparison: list[ComparisonItem]
    loss: LossChart
    cost_chart: CostChart
    component_colours: list[tuple[str, str]]
    timeline: TimelineChart
    ended_colours: list[tuple[str, str]]
    parallel: list[tuple[str, ParallelView]]
    fmt: Callable[[Figure], str]
    usd: Callable[[str | None], str]
    percent: Callable[[float | None], str]
    verdict_colour: str
    decision: DecisionView | None
    pilot_rows: list[tuple[str, str, str]]
    scaling: list[ScalingTable]
    scaling_columns: tuple[tuple[str, bool], ...]


COST_COLUMNS = [*(COMPONENT_NAMES[name] for name in COMPONENTS), "total", "per effective step", "per 1M tokens"]


def _cost_rows(report: TrialReport, labels: Mapping[str, str]) -> list[CostRow]:
    """A row per run (the warm-up compile stage's included): its five components, total, and cost per effective
    step and per 1M tokens; then the trial's row, each component the sum of the rows above it."""
    rows = [CostRow(label=labels.get(run, run),
                    cells=[*(_usd(cost.components()[name]) for name in (*COMPONENTS, "total_usd")),
                           _usd(cost.cost_per_effective_step_usd, 4), _usd(cost.cost_per_1m_tokens_usd, 4)])
            for run, cost in report.cost.by_run.items()]
    trial = report.cost.trial
    return [*rows, CostRow(label="trial (sum of the runs)", trial=True,
                           cells=[*(_usd(trial.get(name)) for name in (*COMPONENTS, "total_usd")), MISSING, MISSING])]


_PRICE_BASIS = re.compile(r"(?P<type>\S+) at (?P<rate>\S+) USD/h \((?P<conf>[^,]+), table (?P<table>[^)]+)\)")


def _prices(costs: Mapping[str, CostView], labels: Mapping[str, str]) -> tuple[list[PriceRow], list[str]]:
    """Each run's price as its cost states it, and the runs priced at an estimated rate."""
    prices = []
    estimates = []
    for run, cost in costs.items():
        found = _PRICE_BASIS.match(cost.price_basis)
        price = found.groupdict() if found else {"type": "?", "rate": "?", "conf": "?", "table": "?"}
        prices.append(PriceRow(label=labels.get(run, run), instance_type=price["type"], rate=f"{price['rate']} USD/h",
                               confidence=price["conf"], table=price["table"]))
        if price["conf"] == "estimate":
            estimates.append(labels.get(run, run))
    return prices, estimates


def _uncertainty_rows(tracks: Mapping[str, TrackRecord]) -> list[UncertaintyRow]:
    rows = []
    for run, t in tracks.items():
        view = t.uncertainty
        rows.append(UncertaintyRow(
            run=run, steps=view.steady_steps if view else MISSING,
            step_time=_interval(view.step_time_s if view else None),
            tokens=_interval(view.tokens_per_s if view else None),
            cost=_interval(view.cost_per_effective_step_usd if view else None, money=True),
            on=f"stand-in {t.backend}" if t.stand_in else f"{t.instance_type}"))
    return rows


# Record-table figures whose key alone would not say what they measure; any other key reads as words, its unit
# suffix (_s, _usd, _mib) in parentheses.
FIGURE_LABELS = {
    "image_pull_and_start_s": "image pull and container start (s)", "runtime_init_s": "runtime init (s)",
    "cache": "cache (last attempt)", "tokens_per_s": "throughput (tokens/s)",
    "validation_loss": "validation loss (nats/token)", "save_s": "checkpoint saves (s)",
    "restore_s": "checkpoint restores (s)", "total_bytes": "checkpoint size", "files": "checkpoint files",
    "save_slowdown": "step-time slowdown while saving", "failures": "failed attempts",
    "global_step_continuous": "global step continuous after resume",
    "loss_continuous": "loss continuous after resume", "stand_in": "stand-in backend",
}
_UNITS = ((" s", " (s)"), (" usd", " (USD)"), (" mib", " (MiB)"))


def _figure_label(name: str) -> str:
    words = name.replace("_", " ")
    return FIGURE_LABELS.get(name) or next(
        (words.removesuffix(suffix) + unit for suffix, unit in _UNITS if words.endswith(suffix)), words)


def _figure(name: str, value: Figure, missing: str) -> str:
    """A record-table figure, with its unit in the cell where the label cannot carry it: a size, a share, a
    slowdown. A cache key shows its first 16 characters, as the cache entries do."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if name.endswith("_bytes"):
            return _size(value)
        if name.endswith(("_share", "_rate")):
            return _percent(value)
        if name.endswith("_slowdown"):
            return f"{_number(value, 3)}\u00d7"
    if name.endswith("_key") and isinstance(value, str) and len(value) > 16:
        return value[:16] + "\u2026"
    return _cell(value, missing)


def _record_groups(report: TrialReport, missing: str) -> list[RecordGroup]:
    """The record table: per item, a row per figure with each run's value."""
    runs = list(report.tracks)
    groups = []
    for row in report.record_table:
        names = dict.fromkeys(name for run in runs for name in row.figures(run))
        groups.append(RecordGroup(item=row.item, rows=[
            FigureRow(label=_figure_label(name), cells=[_figure(name, row.figures(run).get(name), missing)
                                                        for run in runs])
            for name in names]))
    return groups


def _compile_attempts(run: str, caches: Sequence[str], seconds: Sequence[float], startup: Startup | None
                      ) -> list[AttemptRow]:
    started = {a.attempt: a.seconds for a in (startup.by_attempt if startup else [])}
    return [AttemptRow(run=run, attempt=i + 1, cache=cache,
                       compile_s=_html_cell(seconds[i]) if i < len(seconds) else MISSING,
                       startup_s=_html_cell(started.get(i + 1)))
            for i, cache in enumerate(caches)]


def _attempt_rows(report: TrialReport) -> list[AttemptRow]:
    """Each attempt's compile and cache outcome and its image pull and container start: the warm-up compile
    stage's first, then each run's."""
    stage = report.compile.stage
    rows = _compile_attempts(stage.run, stage.cache_by_attempt, stage.seconds_by_attempt, stage.startup) if stage \
        else []
    for run, t in report.tracks.items():
        rows += _compile_attempts(run, t.compile.cache_by_attempt, t.compile.seconds_by_attempt, t.startup)
    return rows


def _hit_rates(report: TrialReport) -> list[tuple[str, str]]:
    view = report.compile
    trial = MISSING if view.hit_rate is None else f"{view.hit_rate:.0%} ({view.hits} of {view.lookups} lookups)"
    return [("trial", trial), *((run, MISSING if t.compile.hit_rate is None else f"{t.compile.hit_rate:.0%}")
                                for run, t in report.tracks.items())]


def _versions(tracks: Mapping[str, TrackRecord]) -> list[VersionRow]:
    rows = []
    for run, t in tracks.items():
        env = dict(t.environment)
        image, digest = env.pop("image", MISSING), env.pop("image_digest", MISSING)
        for noise in ("hostname", "batch_job_id", "instance_type"):
            env.pop(noise, None)
        rows.append(VersionRow(run=run, image=image, digest=digest,
                               versions=", ".join(f"{k} {v}" for k, v in env.items()) or MISSING))
    return rows


def _bookings(report: TrialReport) -> list[tuple[str, Booking]]:
    """How each compile's cost is booked, where the report says: each run's, then the warm-up compile stage's."""
    found = [(run, booking) for run, t in report.tracks.items() if (booking := t.compile.booking) and booking.basis]
    stage = report.compile.stage
    if stage and stage.booking and stage.booking.basis:
        found.append((stage.run, stage.booking))
    return found


def _recovery_rows(tracks: Mapping[str, TrackRecord]) -> list[RecoveryRow]:
    rows = []
    for run, t in tracks.items():
        r, at = t.resume, t.resume.resume_eval
        rows.append(RecoveryRow(run=run, cells=[
            *map(_html_cell, (r.injected_at_step, r.resumed_from_step, r.rerun_steps)),
            MISSING if r.rerun_share is None else _percent(r.rerun_share),
            *map(_html_cell, (r.global_step_continuous, r.loss_continuous)),
            MISSING if r.max_rel_loss_delta is None else _percent(r.max_rel_loss_delta),
            MISSING if not at else f"{_number(at.loss)} at step {at.step:,}"]))
    return rows


def _sample_rows(tracks: Mapping[str, TrackRecord]) -> tuple[list[str], list[SampleRow]]:
    """The runs with final samples, and each fixed prompt's completion by those runs side by side."""
    sample_runs = [run for run, t in tracks.items() if t.final_samples]
    prompts: dict[str, dict[str, str]] = {}
    for run in sample_runs:
        for sample in tracks[run].final_samples:
            prompts.setdefault(sample.prompt, {})[run] = sample.completion
    rows = []
    for prompt, by_run in prompts.items():
        answers = [by_run.get(run) for run in sample_runs]
        if any(answer is not None and not answer.strip() for answer in answers):
            same = "empty"  # an empty completion says nothing, so two of them do not agree
        elif None in answers:
            same = MISSING
        else:
            same = "yes" if len(set(answers)) == 1 else "no"
        rows.append(SampleRow(prompt=prompt, completions=answers, same=same))
    return sample_runs, rows


def _context(report: TrialReport) -> HtmlContext:
    tracks = report.tracks
    labels = _run_labels(report)
    prices, estimates = _prices(report.cost.by_run, labels)
    sample_runs, samples = _sample_rows(tracks)
    return HtmlContext(
        r=report, c=report.comparison, decision=decision_view(report.decision), pilot_rows=pilot_rows(report.pilot),
        scaling=scaling_tables(report.scaling, MISSING),
        scaling_columns=tuple((_unbroken(name), number) for name, number in SCALING_COLUMNS),
        runs=list(tracks), labels=labels,
        cost_columns=COST_COLUMNS,
        cost_rows=_cost_rows(report, labels), prices=prices, estimates=estimates,
        uncertainty=_uncertainty_rows(tracks), record_groups=_record_groups(report, MISSING),
        attempts=_attempt_rows(report), hit_rates=_hit_rates(report), versions=_versions(tracks),
        bookings=_bookings(report), stage=report.compile.stage, cache_entries=report.compile.entries,
        recovery=_recovery_rows(tracks), samples=samples, sample_runs=sample_runs,
        baseline_line=_baseline_line(report.baseline, report.pilot is not None),
        comparison=comparison_items(report.comparison),
        loss=loss_chart(tracks, labels), cost_chart=cost_chart(report.cost.by_run, labels),
        component_colours=[(COMPONENT_NAMES[name], COMPONENT_COLOURS[name]) for name in COMPONENTS],
        timeline=timeline_chart(report.timeline, labels),
        ended_colours=[("succeeded", ENDED_COLOURS["SUCCEEDED"]), ("failed", ENDED_COLOURS["FAILED"]),
                       ("not ended", RUNNING_COLOUR)],
        parallel=[(run, t.parallel) for run, t in tracks.items() if t.parallel], fmt=_html_cell, usd=_usd,
        percent=lambda fraction: MISSING if fraction is None else _percent(fraction),
        verdict_colour=(REHEARSAL_COLOUR if report.comparison.rehearsal
                        else VERDICT_COLOURS.get(str(report.comparison.verdict), "#777")),
    )


@lru_cache(maxsize=1)
def _environment() -> Environment:
    return Environment(loader=PackageLoader("lambdas.domain", "templates"), autoescape=select_autoescape(["html"]),
                       trim_blocks=False, lstrip_blocks=False)


def render_html(report: TrialReport) -> str:
    """One self-contained HTML file (inline SVG, no external assets) from ``templates/report.html``: the verdict
    sentence and the facts behind it first, then the loss curves, costs with their price basis, the record table
    and every other section of the Markdown rendering. Every value is escaped by the template engine."""
    return _environment().get_template("report.html").render(**_context(report))
