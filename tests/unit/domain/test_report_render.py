"""The report's renderings read as a person reads them: a cost table that adds up, charts labelled in words, figures
with their units and a sensible precision, an attempt timeline on a time axis, empty samples called empty and a
comparison that states its figures."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from lambdas.domain.evidence.run_summary import RunSummary
from lambdas.domain.money.ledger import transition_entry
from lambdas.domain.report.build import build_trial_report
from lambdas.domain.report.model import TrialReport
from lambdas.domain.trial.rules import parse_trial
from lambdas.rendering.figures import significant as _number
from lambdas.rendering.markdown_table import md_cell
from lambdas.rendering.report_html import _environment, render_html
from lambdas.rendering.report_markdown import render_markdown
from lambdas.rendering.report_text import _usd, run_label
from tests.builders import run_cost, run_summary

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "trial-llama31-8b-lora.json"
COMPONENT_COLUMNS = ["effective training", "compile", "failed reruns", "checkpoint storage", "queue and environment",
                     "total"]


def _summary(run: str, **over: Any) -> RunSummary:
    return run_summary(run, **{
        "tokens_this_attempt": 2_000_000,
        "phases": {"environment_s": 10.0, "train_s": 100.0},
        "loss": {"initial": 2.5, "final": 1.2, "per_step": [[1, 2.5], [2, 2.0], [3, 1.2]],
                 "eval": [{"step": 100, "loss": 2.2}, {"step": 1000, "loss": 1.25}]},
        "validation_loss": 1.25,
        "throughput": {"tokens_per_s": 124830.5, "step_time_s": 0.1, "samples_per_s": 10.0,
                       "step_times_s": [0.1] * 40},
        "checkpoints": [{"step": 500, "bytes": 835_000_000, "files": 4, "save_s": 6.5, "uri": "s3://a/ckpt/500"}],
        **over,
    })


def _staged(samples: list[dict[str, Any]] | None = None) -> TrialReport:
    """A GPU and a Trainium2 run after a warm-up compile stage, the trn2 run's first attempt failed, with a Batch
    timeline over 75 minutes."""
    spec = parse_trial(json.loads(EXAMPLE.read_text()))
    final = {"final_samples": samples or []}
    warm = {"compile": {"seconds": 12.0, "cache": "hit", "cache_key": "cd" * 32}}
    stage = run_summary("trn2-compile", global_step=3, steps_this_attempt=3, phases={"compile_s": 300.0},
                        compile={"seconds": 300.0, "cache": "miss", "cache_key": "cd" * 32})
    costs = {
        "gpu": run_cost("35.182430", effective_training_usd="32.565333", checkpoint_storage_usd="0.017986",
                        queue_environment_usd="2.599111"),
        "trn2": run_cost("26.840236", run="trn2", effective_training_usd="20.861750", compile_usd="0.119210",
                         failed_reruns_usd="4.271692", checkpoint_storage_usd="0.017986",
                         queue_environment_usd="1.569598"),
        "trn2-compile": run_cost("16.093350", run="trn2-compile", effective_training_usd="0",
                                 compile_usd="16.093350"),
    }
    t0 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
    ledger = [transition_entry(spec.trial_id, run, job_id=f"job-{run}", attempt=attempt, status=status,
                               at=t0 + timedelta(minutes=minute))
              for run, attempt, status, minute in [
                  ("trn2-compile", 1, "STARTING", 0), ("trn2-compile", 1, "SUCCEEDED", 27),
                  ("gpu", 1, "STARTING", 2), ("gpu", 1, "SUCCEEDED", 40), ("trn2", 1, "STARTING", 28),
                  ("trn2", 1, "FAILED", 42), ("trn2", 2, "STARTING", 43), ("trn2", 2, "SUCCEEDED", 75)]]
    return build_trial_report(
        spec, {"gpu": [_summary("gpu", **final)],
               "trn2": [_summary("trn2", status="failed", global_step=300, steps_this_attempt=300, **warm),
                        _summary("trn2", attempt=2, start_step=200, resumed_from_step=200, rerun_steps=100,
                                 steps_this_attempt=800, **warm, **final)],
               "trn2-compile": [stage]},
        costs, ledger)


@pytest.fixture(scope="module")
def staged() -> TrialReport:
    return _staged()


def _table(html: str, css_class: str) -> list[list[str]]:
    """The rows of the table of ``css_class``, each a list of its cells' text."""
    found = re.search(rf'<table class="{css_class}">(.*?)</table>', html, flags=re.S)
    assert found, css_class
    return [[unescape(re.sub(r"<[^>]+>", "", cell)).strip() for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row,
                                                                                    flags=re.S)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", found.group(1), flags=re.S)]


def _markdown_table(text: str, heading: str) -> list[list[str]]:
    lines = text.split(f"## {heading}", 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return [rows[0], *rows[2:]]  # the header, then the rows under the rule


def test_the_cost_table_adds_up_when_the_warm_up_compile_stage_ran(staged: TrialReport) -> None:
    by_run = staged.cost.by_run
    assert list(by_run) == ["gpu", "trn2", "trn2-compile"]
    for name, summed_usd in staged.cost.trial.items():
        assert sum(Decimal(cost.components()[name]) for cost in by_run.values()) == Decimal(summed_usd), name

    # Markdown: a column per run, the stage's included; the trial's column is each row's sum, to the micro-dollar.
    header, *rows = _markdown_table(render_markdown(staged), "Cost (USD)")
    assert header == ["component (USD)", "gpu", "trn2", "trn2-compile", "trial"]
    for label, *cells, summed in rows[:6]:
        assert sum(Decimal(cell) for cell in cells) == Decimal(summed), label

    # HTML: a row per run, then the trial's row; every component column adds up to the trial's, to the cent.
    columns, *priced = _table(render_html(staged), "cost")
    assert columns[1:7] == COMPONENT_COLUMNS
    runs, trial = priced[:-1], priced[-1]
    assert [row[0] for row in runs] == ["GPU (p5.48xlarge)", "Trainium2 (trn2.48xlarge)",
                                        "Trainium2 warm-up compile (trn2.48xlarge)"]
    assert trial[0] == "trial (sum of the runs)"
    for column in range(1, 7):
        amounts = [Decimal(row[column].removeprefix("$").replace(",", "")) for row in runs]
        total = Decimal(trial[column].removeprefix("$").replace(",", ""))
        assert abs(sum(amounts) - total) <= Decimal("0.005") * len(runs), columns[column]
        assert all(re.fullmatch(r"\$[0-9,]+\.[0-9]{2}", row[column]) for row in priced), columns[column]
    assert trial[6] == "$78.12" and runs[2][2] == "$16.09"  # the stage's cost is all compile
    assert runs[2][7:] == ["\u2014", "\u2014"]  # the stage trains no steps: no unit cost


def test_chart_legends_and_labels_name_runs_and_components_in_words(staged: TrialReport) -> None:
    html = render_html(staged)
    legends = {label: [unescape(re.sub(r"<[^>]+>", "", item)).strip() for item in re.findall(r"<li>(.*?)</li>", body)]
               for label, body in re.findall(r'<ul class="legend" aria-label="([^"]+)">(.*?)</ul>', html, flags=re.S)}
    assert legends["loss chart legend"][:3] == ["GPU (p5.48xlarge)", "Trainium2 (trn2.48xlarge)", "validation loss"]
    assert "Trainium2: retry resumed from step 200" in legends["loss chart legend"]
    assert legends["cost chart legend"] == ["effective training", "compile", "failed reruns", "checkpoint storage",
                                            "queue and environment"]
    assert legends["attempt timeline legend"] == ["succeeded", "failed", "not ended", "a Batch transition"]
    for svg in re.findall(r"<svg .*?</svg>", html, flags=re.S):
        texts = [unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", svg)]
        assert not {"gpu", "trn2", "trn2-compile"} & set(texts)
        assert not [t for t in texts if "_" in t]  # no field names
    cost_svg = re.search(r'<svg [^>]*aria-label="cost by component".*?</svg>', html, flags=re.S)
    assert cost_svg and "Trainium2 warm-up compile (trn2.48xlarge)</text>" in cost_svg.group(0)
    assert run_label("trn2", "trn2.48xlarge", "cpu") == "Trainium2 (trn2.48xlarge, stand-in cpu)"
    assert run_label("gpu-fallback", "p5.48xlarge") == "GPU fallback (p5.48xlarge)"


@pytest.mark.parametrize(("value", "text"), [
    (1.443e-05, "0.00001443"), (124830.5, "124,800"), (2.1, "2.1"), (1.16342, "1.163"), (9.99996, "10"),
    (0.0909, "0.0909"), (0.0, "0"), (-0.00421, "-0.00421"), (1000.0, "1,000")])
def test_figures_have_four_significant_figures_written_out(value: float, text: str) -> None:
    assert _number(value) == text


def test_money_is_to_the_cent_and_unit_prices_keep_their_figures() -> None:
    assert (_usd("32.565333"), _usd("1234.5"), _usd("0.017986")) == ("$32.57", "$1,234.50", "$0.02")
    assert (_usd("0.035182", 4), _usd("0.00001443", 4), _usd(None)) == ("$0.03518", "$0.00001443", "\u2014")


def test_the_record_table_carries_units_and_never_python_literals(staged: TrialReport) -> None:
    html, markdown = render_html(staged), render_markdown(staged)
    header, *rows = _table(html, "record")
    assert header == ["item", "figure", "GPU (p5.48xlarge)", "Trainium2 (trn2.48xlarge)"]
    figures = {row[-3]: row[-2:] for row in rows}
    assert figures["throughput (tokens/s)"] == ["124,800", "124,800"]
    assert figures["checkpoint size"] == ["835 MB", "835 MB"]
    assert figures["validation loss (nats/token)"] == ["1.25", "1.25"]
    assert figures["rerun share"][1] == "9.09%" and figures["cache hit rate"] == ["\u2014", "100%"]
    assert figures["stand-in backend"] == ["no", "no"] and figures["loss continuous after resume"][0] == "\u2014"
    assert figures["compile cache key"][1] == "cd" * 8 + "\u2026"
    assert {"runtime init (s)", "compile (s)", "step time (s)", "checkpoint saves (s)", "data load (s)"} <= set(figures)
    record_md = markdown.split("## Record table", 1)[1].split("## Acceptance checks", 1)[0]
    for text in (" ".join(" ".join(row) for row in rows), record_md):
        assert not re.search(r"\b(True|False|None)\b|\d[eE][+-]?\d|\['", text)
    assert "| effective training | step time (s) | 0.1 | 0.1 |" in markdown


def test_the_attempt_timeline_has_a_time_axis_and_a_bar_per_attempt(staged: TrialReport) -> None:
    html = render_html(staged)
    svg = re.search(r'<svg [^>]*aria-label="attempt timeline".*?</svg>', html, flags=re.S)
    assert svg
    ticks = re.findall(r'<text class="tick"[^>]*>([^<]*)</text>', svg.group(0))
    assert ticks == ["0 min", "20 min", "40 min", "60 min"]
    assert "minutes from the trial&#39;s first Batch transition" in svg.group(0)
    bars = re.findall(r'<rect class="attempt" x="([0-9.]+)"[^>]*width="([0-9.]+)"[^>]*fill="([^"]+)"><title>([^<]*)',
                      svg.group(0))
    assert [unescape(title).split(":")[0] for *_, title in bars] == [
        "Trainium2 warm-up compile (trn2.48xlarge), attempt 1", "GPU (p5.48xlarge), attempt 1",
        "Trainium2 (trn2.48xlarge), attempt 1", "Trainium2 (trn2.48xlarge), attempt 2"]
    assert [colour for *_, colour, _ in bars] == ["#2ca02c", "#2ca02c", "#d62728", "#2ca02c"]  # the failed one red
    starts = [float(x) for x, *_ in bars]
    assert starts[0] < starts[1] < starts[2] < starts[3]  # on one time axis, in the order they started
    assert float(bars[3][1]) > float(bars[2][1])  # 32 minutes draw longer than 14


def test_a_short_trial_reads_its_timeline_in_seconds() -> None:
    spec = parse_trial(json.loads(EXAMPLE.read_text()))
    t0 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
    ledger = [transition_entry(spec.trial_id, "gpu", job_id="job-gpu", attempt=1, status=status,
                               at=t0 + timedelta(seconds=second))
              for status, second in (("STARTING", 0), ("RUNNING", 20), ("SUCCEEDED", 50))]
    html = render_html(build_trial_report(spec, {"gpu": [_summary("gpu")]}, {"gpu": run_cost("1")}, ledger))
    assert re.findall(r'<text class="tick"[^>]*>([^<]*)</text>', html)[:2] == ["0 s", "10 s"]
    assert html.count('<rect class="attempt"') == 1 and "RUNNING at 20 s" in html


def test_empty_completions_read_empty_never_the_same() -> None:
    said = {"prompt": "Summarise the release notes.", "completion": "The release adds ...", "token_ids": [1, 2]}
    silent = {"prompt": "Name three colours.", "completion": "  ", "token_ids": []}
    header, *rows = _table(render_html(_staged([said, silent])), "samples")
    assert header == ["prompt", "GPU (p5.48xlarge)", "Trainium2 (trn2.48xlarge)", "same"]
    assert rows[0] == ["Summarise the release notes.", "The release adds ...", "The release adds ...", "yes"]
    assert rows[1] == ["Name three colours.", "empty", "empty", "empty"]


def test_the_comparison_states_its_figures_not_only_their_names(staged: TrialReport) -> None:
    comparison = staged.comparison
    assert comparison.steady_cost_ratio is not None and comparison.final_loss_delta is not None
    _, *rows = _table(render_html(staged), "comparison")
    values = {name: value for name, value, _ in rows}
    loss = values["final validation loss, trn2 vs gpu"]
    assert re.fullmatch(r"[+-]?[0-9.]+% \(within the tolerance of ±5%\)", loss) or loss.startswith("0%"), loss
    steady = values["steady-state cost per training step, trn2 / gpu"]
    assert re.fullmatch(r"[0-9.]+× \(95% interval [0-9.]+ to [0-9.]+\)", steady), steady
    assert values["whole-trial cost, trn2 side / gpu"] == f"{_number(comparison.cost_ratio or 0, 3)}×"
    markdown = render_markdown(staged).split("## Comparison", 1)[1]
    assert f"**{steady}**" in markdown and f"**{loss}**" in markdown


def test_the_decision_block_sits_right_under_the_headline() -> None:
    environment = _environment()
    source = environment.loader.get_source(environment, "report.html")[0] if environment.loader else ""
    headline_ends = source.index("</section>")
    assert source.index('<section id="headline">') < headline_ends < source.index("{% block decision %}")
    assert source.index("{% block decision %}") < source.index("<h2>")


# A Batch status reason, and the compiler message of the same failure, as they can arrive: pipes, a line that reads
# as a table row of its own, Windows and Unicode line breaks.
HOSTILE = "Essential container exited | OutOfMemory\n| gpu | succeeded | fake row |\r\nsee \\| log\u2028end"


def _ended(reason: str) -> TrialReport:
    """A GPU run that succeeded and a trn2 run that failed with ``reason`` as its Batch status reason and as the
    compile cache entry's last failure."""
    spec = parse_trial(json.loads(EXAMPLE.read_text()))
    key = "cd" * 32
    t0 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
    ledger = [transition_entry(spec.trial_id, "gpu", job_id="job-gpu", attempt=1, status="SUCCEEDED", at=t0),
              transition_entry(spec.trial_id, "trn2", job_id="job-trn2", attempt=1, status="FAILED",
                               at=t0 + timedelta(minutes=5), status_reason=reason)]
    return build_trial_report(
        spec, {"gpu": [_summary("gpu")],
               "trn2": [_summary("trn2", status="failed", global_step=300, steps_this_attempt=300,
                                 compile={"seconds": 5.0, "cache": "miss", "cache_key": key})]},
        {"gpu": run_cost("10"), "trn2": run_cost("8", run="trn2")}, ledger,
        cache_entries={key: {"status": "failed", "misses": 1, "failures": 1, "failure_reason": reason}})


def _markdown_tables(text: str) -> list[list[list[str]]]:
    """Every table of a Markdown text: its rows (the lines that start with a pipe, as ``splitlines`` splits them),
    each split into cells where Markdown splits them, at the pipes no backslash escapes."""
    tables: list[list[list[str]]] = []
    in_table = False
    for line in text.splitlines():
        if not line.startswith("|"):
            in_table = False
            continue
        if not in_table:
            tables.append([])
            in_table = True
        tables[-1].append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip()[1:-1])])
    return tables


def test_a_pipe_or_a_line_break_in_a_status_reason_adds_no_row_or_column() -> None:
    """A Batch status reason and a compiler message with pipes and line breaks stay in their cells: every Markdown
    table has the rows and columns it has with a plain reason, no fake row appears, and the cell reads the whole
    reason on one line with its pipes escaped."""
    plain = _markdown_tables(render_markdown(_ended("Essential container exited")))
    hostile = _markdown_tables(render_markdown(_ended(HOSTILE)))
    assert [[len(row) for row in table] for table in hostile] == [[len(row) for row in table] for table in plain]
    one_line = r"Essential container exited \| OutOfMemory \| gpu \| succeeded \| fake row \| see \\\| log end"
    ended = next(table for table in hostile if table[0] == ["run", "outcome", "Batch status reason"])
    assert ended[2:] == [["gpu", "succeeded", "-"], ["trn2", "failed", one_line]]
    entries = next(table for table in hostile if table[0][0] == "cache entry")
    assert entries[2][-1] == one_line
    assert not any(row[:2] == ["gpu", "succeeded"] and "fake row" in row for table in hostile for row in table)


@pytest.mark.parametrize(("text", "cell"), [
    ("a | b", "a \\| b"), ("two\nlines", "two lines"), ("a\r\nb\rc\u2028d", "a b c d"),
    ("escaped \\| already", "escaped \\\\\\| already"), ("no pipe \\ here", "no pipe \\ here")])
def test_a_markdown_cell_keeps_its_text_on_one_line_and_in_one_column(text: str, cell: str) -> None:
    """A pipe is escaped (and a backslash before it doubled, so it cannot unescape it), every line break becomes
    a space, and any other text is left as it is."""
    assert md_cell(text) == cell
