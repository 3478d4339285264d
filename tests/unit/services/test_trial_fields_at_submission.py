"""The trial fields that change a run, checked at submission (``admit``) and carried into the workflow's input:
failure_recovery (gpu_fallback needs what the fallback needs; none runs no fallback) and tracks.trn2.neuron_sdk
(the SDK the stage's Trainium2 image carries)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from lambdas.domain.money.prices import load_price_table, worst_case_usd
from lambdas.domain.trial.governance import Governance
from lambdas.domain.trial.job_targets import parse_job_targets
from lambdas.domain.trial.rules import TrialInvalid
from lambdas.domain.trial.spec import TrialSpec
from lambdas.domain.vocabulary import FALLBACK_RUN
from lambdas.services.trial_submission import Admission, Stage, SubmissionRefused, admit, execution_input, falls_back
from tests import fakes
from tests.json_access import arr, obj
from tests.stage import ACCOUNT, GOVERNANCE, job_targets

TEAM_MEMBER = f"arn:aws:iam::{ACCOUNT}:user/model-team"  # a member of team-nlp, the example trial's owner


def _stage(**overrides: Any) -> Stage:
    settings: dict[str, Any] = {"region": "us-east-1", "attempt_timeout_s": 86400,
                                "data_buckets": ["example-datasets"], "artifacts_bucket": "artifacts",
                                "targets": parse_job_targets(job_targets()),
                                "governance": Governance.model_validate(GOVERNANCE), "max_attempts": 2}
    return Stage(**{**settings, **overrides})


def _admit(spec: TrialSpec, **stage: Any) -> Admission:
    governance = Governance.model_validate(GOVERNANCE)
    return admit(spec, _stage(**stage), load_price_table(), governance.identify(TEAM_MEMBER, ACCOUNT))


def _trial(example_trial: dict[str, Any], **fields: Any) -> TrialSpec:
    doc = copy.deepcopy(example_trial)
    for name, value in fields.items():
        if value is None:
            doc.pop(name, None)
        else:
            doc[name] = value
    return TrialSpec.model_validate(doc)  # the cross-field rules are admit's to check


def _refusal(spec: TrialSpec) -> dict[str, str]:
    with pytest.raises(TrialInvalid) as refused:
        _admit(spec)
    return {p.path: p.message for p in refused.value.problems}


def test_gpu_fallback_without_a_gpu_track_is_refused_naming_failure_recovery_and_the_fix(
        example_trial: dict[str, Any]) -> None:
    trn2_only = {"trn2": example_trial["tracks"]["trn2"]}
    found = _refusal(_trial(example_trial, failure_recovery="gpu_fallback", tracks=trn2_only))
    assert list(found) == ["failure_recovery"]
    assert "has no tracks.gpu: add tracks.gpu, or declare resume_same_track, restart or none" in (
        found["failure_recovery"])
    gpu_only = {"gpu": example_trial["tracks"]["gpu"]}
    found = _refusal(_trial(example_trial, failure_recovery="gpu_fallback", tracks=gpu_only, fault_injection=None))
    assert "has no tracks.trn2: add tracks.trn2" in found["failure_recovery"]


def test_gpu_fallback_without_a_checkpoint_to_resume_is_refused(example_trial: dict[str, Any]) -> None:
    spec = _trial(example_trial, failure_recovery="gpu_fallback", checkpoint_interval_steps=1000,
                  fault_injection=None)
    found = _refusal(spec)
    assert "saves none before the last step (1000)" in found["failure_recovery"]
    assert "set checkpoint_interval_steps below 1000" in found["failure_recovery"]


def test_gpu_fallback_with_both_tracks_runs_the_fallback_on_the_gpu_tracks_target(
        example_trial: dict[str, Any]) -> None:
    spec = _trial(example_trial, failure_recovery="gpu_fallback")
    admission = _admit(spec)
    assert falls_back(spec) and admission.jobs["fallback"] == admission.jobs["gpu"]
    assert FALLBACK_RUN in admission.worst_case_usd
    payload = execution_input(spec, fakes.InMemoryObjects(), attempt_timeout_s=3600, jobs=admission.jobs)
    assert FALLBACK_RUN in payload.run_dirs


def test_failure_recovery_none_gives_the_workflow_no_fallback_to_run(example_trial: dict[str, Any]) -> None:
    """Without ``jobs.fallback`` in its input the workflow's HasGpuFallback choice ends a failed Trainium2 run
    (tests/stacks/test_workflow_execution.py runs it); nothing is booked or priced for a fallback either."""
    spec = _trial(example_trial, failure_recovery="none")
    admission = _admit(spec)
    assert not falls_back(spec)
    assert "fallback" not in admission.jobs and {"gpu", "trn2"} <= set(admission.jobs)
    assert FALLBACK_RUN not in admission.worst_case_usd
    payload = execution_input(spec, fakes.InMemoryObjects(), attempt_timeout_s=3600, jobs=admission.jobs)
    assert FALLBACK_RUN not in payload.run_dirs and "fallback" not in obj(payload.payload()["jobs"])
    with_fallback = worst_case_usd(_trial(example_trial), load_price_table(), "us-east-1")
    without = worst_case_usd(spec, load_price_table(), "us-east-1")
    assert with_fallback["total"] - without["total"] == with_fallback[FALLBACK_RUN]


@pytest.mark.parametrize("recovery", [None, "resume_same_track", "restart"])
def test_other_recoveries_keep_the_fallback_of_a_trial_with_both_tracks(
        example_trial: dict[str, Any], recovery: str | None) -> None:
    assert "fallback" in _admit(_trial(example_trial, failure_recovery=recovery)).jobs


def test_a_neuron_sdk_the_stage_image_does_not_carry_is_refused_naming_the_field_and_the_version_it_has(
        example_trial: dict[str, Any]) -> None:
    spec = _trial(example_trial)  # tracks.trn2.neuron_sdk 2.34.0
    with pytest.raises(SubmissionRefused) as refused:
        _admit(spec, image_versions={"trn2": {"neuron_sdk": "2.33.1"}})
    (error,) = arr(refused.value.detail["errors"])
    assert obj(error)["path"] == "tracks.trn2.neuron_sdk"
    assert "image pins 2.33.1: set tracks.trn2.neuron_sdk to 2.33.1" in obj(error)["message"]
    assert _admit(spec, image_versions={"trn2": {"neuron_sdk": "2.34.0"}}).jobs
