"""The local Batch runner: real status sequence, retry strategy semantics, termination, events."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import boto3
import pytest
from moto import mock_aws

from dualtrack.local.aws.moto_shims import moto_shims
from dualtrack.local.batch_runner import LocalBatch, evaluate_on_exit
from dualtrack.local.dockerfile import ImageConfig

if TYPE_CHECKING:
    from mypy_boto3_batch.type_defs import EvaluateOnExitTypeDef

IMAGES = {"trainer": ImageConfig()}  # no ENTRYPOINT: the job's command is the whole argv
RULES: list[EvaluateOnExitTypeDef] = [{"onExitCode": "75", "action": "RETRY"},
                                      {"onStatusReason": "Host EC2*", "action": "RETRY"},
                                      {"onReason": "*", "action": "EXIT"}]


@pytest.mark.parametrize(
    ("code", "status_reason", "expected"),
    [(75, "Essential container in task exited", "RETRY"),
     (1, "Essential container in task exited", "EXIT"),
     (None, "Host EC2 (instance i-0abc) terminated.", "RETRY"),
     (143, "Essential container in task exited", "EXIT")],
)
def test_evaluate_on_exit_first_match_wins(code: int | None, status_reason: str, expected: str) -> None:
    # Every field of an evaluateOnExit rule is a string: the rules are the string mappings the runner reads.
    rules = cast("list[Mapping[str, str]]", RULES)
    assert evaluate_on_exit(rules, code, status_reason, "") == expected


def test_no_rule_matches_gives_none() -> None:
    assert evaluate_on_exit([{"onExitCode": "75", "action": "RETRY"}], 1, "x", "y") is None


def _batch(command: list[str], attempts: int = 2) -> tuple[Any, str, str]:
    iam = boto3.client("iam")
    role = iam.create_role(RoleName="batch", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    batch = boto3.client("batch")
    ce = batch.create_compute_environment(computeEnvironmentName="local-ce", type="UNMANAGED", state="ENABLED",
                                          serviceRole=role)["computeEnvironmentArn"]
    queue = batch.create_job_queue(jobQueueName="local-queue", state="ENABLED", priority=1,
                                   computeEnvironmentOrder=[{"order": 1, "computeEnvironment": ce}])["jobQueueArn"]
    jd = batch.register_job_definition(
        jobDefinitionName="jd", type="container",
        containerProperties={"image": "trainer", "command": command,
                             "environment": [{"name": "FROM_JOB_DEFINITION", "value": "yes"}],
                             "resourceRequirements": [{"type": "VCPU", "value": "1"},
                                                      {"type": "MEMORY", "value": "512"}]},
        retryStrategy={"attempts": attempts, "evaluateOnExit": RULES})["jobDefinitionArn"]
    return batch, queue, jd


def _wait(batch: Any, job_id: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = batch.describe_jobs(jobs=[job_id])["jobs"][0]
        if job["status"] in ("SUCCEEDED", "FAILED"):
            return job  # type: ignore[no-any-return]
        time.sleep(0.05)
    raise AssertionError("job did not finish")


SCRIPT = ("import os, sys; assert os.environ['FROM_JOB_DEFINITION'] == 'yes'; "
          "print('{\"event\": \"step\", \"step\": 1}'); "
          "sys.exit(int(os.environ['CODES'].split(',')[int(os.environ['AWS_BATCH_JOB_ATTEMPT']) - 1]))")


@pytest.mark.parametrize(
    ("codes", "status", "attempts"),
    [("75,0", "SUCCEEDED", 2), ("3,0", "FAILED", 1), ("75,75", "FAILED", 2), ("0,0", "SUCCEEDED", 1)],
)
@mock_aws(config={"batch": {"use_docker": False}})
def test_attempts_follow_the_retry_strategy(codes: str, status: str, attempts: int) -> None:
    events: list[dict[str, Any]] = []
    progress: list[dict[str, Any]] = []
    batch, queue, jd = _batch([sys.executable, "-c", SCRIPT])
    runner = LocalBatch(events=events.append, progress=lambda job, rec: progress.append(rec), images=IMAGES)
    with runner.install(), moto_shims(batch=runner):
        job_id = batch.submit_job(jobName="j", jobQueue=queue, jobDefinition=jd,
                                  containerOverrides={"environment": [{"name": "CODES", "value": codes}]})["jobId"]
        job = _wait(batch, job_id)
        runner.wait(10)
    assert job["status"] == status
    assert len(job["attempts"]) == attempts
    assert [a["container"]["exitCode"] for a in job["attempts"]] == [int(c) for c in codes.split(",")][:attempts]
    statuses = [e["detail"]["status"] for e in events]
    expected = ["SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING"]
    expected += ["RUNNABLE", "STARTING", "RUNNING"] * (attempts - 1) + [status]
    assert statuses == expected
    assert all(e["detail-type"] == "Batch Job State Change" and e["source"] == "aws.batch" for e in events)
    # Batch lists finished attempts only: the n-th RUNNING event carries n-1 of them.
    running = [len(e["detail"]["attempts"]) for e in events if e["detail"]["status"] == "RUNNING"]
    assert running == list(range(attempts))
    assert sum(1 for p in progress if p["event"] == "step") == attempts


@mock_aws(config={"batch": {"use_docker": False}})
def test_terminate_stops_the_process() -> None:
    events: list[dict[str, Any]] = []
    batch, queue, jd = _batch([sys.executable, "-c", "import time; time.sleep(60)"])
    runner = LocalBatch(events=events.append, terminate_grace_s=2, images=IMAGES)
    with runner.install(), moto_shims(batch=runner):
        job_id = batch.submit_job(jobName="j", jobQueue=queue, jobDefinition=jd)["jobId"]
        deadline = time.monotonic() + 10
        while batch.describe_jobs(jobs=[job_id])["jobs"][0]["status"] != "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.05)
        batch.terminate_job(jobId=job_id, reason="cancelled by user")
        job = _wait(batch, job_id)
    assert job["status"] == "FAILED"
    assert job["statusReason"] == "cancelled by user"
    assert len(job["attempts"]) == 1  # a terminated job is not retried


@mock_aws(config={"batch": {"use_docker": False}})
def test_describing_a_job_does_not_grow_its_environment() -> None:
    batch, queue, jd = _batch([sys.executable, "-c", "pass"], attempts=1)
    runner = LocalBatch(events=lambda e: None, images=IMAGES)
    with runner.install(), moto_shims(batch=runner):
        job_id = batch.submit_job(jobName="j", jobQueue=queue, jobDefinition=jd,
                                  containerOverrides={"environment": [{"name": "A", "value": "1"}]})["jobId"]
        _wait(batch, job_id)
        sizes = {len(batch.describe_jobs(jobs=[job_id])["jobs"][0]["container"]["environment"]) for _ in range(20)}
    assert len(sizes) == 1
