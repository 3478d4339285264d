"""Reports checked the way a person sees them: the HTML in headless Chromium (DOM and screenshot), the Markdown
in a terminal (plain text, aligned tables)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from html import unescape
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from dualtrack.client.display import align_markdown_tables, width
from tests.client.png_pixels import decode_png
from tests.client.report_fixture import build_report

if TYPE_CHECKING:
    from lambdas.domain.report.model import TrialReport

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync")


def chromium() -> str | None:
    for name in (os.environ.get("DUALTRACK_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


needs_chromium = pytest.mark.skipif(
    chromium() is None, reason="headless Chromium not installed (apt-get install -y chromium)")


def run_chromium(*args: str) -> subprocess.CompletedProcess[bytes]:
    with tempfile.TemporaryDirectory(prefix="dualtrack-chromium-") as profile:
        return subprocess.run([chromium() or "chromium", *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                              capture_output=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    """The fixture report as stored: its JSON, which the CLI renders."""
    return build_report().model_dump(mode="json")


@pytest.fixture(scope="module")
def html_file(report: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    from dualtrack.commands.report import render

    path = tmp_path_factory.mktemp("report") / "report.html"
    path.write_text(render(report, "html"), encoding="utf-8")
    return path


@pytest.mark.slow
@needs_chromium
def test_the_html_report_dom_has_its_charts_and_tables(html_file: Path, report: dict[str, Any]) -> None:
    from lambdas.rendering.report_text import RUN_NAMES

    done = run_chromium("--dump-dom", html_file.as_uri())
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    dom = done.stdout.decode()
    svgs = re.findall(r'<svg [^>]*aria-label="([^"]+)"', dom)
    assert svgs == ["loss by global step", "cost by component", "attempt timeline"]
    lines = re.findall(r'<polyline [^>]*points="([^"]+)"', dom)
    per_step = {run: len(t["loss"]["per_step"]) for run, t in report["tracks"].items()}
    assert [len(p.split()) for p in lines] == list(per_step.values())  # one point per recorded step and run
    evals = sum(len(t["loss"]["eval"]) for t in report["tracks"].values())
    assert len(re.findall(r"<circle [^>]*r=\"3.5\"", dom)) == evals  # every validation point marked
    assert "global step" in dom and "loss (nats per token)" in dom  # axes say what they measure
    resumed = [run for run, t in report["tracks"].items() if t["resume"]["resumed_from_step"] is not None]
    assert all(f"{RUN_NAMES[run]}: retry resumed from step" in dom or f"{RUN_NAMES[run]}: fallback resumed" in dom
               for run in resumed)
    assert dom.count("<title>") >= 1 + 5 * len(report["tracks"])  # a tooltip on every cost segment
    tables = {re.search(r"<th[^>]*>([^<]*)</th>", t).group(1): t  # type: ignore[union-attr]
              for t in re.findall(r"<table[^>]*>(.*?)</table>", dom, flags=re.S)}
    figures = sum(len(row["gpu"]) for row in report["record_table"])
    assert figures > len(report["record_table"]) and tables["item"].count("<tr>") == 1 + figures  # a row a figure
    assert tables["check"].count("<tr>") == 1 + len(report["acceptance"])
    assert tables["cost (USD)"].count("<tr") == 1 + len(report["cost"]["by_run"]) + 1  # the runs, then the trial
    assert "image pull and container start (s)" in tables["item"] and "runtime init (s)" in tables["item"]
    assert tables["run"].count("<tr>") >= 1 + len(report["tracks"])
    assert f"Why: {report['comparison']['verdict']}" in dom and report['comparison']['headline'] in dom
    assert "$41.74" in dom and "$35.18" in dom  # money to the cent in the cost table
    for name in ("effective training", "compile", "failed reruns", "checkpoint storage", "queue and environment"):
        assert f'<th class="num">{name}</th>' in tables["cost (USD)"], name
    assert re.search(r"<td>GPU \(p5\.48xlarge\)</td>(<td class=\"num\">\$[0-9,.]+</td>){8}", tables["cost (USD)"])
    assert "Price estimate:" in dom and "Trainium2 (trn2.48xlarge) priced at an estimated rate" in dom
    strokes = re.findall(r'<polyline [^>]*stroke="(#[0-9a-f]{6})"[^>]*stroke-width="([0-9.]+)"', dom)
    assert len({colour for colour, _ in strokes}) == len(strokes) == 2  # distinct colours, one per track
    assert len(re.findall(r'<polyline [^>]*stroke-dasharray=', dom)) == 1  # the curve drawn over is dashed
    assert re.search(r"<text [^>]*>\$41\.74</text>", dom) and re.search(r"<text [^>]*>\$35\.18</text>", dom)


@pytest.mark.slow
@needs_chromium
def test_the_html_report_screenshot_is_legible(html_file: Path, tmp_path: Path) -> None:
    from lambdas.rendering.report_text import COLOURS, COMPONENT_COLOURS

    shot = tmp_path / "report.png"
    done = run_chromium(f"--screenshot={shot}", "--window-size=1280,3200", html_file.as_uri())
    assert done.returncode == 0 and shot.exists(), done.stderr.decode()[-2000:]
    assert shot.stat().st_size > 20_000  # a blank page compresses to a few kilobytes
    image = decode_png(shot.read_bytes())
    assert (image.width, image.height) == (1280, 3200)  # the decision, the loss and the cost charts
    colours = image.colours(step=1)
    total = sum(colours.values())
    background = max(colours.values())
    assert background < total * 0.98 and len(colours) > 50  # not a single colour: text, lines, bars
    dark = sum(n for (r, g, b), n in colours.items() if r + g + b < 200)
    assert dark > 2_000  # black text is on the page

    def rgb(h: str) -> tuple[int, int, int]:
        return int(h[1:3], 16), int(h[3:5], 16), int(h[5:7], 16)

    for name, colour in COMPONENT_COLOURS.items():
        assert colours.get(rgb(colour), 0) >= 50, f"cost chart: no {name} swatch or bar drawn"
    for run in ("gpu", "trn2"):
        near = sum(n for c, n in colours.items() if max(abs(a - b) for a, b in zip(c, rgb(COLOURS[run]),
                                                                              strict=True)) < 40)
        assert near > 30, f"loss chart: the {run} line or its label is missing"


def staged_report() -> TrialReport:
    """The fixture's trial after a warm-up compile stage (so the training run hit the cache), with a prompt both
    tracks answered with nothing: every section of the report has something to show."""
    from lambdas.domain.money.cost import AttemptUsage, Phases, RunUsage, compute_run_cost
    from lambdas.domain.money.ledger import transition_entry
    from lambdas.domain.money.prices import load_price_table
    from lambdas.domain.report.build import build_trial_report
    from lambdas.domain.trial.rules import parse_trial
    from tests.builders import run_summary
    from tests.client.report_fixture import EXAMPLE, _summary

    spec = parse_trial(json.loads(EXAMPLE.read_text()))
    samples = [{"prompt": "Summarise the release notes.", "completion": "The release adds ...", "token_ids": [1, 2]},
               {"prompt": "Name three colours.", "completion": "", "token_ids": []}]
    warm = {"seconds": 12.0, "cache": "hit", "cache_key": "ab" * 32}
    summaries = {
        "gpu": [_summary("gpu", 1, 0, 1000, final_samples=samples)],
        "trn2": [_summary("trn2", 1, 0, 300, fault={"injected_at_step": 300, "mode": "retryable"}, compile=warm),
                 _summary("trn2", 2, 200, 1000, resumed_from_step=200, rerun_steps=100, final_samples=samples,
                          continuity={"global_step_continuous": True, "loss_continuous": True,
                                      "max_rel_delta": 0.002})],
        "trn2-compile": [run_summary("trn2-compile", global_step=3, steps_this_attempt=3, backend="neuron",
                                     phases={"environment_s": 95.0, "compile_s": 1500.0},
                                     compile={"seconds": 1500.0, "cache": "miss", "cache_key": "ab" * 32})],
    }

    def usage(run: str, instance_type: str, *attempts: AttemptUsage, stored: int = 0) -> RunUsage:
        return RunUsage(trial_id=spec.trial_id, run=run, track="gpu" if run == "gpu" else "trn2",
                        instance_type=instance_type, attempts=attempts, checkpoint_bytes=stored * 167_000_000,
                        checkpoint_put_requests=4 * stored)

    prices = load_price_table()
    costs = {run: compute_run_cost(u, prices) for run, u in {
        "gpu": usage("gpu", "p5.48xlarge", AttemptUsage(
            attempt=1, billed_seconds=Decimal(2300), queue_seconds=Decimal(120), end_step=1000, succeeded=True,
            phases=Phases(environment_s=95, data_load_s=40, train_s=2100, eval_s=30)), stored=5),
        "trn2": usage("trn2", "trn2.48xlarge", AttemptUsage(
            attempt=1, billed_seconds=Decimal(800), queue_seconds=Decimal(60), end_step=300,
            phases=Phases(environment_s=95, compile_s=12, train_s=630)), AttemptUsage(
            attempt=2, billed_seconds=Decimal(1900), start_step=200, end_step=1000, resumed_from_step=200,
            rerun_steps=100, succeeded=True,
            phases=Phases(environment_s=95, compile_s=12, train_s=1680, checkpoint_restore_s=20)), stored=5),
        "trn2-compile": usage("trn2-compile", "trn2.48xlarge", AttemptUsage(
            attempt=1, billed_seconds=Decimal(1620), end_step=3, succeeded=True,
            phases=Phases(environment_s=95, compile_s=1500))),
    }.items()}
    t0 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
    ledger = [transition_entry(spec.trial_id, run, job_id=f"job-{run}", attempt=attempt, status=status,
                               at=t0 + timedelta(minutes=minute))
              for run, attempt, status, minute in [
                  ("trn2-compile", 1, "STARTING", 0), ("trn2-compile", 1, "SUCCEEDED", 27), ("gpu", 1, "STARTING", 2),
                  ("gpu", 1, "SUCCEEDED", 40), ("trn2", 1, "STARTING", 28), ("trn2", 1, "FAILED", 42),
                  ("trn2", 2, "STARTING", 43), ("trn2", 2, "SUCCEEDED", 75)]]
    return build_trial_report(spec, summaries, costs, ledger, generated_at="2026-11-20T10:15:00Z")


# Measures the page as laid out: how wide it is, which table wrappers scroll, the cells whose content overflows
# them or whose longest word does not fit, text that overlaps other text in a chart or a legend, or leaves its
# chart. Its findings are written into the page as JSON, for --dump-dom to return.
LAYOUT_PROBE = r"""<script>(() => {
const overlap = (a, b) => a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5
  && b.top < a.bottom - 0.5;
const found = {viewport: innerWidth, page: document.documentElement.scrollWidth, narrow: [], overlaps: [],
  outside: []};
found.scrolling = [...document.querySelectorAll(".scroll")].filter(w => w.scrollWidth > w.clientWidth + 1)
  .map(w => w.querySelector("th").textContent);
for (const cell of document.querySelectorAll("td, th")) {
  const style = getComputedStyle(cell);
  const room = cell.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  const texts = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
  for (let node; (node = texts.nextNode());) {
    // A word, or a hyphenated compound's part up to its hyphen: prose may wrap after a hyphen ("Welch-"), a
    // squeezed column breaks inside a part.
    for (const word of node.data.matchAll(/[^\s-]+-?|-/g)) {
      const range = document.createRange();
      range.setStart(node, word.index);
      range.setEnd(node, word.index + word[0].length);
      const rects = [...range.getClientRects()];
      const wide = Math.max(...rects.map(r => r.width));
      if (rects.length > 1 || wide > room + 1) found.narrow.push([word[0], Math.round(wide), Math.round(room)]);
    }
  }
  if (cell.scrollWidth > cell.clientWidth + 1) found.narrow.push([cell.textContent.slice(0, 40), "overflows"]);
}
const groups = [...document.querySelectorAll("svg")].map(svg => [svg, [...svg.querySelectorAll("text")]])
  .concat([...document.querySelectorAll(".legend")].map(ul => [ul, [...ul.children]]));
for (const [owner, items] of groups) {
  const name = owner.getAttribute("aria-label");
  const boxes = items.map(item => item.getBoundingClientRect());
  boxes.forEach((a, i) => boxes.slice(i + 1).forEach((b, j) => {
    if (overlap(a, b)) found.overlaps.push([name, items[i].textContent, items[i + 1 + j].textContent]);
  }));
  const frame = owner.getBoundingClientRect();
  boxes.forEach((box, i) => {
    if (box.left < frame.left - 1 || box.right > frame.right + 1 || box.top < frame.top - 1
        || box.bottom > frame.bottom + 1) found.outside.push([name, items[i].textContent]);
  });
}
found.attempts = document.querySelectorAll("rect.attempt").length;
found.ticks = [...document.querySelectorAll("text.tick")].map(t => t.textContent);
const out = document.createElement("pre");
out.id = "layout-probe";
out.textContent = JSON.stringify(found);
document.body.append(out);
})();</script>"""


def measure_layout(html: str, width: int, directory: Path) -> dict[str, Any]:
    page = directory / f"report-{width}.html"
    page.write_text(html.replace("</body>", LAYOUT_PROBE + "</body>"), encoding="utf-8")
    done = run_chromium("--dump-dom", f"--window-size={width},900", "--hide-scrollbars", page.as_uri())
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    probe = re.search(r'<pre id="layout-probe">(.*?)</pre>', done.stdout.decode(), flags=re.S)
    assert probe, "the layout probe did not run"
    found: dict[str, Any] = json.loads(unescape(probe.group(1)))
    return found


@pytest.mark.slow
@needs_chromium
def test_the_page_fits_a_1400_px_screen_without_squeezed_columns_or_overlapping_labels(tmp_path: Path) -> None:
    from lambdas.rendering.report_html import render_html

    report = staged_report()
    assert report.compile.stage is not None and report.samples is not None and report.samples.empty == 1
    html = render_html(report)
    wide = measure_layout(html, 1400, tmp_path)
    assert wide["viewport"] == 1400 and wide["page"] <= 1400  # no horizontal scrolling at 1400 px
    assert wide["scrolling"] == []  # every table fits: none needs its wrapper's scrollbar
    assert wide["narrow"] == []  # no column narrower than its longest word, no cell overflowing
    assert wide["overlaps"] == [] and wide["outside"] == []  # chart and legend labels apart, inside their chart
    assert wide["attempts"] == 4 and wide["ticks"] == ["0 min", "20 min", "40 min", "60 min"]
    # On a narrower screen the tables scroll inside their wrappers; the page itself still does not.
    narrow = measure_layout(html, 760, tmp_path)
    assert narrow["page"] <= 760 and narrow["scrolling"] and narrow["narrow"] == []
    assert narrow["overlaps"] == [] and narrow["outside"] == []


@pytest.mark.slow
@needs_chromium
def test_a_report_with_a_scaling_section_fits_1400_px_too(tmp_path: Path) -> None:
    """The scaling table's eleven columns and the scaling run's own column in the record table fit as the rest."""
    from lambdas.rendering.report_html import render_html
    from tests.unit.domain.test_scaling import scaled_report

    report = scaled_report()
    assert report.scaling is not None and list(report.tracks) == ["gpu", "trn2", "gpu-n1"]
    html = render_html(report)
    assert "<h2>Scaling</h2>" in html
    wide = measure_layout(html, 1400, tmp_path)
    assert wide["page"] <= 1400 and wide["scrolling"] == [] and wide["narrow"] == []
    assert wide["overlaps"] == [] and wide["outside"] == []
    narrow = measure_layout(html, 760, tmp_path)
    assert narrow["page"] <= 760 and narrow["narrow"] == []


def test_the_markdown_report_reads_in_a_terminal(report: dict[str, Any]) -> None:
    from dualtrack.commands.report import render

    text = render(report, "md")
    assert "\x1b" not in text and "<" not in text  # plain text: no HTML, no ANSI escapes
    assert all(line.isprintable() for line in text.splitlines())
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("|"):
            if not blocks or not blocks[-1]:
                blocks.append([])
            blocks[-1].append(line)
        elif blocks and blocks[-1]:
            blocks.append([])
    tables = [b for b in blocks if b]
    # the decision's two (sides, price bases), how each job ended, record table, acceptance checks, cost, resume
    assert len(tables) == 7
    for table in tables:
        assert len({width(line) for line in table}) == 1, table  # every row the same width
        pipes = [[m.start() for m in re.finditer(r"\|", line)] for line in table]
        assert all(p == pipes[0] for p in pipes), table  # column separators line up
        assert re.fullmatch(r"\|(-+\|)+", table[1])
    assert "| total " in text and "41.741486" in text


def test_alignment_keeps_cells_and_handles_wide_characters() -> None:
    source = "intro\n\n| a | b |\n|---|---|\n| 训练 | 1 |\n| longer cell | 22 |\nafter\n"
    aligned = align_markdown_tables(source)
    rows = aligned.splitlines()[2:6]
    assert rows == ["| a           | b   |", "|-------------|-----|", "| 训练        | 1   |",
                    "| longer cell | 22  |"]
    assert aligned.startswith("intro\n\n") and aligned.endswith("after\n")


def test_the_scheduled_cost_report_markdown_aligns(report: dict[str, Any]) -> None:
    from datetime import UTC, datetime

    from lambdas.domain.money.cost import COMPONENTS
    from lambdas.domain.money.ledger import LedgerRow
    from lambdas.domain.trial.trial_record import TrialRecord
    from lambdas.services.cost_reporting import cost_report, render_cost_markdown
    from tests.builders import run_cost, stored_cost

    costs = [LedgerRow(f"{report['trial_id']}#{run}", "cost", stored_cost(run_cost(
        t["cost"]["total_usd"], run, trial_id=report["trial_id"], **{name: t["cost"][name] for name in COMPONENTS})))
        for run, t in report["tracks"].items()]
    period = cost_report(costs, [TrialRecord(trial_id=report["trial_id"], owner="team-nlp", status="SUCCEEDED")],
                         start=datetime(2026, 11, 16, tzinfo=UTC), end=datetime(2026, 11, 23, tzinfo=UTC),
                         period="2026-W47")
    text = align_markdown_tables(render_cost_markdown(period))
    for header in ("| owner", "| team "):
        lines = text.splitlines()
        first = next(i for i, line in enumerate(lines) if line.startswith(header))
        table = lines[first:first + 3]  # header, rule, the team-nlp row
        assert table[2].startswith("| team-nlp") and width(table[0]) == width(table[2])
    assert re.search(r"^\| team-nlp +\| 76\.923916 +\|", text, flags=re.M)
