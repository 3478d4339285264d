"""The HTML report's inline SVG charts (loss, cost, attempt timeline): Python computes each chart's geometry
(dataclasses in SVG user units) and every label's text; the template only places them."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from lambdas.domain.money.cost import COMPONENTS
from lambdas.domain.report.model import (
    CostView,
    TimelineRow,
    TrackRecord,
)
from lambdas.domain.vocabulary import scaling_nodes, track_of
from lambdas.rendering.figures import significant as _number
from lambdas.rendering.report_text import (
    COLOURS,
    COMPONENT_COLOURS,
    COMPONENT_NAMES,
    DASHES,
    LINE_STYLES,
    MARKER_ROW,
    RUN_NAMES,
    _usd,
)


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
