"""Run summaries are checked against what training can produce before a report builds a verdict on them: a run whose
figures are impossible is unusable evidence, named first in the headline, and never makes Trainium2 "cheaper"."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from lambdas.domain.evidence.physics import physics_problems
from lambdas.domain.report.build import build_trial_report
from lambdas.domain.report.model import TrialReport
from lambdas.domain.trial.rules import parse_trial
from tests.unit.domain.test_report import EXAMPLE, cost, summary

RESUMED = {"resumed_from_step": 2, "continuity": {"global_step_continuous": True, "loss_continuous": True}}


def _report(**trn2: Any) -> TrialReport:
    data = json.loads(EXAMPLE.read_text())
    data.pop("failure_recovery")
    spec = parse_trial(data)
    summaries = {"gpu": [summary("gpu", 1.20, 1.25, **RESUMED)],
                 "trn2": [summary("trn2", 1.21, 1.26, **{**RESUMED, **trn2})]}
    return build_trial_report(spec, summaries, {"gpu": cost("10.00"), "trn2": cost("8.00")})


def test_the_same_trial_with_possible_figures_is_cheaper() -> None:
    assert _report().comparison.verdict == "trn2_viable_cheaper"


@pytest.mark.parametrize(("trn2", "problem"), [
    ({"throughput": {"step_time_s": 0.0, "tokens_per_s": 1000.0, "samples_per_s": 10.0, "step_times_s": [0.0] * 40}},
     "a step time is zero"),
    ({"global_step": 0, "start_step": 0, "throughput": {"step_times_s": []}}, "without training a step"),
    ({"global_step": 10, "max_steps": 1000}, "40 step times for 10 step(s) run"),
    ({"throughput": {"step_time_s": 0.1, "tokens_per_s": -5.0, "samples_per_s": 10.0,
                     "step_times_s": [0.08] * 40}}, "throughput.tokens_per_s is -5.0"),
    ({"loss": {"initial": 2.5, "final": 1.21, "per_step": [[1, 2.5]], "eval": [[100, math.nan], [1000, 1.26]]}},
     "a loss is not a finite number"),
])
def test_impossible_figures_are_unusable_evidence_not_a_verdict(trn2: dict[str, Any], problem: str) -> None:
    report = _report(**trn2)
    comparison = report.comparison
    assert comparison.verdict == "inconclusive"
    assert comparison.reasons[0].startswith("unusable evidence: trn2 attempt 1:") and problem in \
        comparison.reasons[0]
    assert any(problem in p for p in report.tracks["trn2"].unusable)
    assert report.tracks["gpu"].unusable == []
    assert "unusable evidence" in comparison.headline


def test_physics_accepts_what_training_produces() -> None:
    assert physics_problems(summary("gpu", 1.2, 1.25)) == []


def test_a_report_with_a_nan_loss_is_written_as_strict_json() -> None:
    """JSON has no NaN or Infinity (RFC 8259, section 6): a non-finite figure is written as null, and nothing the
    plane writes can carry the literal."""
    from lambdas.domain.canonical import canonical_json, json_text

    report = _report(loss={"initial": 2.5, "final": math.inf, "per_step": [[1, 2.5]],
                           "eval": [[100, math.nan], [1000, 1.26]]})

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in the report's JSON")

    json.loads(json_text(report.model_dump(mode="json"), default=str), parse_constant=refuse)
    assert json.loads(canonical_json({"x": [math.nan, {"y": -math.inf}], "z": 1.5})) == {"x": [None, {"y": None}],
                                                                                        "z": 1.5}
