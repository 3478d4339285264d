"""Submitting a trial with scaling runs (``nodes: [1, 2]``): where each scaling run is placed, what the workflow is
given for its Map state, what the trial records, and how the worst case names them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from lambdas.domain.money.prices import load_price_table
from lambdas.domain.trial.governance import Governance
from lambdas.domain.trial.job_targets import JobTarget, parse_job_targets
from lambdas.domain.trial.rules import parse_trial
from lambdas.domain.trial.spec import TrialSpec
from lambdas.domain.trial.trial_record import JobPlacement
from lambdas.services.trial_submission import (
    Plane,
    Stage,
    SubmissionRefused,
    execution_input,
    job_targets,
    preflight,
    run_targets,
    submit,
)
from tests import fakes
from tests.json_access import arr, obj
from tests.stage import ACCOUNT, GOVERNANCE
from tests.stage import job_targets as stage_targets

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
GPU = "p5.48xlarge"
# A stage whose GPU type can run 2-node jobs (one job definition per multi-node count), beside the test stage's
# Trainium2 targets (2 and 4 nodes).
TARGETS: dict[str, dict[str, JobTarget]] = {
    "gpu": {GPU: JobTarget(queue="q-gpu", single_node="d-gpu", multi_node={2: "d-gpu-2"})},
    "trn2": {"trn2.48xlarge": JobTarget(queue="q-trn2", single_node="d-trn2", multi_node={2: "d-trn2-2",
                                                                                          4: "d-trn2-4"},
                                        compile_queue="q-trn2-compile")},
}


def scaled(doc: dict[str, Any], **nodes: Any) -> TrialSpec:
    for track, counts in nodes.items():
        doc["tracks"][track]["nodes"] = counts
    return parse_trial(doc)


def test_a_scaling_run_is_placed_by_its_run_name_on_the_definition_for_its_node_count(
        example_trial: dict[str, Any]) -> None:
    """The main run (the largest count) and each scaling run get the job definition for their own node count: a
    single-node run carries no ``nodes`` (the workflow's Choice then submits a single-node job)."""
    spec = scaled(example_trial, gpu=[1, 2], trn2=[1, 2, 4])
    jobs = job_targets(spec, TARGETS)
    assert jobs["gpu"] == JobPlacement(queue="q-gpu", definition="d-gpu-2", nodes=2)
    assert jobs["gpu-n1"] == JobPlacement(queue="q-gpu", definition="d-gpu")
    assert jobs["gpu-n1"].nodes is None
    assert jobs["trn2"] == JobPlacement(queue="q-trn2", definition="d-trn2-4", nodes=4)
    assert jobs["trn2-n2"] == JobPlacement(queue="q-trn2", definition="d-trn2-2", nodes=2)
    assert jobs["trn2-n1"] == JobPlacement(queue="q-trn2", definition="d-trn2")
    # The warm-up compile stage and the GPU fallback follow the main runs, never a scaling run.
    assert jobs["compile"] == JobPlacement(queue="q-trn2-compile", definition="d-trn2-4", nodes=4)
    assert jobs["fallback"] == jobs["gpu"]


def test_a_scaling_count_the_stage_cannot_run_is_refused_naming_the_count_and_the_run(
        example_trial: dict[str, Any]) -> None:
    """The stage has no 3-node Trainium2 definition (only 2 and 4): the trial is refused before anything is stored,
    at the field the counts were written in, with the count, the scaling run and what the stage can run."""
    example_trial["effective_batch_size"] = 96  # divides over 3 and 4 nodes alike
    spec = scaled(example_trial, trn2=[3, 4])
    with pytest.raises(SubmissionRefused) as info:
        job_targets(spec, TARGETS)
    assert info.value.reason == "placement"
    (problem,) = arr(info.value.detail["errors"])
    assert obj(problem)["path"] == "tracks.trn2.nodes"
    message = obj(problem)["message"]
    assert message.startswith("3 nodes (the scaling run trn2-n3): this stage cannot run that")
    assert "it runs 2, 4 nodes of trn2.48xlarge" in message and "multi_node_counts" in message


def test_a_gpu_scaling_count_on_a_stage_without_multi_node_gpus_is_refused(example_trial: dict[str, Any]) -> None:
    """The test stage's GPU track runs on Spot, so it has no multi-node GPU definition: a GPU scaling run at 2 nodes
    (the main run at 4) is refused, and so is the main run, each named."""
    spec = scaled(example_trial, gpu=[2, 4])
    with pytest.raises(SubmissionRefused) as info:
        job_targets(spec, parse_job_targets(stage_targets()))
    messages = [obj(p)["message"] for p in arr(info.value.detail["errors"]) if obj(p)["path"] == "tracks.gpu.nodes"]
    assert [m.split(":")[0] for m in messages] == ["4 nodes", "2 nodes (the scaling run gpu-n2)"]
    assert all("no multi-node capacity for p5.48xlarge" in m for m in messages)


def test_the_workflow_input_lists_each_scaling_run_with_its_run_dir_and_placement(
        example_trial: dict[str, Any]) -> None:
    """Scaling runs go to the Map state's ``scaling`` list, not ``jobs`` (the main runs' branches read ``jobs``
    by target), each with its own run directory beside the main runs'."""
    spec = scaled(example_trial, gpu=[1, 2], trn2=[1, 2, 4])
    payload = execution_input(spec, fakes.InMemoryObjects(), attempt_timeout_s=3600,
                              jobs=job_targets(spec, TARGETS)).payload()
    base = f"s3://artifacts/trials/{spec.trial_id}"
    assert payload["scaling"] == [
        {"run": "gpu-n1", "track": "gpu", "run_dir": f"{base}/gpu-n1",
         "job": {"queue": "q-gpu", "definition": "d-gpu"}},
        {"run": "trn2-n1", "track": "trn2", "run_dir": f"{base}/trn2-n1",
         "job": {"queue": "q-trn2", "definition": "d-trn2"}},
        {"run": "trn2-n2", "track": "trn2", "run_dir": f"{base}/trn2-n2",
         "job": {"queue": "q-trn2", "definition": "d-trn2-2", "nodes": 2}},
    ]
    assert sorted(obj(payload["jobs"])) == ["compile", "fallback", "gpu", "trn2"]
    run_dirs = obj(payload["run_dirs"])
    assert {run: run_dirs[run] for run in ("gpu-n1", "trn2-n1", "trn2-n2")} == {
        run: f"{base}/{run}" for run in ("gpu-n1", "trn2-n1", "trn2-n2")}


def test_a_trial_without_scaling_runs_gives_the_map_an_empty_list(example_trial: dict[str, Any]) -> None:
    spec = parse_trial(example_trial)
    payload = execution_input(spec, fakes.InMemoryObjects(), attempt_timeout_s=3600,
                              jobs=job_targets(spec, TARGETS)).payload()
    assert payload["scaling"] == []
    assert set(obj(payload["run_dirs"])) == {"gpu", "trn2", "trn2-compile", "gpu-fallback"}


def test_a_scaling_run_of_a_track_the_route_does_not_run_is_left_out(example_trial: dict[str, Any]) -> None:
    """Route gpu runs the GPU track only (``planned_tracks``): a Trainium2 scaling run is no more submitted than the
    Trainium2 main run."""
    example_trial["triage_override"] = {"route": "gpu", "reason": "the GPU baseline only, this time"}
    spec = scaled(example_trial, gpu=[1, 2], trn2=[1, 2])
    payload = execution_input(spec, fakes.InMemoryObjects(), attempt_timeout_s=3600,
                              jobs=job_targets(spec, TARGETS)).payload()
    assert payload["tracks"] == ["gpu"]
    assert [obj(item)["run"] for item in arr(payload["scaling"])] == ["gpu-n1"]


def test_the_trial_records_each_scaling_run_with_its_own_node_count(example_trial: dict[str, Any]) -> None:
    """``runs`` is what settlement, credentials and stopping check a job against: a scaling run is there under its
    own name, with its placement's node count and its track's instance type."""
    spec = scaled(example_trial, gpu=[1, 2], trn2=[1, 2, 4])
    runs = run_targets(spec, job_targets(spec, TARGETS))
    assert {run: (t.definition, t.nodes, t.instance_type) for run, t in runs.items()} == {
        "gpu": ("d-gpu-2", 2, GPU), "gpu-n1": ("d-gpu", 1, GPU),
        "trn2": ("d-trn2-4", 4, "trn2.48xlarge"), "trn2-n1": ("d-trn2", 1, "trn2.48xlarge"),
        "trn2-n2": ("d-trn2-2", 2, "trn2.48xlarge"),
        "trn2-compile": ("d-trn2-4", 4, "trn2.48xlarge"), "gpu-fallback": ("d-gpu-2", 2, GPU),
    }


def test_a_worst_case_over_max_usd_names_the_scaling_runs_it_counts(example_trial: dict[str, Any]) -> None:
    spec = scaled(example_trial, trn2=[1, 2, 4])
    with pytest.raises(SubmissionRefused) as info:
        preflight(spec, load_price_table(), "us-east-1")
    (problem,) = arr(info.value.detail["errors"])
    assert obj(problem)["path"] == "limits.max_usd"
    message = obj(problem)["message"]
    assert "fallback and scaling runs trn2-n1, trn2-n2 included" in message
    assert message.endswith("or fewer scaling runs")
    assert {"trn2-n1", "trn2-n2"} <= set(obj(info.value.detail["worst_case_usd"]))


def test_a_submission_with_scaling_runs_records_and_starts_them(example_trial: dict[str, Any]) -> None:
    """Through ``submit``: the booking counts the scaling runs' jobs on their queues, the stored record places them,
    and the execution is started with them in ``scaling`` (the input kept on the trial is the one started)."""
    example_trial["limits"]["max_usd"] = 20000  # the scaling runs' worst case comes on top of the main runs'
    spec = scaled(example_trial, trn2=[1, 2, 4])
    workflow = fakes.InMemoryWorkflow()
    plane = Plane(trials=fakes.InMemoryTrials(), artifacts=fakes.InMemoryObjects(), workflow=workflow,
                  prices=load_price_table())
    governance = Governance.model_validate(GOVERNANCE)
    stage = Stage(region="us-east-1", attempt_timeout_s=86400, data_buckets=["example-datasets"],
                  artifacts_bucket="artifacts", targets=parse_job_targets(stage_targets()), governance=governance)
    done = submit(spec, caller=governance.identify(f"arn:aws:iam::{ACCOUNT}:user/model-team", ACCOUNT), stage=stage,
                  plane=plane, now=NOW)
    assert done.created is True
    record = plane.trials.get(spec.trial_id)
    assert record is not None
    assert {run: target.nodes for run, target in record.runs.items() if run.startswith("trn2")} == {
        "trn2": 4, "trn2-n1": 1, "trn2-n2": 2}
    assert record.run_names()[-2:] == ["trn2-n1", "trn2-n2"]
    assert {"trn2-n1", "trn2-n2"} <= set(record.queues)
    assert {"trn2-n1", "trn2-n2"} <= set(record.worst_case_usd)
    (execution,) = workflow.executions.values()
    assert [item["run"] for item in execution["input"]["scaling"]] == ["trn2-n1", "trn2-n2"]
    assert record.execution_input is not None
    assert execution["input"] == record.execution_input.payload()
