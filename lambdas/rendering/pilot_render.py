"""The pilot comparison as rows of text and as Markdown (``lambdas.domain.report.pilot`` builds it)."""

from __future__ import annotations

from lambdas.domain.report.model import (
    PilotComparison,
    PilotFigure,
)
from lambdas.rendering.figures import significant
from lambdas.rendering.markdown_table import md_row


def pilot_rows(pilot: PilotComparison | None) -> list[tuple[str, str, str]]:
    """Each pilot figure as (figure with its unit, trn2 measured, GPU baseline) text, for the HTML report."""
    return [] if pilot is None else [(f"{row.figure} ({row.unit})", _shown(row.trn2), _shown(row.baseline))
                                     for row in pilot.figures]


def _shown(figure: PilotFigure) -> str:
    if figure.value is None:
        return f"- ({figure.note})"
    bounds = figure.interval
    spread = (f" ({bounds.confidence:.0%} interval {significant(bounds.low)} to {significant(bounds.high)})"
              if bounds else "")
    return f"{significant(figure.value)}{spread}"


def pilot_markdown(pilot: PilotComparison | None) -> list[str]:
    """The pilot section of the Markdown report: the losses against the baseline and each figure beside the
    baseline's, marked by where it comes from; nothing for a trial with a GPU track."""
    if pilot is None:
        return []
    reproduced = {True: "within loss_tolerance", False: "OUTSIDE loss_tolerance", None: "not evidenced"}
    out = ["## Trainium2 pilot against the GPU baseline", "",
           f"Losses {reproduced[pilot.loss.reproduced]}: {pilot.loss.format} at {pilot.loss.uri}; {pilot.loss.detail}",
           "", "| figure | trn2 (measured) | GPU baseline (from_baseline) |", "|---|---|---|"]
    out += [md_row([f"{row.figure} ({row.unit})", _shown(row.trn2), _shown(row.baseline)]) for row in pilot.figures]
    ratio = pilot.cost_ratio
    out += ["", (f"Cost per step, trn2 / baseline: {ratio.estimate:.3f}x ({ratio.confidence:.0%} interval "
                 f"{ratio.low:.3f}-{ratio.high:.3f}, the trn2 side's alone)" if ratio
                 else "Cost per step, trn2 / baseline: not evidenced"), "", f"Rule: {pilot.rule}.", ""]
    return out
