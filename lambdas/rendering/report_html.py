"""Markdown and self-contained HTML renderings of a trial report (inline SVG charts, no external assets).

Python computes each chart's geometry (dataclasses in SVG user units) and every figure's text; the template only
places them. Figures read the same in both renderings: four significant figures written out (0.00001443, never
1.443e-05), money in USD to the cent, yes/no for a flag and a dash where nothing was measured."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TypedDict

from jinja2 import Environment, PackageLoader, select_autoescape

from lambdas.domain.money.cost import COMPONENTS
from lambdas.domain.report.model import (
    Booking,
    CacheEntryView,
    Comparison,
    CompileStage,
    CostView,
    Figure,
    IntervalView,
    ParallelView,
    Startup,
    TrackRecord,
    TrialReport,
)
from lambdas.rendering.charts import (
    ENDED_COLOURS,
    RUNNING_COLOUR,
    CostChart,
    LossChart,
    TimelineChart,
    cost_chart,
    loss_chart,
    timeline_chart,
)
from lambdas.rendering.decision_render import DecisionView, decision_view
from lambdas.rendering.figures import significant as _number
from lambdas.rendering.pilot_render import pilot_rows
from lambdas.rendering.report_markdown import ComparisonItem, _baseline_line, comparison_items
from lambdas.rendering.report_text import (
    COMPONENT_COLOURS,
    COMPONENT_NAMES,
    MISSING,
    REHEARSAL_COLOUR,
    VERDICT_COLOURS,
    RecordGroup,
    _html_cell,
    _percent,
    _record_groups,
    _run_labels,
    _spread,
    _unbroken,
    _usd,
)
from lambdas.rendering.scaling_render import SCALING_COLUMNS, ScalingTable, scaling_tables


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
    return Environment(loader=PackageLoader("lambdas.rendering", "templates"), autoescape=select_autoescape(["html"]),
                       trim_blocks=False, lstrip_blocks=False)


def render_html(report: TrialReport) -> str:
    """One self-contained HTML file (inline SVG, no external assets) from ``templates/report.html``: the verdict
    sentence and the facts behind it first, then the loss curves, costs with their price basis, the record table
    and every other section of the Markdown rendering. Every value is escaped by the template engine."""
    return _environment().get_template("report.html").render(**_context(report))
