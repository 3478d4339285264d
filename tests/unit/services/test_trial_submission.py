"""Submitting and cancelling a trial (``lambdas.services.trial_submission``) over in-memory ports: no moto, no
patching of the project's seams. The ports' behaviour is pinned against AWS by
``tests/integration/test_port_contracts.py``."""

from __future__ import annotations

from typing import Any

import pytest

from lambdas.domain.prices import load_price_table
from lambdas.domain.trial import TrialSpec, parse_trial
from lambdas.services.ports import Started
from lambdas.services.trial_submission import SubmissionRefused, Submitted, cancel, submit
from tests import fakes
from tests.stage import job_targets

NOW = "2026-12-04T12:00:00Z"


@pytest.fixture
def spec(example_trial: dict[str, Any]) -> TrialSpec:
    return parse_trial(example_trial)


@pytest.fixture
def ports() -> dict[str, Any]:
    return {"trials": fakes.InMemoryTrials(), "artifacts": fakes.InMemoryObjects(),
            "workflow": fakes.InMemoryWorkflow()}


def _submit(spec: TrialSpec, ports: dict[str, Any], **overrides: Any) -> Submitted:
    stage: dict[str, Any] = {"prices": load_price_table(), "region": "us-east-1", "now": NOW,
                             "attempt_timeout_s": 86400, "data_buckets": ["example-datasets"],
                             "artifacts_bucket": "artifacts", "targets": job_targets()}
    return submit(spec, **ports, **{**stage, **overrides})


def test_a_submission_freezes_the_spec_records_the_trial_and_starts_one_execution(spec: TrialSpec,
                                                                                  ports: dict[str, Any]) -> None:
    done = _submit(spec, ports)
    trial_id = spec.trial_id
    assert done.created is True and done.body["status"] == "SUBMITTED"
    assert ports["artifacts"].get_json(f"trials/{trial_id}/spec.json")["name"] == spec.name
    item = ports["trials"].get(trial_id)
    assert item["status"] == "SUBMITTED" and item["spec_hash"] == spec.spec_hash()
    assert item["max_steps"] == spec.max_steps
    execution = ports["workflow"].executions[item["execution_arn"]]
    assert execution["input"]["spec_uri"] == f"s3://artifacts/trials/{trial_id}/spec.json"
    assert set(execution["input"]["run_dirs"]) == {"gpu", "trn2", "gpu-fallback"}

    again = _submit(spec, ports)  # the same body again: the same trial, no second execution
    assert again.created is False and again.body["already_submitted"] is True
    assert len(ports["workflow"].executions) == 1


def test_a_workflow_that_cannot_start_leaves_nothing_half_submitted(spec: TrialSpec, ports: dict[str, Any]) -> None:
    class Unavailable(fakes.InMemoryWorkflow):
        def start(self, name: str, payload: dict[str, Any]) -> Started:
            raise ConnectionError("states endpoint unreachable")

    with pytest.raises(ConnectionError):
        _submit(spec, {**ports, "workflow": Unavailable()})
    assert ports["trials"].get(spec.trial_id) is None
    assert _submit(spec, ports).created is True  # the same body, sent again, goes through


def test_an_input_the_job_role_cannot_read_is_refused_before_anything_is_stored(spec: TrialSpec,
                                                                               ports: dict[str, Any]) -> None:
    with pytest.raises(SubmissionRefused):
        _submit(spec, ports, data_buckets=["another-bucket"])
    assert ports["trials"].items == {} and ports["artifacts"].blobs == {} and ports["workflow"].executions == {}


def test_cancelling_stops_the_execution_once(spec: TrialSpec, ports: dict[str, Any]) -> None:
    _submit(spec, ports)
    first = cancel(spec.trial_id, trials=ports["trials"], workflow=ports["workflow"], now=NOW, reason="not needed")
    assert first == {"trial_id": spec.trial_id, "status": "CANCELLED", "execution_status": "ABORTED",
                     "changed": True}
    assert ports["trials"].get(spec.trial_id)["status_cause"] == "not needed"
    second = cancel(spec.trial_id, trials=ports["trials"], workflow=ports["workflow"], now=NOW, reason="again")
    assert second == {"trial_id": spec.trial_id, "status": "CANCELLED", "changed": False}
