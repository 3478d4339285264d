"""The report checks the trial's declarations against what its runs did: the dataset's sample count against what
each run loaded, the Neuron SDK against the one the trn2 run ran, and failure_recovery none against the runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lambdas.domain.evidence.run_summary import RunSummary
from lambdas.domain.report.build import build_trial_report
from lambdas.domain.report.model import Check, TrialReport
from lambdas.domain.trial.rules import parse_trial
from lambdas.domain.trial.spec import TrialSpec
from tests.builders import run_cost, run_summary

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "trial-llama31-8b-lora.json"
ENVIRONMENT = {"python": "3.11.9", "torch": "2.5.1", "hostname": "test-host"}


def _spec(**fields: Any) -> TrialSpec:
    return parse_trial({**json.loads(EXAMPLE.read_text()), **fields})


def _summary(run: str, **environment: str) -> RunSummary:
    return run_summary(run, environment={**ENVIRONMENT, **environment})


def _report(spec: TrialSpec, summaries: dict[str, list[RunSummary]]) -> TrialReport:
    return build_trial_report(spec, summaries, {run: run_cost("1", run) for run in summaries})


def _check(report: TrialReport, name: str) -> Check | None:
    return next((c for c in report.acceptance if c.check == name), None)


def test_the_sample_count_each_run_loaded_is_checked_against_data_samples() -> None:
    spec = _spec()  # data.samples 50000
    same = _report(spec, {"gpu": [_summary("gpu", data_samples="50000")],
                          "trn2": [_summary("trn2", data_samples="50000")]})
    check = _check(same, "data.samples matches the data")
    assert check is not None and check.status == "pass"
    assert check.detail == "declared 50000 training samples; gpu loaded 50000, trn2 loaded 50000"

    short = _report(spec, {"gpu": [_summary("gpu", data_samples="49000")],
                           "trn2": [_summary("trn2", data_samples="50000")]})
    check = _check(short, "data.samples matches the data")
    assert check is not None and check.status == "fail"
    assert "gpu loaded 49000" in check.detail and "set data.samples to the rows of data.train_uri" in check.detail
    assert short.comparison.verdict != "trn2_viable_cheaper"
    assert any(reason.startswith("data.samples matches the data: fail") for reason in short.comparison.reasons)


def test_summaries_that_never_recorded_the_count_get_no_data_check() -> None:
    """Summaries written before the trainer recorded the count still parse, and prove nothing either way."""
    report = _report(_spec(), {"gpu": [_summary("gpu")], "trn2": [_summary("trn2")]})
    assert _check(report, "data.samples matches the data") is None
    assert report.tracks["gpu"].environment.get("data_samples") is None


def test_the_neuron_sdk_the_trn2_run_ran_is_checked_against_the_declared_one() -> None:
    spec = _spec()  # tracks.trn2.neuron_sdk 2.34.0
    ran = _report(spec, {"gpu": [_summary("gpu")], "trn2": [_summary("trn2", neuron_sdk="2.34.0")]})
    check = _check(ran, "Neuron SDK as declared")
    assert check is not None and check.status == "pass"
    assert check.detail == "the trn2 run ran Neuron SDK 2.34.0; the trial declared 2.34.0"
    assert ran.tracks["trn2"].environment["neuron_sdk"] == "2.34.0"

    other = _report(spec, {"gpu": [_summary("gpu")], "trn2": [_summary("trn2", neuron_sdk="2.33.1")]})
    check = _check(other, "Neuron SDK as declared")
    assert check is not None and check.status == "fail"
    assert check.detail == "the trn2 run ran Neuron SDK 2.33.1; the trial declared 2.34.0"

    short_form = _spec(tracks={**json.loads(EXAMPLE.read_text())["tracks"],
                               "trn2": {**json.loads(EXAMPLE.read_text())["tracks"]["trn2"], "neuron_sdk": "2.34"}})
    check = _check(_report(short_form, {"trn2": [_summary("trn2", neuron_sdk="2.34.0")]}), "Neuron SDK as declared")
    assert check is not None and check.status == "pass"  # 2.34 and 2.34.0 are one release

    unrecorded = _report(spec, {"gpu": [_summary("gpu")], "trn2": [_summary("trn2")]})
    assert _check(unrecorded, "Neuron SDK as declared") is None  # a stand-in records no Neuron SDK


def test_failure_recovery_none_passes_without_a_fallback_and_fails_with_one() -> None:
    spec = _spec(failure_recovery="none")
    failed = run_summary("trn2", status="failed")
    alone = _report(spec, {"gpu": [_summary("gpu")], "trn2": [failed]})
    check = _check(alone, "failure recovery as declared (none)")
    assert check is not None and (check.status, check.detail) == ("pass", "no GPU fallback ran")
    assert alone.declared.failure_recovery == "none"

    fell_back = _report(spec, {"gpu": [_summary("gpu")], "trn2": [failed],
                               "gpu-fallback": [run_summary("gpu-fallback", resumed_from_step=200)]})
    check = _check(fell_back, "failure recovery as declared (none)")
    assert check is not None and check.status == "fail"
