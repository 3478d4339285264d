"""`dualtrack report` against the real API: 404 until the report exists, then md, json and html renderings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dualtrack.client.errors import EXIT_INVALID, EXIT_NOT_FOUND
from tests.client.report_fixture import build_report

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish:UserWarning")


@pytest.fixture
def settled(cli: Any, served: Any, trial_file: Any, aws: dict[str, Any]) -> dict[str, Any]:
    code, out, err = cli("submit", trial_file(), "--endpoint", served.url, "--yes", "--json")
    assert code == 0, err
    trial_id = json.loads(out)["trial"]["trial_id"]
    report = build_report().model_dump(mode="json")
    assert report["trial_id"] == trial_id  # the fixture report is for the example trial
    return {"trial_id": trial_id, "report": report,
            "store": lambda: aws["s3"].put_object(Bucket="artifacts", Key=f"trials/{trial_id}/report/report.json",
                                                  Body=json.dumps(report).encode())}


def test_no_report_yet_is_404_exit_3(cli: Any, served: Any, settled: dict[str, Any]) -> None:
    code, out, err = cli("report", settled["trial_id"], "--endpoint", served.url)
    assert code == EXIT_NOT_FOUND and out == ""
    assert "has no report yet; it is written when the trial settles" in err
    code, _, err = cli("report", "no-such-trial", "--endpoint", served.url)
    assert code == EXIT_NOT_FOUND and "no trial 'no-such-trial'" in err


def test_report_formats(cli: Any, served: Any, settled: dict[str, Any], tmp_path: Path) -> None:
    settled["store"]()
    trial_id, report = settled["trial_id"], settled["report"]
    code, out, _ = cli("report", trial_id, "--endpoint", served.url)
    assert code == 0 and out.startswith(f"# Trial {trial_id}")
    assert f"**{report['comparison']['headline']}**" in out
    assert f"Verdict code: `{report['comparison']['verdict']}`" in out
    code, out, _ = cli("report", trial_id, "--endpoint", served.url, "--format", "json")
    assert code == 0 and json.loads(out) == report
    target = tmp_path / "out" / "report.html"
    code, out, _ = cli("report", trial_id, "--endpoint", served.url, "--out", str(target))
    assert code == 0 and out.strip() == f"wrote html report for {trial_id} to {target}"
    html = target.read_text()
    assert html.startswith("<!doctype html>") and html.count("<svg") == 3
    code, out, _ = cli("report", trial_id, "--endpoint", served.url, "--out", str(tmp_path / "r.md"), "--json")
    assert code == 0 and json.loads(out)["format"] == "md" and (tmp_path / "r.md").read_text().startswith("# Trial")


def test_report_open_writes_html_and_opens_it(cli: Any, served: Any, settled: dict[str, Any], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    settled["store"]()
    opened: list[str] = []

    def fake_open(uri: str) -> bool:
        opened.append(uri)
        return True

    monkeypatch.setattr("webbrowser.open", fake_open)
    target = tmp_path / "view.html"
    code, out, _ = cli("report", settled["trial_id"], "--endpoint", served.url, "--open", "--out", str(target))
    assert code == 0 and opened == [target.resolve().as_uri()] and out.strip().endswith("and opened it")
    code, _, err = cli("report", settled["trial_id"], "--endpoint", served.url, "--open", "--format", "md")
    assert code == EXIT_INVALID and "--open shows the HTML report" in err


def test_a_report_the_renderer_cannot_read_points_to_json(cli: Any, served: Any, settled: dict[str, Any],
                                                          aws: dict[str, Any]) -> None:
    odd = {"report_version": 99, "trial_id": settled["trial_id"], "comparison": {"verdict": "x"}}
    aws["s3"].put_object(Bucket="artifacts", Key=f"trials/{settled['trial_id']}/report/report.json",
                         Body=json.dumps(odd).encode())
    code, _, err = cli("report", settled["trial_id"], "--endpoint", served.url, "--format", "html")
    assert code == EXIT_INVALID and "cannot render report version 99 as html" in err and "--format json" in err


def test_compare_puts_a_remote_trial_beside_a_local_rehearsal(cli: Any, served: Any, settled: dict[str, Any],
                                                             tmp_path: Path) -> None:
    """--compare takes trial ids, report.json files or rehearsal directories (their `latest` run), in any mix."""
    settled["store"]()
    trial_id, report = settled["trial_id"], settled["report"]
    rehearsal = tmp_path / "rehearsal" / "20261205T101500Z-pilot"
    rehearsal.mkdir(parents=True)
    other = json.loads(json.dumps(report))
    other["comparison"]["verdict"] = "inconclusive"
    other["tracks"]["trn2"]["cost"]["total_usd"] = "99.5"
    (rehearsal / "report.json").write_text(json.dumps(other))
    (tmp_path / "rehearsal" / "latest").symlink_to(rehearsal.name)
    code, out, err = cli("report", trial_id, "--compare", str(tmp_path / "rehearsal"), "--endpoint", served.url)
    assert code == 0, err
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:4]]
            for line in out.splitlines() if line.startswith("| ")}
    assert rows["verdict"] == [report["comparison"]["verdict"], "inconclusive"]
    assert rows["trn2: total USD"] == [report["tracks"]["trn2"]["cost"]["total_usd"], "99.5"]
    assert rows["trn2: cache by attempt"] == ["miss, hit", "miss, hit"]
    assert all(f"check: {c['check']}" in rows for c in report["acceptance"])
    code, out, _ = cli("report", str(rehearsal / "report.json"), "--compare", str(rehearsal), "--format", "json")
    first, second = json.loads(out)["compared"]  # two local reports: no endpoint needed
    assert code == 0 and {**first, "source": "", "title": ""} == {**second, "source": "", "title": ""}
    assert first["title"].endswith(f"from {rehearsal / 'report.json'}")  # one run read twice: told apart by source
    code, _, err = cli("report", str(tmp_path / "nothing-here/"), "--compare", trial_id, "--endpoint", served.url)
    assert code == EXIT_INVALID and "no report.json there" in err
