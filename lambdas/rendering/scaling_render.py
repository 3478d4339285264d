"""The scaling section as table rows and Markdown (``lambdas.domain.report.scaling`` builds its views)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lambdas.domain.report.model import ScalingView
from lambdas.rendering.figures import significant
from lambdas.rendering.markdown_table import md_row

# The table's columns and whether each holds a number (right-aligned in HTML).
SCALING_COLUMNS: tuple[tuple[str, bool], ...] = (
    ("nodes", True), ("world size", True), ("run", False), ("outcome", False), ("step time (s)", True),
    ("throughput (tokens/s)", True), ("speed-up", True), ("scaling efficiency", True),
    ("communication share", True), ("cost per effective step", True), ("cost ratio", True))


def _times(value: float | None, missing: str) -> str:
    return missing if value is None else f"{significant(value, 3)}\u00d7"


def _percent(value: float | None, missing: str) -> str:
    return missing if value is None else f"{significant(value * 100, 3)}%"


def _money(value: float | None, missing: str) -> str:
    """A unit price keeps four significant figures (often well under a cent)."""
    if value is None:
        return missing
    return f"${significant(value)}" if value < 1 else f"${value:,.2f}"


def scaling_rows(view: ScalingView, missing: str) -> list[list[str]]:
    """A row of text per node count, in ``SCALING_COLUMNS`` order (``missing`` where nothing was measured)."""
    return [[f"{p.nodes:,}", f"{p.world_size:,}", p.run, p.outcome,
             missing if p.step_time_s is None else significant(p.step_time_s),
             missing if p.tokens_per_s is None else significant(p.tokens_per_s),
             _times(p.speedup, missing), _percent(p.efficiency, missing), _percent(p.communication_share, missing),
             _money(p.cost_per_step_usd, missing), _times(p.cost_per_step_ratio, missing)]
            for p in view.points]


@dataclass(frozen=True)
class ScalingTable:
    """One track's scaling comparison as the HTML report shows it."""

    title: str
    summary: str
    rows: list[list[str]]


def scaling_tables(views: Sequence[ScalingView] | None, missing: str) -> list[ScalingTable]:
    return [ScalingTable(title=f"{view.track} ({view.instance_type})", summary=view.summary,
                         rows=scaling_rows(view, missing)) for view in views or []]


def scaling_markdown(views: Sequence[ScalingView] | None) -> list[str]:
    """The scaling section of the Markdown report; nothing for a trial without scaling runs."""
    if not views:
        return []
    out = ["", "## Scaling", "",
           "Each track at each node count it declared, with the same effective batch per step: speed-up and cost "
           "ratio against the smallest count.", ""]
    for table in scaling_tables(views, "-"):
        out += [f"### {table.title}", "", table.summary, "",
                md_row(name for name, _ in SCALING_COLUMNS),
                "|" + "".join("---:|" if number else "---|" for _, number in SCALING_COLUMNS)]
        out += [md_row(row) for row in table.rows] + [""]
    return out[:-1]  # the next section opens with its own blank line
