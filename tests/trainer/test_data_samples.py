"""The trainer records how many training samples it loaded, and the report checks data.samples against it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from lambdas.domain.evidence.run_summary import parse_summary
from lambdas.domain.report.build import build_trial_report
from lambdas.domain.trial.rules import parse_trial
from tests.builders import run_cost
from tests.trainer.helpers import attempt


@pytest.mark.slow
def test_the_summary_records_the_rows_loaded_and_the_report_flags_a_declared_count_that_differs(
        write_spec: Callable[..., str], tmp_path: Path) -> None:
    spec_path = write_spec(max_steps=2, checkpoint_interval_steps=1, fault_injection=None, failure_recovery=None,
                           evaluation={"interval_steps": 2, "prompts": [], "max_new_tokens": 1})
    code, raw = attempt(spec_path, str(tmp_path / "gpu"))
    summary = parse_summary(raw)
    assert code == 0 and summary.environment.data_samples == "96"  # the tiny data set's training rows

    doc = json.loads(Path(spec_path).read_text())
    declared_400 = parse_trial(doc, allow_local_paths=True)  # the rehearsal example's data.samples
    report = build_trial_report(declared_400, {"gpu": [summary]}, {"gpu": run_cost("1")})
    check = next(c for c in report.acceptance if c.check == "data.samples matches the data")
    assert check.status == "fail" and check.detail.startswith("declared 400 training samples; gpu loaded 96")

    doc["data"]["samples"] = 96
    report = build_trial_report(parse_trial(doc, allow_local_paths=True), {"gpu": [summary]}, {"gpu": run_cost("1")})
    assert next(c for c in report.acceptance if c.check == "data.samples matches the data").status == "pass"
