"""Workflow-task Lambdas against moto: compile-cache resolution and retention, report, status, cost report."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lambdas.domain.json_types import JsonObject, JsonValue
from tests.integration.conftest import Context, api_event, s3_event
from tests.integration.test_run_events import deliver, scenario
from tests.json_access import obj


def submit(example: dict[str, Any]) -> str:
    from lambdas.handlers.on_trial_api import handler

    return json.loads(obj(handler(api_event("POST", "/trials", example), Context()))["body"])["trial_id"]


def test_resolve_cache_isolates_keys_and_records_failures(aws: dict[str, Any], example: dict[str, Any]) -> None:
    from lambdas.adapters.cache_registry import DynamoCacheRegistry
    from lambdas.handlers.on_artifact_created import handler as on_artifact
    from lambdas.handlers.resolve_compile_cache import handler as resolve

    trial_id = submit(example)
    spec_uri = f"s3://artifacts/trials/{trial_id}/spec.json"
    cold = obj(resolve({"trial_id": trial_id, "spec_uri": spec_uri}, Context()))
    assert cold["warm"] is False and cold["failed_before"] is False
    assert cold["cache_url"] == f"s3://compile-cache/{cold['prefix']}" and cold["prefix"].endswith(
        cold["cache_key"] + "/"
    )
    from lambdas.domain.cache.compile_cache import ENTRY_MARKER, completion_marker

    aws["s3"].put_object(Bucket="compile-cache", Key=cold["prefix"] + "MODULE_1/model.neff", Body=b"x" * 1234)
    aws["s3"].put_object(Bucket="compile-cache", Key=cold["prefix"] + ENTRY_MARKER,
                         Body=json.dumps(completion_marker({"MODULE_1/model.neff": (1234, None)})).encode())
    on_artifact(s3_event("compile-cache", cold["prefix"] + "MODULE_1/model.neff", 1234, "n1"), Context())
    on_artifact(s3_event("compile-cache", cold["prefix"] + "MODULE_1/model.neff", 1234, "n1"), Context())
    registry = DynamoCacheRegistry("cache-registry")
    registry.observe(cold["cache_key"], f"{trial_id}#trn2#a001", "miss", 700.0, "2026-11-20T11:00:00Z")
    warm = obj(resolve({"trial_id": trial_id, "spec_uri": spec_uri}, Context()))
    assert warm["warm"] is True and warm["cache_key"] == cold["cache_key"]

    other = dict(example, sequence_length=2048, name="llama31-8b-lora-seq2k")
    other_id = submit(other)
    isolated = obj(resolve({"trial_id": other_id, "spec_uri": f"s3://artifacts/trials/{other_id}/spec.json"},
                           Context()))
    assert isolated["cache_key"] != cold["cache_key"] and isolated["warm"] is False

    registry.observe(
        isolated["cache_key"],
        f"{other_id}#trn2#a001",
        "failed",
        50.0,
        "2026-11-20T11:00:00Z",
        reason="neuronx-cc: unsupported operator",
    )
    again = obj(resolve(
        {"trial_id": other_id, "spec_uri": f"s3://artifacts/trials/{other_id}/spec.json", "retry_failed": True},
        Context(),
    ))
    assert again["failed_before"] is True and again["retry_requested"] is True and again["warm"] is False

    from lambdas.handlers.on_trial_api import handler as api

    listing = json.loads(obj(api(api_event("GET", "/compile-cache"), Context()))["body"])
    entry = next(e for e in listing["entries"] if e["cache_key"] == cold["cache_key"])
    assert entry["size_bytes"] == 1234 and entry["objects"] == 1 and entry["misses"] == 1
    assert {g["model"] for g in listing["groups"]} == {"meta-llama-llama-3.1-8b-main"}


def test_garbage_collection_spares_active_trials(aws: dict[str, Any], example: dict[str, Any]) -> None:
    from lambdas.adapters.cache_registry import DynamoCacheRegistry
    from lambdas.handlers.resolve_compile_cache import handler as resolve

    registry = DynamoCacheRegistry("cache-registry")
    old = (datetime.now(UTC) - timedelta(days=90)).isoformat()
    for key in ("b" * 64, "c" * 64):
        registry.ensure(key, prefix=f"neuron/m/c/{key}/", model_slug="m", compiler_version="c", components=None, at=old)
        aws["s3"].put_object(Bucket="compile-cache", Key=f"neuron/m/c/{key}/model.neff", Body=b"x")
    trial_id = submit(example)
    aws["ddb"].update_item(
        TableName="trials",
        Key={"trial_id": {"S": trial_id}},
        UpdateExpression="SET cache_key = :k",
        ExpressionAttributeValues={":k": {"S": "b" * 64}},
    )
    dry = obj(resolve({"action": "collect_garbage", "dry_run": True}, Context()))
    assert dry["expired"] == ["c" * 64] and dry["deleted_objects"] == 0
    done = obj(resolve({"action": "collect_garbage"}, Context()))
    assert done["expired"] == ["c" * 64] and done["deleted_objects"] == 1
    assert registry.get("c" * 64) is None and registry.get("b" * 64) is not None


def test_report_status_and_scheduled_cost_report(aws: dict[str, Any], example: dict[str, Any]) -> None:
    from lambdas.handlers.build_trial_report import handler as build
    from lambdas.handlers.on_trial_api import handler as api
    from lambdas.handlers.scheduled_cost_report import handler as scheduled
    from lambdas.handlers.set_trial_status import handler as set_status

    trial_id, events = scenario(aws, example)
    deliver(events)
    out = obj(build({"trial_id": trial_id}, Context()))
    assert out["report_uri"] == f"s3://artifacts/trials/{trial_id}/report/report.json"
    report = json.loads(
        aws["s3"].get_object(Bucket="artifacts", Key=f"trials/{trial_id}/report/report.json")["Body"].read()
    )
    trn2 = report["tracks"]["trn2"]
    assert trn2["stand_in"] is True and "declared instance's rate" in trn2["label"]
    assert trn2["resume"] == {
        "injected_at_step": 300,
        "fault_mode": "retryable",
        "resumed_from_step": 200,
        "rerun_steps": 100,
        "steps_executed": 1100,  # 300 before the fault, 800 after resuming from step 200
        "rerun_share": 0.0909,
        "global_step_continuous": True,
        "loss_continuous": True,
        "max_rel_loss_delta": 0.01,
        "resume_eval": None,
    }
    # A stand-in run gives no verdict, only whether the pipeline worked (this one trained, resumed and was costed).
    assert out["verdict"] is None and report["comparison"]["verdict"] is None
    assert out["rehearsal"] == report["comparison"]["rehearsal"] == "passed"
    html = aws["s3"].get_object(Bucket="artifacts", Key=f"trials/{trial_id}/report/report.html")["Body"].read()
    assert b"<svg" in html and b"<script" not in html

    view = json.loads(obj(api(api_event("GET", f"/trials/{trial_id}"), Context()))["body"])
    assert view["runs"]["trn2"]["status"] == "SUCCEEDED" and view["runs"]["trn2"]["cost_final"] is True
    assert len(view["runs"]["trn2"]["attempts"]) == 2
    got = json.loads(
        obj(api(api_event("GET", f"/trials/{trial_id}/report", query={"format": "json"}), Context()))["body"])
    assert got["trial_id"] == trial_id

    assert obj(set_status({"trial_id": trial_id, "status": "SUCCEEDED"}, Context()))["changed"] is True
    summary = obj(scheduled({"time": "2026-11-23T06:00:00Z"}, Context()))  # the weekly schedule's Monday run
    assert summary["period"] == "2026-W47"  # Monday 16 to Monday 23 November: the run ended on the 20th
    assert summary["runs"] == 1 and summary["total_usd"] == view["runs"]["trn2"]["cost"]["total_usd"]
    assert summary["message_id"]
    cost = json.loads(
        aws["s3"].get_object(Bucket="artifacts", Key=f"reports/cost/{summary['period']}/report.json")["Body"].read()
    )
    assert list(cost["by_owner"]) == ["team-nlp"] and cost["cache_hit_rate_by_day"] == {"2026-11-20": 0.5}


def test_the_report_reads_the_gpu_baseline_from_the_teams_data_bucket(aws: dict[str, Any],
                                                                      example: dict[str, Any]) -> None:
    """The report function reads ``baseline_logs_uri`` with GetObject in a data bucket (its role may read the
    stage's data buckets, never write them); a log it cannot find is named in the report, which is still written."""
    from lambdas.handlers.build_trial_report import handler as build

    aws["s3"].create_bucket(Bucket="example-datasets")
    aws["s3"].put_object(Bucket="example-datasets", Key="baselines/llama-gpu.csv", Body=b"step,loss\n1,2.5\n")
    trial_id, events = scenario(aws, {**example, "baseline_logs_uri": "s3://example-datasets/baselines/llama-gpu.csv"})
    deliver(events)
    build({"trial_id": trial_id}, Context())
    report = json.loads(
        aws["s3"].get_object(Bucket="artifacts", Key=f"trials/{trial_id}/report/report.json")["Body"].read())
    assert report["baseline"]["uri"] == "s3://example-datasets/baselines/llama-gpu.csv"
    assert report["baseline"]["format"] == "csv"  # read
    # This scenario ran trn2 alone: a Trainium2 pilot, judged against the baseline (one shared step proves nothing).
    check = next(c for c in report["acceptance"] if c["check"] == "trn2 run reproduces the baseline")
    assert check["status"] == "not_evidenced" and report["pilot"] is not None

    aws["s3"].delete_object(Bucket="example-datasets", Key="baselines/llama-gpu.csv")
    build({"trial_id": trial_id}, Context())
    report = json.loads(
        aws["s3"].get_object(Bucket="artifacts", Key=f"trials/{trial_id}/report/report.json")["Body"].read())
    assert report["baseline"]["error"].startswith("could not be read (NoSuchKey")


def test_the_resolved_key_carries_the_images_compiler_versions(aws: dict[str, Any], example: dict[str, Any],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Two stages whose Trainium2 images pin different compilers resolve the same trial to two entries."""
    from lambdas.handlers.resolve_compile_cache import handler as resolve
    from lambdas.runtime.composition import reset_environment

    trial_id = submit(example)
    request: JsonObject = {"trial_id": trial_id, "spec_uri": f"s3://artifacts/trials/{trial_id}/spec.json"}
    found = {}
    for compiler in ("2.20.1", "2.21.18"):
        monkeypatch.setenv("IMAGE_VERSIONS", json.dumps({"trn2": {"neuron_sdk": "2.26.0", "neuronx_cc": compiler}}))
        reset_environment()
        found[compiler] = obj(resolve(request, Context()))
    assert found["2.20.1"]["cache_key"] != found["2.21.18"]["cache_key"]
    assert found["2.20.1"]["prefix"].split("/")[2] == "2.20.1" and found["2.21.18"]["prefix"].split("/")[2] == "2.21.18"


def test_the_reconciler_finishes_a_pending_stop_and_books_the_place_back(aws: dict[str, Any],
                                                                         example: dict[str, Any]) -> None:
    """A cancel whose StopExecution failed leaves the trial STOPPING with its execution running; the scheduled
    reconciler stops it (StopExecution on a RUNNING execution makes it ABORTED: Step Functions API reference,
    "StopExecution") and, with no job of the trial still live, makes it CANCELLED and releases its booking in the
    same transaction."""
    from lambdas.handlers.reconcile_trials import handler as reconcile

    trial_id = submit(example)
    item = aws["ddb"].get_item(TableName="trials", Key={"trial_id": {"S": trial_id}})["Item"]
    arn = item["execution_arn"]["S"]
    aws["ddb"].update_item(TableName="trials", Key={"trial_id": {"S": trial_id}},
                           UpdateExpression="SET #s = :s, stop_requested_at = :t",
                           ExpressionAttributeNames={"#s": "status"},
                           ExpressionAttributeValues={":s": {"S": "STOPPING"}, ":t": {"S": "2026-12-04T12:00:00Z"}})
    assert aws["sfn"].describe_execution(executionArn=arn)["status"] == "RUNNING"
    done = obj(reconcile({"time": "2026-12-04T12:05:00Z"}, Context()))
    assert done["stops_finished"] == [trial_id] and done["stops_overdue"] == []
    assert aws["sfn"].describe_execution(executionArn=arn)["status"] == "ABORTED"
    item = aws["ddb"].get_item(TableName="trials", Key={"trial_id": {"S": trial_id}})["Item"]
    assert item["status"]["S"] == "CANCELLED"
    usage = aws["ddb"].get_item(TableName="usage", Key={"usage_key": {"S": f"team#{item['team']['S']}"}})["Item"]
    assert usage["active"]["N"] == "0"


def test_a_scaling_run_is_started_with_the_trial_and_settled_by_close_trial_costs(aws: dict[str, Any],
                                                                                   example: dict[str, Any]) -> None:
    """Through the API: a Trainium2 track with ``nodes: [1, 2]`` starts its execution with the scaling run
    ``trn2-n1`` in the input's ``scaling`` list (single-node: no ``nodes``) and not among ``jobs``. The workflow's
    RunTracks Parallel then hands CloseTrialCosts its three branches' outputs, the scaling branch's a list of
    outcomes, and the scaling run is settled like the main runs."""
    from lambdas.handlers.close_trial_costs import handler as close

    example["tracks"]["trn2"]["nodes"] = [1, 2]
    example["limits"]["max_usd"] = 10000  # the scaling run is priced on top of the main runs
    trial_id = submit(example)
    item = aws["ddb"].get_item(TableName="trials", Key={"trial_id": {"S": trial_id}})["Item"]
    execution = aws["sfn"].describe_execution(executionArn=item["execution_arn"]["S"])
    started = json.loads(execution["input"])
    assert started["jobs"]["trn2"]["nodes"] == 2 and "trn2-n1" not in started["jobs"]
    (scaling,) = started["scaling"]
    assert scaling["run"] == "trn2-n1" and scaling["track"] == "trn2" and "nodes" not in scaling["job"]
    assert scaling["run_dir"] == started["run_dirs"]["trn2-n1"] == f"s3://artifacts/trials/{trial_id}/trn2-n1"

    runs: list[JsonValue] = [
        {"run": "gpu", "status": "SUCCEEDED", "job_id": "", "fallback": False},
        [{"run": "trn2-compile", "status": "SKIPPED", "job_id": "", "fallback": False},
         {"run": "trn2", "status": "SUCCEEDED", "job_id": "", "fallback": False}],
        [{"run": "trn2-n1", "status": "FAILED", "job_id": "", "fallback": False}],
    ]
    closed = obj(close({"trial_id": trial_id, "runs": runs}, Context()))
    assert sorted(obj(closed["runs"])) == ["gpu", "trn2", "trn2-n1"]
