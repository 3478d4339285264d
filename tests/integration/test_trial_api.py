"""The trial API against moto: submission is idempotent, bad bodies store nothing, cancel stops the execution."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from tests.integration.conftest import Context, api_event
from tests.json_access import obj

if TYPE_CHECKING:
    from mypy_boto3_cloudwatch.type_defs import DimensionTypeDef, MetricDatumTypeDef


@pytest.fixture(autouse=True)
def _stage_data_buckets(monkeypatch: pytest.MonkeyPatch) -> None:
    # The stage's data buckets: the example trial reads its data and weights from example-datasets.
    monkeypatch.setenv("DATA_BUCKETS", "example-datasets")


def call(event: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    from lambdas.handlers.on_trial_api import handler

    out = obj(handler(event, Context()))
    return out["statusCode"], json.loads(out["body"])


def stored(aws: dict[str, Any]) -> tuple[int, int, int]:
    items = aws["ddb"].scan(TableName="trials")["Count"]
    objects = aws["s3"].list_objects_v2(Bucket="artifacts").get("KeyCount", 0)
    executions = len(aws["sfn"].list_executions(stateMachineArn=aws["state_machine"])["executions"])
    return items, objects, executions


def test_repeated_post_starts_one_execution(aws: dict[str, Any], example: dict[str, Any]) -> None:
    status, first = call(api_event("POST", "/trials", example))
    assert status == 201, first
    assert first["trial_id"].startswith("llama31-8b-lora-pilot-")
    assert first["status_url"] == f"/trials/{first['trial_id']}"
    assert first["triage"]["route"] in ("trn2_trial", "dual_track")
    from decimal import Decimal

    from lambdas.domain.money.prices import load_price_table

    table = load_price_table()
    # Every attempt Batch may make (the stage's MAX_ATTEMPTS, 2) may run limits.max_hours (12 h).
    expected = (2 * table.instance_hourly_usd("p5.48xlarge") + table.instance_hourly_usd("trn2.48xlarge")) * 12 * 2
    assert Decimal(first["worst_case_usd"]["total"]) == expected.quantize(Decimal("0.01"))
    status, again = call(api_event("POST", "/trials", example))
    assert status == 200 and again["already_submitted"] is True
    assert again["trial_id"] == first["trial_id"] and again["execution_arn"] == first["execution_arn"]
    assert stored(aws) == (1, 1, 1)
    execution = aws["sfn"].list_executions(stateMachineArn=aws["state_machine"])["executions"][0]
    assert execution["name"] == first["trial_id"]
    described = aws["sfn"].describe_execution(executionArn=execution["executionArn"])
    payload = json.loads(described["input"])
    assert payload["run_dirs"]["gpu-fallback"] == f"s3://artifacts/trials/{first['trial_id']}/gpu-fallback"
    assert "max_attempts" not in payload  # retries are the job definitions' own
    assert payload["attempt_timeout_s"] == 12 * 3600  # the trial's max_hours, under the stage's default 24 h
    spec = json.loads(
        aws["s3"].get_object(Bucket="artifacts", Key=f"trials/{first['trial_id']}/spec.json")["Body"].read()
    )
    assert spec["name"] == example["name"]


def test_execution_already_exists_is_already_submitted(aws: dict[str, Any], example: dict[str, Any]) -> None:
    from lambdas.domain.trial.rules import parse_trial

    trial_id = parse_trial(example).trial_id
    aws["sfn"].start_execution(stateMachineArn=aws["state_machine"], name=trial_id, input="{}")
    status, body = call(api_event("POST", "/trials", example))
    assert status == 200 and body["already_submitted"] is True
    assert stored(aws)[2] == 1


def test_invalid_bodies_get_4xx_and_store_nothing(aws: dict[str, Any], example: dict[str, Any]) -> None:
    bad = dict(example, sequence_length="long", extra_field=1)
    status, body = call(api_event("POST", "/trials", bad))
    assert status == 422
    paths = {e["path"] for e in body["errors"]}
    assert {"sequence_length", "extra_field"} <= paths
    assert all(e["message"] for e in body["errors"])
    status, body = call(api_event("POST", "/trials", "{not json"))
    assert status == 422 and "malformed JSON" in body["errors"][0]["message"]
    status, body = call(api_event("POST", "/trials", "[1, 2]"))
    assert status == 422
    status, body = call(api_event("POST", "/trials", {"x": "y" * (300 * 1024)}))
    assert status == 413
    over = dict(example, limits={"max_usd": 100, "max_hours": 12})
    status, body = call(api_event("POST", "/trials", over))
    assert status == 422 and body["errors"][0]["path"] == "limits.max_usd"
    refused = dict(example, workload={"custom_cuda_ops": True})
    status, body = call(api_event("POST", "/trials", refused))
    assert status == 409 and "triage_override" in body["message"] + json.dumps(body)
    assert stored(aws) == (0, 0, 0)


def _execution_input(aws: dict[str, Any], trial_id: str) -> dict[str, Any]:
    arn = next(e["executionArn"] for e in aws["sfn"].list_executions(stateMachineArn=aws["state_machine"])["executions"]
               if e["name"] == trial_id)
    return json.loads(aws["sfn"].describe_execution(executionArn=arn)["input"])  # type: ignore[no-any-return]


def test_attempt_timeout_is_the_shorter_of_stage_and_trial(
    aws: dict[str, Any], example: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from lambdas.runtime.settings import reset_settings

    monkeypatch.setenv("ATTEMPT_TIMEOUT_S", "7200")
    reset_settings()
    status, body = call(api_event("POST", "/trials", example))  # trial 12 h, stage 2 h
    assert status == 201, body
    assert _execution_input(aws, body["trial_id"])["attempt_timeout_s"] == 7200
    short = dict(example, name="short-trial", limits={"max_usd": 2500, "max_hours": 0.5})
    status, body = call(api_event("POST", "/trials", short))  # trial 30 min, stage 2 h
    assert status == 201, body
    payload = _execution_input(aws, body["trial_id"])
    assert payload["attempt_timeout_s"] == 1800 and "max_attempts" not in payload
    gpu_only = {k: v for k, v in short.items() if k != "fault_injection"}
    gpu_only.update(name="gpu-only", tracks={"gpu": example["tracks"]["gpu"]})
    status, body = call(api_event("POST", "/trials", gpu_only))
    assert status == 201, body
    assert set(_execution_input(aws, body["trial_id"])["run_dirs"]) == {"gpu"}  # no fallback without trn2


def test_unreadable_bucket_is_refused_naming_field_and_stage_setting(
    aws: dict[str, Any], example: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from lambdas.runtime.settings import reset_settings

    monkeypatch.setenv("DATA_BUCKETS", "shared-data, other-data")
    reset_settings()
    status, body = call(api_event("POST", "/trials", example))
    assert status == 422, body
    errors = {e["path"]: e["message"] for e in body["errors"]}
    assert set(errors) == {"model.uri", "data.train_uri", "data.validation_uri"}
    message = errors["data.train_uri"]
    assert "cannot read bucket example-datasets" in message and "data_buckets" in message
    assert "s3://shared-data/, s3://other-data/, s3://artifacts/trials/" in message
    assert stored(aws) == (0, 0, 0)
    monkeypatch.setenv("DATA_BUCKETS", "")
    reset_settings()
    status, body = call(api_event("POST", "/trials", example))
    assert status == 422 and "data.train_uri" in {e["path"] for e in body["errors"]}
    monkeypatch.setenv("DATA_BUCKETS", "example-datasets,shared-data")
    reset_settings()
    status, body = call(api_event("POST", "/trials", example))
    assert status == 201, body


def test_runs_go_to_the_queue_and_job_definition_of_their_instance_type(
    aws: dict[str, Any], example: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """SubmitJob takes queue and job definition names (https://docs.aws.amazon.com/batch/latest/APIReference/API_SubmitJob.html);
    a job sent to a queue without its instance type waits RUNNABLE until the queue cancels it, so the API refuses
    a trial the stage cannot place."""
    import json

    from lambdas.runtime.settings import reset_settings
    from tests.stage import job_targets

    status, body = call(api_event("POST", "/trials", example))
    assert status == 201, body
    jobs = _execution_input(aws, body["trial_id"])["jobs"]
    targets = job_targets()
    assert jobs["gpu"] == {"queue": targets["gpu"]["p5.48xlarge"]["queue"],
                           "definition": targets["gpu"]["p5.48xlarge"]["single_node"]}
    assert jobs["trn2"]["definition"] == targets["trn2"]["trn2.48xlarge"]["single_node"]
    assert jobs["fallback"] == jobs["gpu"]  # the fallback runs the trial's GPU track configuration

    monkeypatch.setenv("JOB_TARGETS", json.dumps({"gpu": {"g6e.48xlarge": targets["gpu"]["g6e.48xlarge"]}}))
    reset_settings()
    status, body = call(api_event("POST", "/trials", dict(example, name="elsewhere")))
    assert status == 422, body
    errors = {e["path"]: e["message"] for e in body["errors"]}
    assert set(errors) == {"tracks.gpu.instance_type", "tracks.trn2"}
    placement = errors["tracks.gpu.instance_type"]
    assert "g6e.48xlarge" in placement and "instance_types" in placement
    assert "no trn2 capacity" in errors["tracks.trn2"]

    monkeypatch.setenv("JOB_TARGETS", json.dumps(targets))
    reset_settings()
    multi = json.loads(json.dumps(example))
    multi.update(name="two-nodes")
    multi["tracks"]["gpu"]["nodes"] = 2  # the GPU track here is Spot-backed: no multi-node definitions
    status, body = call(api_event("POST", "/trials", multi))
    assert status == 422 and {e["path"] for e in body["errors"]} >= {"tracks.gpu.nodes"}, body
    assert "no multi-node capacity" in {e["path"]: e["message"] for e in body["errors"]}["tracks.gpu.nodes"]
    multi["tracks"]["gpu"]["nodes"] = 1
    multi["tracks"]["trn2"]["nodes"] = 8  # valid layout (dp 64), but no definition for 8 nodes
    status, body = call(api_event("POST", "/trials", multi))
    assert status == 422, body
    assert "runs 2, 4 nodes" in {e["path"]: e["message"] for e in body["errors"]}["tracks.trn2.nodes"], body
    multi["tracks"]["trn2"]["nodes"] = 2
    multi["limits"] = {"max_usd": 5000, "max_hours": 12}  # two trn2 nodes, two attempts each: 4,358.54 USD
    status, body = call(api_event("POST", "/trials", multi))
    assert status == 201, body
    jobs = _execution_input(aws, body["trial_id"])["jobs"]
    assert jobs["trn2"] == {"queue": targets["trn2"]["trn2.48xlarge"]["queue"],
                            "definition": targets["trn2"]["trn2.48xlarge"]["multi_node"]["2"], "nodes": 2}


def test_unknown_routes_and_wrong_methods(aws: dict[str, Any]) -> None:
    status, body = call(api_event("GET", "/nowhere"))
    assert status == 404 and "no route" in body["message"]
    status, body = call(api_event("DELETE", "/trials"))
    assert status == 405 and "GET, POST" in body["message"]
    status, body = call(api_event("GET", "/trials/unknown-0123456789"))
    assert status == 404 and "no trial" in body["message"]


def test_failed_start_rolls_back_and_retry_succeeds(
    aws: dict[str, Any], example: dict[str, Any], monkeypatch: Any
) -> None:
    from lambdas.adapters.workflow import StepFunctionsWorkflow

    real = StepFunctionsWorkflow.start

    def broken(self: Any, name: str, payload: dict[str, Any]) -> Any:
        raise RuntimeError("throttled")

    monkeypatch.setattr(StepFunctionsWorkflow, "start", broken)
    status, _ = call(api_event("POST", "/trials", example))
    assert status == 503
    assert stored(aws)[0] == 0 and stored(aws)[2] == 0
    monkeypatch.setattr(StepFunctionsWorkflow, "start", real)
    status, _ = call(api_event("POST", "/trials", example))
    assert status == 201 and stored(aws) == (1, 1, 1)


def test_cancel_stops_the_execution(aws: dict[str, Any], example: dict[str, Any]) -> None:
    _, body = call(api_event("POST", "/trials", example))
    trial_id = body["trial_id"]
    status, cancelled = call(api_event("POST", f"/trials/{trial_id}/cancel", {"reason": "capacity needed"}))
    assert status == 200 and cancelled["status"] == "CANCELLED", cancelled
    described = aws["sfn"].describe_execution(executionArn=body["execution_arn"])
    assert described["status"] == "ABORTED"
    status, view = call(api_event("GET", f"/trials/{trial_id}"))
    assert status == 200 and view["status"] == "CANCELLED" and view["status_cause"] == "capacity needed"
    status, listing = call(api_event("GET", "/trials"))
    assert [t["trial_id"] for t in listing["trials"]] == [trial_id]
    status, again = call(api_event("POST", f"/trials/{trial_id}/cancel"))
    assert status == 200 and again["changed"] is False
    status, report = call(api_event("GET", f"/trials/{trial_id}/report"))
    assert status == 404 and "no report yet" in report["message"]


def test_status_shows_each_runs_progress_against_max_steps(aws: dict[str, Any], example: dict[str, Any]) -> None:
    from datetime import UTC, datetime, timedelta

    import boto3

    from lambdas.handlers.on_artifact_created import handler as on_artifact
    from lambdas.handlers.on_batch_job_state import handler as on_batch
    from tests.integration.conftest import batch_event, s3_event
    from tests.integration.test_run_events import summary

    status, body = call(api_event("POST", "/trials", example))
    trial_id = body["trial_id"]
    now = datetime.now(UTC).replace(microsecond=0)
    at = lambda minutes: (now - timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")  # noqa: E731
    for status_name, minutes in (("SUBMITTED", 20), ("STARTING", 15), ("RUNNING", 14)):
        on_batch(batch_event(trial_id=trial_id, run="trn2", job_id="job-t1", status=status_name, time=at(minutes)),
                 Context())
    status, view = call(api_event("GET", f"/trials/{trial_id}"))
    assert status == 200 and view["max_steps"] == example["max_steps"]
    assert view["runs"]["trn2"]["step"] is None and view["runs"]["trn2"]["status"] == "RUNNING"

    # The trainer publishes step and loss as it goes: the running attempt's newest values are its progress.
    dims: list[DimensionTypeDef] = [{"Name": "TrialId", "Value": trial_id}, {"Name": "Run", "Value": "trn2"},
                                    {"Name": "Attempt", "Value": "1"}]
    points = [(step, 2.5 - step / 100, now - timedelta(minutes=12 - step // 10)) for step in (10, 20, 30, 40)]
    data: list[MetricDatumTypeDef] = []
    for step, loss, when in points:
        data += [{"MetricName": "GlobalStep", "Value": step, "Dimensions": dims, "Timestamp": when, "Unit": "Count"},
                 {"MetricName": "Loss", "Value": loss, "Dimensions": dims, "Timestamp": when}]
    boto3.client("cloudwatch", region_name="us-east-1").put_metric_data(Namespace="Dualtrack", MetricData=data)
    status, view = call(api_event("GET", f"/trials/{trial_id}"))
    trn2 = view["runs"]["trn2"]
    assert (trn2["step"], trn2["progress_source"], trn2["attempt"]) == (40, "metrics", 1)
    assert trn2["loss"] == 2.5 - 40 / 100

    # A checkpoint manifest newer than the flushed metrics: the step is at least the checkpoint's.
    key = f"trials/{trial_id}/trn2/checkpoints/step-50/manifest.json"
    aws["s3"].put_object(Bucket="artifacts", Key=key.replace("manifest.json", "model.safetensors"), Body=b"w" * 64)
    aws["s3"].put_object(Bucket="artifacts", Key=key, Body=json.dumps(
        {"step": 50, "shards": [{"name": "model.safetensors", "bytes": 64}]}).encode())
    on_artifact(s3_event("artifacts", key, 20, "m50"), Context())
    status, view = call(api_event("GET", f"/trials/{trial_id}"))
    assert (view["runs"]["trn2"]["step"], view["runs"]["trn2"]["progress_source"]) == (50, "checkpoint")

    # The attempt ends: its summary is authoritative.
    final = summary(trial_id, 1, status="succeeded", exit_code=0, global_step=example["max_steps"],
                    loss={"initial": 2.5, "final": 1.17, "per_step": [], "eval": []})
    key = f"trials/{trial_id}/trn2/attempt-1/summary.json"
    aws["s3"].put_object(Bucket="artifacts", Key=key, Body=json.dumps(final).encode())
    on_artifact(s3_event("artifacts", key, 100, "s1"), Context())
    status, view = call(api_event("GET", f"/trials/{trial_id}"))
    trn2 = view["runs"]["trn2"]
    assert (trn2["step"], trn2["loss"], trn2["progress_source"]) == (example["max_steps"], 1.17, "summary")


@pytest.mark.parametrize(("overrides", "named"), [
    ('{"instances": {"us-east-1": {"p5.48xlarge": {"hourly_usd": "abc"}}}}',
     r"instances\.us-east-1\.p5\.48xlarge\.hourly_usd: .*usd per hour"),
    ('{"instances": ["p5.48xlarge"]}', r"instances: .*\{\"<region>\""),
    ('{"s3": {"us-east-1": 5}}', r"s3\.us-east-1: .*storage_gb_month_usd"),
])
def test_a_malformed_price_override_fails_the_cold_start_naming_the_field_and_the_fix(
        aws: dict[str, Any], monkeypatch: pytest.MonkeyPatch, overrides: str, named: str) -> None:
    """A function error reaches an API caller only as API Gateway's own 502, body ``{"message": "Internal server
    error"}`` (Lambda developer guide, "Handling Lambda errors with an API Gateway API":
    https://docs.aws.amazon.com/lambda/latest/dg/services-apigateway-errors.html): what names the problem is the
    function's error and log. A malformed PRICE_OVERRIDES is caught where every setting is, before the request is
    read, naming the variable, the field and what it must hold; not as a traceback from deep in the price table."""
    from lambdas.handlers.on_trial_api import compose, handler
    from lambdas.runtime.settings import SettingsInvalid, reset_settings

    monkeypatch.setenv("PRICE_OVERRIDES", overrides)
    reset_settings()
    with pytest.raises(SettingsInvalid, match=rf"PRICE_OVERRIDES: .*{named}"):
        handler(api_event("GET", "/trials"), Context())
    assert compose.cache_info().currsize == 0  # nothing was built from it
