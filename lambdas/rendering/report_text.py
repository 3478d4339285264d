"""What both renderings of a report share: the names and colours of runs and cost components, figures as cells
(four significant figures written out, 0.00001443, never 1.443e-05; money in USD to the cent; yes/no for a flag;
a dash where nothing was measured) and the record table's groups."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from lambdas.domain.money.cost import COMPONENTS
from lambdas.domain.report.model import (
    Figure,
    TrialReport,
)
from lambdas.domain.report.scaling import nodes_text
from lambdas.domain.vocabulary import COMPILE_RUN, scaling_nodes, track_of
from lambdas.rendering.figures import fixed as _fixed
from lambdas.rendering.figures import places as _places
from lambdas.rendering.figures import significant as _number

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


def _percent(fraction: float, sign: str = "") -> str:
    return f"{sign if fraction > 0 else ''}{_number(fraction * 100, 3)}%"


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
class FigureRow:
    label: str
    cells: list[str]


@dataclass(frozen=True)
class RecordGroup:
    """One item of the record table: a row per figure, a cell per run."""

    item: str
    rows: list[FigureRow]


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
