"""The stored trial record: its layout in the trials table, and the migration of items written before the schema
had a version."""

from __future__ import annotations

from decimal import Decimal

import pytest
from pydantic import ValidationError

from lambdas.domain.json_types import JsonValue
from lambdas.domain.trial.trial_record import RECORD_VERSION, ExecutionInput, TrialRecord

# A trial item as the plane wrote it before records were versioned: no schema_version and no runs; the run
# targets live only in the workflow input (by target: gpu, trn2, compile, fallback), the instance types only in the
# tracks, and the counters are flat attributes written by ADD and SET updates.
VERSION_1: dict[str, JsonValue] = {
    "trial_id": "pilot-0123456789", "model_id": "meta-llama/Llama-3.1-8B", "name": "pilot", "owner": "team-nlp",
    "team": "team-nlp", "submitted_by": "arn:aws:iam::123456789012:role/nlp", "spec_hash": "ab" * 32,
    "spec_uri": "s3://artifacts/trials/pilot-0123456789/spec.json", "status": "SUBMITTED",
    "created_at": "2026-11-20T10:00:00Z", "updated_at": "2026-11-20T10:00:01Z",
    "tracks": {"gpu": {"instance_type": "p5.48xlarge", "nodes": 1, "precision": "bf16"},
               "trn2": {"instance_type": "trn2.48xlarge", "nodes": 2, "neuron_sdk": "2.33.0"}},
    "max_steps": 200,
    "triage": {"route": "dual_track", "scenario": "S2", "scores": {"gpu": 3, "trn2_trial": 4, "dual_track": 5},
               "conclusion": "run both", "reasons": ["r"], "risks": []},
    "worst_case_usd": {"gpu": "1000.00", "trn2": "700.00", "total": "1700.00"},
    "queues": {"gpu": "q-gpu", "trn2": "q-trn2", "trn2-compile": "q-trn2-compile", "gpu-fallback": "q-gpu"},
    "booking": {"team": "team-nlp", "month": "2026-11", "usd": "1700.00", "queues": {"q-gpu": 2, "q-trn2": 1}},
    "execution_input": {
        "trial_id": "pilot-0123456789", "spec_uri": "s3://artifacts/trials/pilot-0123456789/spec.json",
        "tracks": ["gpu", "trn2"], "run_dirs": {"gpu": "s3://artifacts/trials/pilot-0123456789/gpu"},
        "jobs": {"gpu": {"queue": "q-gpu", "definition": "d-gpu"},
                 "trn2": {"queue": "q-trn2", "definition": "d-trn2-2", "nodes": 2},
                 "compile": {"queue": "q-trn2-compile", "definition": "d-trn2-2", "nodes": 2},
                 "fallback": {"queue": "q-gpu", "definition": "d-gpu"}},
        "attempt_timeout_s": 7200, "compile_timeout_s": 3600},
    "run_limits": {"max_usd": {"value": "3600", "source": "team team-nlp quota max_usd_per_trial"}},
    "execution_arn": "arn:aws:states:us-east-1:123456789012:execution:wf:pilot-0123456789",
    "spend_usd#gpu": "12.5", "spend_usd#trn2": "7.25", "written_bytes": 4096, "written_objects": 3,
}


def test_a_version_1_item_reads_as_the_current_record_with_each_runs_target_and_instance_type() -> None:
    record = TrialRecord.from_item(VERSION_1)
    assert record.schema_version == RECORD_VERSION == 2
    assert {run: (t.queue, t.definition, t.nodes, t.instance_type) for run, t in record.runs.items()} == {
        "gpu": ("q-gpu", "d-gpu", 1, "p5.48xlarge"),
        "trn2": ("q-trn2", "d-trn2-2", 2, "trn2.48xlarge"),
        "trn2-compile": ("q-trn2-compile", "d-trn2-2", 2, "trn2.48xlarge"),
        "gpu-fallback": ("q-gpu", "d-gpu", 1, "p5.48xlarge"),
    }
    assert record.spend_usd == {"gpu": "12.5", "trn2": "7.25"} and record.use.spend == Decimal("19.75")
    assert (record.written_bytes, record.written_objects) == (4096, 3)
    assert record.run_limits is not None and record.run_limits.max_usd is not None
    assert record.run_limits.max_usd.value == Decimal(3600)
    assert record.booking is not None and record.booking.queues == {"q-gpu": 2, "q-trn2": 1}
    assert record.started and record.instance_type("gpu-fallback") == "p5.48xlarge"


def test_the_stored_layout_round_trips_and_keeps_the_counters_flat() -> None:
    """The counters stay flat attributes (``spend_usd#<run>``): the limit guard's SET and the write tally's ADD
    address them by name, so the layout must not nest them."""
    record = TrialRecord.from_item(VERSION_1)
    item = record.to_item()
    assert item["schema_version"] == 2 and item["spend_usd#gpu"] == "12.5" and "spend_usd" not in item
    assert all(value is not None for value in item.values())
    assert TrialRecord.from_item(item) == record


def test_the_workflow_input_is_what_step_functions_was_given() -> None:
    """A multi-node target carries its node count (the workflow passes it as a job parameter); a single-node one
    has no ``nodes`` key, as the state machine's single-node branch expects.

    An input stored before scaling runs existed is replayed (a start cut short, an approval) with ``scaling: []``
    added: the workflow's ``ScalingRuns`` Map reads its items from ``$.scaling``, and Step Functions fails the
    execution with ``States.Runtime`` when a Map's ItemsPath matches nothing or no array (Step Functions developer
    guide, "Map state": "ItemsPath ... must identify an array"; "Error names": States.Runtime), which no catcher
    catches. Everything else comes back as it was stored."""
    stored = VERSION_1["execution_input"]
    assert isinstance(stored, dict) and "scaling" not in stored
    execution_input = ExecutionInput.model_validate(stored)
    assert execution_input.payload() == {**stored, "scaling": []}


def test_a_scaling_run_is_given_to_the_workflow_with_its_placement_and_not_among_the_jobs() -> None:
    """Each scaling run reaches the Map state as one item: its run name, track, run directory and placement; a
    single-node placement has no ``nodes`` key (the item's Choice submits a multi-node job only when
    ``job.nodes`` is present), a multi-node one carries its count."""
    stored = VERSION_1["execution_input"]
    assert isinstance(stored, dict)
    scaling: list[JsonValue] = [
        {"run": "gpu-n1", "track": "gpu", "run_dir": "s3://artifacts/trials/pilot-0123456789/gpu-n1",
         "job": {"queue": "q-gpu", "definition": "d-gpu"}},
        {"run": "trn2-n1", "track": "trn2", "run_dir": "s3://artifacts/trials/pilot-0123456789/trn2-n1",
         "job": {"queue": "q-trn2", "definition": "d-trn2"}},
        {"run": "gpu-n2", "track": "gpu", "run_dir": "s3://artifacts/trials/pilot-0123456789/gpu-n2",
         "job": {"queue": "q-gpu", "definition": "d-gpu-2", "nodes": 2}},
    ]
    execution_input = ExecutionInput.model_validate({**stored, "scaling": scaling})
    payload = execution_input.payload()
    assert payload["scaling"] == scaling and payload["jobs"] == stored["jobs"]
    assert ExecutionInput.model_validate(payload) == execution_input


def test_an_item_with_an_unknown_status_is_refused_with_the_field() -> None:
    with pytest.raises(ValidationError, match="status"):
        TrialRecord.from_item({**VERSION_1, "status": "RUNNING"})
