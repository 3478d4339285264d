"""Each shim covers a gap that plain moto 5.2.5 still has; these tests fail (naming the patch to delete) once a
moto upgrade closes one, and check the shims themselves."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from moto import mock_aws

from dualtrack.local.aws import moto_shims as shims
from dualtrack.local.aws.moto_shims import MOTO_CONFIG, InProcessLambdas, ScriptedJobs, moto_shims

if TYPE_CHECKING:
    from mypy_boto3_batch.type_defs import JobStateTimeLimitActionTypeDef
    from mypy_boto3_stepfunctions.type_defs import DescribeExecutionOutputTypeDef

REGION = "us-east-1"
ROLE = "arn:aws:iam::123456789012:role/local"


@pytest.fixture
def aws() -> Iterator[None]:
    with mock_aws(config=MOTO_CONFIG):
        boto3.client("iam", region_name=REGION).create_role(
            RoleName="local", AssumeRolePolicyDocument=json.dumps({"Statement": []}))
        yield


def _batch() -> tuple[str, str]:
    batch = boto3.client("batch", region_name=REGION)
    env = batch.create_compute_environment(computeEnvironmentName="local-env", type="UNMANAGED", state="ENABLED",
                                           serviceRole=ROLE)["computeEnvironmentArn"]
    queue = batch.create_job_queue(jobQueueName="local-queue", state="ENABLED", priority=1,
                                   computeEnvironmentOrder=[{"order": 1, "computeEnvironment": env}])["jobQueueArn"]
    definition = batch.register_job_definition(
        jobDefinitionName="local-job", type="container",
        containerProperties={"image": "busybox", "vcpus": 1, "memory": 128,
                             "environment": [{"name": "FROM_DEFINITION", "value": "1"}]})["jobDefinitionArn"]
    return queue, definition


def _machine(queue: str, definition: str) -> str:
    asl = {"StartAt": "Run", "States": {"Run": {
        "Type": "Task", "Resource": "arn:aws:states:::batch:submitJob.sync", "End": True,
        "ResultSelector": {"job_id.$": "$.JobId", "status.$": "$.Status"},
        "Parameters": {"JobName": "job", "JobQueue": queue, "JobDefinition": definition,
                       "ContainerOverrides": {"Environment": [{"Name": "DUALTRACK_RUN", "Value.$": "$.run"}]}}}}}
    return boto3.client("stepfunctions", region_name=REGION).create_state_machine(  # type: ignore[no-any-return]
        name="m", definition=json.dumps(asl), roleArn=ROLE)["stateMachineArn"]


def _run(machine: str, payload: dict[str, Any], *, wait: bool = True) -> tuple[str, DescribeExecutionOutputTypeDef]:
    sfn = boto3.client("stepfunctions", region_name=REGION)
    arn = sfn.start_execution(stateMachineArn=machine, name=f"run-{uuid.uuid4().hex[:8]}",
                              input=json.dumps(payload))["executionArn"]
    deadline = time.monotonic() + 30
    described = sfn.describe_execution(executionArn=arn)
    while wait and described["status"] == "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.1)
        described = sfn.describe_execution(executionArn=arn)
    return arn, described


# ---- the gaps, in plain moto ---------------------------------------------------------------------------------
def test_plain_moto_cannot_run_batch_submit_job_sync(aws: None) -> None:
    _, described = _run(_machine(*_batch()), {"run": "gpu"})
    assert described["status"] == "FAILED", (
        "moto now runs batch:submitJob.sync by itself: delete _normalise_parameters/_normalise_response "
        "from dualtrack.local.aws.moto_shims")


def test_plain_moto_lambda_only_echoes(aws: None) -> None:
    client = boto3.client("lambda", region_name=REGION)
    client.create_function(FunctionName="f", Runtime="python3.12", Role=ROLE, Handler="x.handler",
                           Code={"ZipFile": b"PK\x05\x06" + b"\0" * 18})
    payload = client.invoke(FunctionName="f", Payload=json.dumps({"ping": 1}))["Payload"].read()
    assert json.loads(payload) == {"ping": 1}, (
        "moto's Docker-free Lambda now runs handlers: reconsider the invoke seam in dualtrack.local.aws.moto_shims")


def test_plain_moto_batch_succeeds_every_job_at_submit(aws: None) -> None:
    queue, definition = _batch()
    batch = boto3.client("batch", region_name=REGION)
    job = batch.submit_job(jobName="j", jobQueue=queue, jobDefinition=definition)["jobId"]
    assert batch.describe_jobs(jobs=[job])["jobs"][0]["status"] == "SUCCEEDED", (
        "moto's simple Batch no longer ends jobs at submit: revisit the job-runner seam in moto_shims")


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # moto's own, on stop
def test_plain_moto_stop_leaves_the_sync_job_running(aws: None) -> None:
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_batch import (
        StateTaskServiceBatch,
    )
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_callback import (
        StateTaskServiceCallback,
    )

    jobs = ScriptedJobs({"trn2": None})
    machine = _machine(*_batch())
    with moto_shims(batch=jobs), shims._patched(StateTaskServiceBatch, "_eval_sync",
                                                  StateTaskServiceCallback._eval_sync):
        arn, _ = _run(machine, {"run": "trn2"}, wait=False)
        _wait(lambda: bool(jobs.submitted))
        boto3.client("stepfunctions", region_name=REGION).stop_execution(executionArn=arn)
        time.sleep(1.5)  # three of moto's sync polling periods
        assert jobs.submitted[0].status == "RUNNING" and not jobs.terminated, (
            "moto now terminates the job of a stopped .sync state: delete _eval_sync/_build_sync_resolver "
            "from dualtrack.local.aws.moto_shims")
        jobs.terminate(jobs.submitted[0], "cleanup")


def test_plain_moto_accepts_batch_requests_aws_refuses(aws: None) -> None:
    """AWS Batch refuses a job timeout under 60 seconds (API_JobTimeout: "The minimum value for the timeout is 60
    seconds") and time-limit actions other than RUNNABLE/CANCEL within 600..86400 s
    (API_JobStateTimeLimitAction)."""
    queue, definition = _batch()
    batch = boto3.client("batch", region_name=REGION)
    batch.register_job_definition(jobDefinitionName="short", type="container", timeout={"attemptDurationSeconds": 10},
                                  containerProperties={"image": "busybox", "vcpus": 1, "memory": 128})
    batch.submit_job(jobName="j", jobQueue=queue, jobDefinition=definition, timeout={"attemptDurationSeconds": 5})
    env = batch.describe_job_queues(jobQueues=[queue])["jobQueues"][0]["computeEnvironmentOrder"]
    # A time-limit state and time AWS refuses (and the client's types rule out): sent as a plain request.
    odd: dict[str, Any] = {"jobQueueName": "odd-limits", "state": "ENABLED", "priority": 1,
                           "computeEnvironmentOrder": env,
                           "jobStateTimeLimitActions": [{"reason": "r", "state": "RUNNING", "maxTimeSeconds": 5,
                                                         "action": "CANCEL"}]}
    batch.create_job_queue(**odd)
    # Reaching here means moto accepted all three: keep _submit_job, _register_job_definition, _create_job_queue.


def test_plain_moto_drops_fields_batch_keeps_and_grows_the_environment(aws: None) -> None:
    """SubmitJob's retryStrategy and nodeOverrides and CreateJobQueue's jobStateTimeLimitActions are part of the
    job and queue in AWS Batch (API_SubmitJob, API_CreateJobQueue); a describe does not change a job."""
    queue, definition = _batch()
    batch = boto3.client("batch", region_name=REGION)
    job = batch.submit_job(jobName="j", jobQueue=queue, jobDefinition=definition, retryStrategy={"attempts": 3},
                           containerOverrides={"environment": [{"name": "A", "value": "1"}]})["jobId"]
    first, second = (batch.describe_jobs(jobs=[job])["jobs"][0] for _ in range(2))
    assert not first.get("retryStrategy"), "moto keeps retryStrategy now: drop it from _submit_job's hand-off"
    assert len(second["container"]["environment"]) > len(first["container"]["environment"]), (
        "moto's DescribeJobs no longer grows the job's environment: delete _container_property")
    limited = batch.create_job_queue(
        jobQueueName="limited", state="ENABLED", priority=1,
        computeEnvironmentOrder=batch.describe_job_queues(jobQueues=[queue])["jobQueues"][0]["computeEnvironmentOrder"],
        jobStateTimeLimitActions=[{"reason": "r", "state": "RUNNABLE", "maxTimeSeconds": 600, "action": "CANCEL"}])
    assert not batch.describe_job_queues(jobQueues=[limited["jobQueueArn"]])["jobQueues"][0].get(
        "jobStateTimeLimitActions"), "moto keeps time-limit actions now: drop queue_created's hand-off"


def test_plain_moto_rules_cannot_reach_lambda_targets_and_match_scheduled_rules_to_bus_events(aws: None) -> None:
    """EventBridge invokes a rule's Lambda target with the matching event, and a scheduled rule only runs on its
    schedule (EventBridge user guide, "Rules"); moto raises on Lambda targets without Docker and matches a rule
    without a pattern to every event."""
    from moto.events.models import Rule, events_backends

    events = boto3.client("events", region_name=REGION)
    events.put_rule(Name="every-hour", ScheduleExpression="rate(1 hour)")
    events.put_targets(Rule="every-hour", Targets=[{"Id": "f", "Arn": "arn:aws:lambda:us-east-1:123456789012:"
                                                                      "function:f"}])
    rule = events_backends["123456789012"][REGION].describe_rule("every-hour", None)
    assert rule.event_pattern.matches_event({"source": "aws.batch", "detail-type": "x", "detail": {}}), (
        "moto no longer matches a scheduled rule to bus events: simplify _send_to_targets")
    with pytest.raises(Exception):  # noqa: B017 - moto's own error type for an undeliverable target
        Rule.send_to_targets(rule, {"source": "aws.batch", "detail-type": "x", "detail": {}})


def _wait(condition: Any, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


# ---- the shims ---------------------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_shimmed_sync_job_reports_pascal_case_and_job_runner_decides(aws: None) -> None:
    jobs = ScriptedJobs({"trn2": 76})
    machine = _machine(*_batch())
    with moto_shims(batch=jobs):
        _, ok = _run(machine, {"run": "gpu"})
        _, failed = _run(machine, {"run": "trn2"})
    assert ok["status"] == "SUCCEEDED"
    assert json.loads(ok["output"]) == {"job_id": jobs.submitted[0].job_id, "status": "SUCCEEDED"}
    assert failed["status"] == "FAILED"
    assert shims.job_environment(jobs.submitted[0]).items() >= {
        "FROM_DEFINITION": "1", "DUALTRACK_RUN": "gpu", "MANAGED_BY_AWS": "STARTED_BY_STEP_FUNCTIONS"}.items()
    assert jobs.submitted[1].exit_code == 76


def test_casing_follows_the_botocore_model() -> None:
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_batch import (
        StateTaskServiceBatch,
    )

    service = StateTaskServiceBatch()
    parameters = {"JobName": "a", "ContainerOverrides": {"Environment": [{"Name": "X", "Value": "1"}]},
                  "Tags": {"Keep": "Case"}}
    shims._normalise_parameters(service, parameters, service_action_name="submitJob")
    assert parameters == {"jobName": "a", "containerOverrides": {"environment": [{"name": "X", "value": "1"}]},
                          "tags": {"Keep": "Case"}}
    response = {"jobs": [{"jobId": "1", "container": {"exitCode": 0}, "tags": {"k": "v"}}]}
    inner = response["jobs"][0]
    shims._normalise_response(service, response, service_action_name="describe_jobs")
    assert response == {"Jobs": [{"JobId": "1", "Container": {"ExitCode": 0}, "Tags": {"k": "v"}}]}
    assert response["Jobs"][0] is inner  # moto returns the inner object: it must be converted in place


def test_in_process_lambda_applies_env_and_reports_errors(aws: None) -> None:
    client = boto3.client("lambda", region_name=REGION)
    for name in ("ok", "boom"):
        client.create_function(FunctionName=name, Runtime="python3.12", Role=ROLE, Handler=f"pkg.{name}.handler",
                               Code={"ZipFile": b"PK\x05\x06" + b"\0" * 18},
                               Environment={"Variables": {"DUALTRACK_PROBE": name}})

    def ok(event: Any, context: Any) -> dict[str, Any]:
        return {"seen": event, "env": os.environ["DUALTRACK_PROBE"], "fn": context.function_name}

    def boom(event: Any, context: Any) -> None:
        raise ValueError("no such trial")

    lambdas = InProcessLambdas({"ok": ok, "pkg.boom.handler": boom})
    with moto_shims(lambdas=lambdas):
        good = client.invoke(FunctionName="ok", Payload=json.dumps({"a": 1}))
        bad = client.invoke(FunctionName="boom", Payload="{}")
    assert json.loads(good["Payload"].read()) == {"seen": {"a": 1}, "env": "ok", "fn": "ok"}
    assert "DUALTRACK_PROBE" not in os.environ
    assert bad["FunctionError"] == "Unhandled"
    error = json.loads(bad["Payload"].read())
    assert error["errorType"] == "ValueError" and error["errorMessage"] == "no such trial"


def test_shimmed_batch_refuses_what_aws_refuses_and_hands_over_what_moto_drops(aws: None) -> None:
    queue, definition = _batch()
    batch = boto3.client("batch", region_name=REGION)
    seen: dict[str, Any] = {}

    class RecordingJobs(ScriptedJobs):
        def queue_created(self, name: str, time_limit_actions: list[dict[str, Any]]) -> None:
            seen[name] = time_limit_actions

    jobs = RecordingJobs()
    with moto_shims(batch=jobs):
        with pytest.raises(batch.exceptions.ClientException, match="minimum value for the timeout is 60"):
            batch.submit_job(jobName="j", jobQueue=queue, jobDefinition=definition,
                             timeout={"attemptDurationSeconds": 5})
        with pytest.raises(batch.exceptions.ClientException, match="minimum value for the timeout is 60"):
            batch.register_job_definition(jobDefinitionName="short", type="container",
                                          timeout={"attemptDurationSeconds": 10},
                                          containerProperties={"image": "busybox", "vcpus": 1, "memory": 128})
        order = batch.describe_job_queues(jobQueues=[queue])["jobQueues"][0]["computeEnvironmentOrder"]
        # A time-limit state AWS refuses (and the client's types rule out): sent as a plain request.
        odd: dict[str, Any] = {"jobQueueName": "odd", "state": "ENABLED", "priority": 1,
                               "computeEnvironmentOrder": order,
                               "jobStateTimeLimitActions": [{"reason": "r", "state": "RUNNING", "maxTimeSeconds": 600,
                                                             "action": "CANCEL"}]}
        with pytest.raises(batch.exceptions.ClientException, match="must be RUNNABLE"):
            batch.create_job_queue(**odd)
        limits: list[JobStateTimeLimitActionTypeDef] = [
            {"reason": "r", "state": "RUNNABLE", "maxTimeSeconds": 600, "action": "CANCEL"}]
        batch.create_job_queue(jobQueueName="limited", state="ENABLED", priority=1, computeEnvironmentOrder=order,
                               jobStateTimeLimitActions=limits)
        job = batch.submit_job(jobName="j", jobQueue=queue, jobDefinition=definition, retryStrategy={"attempts": 3},
                               containerOverrides={"environment": [{"name": "A", "value": "1"}]})["jobId"]
        first, second = (batch.describe_jobs(jobs=[job])["jobs"][0] for _ in range(2))
    assert seen == {"limited": limits}
    assert len(first["container"]["environment"]) == len(second["container"]["environment"])
