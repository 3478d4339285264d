"""Markdown and self-contained HTML renderings of a trial report (inline SVG charts, no external assets)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from functools import lru_cache
from html import escape
from typing import TypedDict

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from lambdas.domain.cost import COMPONENTS
from lambdas.domain.report_model import (
    BaselineCompared,
    BaselineUnread,
    BaselineView,
    Booking,
    CacheEntryView,
    Comparison,
    CompileStage,
    Figure,
    IntervalView,
    ParallelView,
    Startup,
    TimelineRow,
    TrackRecord,
    TrialReport,
)

COLOURS = {"gpu": "#1f77b4", "trn2": "#d62728", "gpu-fallback": "#2ca02c"}
# Two tracks that train alike draw one curve over the other: each run has its own dash, so both stay visible.
DASHES = {"gpu": "", "trn2": "6 4", "gpu-fallback": "2 3"}
COMPONENT_COLOURS = dict(zip(COMPONENTS, ("#4c78a8", "#f58518", "#e45756", "#72b7b2", "#b279a2"), strict=True))
VERDICT_COLOURS = {"trn2_viable_cheaper": "#1a7f37", "trn2_viable_not_cheaper": "#9a6700", "stay_on_gpu": "#d62728"}
# A rehearsal on stand-ins is not a verdict: its own colour, passed or failed, never the verdicts' green or red.
REHEARSAL_COLOUR = "#3b6ea5"


def _cell(value: Figure) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


def _baseline_line(baseline: BaselineView | None) -> str:
    """What the report says of the trial's GPU baseline, in one line."""
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
        out += [f"| `{e.cache_key[:16]}` | {e.status} | {e.hits} | {e.misses} | {e.failures} | "
                f"{_cell(e.failure_reason)} |" for e in view.entries] + [""]
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
        out += [f"> Compiler: {_cell(stage.error or stage.detail)}", ""]
    return out


def render_markdown(report: TrialReport) -> str:
    return "\n".join([*_summary_lines(report), *_record_lines(report), *_cost_lines(report), *_compile_lines(report),
                      *_resume_lines(report.tracks), *_comparison_lines(report.comparison)])


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
    out += [f"GPU baseline: {_baseline_line(report.baseline)}", ""]
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
    out += [f"| {run} | {t.outcome} | {_cell(t.status_reason)} |" for run, t in tracks.items()] + [""]
    out += ["## Record table", "", "| item | " + " | ".join(runs) + " |", "|---|" + "---|" * len(runs)]
    for row in report.record_table:
        cells = [", ".join(f"{k} {_cell(v)}" for k, v in row.figures(run).items()) for run in runs]
        out.append(f"| {row.item} | " + " | ".join(cells) + " |")
    out += ["", "## Acceptance checks", "", "| check | status | detail |", "|---|---|---|"]
    out += [f"| {c.check} | {c.status} | {c.detail} |" for c in report.acceptance]
    parallel = {run: t.parallel for run, t in tracks.items() if t.parallel}
    if parallel:
        out += ["", "## Parallel layout", "",
                "| run | nodes | devices billed | training ranks | utilisation | processes | communication_s | "
                "communication share | sync wait median_s | basis |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        out += [f"| {run} | {p.nodes} | {p.devices_billed} | {p.layout_ranks} | "
                f"{_cell(p.device_utilisation)} | {p.processes} | {_cell(p.communication_s)} | "
                f"{_cell(p.communication_share)} | {_cell(p.sync_wait_median_s)} | {p.basis} |"
                for run, p in parallel.items()]
    return out


def _cost_lines(report: TrialReport) -> list[str]:
    """Each run's cost by component and the trial's, the price basis and how each run's compile is booked."""
    tracks = report.tracks
    runs = list(tracks)
    out = [
        "",
        "## Cost (USD)",
        "",
        "| component | " + " | ".join(runs) + " | trial |",
        "|---|" + "---|" * (len(runs) + 1),
    ]
    for name in (*COMPONENTS, "total_usd", "cost_per_effective_step_usd", "cost_per_1m_tokens_usd"):
        trial = report.cost.trial.get(name, "")
        out.append(f"| {name} | " + " | ".join(_cell(t.cost.amounts()[name]) for t in tracks.values())
                   + f" | {trial} |")
    out += ["", "Price basis: " + "; ".join(f"{run}: {t.cost.price_basis}" for run, t in tracks.items()), ""]
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
        "| run | injected_at_step | resumed_from_step | rerun_steps | rerun share | global_step_continuous | "
        "loss_continuous |",
        "|---|---|---|---|---|---|---|",
    ]
    for run, t in tracks.items():
        r = t.resume
        out.append(
            f"| {run} | {_cell(r.injected_at_step)} | {_cell(r.resumed_from_step)} | "
            f"{r.rerun_steps} | {_cell(r.rerun_share)} | {_cell(r.global_step_continuous)} | "
            f"{_cell(r.loss_continuous)} |"
        )
    return out


def _comparison_lines(comparison: Comparison) -> list[str]:
    return [
        "",
        "## Comparison",
        "",
        f"- final validation-loss delta (relative): {_cell(comparison.final_loss_delta)} "
        f"(tolerance {comparison.loss_tolerance}, within: {_cell(comparison.within_tolerance)})",
        f"- cost ratio: {_cell(comparison.cost_ratio)} ({comparison.cost_ratio_basis})",
        "",
    ]


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
    at: float
    colour: str
    label: str


@dataclass(frozen=True)
class EvalMark:
    x: float
    y: float
    step: float
    loss: float


@dataclass(frozen=True)
class Series:
    run: str
    colour: str
    dash: str
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


def loss_chart(tracks: Mapping[str, TrackRecord], width: int = 720, height: int = 300) -> LossChart:
    """The loss chart's geometry: one line per run, its validation points, and the fault, retry, resume and
    fallback marked where they happened."""
    left, right, top, bottom = 56, width - 16, 16, height - 40
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
        series=[Series(run=run, colour=COLOURS.get(run, "#555"), dash=DASHES.get(run, "3 3"),
                       points=" ".join(f"{sx(x)},{sy(y)}" for x, y in pts),
                       evals=[EvalMark(x=sx(x), y=sy(y), step=x, loss=round(y, 4)) for x, y in evals[run]])
                for run, pts in series.items() if pts or evals[run]],
        x_ticks=[Tick(at=sx(v), label=f"{v:g}") for v in _ticks(x0, x1) if x0 <= v <= x1],
        y_ticks=[Tick(at=sy(v), label=f"{v:.3g}") for v in _ticks(y0, y1) if y0 <= v <= y1],
        markers=_markers(tracks, sx),
    )


def _markers(tracks: Mapping[str, TrackRecord], sx: Callable[[float], float]) -> list[Marker]:
    """Where each run's fault was injected and where a retry or the fallback resumed (``sx``: step to x)."""
    markers = []
    for run, t in tracks.items():
        resume = t.resume
        if resume.injected_at_step:
            markers.append(Marker(at=sx(resume.injected_at_step), colour="#d62728",
                                  label=f"{run}: fault after step {resume.injected_at_step}"))
        if resume.resumed_from_step is not None:
            what = "fallback resumed" if run == "gpu-fallback" else "retry resumed"
            markers.append(Marker(at=sx(resume.resumed_from_step), colour=COLOURS.get(run, "#555"),
                                  label=f"{run}: {what} from step {resume.resumed_from_step}"))
    return markers


def _cost_chart(tracks: Mapping[str, TrackRecord], width: int = 640) -> str:
    totals = {run: float(t.cost.total_usd) for run, t in tracks.items()}
    top = max(totals.values(), default=0.0) or 1.0
    bars = []
    for i, (run, t) in enumerate(tracks.items()):
        x, y = 120.0, 20 + i * 34
        bars.append(f'<text x="4" y="{y + 16}">{escape(run)}</text>')
        amounts = t.cost.components()
        for name in COMPONENTS:
            w = float(amounts[name]) / top * (width - 220)
            bars.append(
                f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="22" fill="{COMPONENT_COLOURS[name]}">'
                f"<title>{name} {amounts[name]}</title></rect>"
            )
            x += w
        bars.append(f'<text x="{x + 6:.1f}" y="{y + 16}">{totals[run]:.2f} USD</text>')
    legend = "".join(
        f'<rect x="{120 + i * 100}" y="{28 + 34 * len(tracks)}" width="10" height="10" '
        f'fill="{COMPONENT_COLOURS[n]}"/><text x="{134 + i * 100}" y="{37 + 34 * len(tracks)}">'
        f"{n.removesuffix('_usd')}</text>"
        for i, n in enumerate(COMPONENTS)
    )
    height = 50 + 34 * len(tracks)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="cost by component" width="{width}" '
        f'height="{height}" font-size="11">{"".join(bars)}{legend}</svg>'
    )


def _stamp(at: str) -> float:
    return datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()


def _timeline_chart(timeline: Sequence[TimelineRow], width: int = 640) -> str:
    if not timeline:
        return "<p>No Batch transitions recorded.</p>"
    t0, t1 = _stamp(timeline[0].at), _stamp(timeline[-1].at)
    lanes = sorted({(r.run, r.attempt) for r in timeline})
    marks = []
    for row in timeline:
        lane = lanes.index((row.run, row.attempt))
        x = 140 + (_stamp(row.at) - t0) / ((t1 - t0) or 1) * (width - 180)
        colour = "#2ca02c" if row.status == "SUCCEEDED" else "#d62728" if row.status == "FAILED" else "#777"
        marks.append(
            f'<circle cx="{x:.1f}" cy="{24 + lane * 22}" r="4" fill="{colour}"><title>{row.status} '
            f"{escape(row.at)}</title></circle>"
        )
    labels = "".join(f'<text x="4" y="{28 + i * 22}">{escape(r)} attempt {a}</text>' for i, (r, a) in enumerate(lanes))
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="attempt timeline" width="{width}" '
        f'height="{40 + 22 * len(lanes)}" font-size="11">{labels}{"".join(marks)}</svg>'
    )


def _usd(value: str | None, places: int = 2) -> str:
    """Money for people: to the cent in tables (full precision stays in report.json)."""
    if not value:
        return "-"
    amount = Decimal(value)
    if places == 2 or abs(amount) >= 1:
        return f"${amount:,.2f}"
    return f"${amount:.{places}g}" if amount else "$0"


def _interval(view: IntervalView | None, fmt: str) -> str:
    if not view:
        return "-"
    return f"{view.estimate:{fmt}} ({view.confidence:.0%}: {view.low:{fmt}}-{view.high:{fmt}})"


@dataclass(frozen=True)
class CostRow:
    name: str
    cells: list[str]


@dataclass(frozen=True)
class PriceRow:
    run: str
    instance_type: str
    rate: str
    confidence: str
    table: str


@dataclass(frozen=True)
class UncertaintyRow:
    run: str
    steps: int | str
    step_time: str
    tokens: str
    cost: str
    on: str


@dataclass(frozen=True)
class RecordTableRow:
    """One record item: per run, its figures as (label, value) pairs."""

    item: str
    cells: list[list[tuple[str, str]]]


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
    prompt: str
    completions: list[str]
    same: str


class HtmlContext(TypedDict):
    """What ``templates/report.html`` reads."""

    r: TrialReport
    c: Comparison
    runs: list[str]
    cost_rows: list[CostRow]
    prices: list[PriceRow]
    estimates: list[str]
    uncertainty: list[UncertaintyRow]
    record_rows: list[RecordTableRow]
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
    loss: LossChart
    cost_chart: Markup
    timeline_chart: Markup
    parallel: list[tuple[str, ParallelView]]
    fmt: Callable[[Figure], str]
    verdict_colour: str


def _cost_rows(report: TrialReport) -> list[CostRow]:
    """Each component, the total, and the cost per effective step and per 1M tokens: per run, then the trial's."""
    costs = [t.cost for t in report.tracks.values()]
    rows = [CostRow(name=name.removesuffix("_usd").replace("_", " "),
                    cells=[_usd(cost.components()[name]) for cost in costs] + [_usd(report.cost.trial[name])])
            for name in (*COMPONENTS, "total_usd")]
    rows.append(CostRow(name="cost per effective step",
                        cells=[_usd(cost.cost_per_effective_step_usd, 4) for cost in costs] + ["-"]))
    rows.append(CostRow(name="cost per 1m tokens", cells=[_usd(cost.cost_per_1m_tokens_usd, 2) for cost in costs]
                        + ["-"]))
    return rows


_PRICE_BASIS = re.compile(r"(?P<type>\S+) at (?P<rate>\S+) USD/h \((?P<conf>[^,]+), table (?P<table>[^)]+)\)")


def _prices(tracks: Mapping[str, TrackRecord]) -> tuple[list[PriceRow], list[str]]:
    """Each run's price as its cost states it, and the runs priced at an estimated rate."""
    prices = []
    estimates = []
    for run, t in tracks.items():
        found = _PRICE_BASIS.match(t.cost.price_basis)
        price = found.groupdict() if found else {"type": "?", "rate": "?", "conf": "?", "table": "?"}
        prices.append(PriceRow(run=run, instance_type=price["type"], rate=f"{price['rate']} USD/h",
                               confidence=price["conf"], table=price["table"]))
        if price["conf"] == "estimate":
            estimates.append(f"{run} ({price['type']})")
    return prices, estimates


def _uncertainty_rows(tracks: Mapping[str, TrackRecord]) -> list[UncertaintyRow]:
    rows = []
    for run, t in tracks.items():
        view = t.uncertainty
        rows.append(UncertaintyRow(
            run=run, steps=view.steady_steps if view else "-",
            step_time=_interval(view.step_time_s if view else None, ".4g"),
            tokens=_interval(view.tokens_per_s if view else None, ",.0f"),
            cost=_interval(view.cost_per_effective_step_usd if view else None, ".3g"),
            on=f"stand-in {t.backend}" if t.stand_in else f"{t.instance_type}"))
    return rows


def _figure_label(name: str) -> str:
    return name.replace("_", " ").removesuffix(" s") + (" (s)" if name.endswith("_s") else "")


def _record_rows(report: TrialReport) -> list[RecordTableRow]:
    runs = list(report.tracks)
    return [RecordTableRow(item=row.item,
                           cells=[[(_figure_label(name),
                                    ", ".join(map(_cell, value)) if isinstance(value, list) else _cell(value))
                                   for name, value in row.figures(run).items()] for run in runs])
            for row in report.record_table]


def _compile_attempts(run: str, caches: Sequence[str], seconds: Sequence[float], startup: Startup | None
                      ) -> list[AttemptRow]:
    started = {a.attempt: a.seconds for a in (startup.by_attempt if startup else [])}
    return [AttemptRow(run=run, attempt=i + 1, cache=cache,
                       compile_s=_cell(seconds[i]) if i < len(seconds) else "-",
                       startup_s=_cell(started.get(i + 1)))
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
    trial = "-" if view.hit_rate is None else f"{view.hit_rate:.0%} ({view.hits} of {view.lookups} lookups)"
    return [("trial", trial), *((run, "-" if t.compile.hit_rate is None else f"{t.compile.hit_rate:.0%}")
                                for run, t in report.tracks.items())]


def _versions(tracks: Mapping[str, TrackRecord]) -> list[VersionRow]:
    rows = []
    for run, t in tracks.items():
        env = dict(t.environment)
        image, digest = env.pop("image", "-"), env.pop("image_digest", "-")
        for noise in ("hostname", "batch_job_id", "instance_type"):
            env.pop(noise, None)
        rows.append(VersionRow(run=run, image=image, digest=digest,
                               versions=", ".join(f"{k} {v}" for k, v in env.items()) or "-"))
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
            *map(_cell, (r.injected_at_step, r.resumed_from_step, r.rerun_steps, r.rerun_share,
                         r.global_step_continuous, r.loss_continuous, r.max_rel_loss_delta)),
            "-" if not at else f"{at.loss:.4f} at step {at.step}"]))
    return rows


def _sample_rows(tracks: Mapping[str, TrackRecord]) -> tuple[list[str], list[SampleRow]]:
    """The runs with final samples, and each fixed prompt's completion by those runs side by side."""
    sample_runs = [run for run, t in tracks.items() if t.final_samples]
    prompts: dict[str, dict[str, str]] = {}
    for run in sample_runs:
        for sample in tracks[run].final_samples:
            prompts.setdefault(sample.prompt, {})[run] = sample.completion
    return sample_runs, [
        SampleRow(prompt=prompt, completions=[by_run.get(run, "-") for run in sample_runs],
                  same="yes" if len(set(by_run.values())) == 1 and len(by_run) == len(sample_runs) else "no")
        for prompt, by_run in prompts.items()]


def _context(report: TrialReport) -> HtmlContext:
    tracks = report.tracks
    prices, estimates = _prices(tracks)
    sample_runs, samples = _sample_rows(tracks)
    return HtmlContext(
        r=report, c=report.comparison, runs=list(tracks), cost_rows=_cost_rows(report), prices=prices,
        estimates=estimates, uncertainty=_uncertainty_rows(tracks), record_rows=_record_rows(report),
        attempts=_attempt_rows(report), hit_rates=_hit_rates(report), versions=_versions(tracks),
        bookings=_bookings(report), stage=report.compile.stage, cache_entries=report.compile.entries,
        recovery=_recovery_rows(tracks), samples=samples, sample_runs=sample_runs,
        baseline_line=_baseline_line(report.baseline), loss=loss_chart(tracks),
        cost_chart=Markup(_cost_chart(tracks)), timeline_chart=Markup(_timeline_chart(report.timeline)),
        parallel=[(run, t.parallel) for run, t in tracks.items() if t.parallel], fmt=_cell,
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
