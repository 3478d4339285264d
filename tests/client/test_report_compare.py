"""`dualtrack report A --compare B`: a column per run, titled by its trial id and report time, as Markdown, JSON
or one HTML file (every value escaped), from local reports (no endpoint)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from lambdas.rendering.report_html import render_html
from lambdas.rendering.report_markdown import render_markdown
from tests.client.report_fixture import build_report

# What a verdict on cost says: no rendering of a rehearsal on stand-ins may say it.
VERDICT_WORDS = re.compile(r"cheaper|pays? back", re.IGNORECASE)


class Tables(HTMLParser):
    """The text of every header and data cell, row by row, with each row's class."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[str, list[str]]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self.rows.append((dict(attrs).get("class") or "", []))
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1][1].append(" ".join(" ".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    return build_report().model_dump(mode="json")


@pytest.fixture
def runs(report: dict[str, Any], tmp_path: Path) -> tuple[Path, Path]:
    """Two rehearsal directories of one trial, a day apart; the later one's trn2 run cost more."""
    earlier, later = tmp_path / "20261120T101500Z-pilot", tmp_path / "20261121T090000Z-pilot"
    other = json.loads(json.dumps(report))
    other["generated_at"] = "2026-11-21T09:00:00Z"
    other["tracks"]["trn2"]["cost"]["total_usd"] = "99.5"
    for where, doc in ((earlier, report), (later, other)):
        where.mkdir()
        (where / "report.json").write_text(json.dumps(doc))
    return earlier, later


def table_rows(markdown: str) -> list[list[str]]:
    """Each table row's cells, split where Markdown splits them: at every pipe not escaped by a backslash."""
    return [[c.strip() for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])] for line in markdown.splitlines()
            if line.startswith("| ")]


def test_columns_are_titled_by_run(cli: Any, runs: tuple[Path, Path], report: dict[str, Any]) -> None:
    code, out, err = cli("report", str(runs[0]), "--compare", str(runs[1]))
    assert code == 0, err
    trial_id = report["trial_id"]
    header, *rows = table_rows(out)
    assert header == ["figure", f"{trial_id} (2026-11-20 10:15:00Z)", f"{trial_id} (2026-11-21 09:00:00Z)"]
    assert out.startswith(f"# {trial_id}: 2 reports side by side\n")
    assert f"- {trial_id} (2026-11-21 09:00:00Z): " in out  # each headline under its run's title
    assert {r[0]: r[1:] for r in rows}["trn2: total USD"] == [report["tracks"]["trn2"]["cost"]["total_usd"], "99.5"]
    assert {r[0]: r[1:] for r in rows}["read from"] == [str(runs[0]), str(runs[1])]


def test_one_report_read_twice_is_told_apart_by_where_it_was_read(cli: Any, runs: tuple[Path, Path],
                                                                  report: dict[str, Any]) -> None:
    code, out, _ = cli("report", str(runs[0]), "--compare", str(runs[0] / "report.json"), "--format", "json")
    first, second = json.loads(out)["compared"]
    base = f"{report['trial_id']} (2026-11-20 10:15:00Z)"
    assert code == 0 and first["title"] == f"{base} from {runs[0]}"
    assert second["title"] == f"{base} from {runs[0] / 'report.json'}"
    assert first["verdict"] == second["verdict"] == report["comparison"]["verdict"]


def test_json_lists_each_run_with_its_title(cli: Any, runs: tuple[Path, Path], report: dict[str, Any]) -> None:
    code, out, _ = cli("report", str(runs[0]), "--compare", str(runs[1]), "--json")
    compared = json.loads(out)["compared"]
    assert code == 0 and [c["generated_at"] for c in compared] == ["2026-11-20T10:15:00Z", "2026-11-21T09:00:00Z"]
    assert [c["source"] for c in compared] == [str(runs[0]), str(runs[1])]
    assert compared[1]["runs"]["trn2"]["total_usd"] == "99.5"


@pytest.mark.parametrize("how", [("--format", "html"), ("--out", "{dir}/compare.html")])
def test_html_has_a_column_per_run_and_marks_what_differs(cli: Any, runs: tuple[Path, Path], report: dict[str, Any],
                                                          tmp_path: Path, how: tuple[str, str]) -> None:
    flag, value = how[0], how[1].format(dir=tmp_path)
    code, out, err = cli("report", str(runs[0]), "--compare", str(runs[1]), flag, value)
    assert code == 0, err
    html = (tmp_path / "compare.html").read_text() if flag == "--out" else out
    if flag == "--out":
        assert out.startswith("wrote html comparison of ") and out.strip().endswith(str(tmp_path / "compare.html"))
    assert html.startswith("<!doctype html>") and "<script" not in html and "http" not in html  # self-contained
    tables = Tables()
    tables.feed(html)
    (_, header), *rows = tables.rows
    trial_id = report["trial_id"]
    assert header == ["figure", f"{trial_id} (2026-11-20 10:15:00Z) {runs[0]}",
                      f"{trial_id} (2026-11-21 09:00:00Z) {runs[1]}"]
    differing = [cells[0] for cls, cells in rows if cls == "differs"]
    assert differing == ["total USD"]  # trn2's; the run titles differ by design and are not marked
    checks = [cells[1:] for _, cells in rows if cells[0] in {c["check"] for c in report["acceptance"]}]
    assert len(checks) == len(report["acceptance"])


def test_html_escapes_what_the_reports_say(cli: Any, runs: tuple[Path, Path]) -> None:
    doc = json.loads((runs[1] / "report.json").read_text())
    doc["comparison"]["headline"] = "<script>alert(1)</script> & more"
    (runs[1] / "report.json").write_text(json.dumps(doc))
    code, out, _ = cli("report", str(runs[0]), "--compare", str(runs[1]), "--format", "html")
    assert code == 0 and "<script>" not in out and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in out


def test_open_writes_the_html_comparison_and_shows_it(cli: Any, runs: tuple[Path, Path], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []

    def fake_open(uri: str) -> bool:
        opened.append(uri)
        return True

    monkeypatch.setattr("webbrowser.open", fake_open)
    monkeypatch.setattr("tempfile.gettempdir", lambda: str(tmp_path))
    code, out, _ = cli("report", str(runs[0]), "--compare", str(runs[1]), "--open", "--json")
    answer = json.loads(out)
    assert code == 0 and answer["format"] == "html" and answer["opened"] is True
    assert opened == [Path(answer["written"]).as_uri()] and Path(answer["written"]).parent == tmp_path
    assert len(answer["compared"]) == 2


def test_a_rehearsal_on_stand_ins_says_cheaper_or_pays_back_in_no_rendering(cli: Any, tmp_path: Path) -> None:
    """Figures that make Trainium2 pay back on the tracks' devices, measured on stand-ins, give a rehearsal: its
    report.json, Markdown and HTML and --compare's Markdown, JSON and HTML say "cheaper", "not cheaper" or "pays
    back" nowhere, and --compare shows the rehearsal's outcome where a verdict would be, never a verdict row."""
    assert build_report().comparison.verdict == "trn2_viable_pays_back"  # the same figures on the devices
    report = build_report(stand_in=True)
    assert report.stand_in and report.comparison.rehearsal == "passed"
    where = tmp_path / "20261120T101500Z-pilot"
    where.mkdir()
    (where / "report.json").write_text(report.model_dump_json())
    said = {"report.json": report.model_dump_json(), "markdown": render_markdown(report),
            "html": render_html(report)}
    for fmt in ("md", "json", "html"):
        code, out, err = cli("report", str(where), "--compare", str(where / "report.json"), "--format", fmt)
        assert code == 0, err
        said[f"compare {fmt}"] = out
    assert {name: VERDICT_WORDS.findall(text) for name, text in said.items()} == {name: [] for name in said}
    rows = {cells[0]: cells[1:] for cells in table_rows(said["compare md"])}
    assert "verdict" not in rows and rows["rehearsal"] == ["passed", "passed"]
    compared = json.loads(said["compare json"])["compared"]
    assert [(c.get("verdict"), c["rehearsal"]) for c in compared] == [(None, "passed"), (None, "passed")]
    tables = Tables()
    tables.feed(said["compare html"])
    labels = [cells[0] for _, cells in tables.rows]
    assert "verdict" not in labels and "rehearsal" in labels


def test_a_rehearsal_beside_a_trial_on_the_devices_keeps_its_outcome_out_of_the_verdict_row(
        cli: Any, runs: tuple[Path, Path], report: dict[str, Any], tmp_path: Path) -> None:
    """Side by side, the trial on the devices has its verdict and the rehearsal its outcome, each in its own row:
    the rehearsal's verdict cell is empty."""
    rehearsal = tmp_path / "20261122T090000Z-pilot"
    rehearsal.mkdir()
    (rehearsal / "report.json").write_text(build_report(stand_in=True).model_dump_json())
    code, out, err = cli("report", str(runs[0]), "--compare", str(rehearsal))
    assert code == 0, err
    rows = {cells[0]: cells[1:] for cells in table_rows(out)}
    assert rows["verdict"] == [report["comparison"]["verdict"], "-"]
    assert rows["rehearsal"] == ["-", "passed"]


def test_a_pipe_or_a_line_break_in_what_a_report_says_adds_no_row_or_column(cli: Any, runs: tuple[Path, Path]
                                                                           ) -> None:
    """Text read from a report (a check's name, a headline) with a pipe and a line break stays in its cell and on
    its line: the Markdown table keeps its rows and columns and no fake row appears."""
    code, plain, _ = cli("report", str(runs[0]), "--compare", str(runs[1]))
    for run in runs:  # the same check in both, so it stays one row
        doc = json.loads((run / "report.json").read_text())
        doc["comparison"]["headline"] = "it ran\n| fake | row | here |"
        doc["acceptance"][0]["check"] = "loss | keeps\nfalling"
        (run / "report.json").write_text(json.dumps(doc))
    code, out, err = cli("report", str(runs[0]), "--compare", str(runs[1]))
    assert code == 0, err
    before, after = table_rows(plain), table_rows(out)
    assert len(after) == len(before) and {len(cells) for cells in after} == {3}
    assert "check: loss \\| keeps falling" in {cells[0] for cells in after}
    assert not any(cells[0] == "fake" for cells in after)
