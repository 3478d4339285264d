"""Reports checked the way a person sees them: the HTML in headless Chromium (DOM and screenshot), the Markdown
in a terminal (plain text, aligned tables)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from dualtrack.client.display import align_markdown_tables, width
from tests.client.png_pixels import decode_png
from tests.client.report_fixture import build_report

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
    assert all(f"{run}: retry resumed from step" in dom or f"{run}: fallback resumed" in dom for run in resumed)
    assert dom.count("<title>") >= 1 + 5 * len(report["tracks"])  # a tooltip on every cost segment
    tables = {re.search(r"<th>([^<]*)</th>", t).group(1): t  # type: ignore[union-attr]
              for t in re.findall(r"<table>(.*?)</table>", dom, flags=re.S)}
    assert tables["item"].count("<tr>") == 1 + len(report["record_table"])
    assert tables["check"].count("<tr>") == 1 + len(report["acceptance"])
    assert tables["component (USD)"].count("<tr>") == 1 + 5 + 1 + 2  # five components, total, per step, per 1M
    assert "image pull and start (s)" in tables["item"] and "runtime init (s)" in tables["item"]
    assert tables["run"].count("<tr>") >= 1 + len(report["tracks"])
    assert f"Why: {report['comparison']['verdict']}" in dom and report['comparison']['headline'] in dom
    assert "$41.74" in dom and "$35.18" in dom  # money to the cent in the cost table
    for name in ("effective training", "compile", "failed reruns", "checkpoint storage", "queue environment"):
        assert re.search(rf"<td>{name}</td>(<td class=\"num\">\$[0-9,.]+</td>)+", tables["component (USD)"]), name
    assert "Price estimate:" in dom and "trn2 (trn2.48xlarge) priced at an estimated rate" in dom
    strokes = re.findall(r'<polyline [^>]*stroke="(#[0-9a-f]{6})"[^>]*stroke-width="([0-9.]+)"', dom)
    assert len({colour for colour, _ in strokes}) == len(strokes) == 2  # distinct colours, one per track
    assert len(re.findall(r'<polyline [^>]*stroke-dasharray=', dom)) == 1  # the curve drawn over is dashed
    assert "41.74 USD" in dom and "35.18 USD" in dom  # each run's total printed beside its bar, with its unit


@pytest.mark.slow
@needs_chromium
def test_the_html_report_screenshot_is_legible(html_file: Path, tmp_path: Path) -> None:
    from lambdas.domain.report_render import COLOURS, COMPONENT_COLOURS

    shot = tmp_path / "report.png"
    done = run_chromium(f"--screenshot={shot}", "--window-size=1280,2000", html_file.as_uri())
    assert done.returncode == 0 and shot.exists(), done.stderr.decode()[-2000:]
    assert shot.stat().st_size > 20_000  # a blank page compresses to a few kilobytes
    image = decode_png(shot.read_bytes())
    assert (image.width, image.height) == (1280, 2000)
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
    assert len(tables) == 5  # how each job ended, record table, acceptance checks, cost, resume evidence
    for table in tables:
        assert len({width(line) for line in table}) == 1, table  # every row the same width
        pipes = [[m.start() for m in re.finditer(r"\|", line)] for line in table]
        assert all(p == pipes[0] for p in pipes), table  # column separators line up
        assert re.fullmatch(r"\|(-+\|)+", table[1])
    assert "| total_usd " in text and "41.741486" in text


def test_alignment_keeps_cells_and_handles_wide_characters() -> None:
    source = "intro\n\n| a | b |\n|---|---|\n| 训练 | 1 |\n| longer cell | 22 |\nafter\n"
    aligned = align_markdown_tables(source)
    rows = aligned.splitlines()[2:6]
    assert rows == ["| a           | b   |", "|-------------|-----|", "| 训练        | 1   |",
                    "| longer cell | 22  |"]
    assert aligned.startswith("intro\n\n") and aligned.endswith("after\n")


def test_the_scheduled_cost_report_markdown_aligns(report: dict[str, Any]) -> None:
    from datetime import UTC, datetime

    from lambdas.domain.cost import COMPONENTS
    from lambdas.domain.ledger import LedgerRow
    from lambdas.domain.trial_record import TrialRecord
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
