"""`dualtrack report A --compare B`: two reports side by side, each column titled by its run (trial id and the time
its report was generated), as aligned Markdown, JSON or one self-contained HTML file."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from jinja2 import Environment, PackageLoader, select_autoescape
from pydantic import BaseModel, ConfigDict, Field

from dualtrack.client.display import RUN_ORDER, align_markdown_tables
from lambdas.domain.json_types import JsonObject
from lambdas.domain.report.model import IntervalView, TrialReport
from lambdas.rendering.markdown_table import md_cell, md_row
from lambdas.rendering.report_text import REHEARSAL_COLOUR, VERDICT_COLOURS

Cell = str | int | float | bool | None
CHECK_CLASSES = ("pass", "fail", "not_evidenced")  # a check's status, coloured as report.html colours it
_NUMBER = re.compile(r"-?\d[\d.,e+-]*( \[.*\])?")  # a figure, or one with its interval


class RunFigures(BaseModel):
    """One run's figures in --compare. The warm-up compile stage sets only some: the others are left out of its
    JSON (``exclude_unset``) and read as None."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    status: str | None = None
    steps: int | None = None
    backend: str | None = None
    stand_in: bool | None = None
    step_time_s: IntervalView | None = None
    total_usd: str | None = None
    validation_loss: float | None = None
    first_compile_s: int | float | None = None
    cache_by_attempt: list[str] | None = None

    def cells(self) -> dict[str, Cell]:
        return {"status": self.status, "steps": self.steps, "backend": self.backend, "total USD": self.total_usd,
                "validation loss": self.validation_loss, "first compile s": self.first_compile_s}


class ComparisonView(BaseModel):
    """The figures --compare puts side by side (its JSON: ``model_dump(mode="json", exclude_unset=True)``)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    title: str = ""  # the column's heading: trial id and generation time, and the source where those tie
    source: str = ""  # the trial id, report.json or rehearsal directory it was read from
    trial_id: str
    generated_at: str | None
    # A run on real devices has a verdict; a run on stand-ins (the rehearsal) has none, only whether the pipeline
    # worked: ``rehearsal`` passed or failed. Each view has one of them (the other is left out of its JSON).
    verdict: str | None = Field(default=None, exclude_if=lambda value: value is None)
    rehearsal: str | None = Field(default=None, exclude_if=lambda value: value is None)
    headline: str
    hit_rate: float | None
    steady_cost_ratio: IntervalView | None
    cost_ratio: float | None
    checks: dict[str, str]
    runs: dict[str, RunFigures]


def comparison_view(report: TrialReport) -> ComparisonView:
    """The figures --compare puts side by side."""
    runs = {run: RunFigures(status=track.status, steps=track.steps_completed, backend=track.backend,
                            stand_in=track.stand_in,
                            step_time_s=track.uncertainty.step_time_s if track.uncertainty else None,
                            total_usd=track.cost.total_usd, validation_loss=track.loss.validation,
                            first_compile_s=track.compile.first_compile_s,
                            cache_by_attempt=track.compile.cache_by_attempt)
            for run, track in report.tracks.items()}
    stage = report.compile.stage
    if stage:
        runs[stage.run] = RunFigures(status=stage.status, backend=stage.backend, stand_in=stage.stand_in,
                                     total_usd=stage.cost.total_usd, first_compile_s=stage.compile_s,
                                     cache_by_attempt=stage.cache_by_attempt)
    comparison = report.comparison
    return ComparisonView(trial_id=report.trial_id, generated_at=report.generated_at,
                          verdict=None if comparison.rehearsal else comparison.verdict, rehearsal=comparison.rehearsal,
                          headline=comparison.headline, hit_rate=report.compile.hit_rate,
                          steady_cost_ratio=comparison.steady_cost_ratio, cost_ratio=comparison.cost_ratio,
                          checks={c.check: c.status for c in report.acceptance}, runs=runs)


def _generated(at: str | None) -> str:
    """``2026-11-20T10:15:00Z`` as ``2026-11-20 10:15:00Z``: a heading that reads as a time."""
    return at.replace("T", " ", 1) if at else "generation time unknown"


def compared(reports: Sequence[tuple[str, TrialReport]]) -> list[ComparisonView]:
    """The views of ``(source, report)`` pairs, each titled by its run: trial id and generation time, with the
    source added where two runs share both (the same report read twice, or two copies of one)."""
    views = [comparison_view(report) for _, report in reports]
    titles = [f"{view.trial_id} ({_generated(view.generated_at)})" for view in views]
    return [view.model_copy(update={"source": source,
                                    "title": title if titles.count(title) == 1 else f"{title} from {source}"})
            for (source, _), view, title in zip(reports, views, titles, strict=True)]


def comparison_json(views: Sequence[ComparisonView]) -> JsonObject:
    return {"compared": [view.model_dump(mode="json", exclude_unset=True) for view in views]}


def _interval(view: IntervalView | None, digits: int = 3) -> str:
    if not view:
        return "-"
    return f"{view.estimate:.{digits}g} [{view.low:.{digits}g}, {view.high:.{digits}g}]"


def _cell(value: Cell) -> str:
    return "-" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)


IDENTITY_ROWS = ("trial", "generated", "read from")


@dataclass(frozen=True)
class Row:
    section: str  # "trial", a run ("gpu", "trn2", ...) or "checks"
    label: str
    cells: tuple[str, ...]  # one per compared report, in column order

    @property
    def name(self) -> str:
        """The row's name in Markdown, where there are no sections: ``trn2: total USD``, ``check: loss``."""
        if self.section == "trial":
            return self.label
        return f"check: {self.label}" if self.section == "checks" else f"{self.section}: {self.label}"

    @property
    def differs(self) -> bool:
        """A figure the runs disagree on (which report, read from where and when, differ by design)."""
        return not (self.section == "trial" and self.label in IDENTITY_ROWS) and len(set(self.cells)) > 1


def _run_order(run: str) -> tuple[int, str]:
    return (RUN_ORDER.index(run) if run in RUN_ORDER else len(RUN_ORDER), run)


def comparison_rows(views: Sequence[ComparisonView]) -> list[Row]:
    """Every figure of the compared reports, one row each, in the order the reports are read."""
    def row(section: str, label: str, values: Sequence[Cell]) -> Row:
        return Row(section, label, tuple(_cell(v) for v in values))

    rows = [row("trial", "trial", [v.trial_id for v in views]),
            row("trial", "generated", [v.generated_at for v in views]),
            row("trial", "read from", [v.source or None for v in views]),
            *_outcome_rows(views, row),
            row("trial", "steady cost ratio trn2/gpu [95%]", [_interval(v.steady_cost_ratio) for v in views]),
            row("trial", "whole-trial cost ratio", [v.cost_ratio for v in views]),
            row("trial", "compile cache hit rate", [v.hit_rate for v in views])]
    for run in sorted({run for v in views for run in v.runs}, key=_run_order):
        figures = [v.runs.get(run, RunFigures()) for v in views]
        cells = [f.cells() for f in figures]
        rows += [row(run, label, [c[label] for c in cells]) for label in cells[0]]
        rows.append(row(run, "step time s [95%]", [_interval(f.step_time_s) for f in figures]))
        rows.append(row(run, "cache by attempt", [", ".join(f.cache_by_attempt or []) or None for f in figures]))
    for check in dict.fromkeys(c for v in views for c in v.checks):
        rows.append(row("checks", check, [v.checks.get(check) for v in views]))
    return rows


def _outcome_rows(views: Sequence[ComparisonView], row: Callable[[str, str, Sequence[Cell]], Row]) -> list[Row]:
    """A verdict row only where a compared run has a verdict, and a rehearsal row where one ran on stand-ins: a
    rehearsal gives no verdict, so its column shows its outcome, never a verdict cell."""
    rows = []
    if any(v.verdict is not None for v in views):
        rows.append(row("trial", "verdict", [v.verdict for v in views]))
    if any(v.rehearsal is not None for v in views):
        rows.append(row("trial", "rehearsal", [v.rehearsal for v in views]))
    return rows


def outcome(view: ComparisonView) -> str:
    """The verdict, or ``rehearsal passed`` or ``failed`` for a run on stand-ins."""
    return f"rehearsal {view.rehearsal}" if view.rehearsal else str(view.verdict)


def heading(views: Sequence[ComparisonView]) -> str:
    """``A vs B``; two runs of one trial are ``A: 2 reports side by side`` (their columns tell them apart)."""
    ids = list(dict.fromkeys(v.trial_id for v in views))
    if len(ids) == 1 and len(views) > 1:
        return f"{ids[0]}: {len(views)} reports side by side"
    return " vs ".join(ids)


def render_comparison(views: Sequence[ComparisonView]) -> str:
    """The reports side by side as one aligned Markdown table, a column per run. Every cell is escaped, and so is
    every line of text, which a line break in a headline would otherwise end (and could follow with fake rows)."""
    lines = [f"# {md_cell(heading(views))}", ""]
    lines += [f"- {md_cell(v.title)}: {md_cell(v.headline or outcome(v))}" for v in views]
    lines += ["", md_row(["figure", *(v.title for v in views)]), "|---|" + "---|" * len(views)]
    lines += [md_row([r.name, *r.cells]) for r in comparison_rows(views)]
    return align_markdown_tables("\n".join(lines)) + "\n"


def verdict_colour(view: ComparisonView) -> str:
    """The colour the single report gives this outcome (report.html's headline border)."""
    return REHEARSAL_COLOUR if view.rehearsal else VERDICT_COLOURS.get(str(view.verdict), "#777")


def cell_class(section: str, cell: str) -> str:
    """The HTML class of a cell: a check's status is coloured, a figure is right-aligned."""
    if section == "checks" and cell in CHECK_CLASSES:
        return cell
    return "num" if _NUMBER.fullmatch(cell) else ""


def render_comparison_html(views: Sequence[ComparisonView]) -> str:
    """One self-contained HTML file from ``dualtrack/data/templates/compare.html``, every value escaped."""
    environment = Environment(loader=PackageLoader("dualtrack", "data/templates"),
                              autoescape=select_autoescape(["html"]))
    rows = comparison_rows(views)
    sections = [(name, [r for r in rows if r.section == name]) for name in dict.fromkeys(r.section for r in rows)]
    return environment.get_template("compare.html").render(
        heading=heading(views), views=views, sections=sections, colours=[verdict_colour(v) for v in views],
        cell_class=cell_class, outcome=outcome)
