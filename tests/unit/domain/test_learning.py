"""No verdict unless both tracks learned: a run whose weights never changed (the Trainium2 loop whose optimizer step
never reached the weights, with no error), whose training loss did not fall by the trial's declared margin by its
declared step, or that recorded no evidence either way is unusable evidence, named in the headline."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lambdas.domain.evidence.learning import learning_problems
from lambdas.domain.report.build import build_trial_report
from lambdas.domain.report.model import TrialReport
from lambdas.domain.trial.rules import TrialInvalid, parse_trial
from lambdas.domain.trial.spec import TrialSpec
from tests.builders import run_summary
from tests.unit.domain.test_report import EXAMPLE, cost, summary

RESUMED = {"resumed_from_step": 2, "continuity": {"global_step_continuous": True, "loss_continuous": True}}
FROZEN = {"weights_changed": False, "steps": 1000, "trainable_params": 4_194_304, "trainable_tensors": 128,
          "tensors_changed": 0, "norm_start": 12.5, "norm_end": 12.5}


def _spec(**learning: Any) -> TrialSpec:
    data = json.loads(EXAMPLE.read_text())
    data.pop("failure_recovery")
    if learning:
        data["evaluation"]["learning"] = learning
    return parse_trial(data)


def _report(spec: TrialSpec | None = None, **trn2: Any) -> TrialReport:
    summaries = {"gpu": [summary("gpu", 1.20, 1.25, **RESUMED)],
                 "trn2": [summary("trn2", 1.21, 1.26, **{**RESUMED, **trn2})]}
    return build_trial_report(spec or _spec(), summaries, {"gpu": cost("10.00"), "trn2": cost("8.00")})


def _falling(steps: int, start: float = 2.5, end: float = 1.2) -> list[list[float]]:
    return [[s, round(start + (end - start) * (s - 1) / (steps - 1), 6)] for s in range(1, steps + 1)]


def test_runs_that_learned_leave_the_verdict_to_the_other_checks() -> None:
    report = _report()
    assert report.tracks["gpu"].unusable == [] and report.tracks["trn2"].unusable == []
    assert report.comparison.verdict is not None and report.comparison.verdict.startswith("trn2_viable")


def test_weights_that_never_changed_are_unusable_evidence_named_in_the_headline() -> None:
    report = _report(learning=FROZEN)
    comparison = report.comparison
    problem = ("attempt 1: did not learn: its weights did not change over 1000 step(s) (the failure mode of a loop "
               "whose optimizer step never reached the weights)")
    assert report.tracks["trn2"].unusable == [problem] and report.tracks["gpu"].unusable == []
    assert comparison.verdict == "inconclusive"
    assert comparison.reasons[0] == f"unusable evidence: trn2 {problem}"
    assert comparison.headline.startswith(f"Inconclusive: unusable evidence: trn2 {problem}")


def test_a_loss_that_did_not_fall_by_the_declared_margin_is_named_with_both_figures() -> None:
    flat = [[s, 2.5 - 0.001 * (s % 3)] for s in range(1, 1001)]
    report = _report(loss={"initial": 2.5, "final": 2.498, "per_step": flat, "eval": [[1000, 2.5]]})
    (problem,) = report.tracks["trn2"].unusable
    assert problem.startswith("did not learn: the training loss fell 0.0% by step 1000 (median 2.499 over steps "
                              "991-1000 against 2.499 over steps 1-10)")
    assert problem.endswith("less than the declared 1.0% (evaluation.learning.min_loss_drop)")
    assert report.comparison.verdict == "inconclusive" and problem in report.comparison.headline

    risen = _report(loss={"initial": 2.0, "final": 2.4, "per_step": _falling(1000, 2.0, 2.4)})
    assert "did not learn: the training loss rose 19.8% by step 1000" in risen.tracks["trn2"].unusable[0]


def test_the_declared_margin_and_step_are_the_ones_judged() -> None:
    # Falls 52% by step 1000, but only 5% by step 100: enough for the default, not for 10% by step 100.
    points = [[s, 2.5 - 0.00125 * s if s <= 100 else 2.375 - (s - 100) * 0.00131] for s in range(1, 1001)]
    summaries = [summary("trn2", 1.2, 1.26, loss={"initial": 2.5, "final": 1.2, "per_step": points})]
    assert learning_problems(summaries, _spec()) == []
    assert learning_problems(summaries, _spec(min_loss_drop=0.04, by_step=100)) == []
    (problem,) = learning_problems(summaries, _spec(min_loss_drop=0.1, by_step=100))
    assert "fell 4.5% by step 100" in problem and "less than the declared 10.0%" in problem


def test_one_noisy_step_neither_fails_a_run_that_learned_nor_passes_one_that_did_not() -> None:
    spiked = _falling(40)
    spiked[-1][1] = 9.0  # a bad batch at the very last step
    assert learning_problems([summary("trn2", 9.0, 1.26, loss={"per_step": spiked})], _spec()) == []
    flat = [[s, 2.5] for s in range(1, 41)]
    flat[-1][1] = 0.5  # one lucky batch
    assert learning_problems([summary("trn2", 0.5, 1.26, loss={"per_step": flat})], _spec())


def test_a_missing_learning_record_is_named_unless_the_attempt_failed_or_trained_nothing() -> None:
    report = _report(learning=None)
    assert report.tracks["trn2"].unusable == ["attempt 1: recorded no learning evidence (weights_changed)"]
    assert report.comparison.verdict == "inconclusive"
    assert "recorded no learning evidence" in report.comparison.headline
    spec = _spec()
    failed = run_summary("trn2", status="failed", global_step=300, learning=None)
    idle = run_summary("trn2", global_step=1000, start_step=1000, learning=None, status="interrupted")
    assert learning_problems([failed], spec) == [] and learning_problems([idle], spec) == []


def test_resumed_runs_are_judged_per_attempt_and_on_their_merged_loss() -> None:
    spec = _spec()
    losses = _falling(1000)
    first = summary("trn2", 1.9, 1.3, status="faulted", global_step=300,
                    loss={"per_step": losses[:300]}, learning={**FROZEN, "steps": 300})
    second = summary("trn2", 1.2, 1.26, attempt=2, start_step=200, global_step=1000,
                     loss={"per_step": losses[200:]})
    assert learning_problems([first, second], spec) == [
        "attempt 1: did not learn: its weights did not change over 300 step(s) (the failure mode of a loop whose "
        "optimizer step never reached the weights)"]
    # A run that began from another run's checkpoint did its first steps there: only its weights are judged.
    fallback = summary("gpu-fallback", 2.5, 1.26, start_step=400, global_step=1000,
                       loss={"per_step": [[s, 2.5] for s in range(401, 1001)]})
    assert learning_problems([fallback], spec) == []
    # A run that stopped before the declared step is not judged on its loss here (how it ended is).
    stopped = summary("trn2", 2.5, 1.26, status="failed", global_step=500,
                      loss={"per_step": [[s, 2.5] for s in range(1, 501)]})
    assert learning_problems([stopped], spec) == []


def test_a_rehearsal_whose_run_did_not_learn_fails_naming_it() -> None:
    on = {"backend": "cpu", "stand_in": True}
    report = build_trial_report(_spec(), {"gpu": [summary("gpu", 1.2, 1.25, **RESUMED, **on)],
                                          "trn2": [summary("trn2", 1.2, 1.3, **RESUMED, **on, learning=FROZEN)]},
                                {"gpu": cost("10.00"), "trn2": cost("10.00")})
    comparison = report.comparison
    assert comparison.verdict is None and comparison.rehearsal == "failed"
    assert comparison.headline.startswith("Pipeline rehearsal failed: trn2 attempt 1: did not learn: its weights did "
                                          "not change over 1000 step(s)")


def test_the_requirement_is_declared_on_the_trial_and_checked_against_max_steps() -> None:
    default = _spec().evaluation
    assert default.learning is None
    assert default.learning_requirement().min_loss_drop == 0.01 and default.learning_requirement().by_step is None
    # Absent, it leaves the trial's canonical form (and so its hash and id) as a trial written before it.
    assert '"learning":' not in _spec().canonical_json()
    declared = _spec(min_loss_drop=0.05, by_step=500).evaluation.learning_requirement()
    assert (declared.min_loss_drop, declared.by_step) == (0.05, 500)
    with pytest.raises(TrialInvalid) as refused:
        _spec(by_step=1001)
    assert "evaluation.learning.by_step" in str(refused.value) and "max_steps (1000)" in str(refused.value)
    for bad in ({"by_step": 1}, {"min_loss_drop": 1.0}, {"min_loss_drop": -0.1}, {"margin": 0.1}):
        with pytest.raises(TrialInvalid):
            _spec(**bad)
