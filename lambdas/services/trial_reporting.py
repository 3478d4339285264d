"""Gathering a trial's evidence from S3 and the ledger, building its report and writing it next to the trial."""

from __future__ import annotations

import re
from typing import Any

from lambdas.domain.ledger import RUNS, run_key
from lambdas.domain.report import build_trial_report
from lambdas.domain.report_render import render_html, render_markdown
from lambdas.services.ports import Ledger, Objects

_SUMMARY = re.compile(r"/attempt-(\d+)/summary\.json$")


def gather(trial_id: str, artifacts: Objects, ledger: Ledger) -> tuple[dict[str, list[Any]], dict[str, Any], list]:
    summaries: dict[str, list[Any]] = {}
    costs: dict[str, Any] = {}
    entries: list = []
    for run in RUNS:
        keys = [k for k in artifacts.list_keys(f"trials/{trial_id}/{run}/attempt-") if _SUMMARY.search(k)]
        ordered = sorted(keys, key=lambda k: int(_SUMMARY.search(k).group(1)))  # type: ignore[union-attr]
        found = [artifacts.get_json(k) for k in ordered]
        if found:
            summaries[run] = [s for s in found if isinstance(s, dict)]
        stored = ledger.cost(run_key(trial_id, run))
        if stored is not None:
            costs[run] = stored["cost"]
        entries += ledger.entries(run_key(trial_id, run))
    return summaries, costs, entries


def write_report(trial_id: str, spec: Any, artifacts: Objects, ledger: Ledger, generated_at: str) -> dict[str, Any]:

    summaries, costs, entries = gather(trial_id, artifacts, ledger)
    report = build_trial_report(spec, summaries, costs, entries, generated_at=generated_at)
    base = f"trials/{trial_id}/report/"
    artifacts.put_json(base + "report.json", report)
    artifacts.put_text(base + "report.md", render_markdown(report), "text/markdown; charset=utf-8")
    artifacts.put_text(base + "report.html", render_html(report), "text/html; charset=utf-8")
    return {
        "report_uri": artifacts.uri(base + "report.json"),
        "verdict": report["comparison"]["verdict"],
        "markdown_uri": artifacts.uri(base + "report.md"),
        "html_uri": artifacts.uri(base + "report.html"),
    }
