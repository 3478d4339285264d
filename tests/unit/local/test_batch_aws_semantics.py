"""The local Batch refuses and behaves as AWS Batch does: image ENTRYPOINT/CMD, SubmitJob overrides, timeouts,
job queues without capacity and their time-limit actions. Each test names the AWS page it encodes."""

from __future__ import annotations

import json
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.core.config import DefaultConfig

from dualtrack.local.aws.moto_shims import moto_shims
from dualtrack.local.batch_rules import time_limit_actions_problem, timeout_problem
from dualtrack.local.batch_runner import CANCELED_BY_TIME_LIMIT, INSUFFICIENT_CAPACITY, TIMED_OUT, LocalBatch
from dualtrack.local.dockerfile import DockerfileError, ImageConfig, asset_image_configs, parse_dockerfile
from lambdas.domain.json_types import JsonObject

MOTO: DefaultConfig = {"batch": {"use_docker": False}}
IMAGE = "registry.example/trainer:1"
# A stand-in for the trainer's CLI: `run` is its only command; it reports its argv and environment.
TINY = textwrap.dedent("""
    import argparse, json, os, sys
    parser = argparse.ArgumentParser(prog="python -m tinytrainer")
    parser.add_argument("command", choices=["run"])
    parser.add_argument("--steps", type=int, default=1)
    args = parser.parse_args()
    keys = ("FROM_IMAGE", "FROM_DEFINITION", "FROM_OVERRIDE", "DIGEST", "AWS_BATCH_JOB_NUM_NODES", "PYTHONPATH")
    print(json.dumps({"event": "ran", "argv": sys.argv[1:], "cwd": os.getcwd(),
                      "env": {k: os.environ.get(k) for k in keys}}))
    sys.exit(int(os.environ.get("EXIT_CODES", "0").split(",")[int(os.environ["AWS_BATCH_JOB_ATTEMPT"]) - 1]))
""")


@pytest.fixture
def tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ImageConfig:
    (tmp_path / "tinytrainer.py").write_text(TINY)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return ImageConfig(entrypoint=("python", "-m", "tinytrainer"), cmd=("run",), env={"FROM_IMAGE": "image"})


def _queue(batch: Any, name: str = "queue", **extra: Any) -> str:
    role = boto3.client("iam").create_role(RoleName=f"{name}-role", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    ce = batch.create_compute_environment(computeEnvironmentName=f"{name}-ce", type="UNMANAGED", state="ENABLED",
                                          serviceRole=role)["computeEnvironmentArn"]
    return str(batch.create_job_queue(jobQueueName=name, state="ENABLED", priority=1,
                                      computeEnvironmentOrder=[{"order": 1, "computeEnvironment": ce}],
                                      **extra)["jobQueueArn"])


def _definition(batch: Any, command: list[str] | None, *, image: str = IMAGE, **extra: Any) -> str:
    props: dict[str, Any] = {"image": image, "environment": [{"name": "FROM_DEFINITION", "value": "definition"},
                                                             {"name": "FROM_OVERRIDE", "value": "definition"}],
                             "resourceRequirements": [{"type": "VCPU", "value": "1"},
                                                      {"type": "MEMORY", "value": "512"}]}
    if command is not None:
        props["command"] = command
    return str(batch.register_job_definition(jobDefinitionName="jd", type="container", containerProperties=props,
                                             **extra)["jobDefinitionArn"])


def _wait(batch: Any, job_id: str, timeout: float = 10) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = batch.describe_jobs(jobs=[job_id])["jobs"][0]
        if job["status"] in ("SUCCEEDED", "FAILED"):
            return job  # type: ignore[no-any-return]
        time.sleep(0.05)
    raise AssertionError("job did not finish")


def _run(runner: LocalBatch, command: list[str] | None, *, definition: dict[str, Any] | None = None,
         image: str = IMAGE, **submit: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    progress: list[dict[str, Any]] = []
    runner.progress = lambda job, record: progress.append(record)
    batch = boto3.client("batch")
    with runner.install(), moto_shims(batch=runner):
        queue = _queue(batch)
        jd = _definition(batch, command, image=image, **(definition or {}))
        job_id = batch.submit_job(jobName="j", jobQueue=queue, jobDefinition=jd, **submit)["jobId"]
        job = _wait(batch, job_id)
        runner.wait(5)
    return job, [p for p in progress if p["event"] == "ran"]


# ---- the image's ENTRYPOINT and CMD ------------------------------------------------------------------------
DOCKERFILE = """\
# syntax=docker/dockerfile:1
ARG BASE=python:3.11
FROM ${BASE} AS base
ARG IMAGE_DIGEST=unknown
ENV PYTHONDONTWRITEBYTECODE=1 \\
    # a comment inside a continuation is dropped
    DIGEST=${IMAGE_DIGEST} \\
    QUOTED="two words"
ENV LEGACY value with spaces
WORKDIR /opt
WORKDIR app
CMD ["serve"]

FROM base
ENTRYPOINT ["python", "-m", "trainer"]
RUN pip install x
USER 10001:10001
CMD ["run"]
"""


def test_dockerfile_final_stage_config() -> None:
    """https://docs.docker.com/reference/dockerfile/ (ENV, ARG, WORKDIR, ENTRYPOINT, CMD, multi-stage FROM)."""
    config = parse_dockerfile(DOCKERFILE)
    assert config.entrypoint == ("python", "-m", "trainer")
    assert config.cmd == ("run",)
    assert config.workdir == "/opt/app"
    assert config.env == {"PYTHONDONTWRITEBYTECODE": "1", "DIGEST": "unknown", "QUOTED": "two words",
                          "LEGACY": "value with spaces"}
    assert parse_dockerfile(DOCKERFILE, build_args={"IMAGE_DIGEST": "sha256:abc"}).env["DIGEST"] == "sha256:abc"
    assert parse_dockerfile(DOCKERFILE, target="base").entrypoint == ()


def test_entrypoint_resets_an_inherited_cmd_and_shell_form_runs_in_sh() -> None:
    """https://docs.docker.com/reference/dockerfile/#understand-how-cmd-and-entrypoint-interact ("If CMD is
    defined from the base image, setting ENTRYPOINT will reset CMD to an empty value")."""
    config = parse_dockerfile("FROM x AS a\nCMD [\"serve\"]\nFROM a\nENTRYPOINT exec python -m trainer\n")
    assert config.entrypoint == ("/bin/sh", "-c", "exec python -m trainer")
    assert config.cmd == ()


@pytest.mark.parametrize("text", ["FROM x\nONBUILD RUN true\n", "FROM x\nCMD [\"run\"\n",
                                  "FROM x\nENV A=${B:-c}\n", "ENV A=b\n", "FROM x\nRUN <<EOF\ntrue\nEOF\n"])
def test_dockerfile_reader_refuses_what_it_does_not_understand(text: str) -> None:
    with pytest.raises(DockerfileError):
        parse_dockerfile(text)


def test_asset_images_by_their_ecr_uri(tmp_path: Path) -> None:
    """The cloud assembly's *.assets.json format:
    https://docs.aws.amazon.com/cdk/v2/guide/assets.html (docker image assets published to the bootstrap ECR)."""
    asset = tmp_path / "asset.abc"
    (asset / "containers" / "gpu").mkdir(parents=True)
    (asset / "containers" / "gpu" / "Dockerfile").write_text(DOCKERFILE)
    (tmp_path / "App-Compute.assets.json").write_text(json.dumps({"dockerImages": {"abc": {
        "source": {"directory": "asset.abc", "dockerFile": "containers/gpu/Dockerfile"},
        "destinations": {"d": {"repositoryName": "cdk-hnb659fds-container-assets-${AWS::AccountId}-${AWS::Region}",
                               "imageTag": "abc"}}}}}))
    images = asset_image_configs(tmp_path, account="123456789012", region="us-east-1")
    uri = "123456789012.dkr.ecr.us-east-1.amazonaws.com/cdk-hnb659fds-container-assets-123456789012-us-east-1:abc"
    assert list(images) == [uri]
    assert images[uri].cmd == ("run",)


@mock_aws(config=MOTO)
def test_job_command_replaces_cmd_only(tiny: ImageConfig) -> None:
    """https://docs.aws.amazon.com/batch/latest/userguide/job_definition_parameters.html#containerProperties
    (command maps to Docker's COMMAND: it replaces CMD and is passed to the ENTRYPOINT)."""
    job, ran = _run(LocalBatch(events=lambda e: None, images={IMAGE: tiny}), ["run", "--steps", "3"])
    assert job["status"] == "SUCCEEDED"
    assert ran[0]["argv"] == ["run", "--steps", "3"]
    assert ran[0]["cwd"] == str(Path(__file__).resolve().parents[3])


@mock_aws(config=MOTO)
def test_no_command_runs_the_image_cmd(tiny: ImageConfig) -> None:
    """https://docs.docker.com/reference/dockerfile/#understand-how-cmd-and-entrypoint-interact"""
    job, ran = _run(LocalBatch(events=lambda e: None, images={IMAGE: tiny}), None)
    assert job["status"] == "SUCCEEDED"
    assert ran[0]["argv"] == ["run"]


@mock_aws(config=MOTO)
def test_a_command_repeating_the_entrypoint_fails_with_exit_2() -> None:
    """https://docs.aws.amazon.com/batch/latest/userguide/job_definition_parameters.html#containerProperties:
    with ENTRYPOINT ["python","-m","trainer"], command ["python","-m","trainer","run"] runs
    `python -m trainer python -m trainer run`, which the trainer's argparse refuses (exit 2)."""
    image = parse_dockerfile((Path(__file__).resolve().parents[3] / "containers/gpu/Dockerfile").read_text())
    job, _ = _run(LocalBatch(events=lambda e: None, images={IMAGE: image}), ["python", "-m", "trainer", "run"])
    assert job["status"] == "FAILED"
    assert [a["container"]["exitCode"] for a in job["attempts"]] == [2]


@mock_aws(config=MOTO)
def test_unknown_image_cannot_be_pulled(tiny: ImageConfig) -> None:
    """https://docs.aws.amazon.com/batch/latest/userguide/troubleshooting.html (CannotPullContainerError: the
    container never starts, the job fails)."""
    job, ran = _run(LocalBatch(events=lambda e: None, images={IMAGE: tiny}), ["run"],
                    image="registry.example/unknown:2")
    assert job["status"] == "FAILED"
    assert job["statusReason"].startswith("CannotPullContainerError:")
    assert job["attempts"][0]["container"].get("exitCode") is None  # never started: no exit code
    assert job["attempts"][0]["container"]["reason"].startswith("CannotPullContainerError:")
    assert ran == []


# ---- SubmitJob overrides -----------------------------------------------------------------------------------
@mock_aws(config=MOTO)
def test_environment_image_then_definition_then_overrides(tiny: ImageConfig) -> None:
    """https://docs.aws.amazon.com/batch/latest/APIReference/API_ContainerOverrides.html (environment: "The
    environment variables to send to the container. You can add new environment variables, which are added to
    the container at launch, or you can override the existing environment variables")."""
    image = ImageConfig(entrypoint=tiny.entrypoint, env={"FROM_IMAGE": "image", "FROM_DEFINITION": "image",
                                                         "PYTHONPATH": "/opt/dualtrack"})
    job, ran = _run(LocalBatch(events=lambda e: None, images={IMAGE: image}), ["run"],
                    containerOverrides={"environment": [{"name": "FROM_OVERRIDE", "value": "override"}]})
    assert job["status"] == "SUCCEEDED"
    env = ran[0]["env"]
    assert (env["FROM_IMAGE"], env["FROM_DEFINITION"], env["FROM_OVERRIDE"]) == ("image", "definition", "override")
    assert "/opt/dualtrack" not in env["PYTHONPATH"]


@mock_aws(config=MOTO)
@pytest.mark.parametrize(("submitted", "attempts"), [(None, 1), ({"attempts": 2}, 2)])
def test_submitted_retry_strategy_replaces_the_definitions(tiny: ImageConfig, submitted: dict[str, Any] | None,
                                                           attempts: int) -> None:
    """https://docs.aws.amazon.com/batch/latest/APIReference/API_SubmitJob.html (retryStrategy: "When a retry
    strategy is specified here, it overrides the retry strategy defined in the job definition"): the definition's
    rule EXIT on 76 goes with it, so exit 76 is retried."""
    extra: dict[str, Any] = {"retryStrategy": submitted} if submitted else {}
    job, ran = _run(LocalBatch(events=lambda e: None, images={IMAGE: tiny}), ["run"],
                    definition={"retryStrategy": {"attempts": 2,
                                                  "evaluateOnExit": [{"onExitCode": "76", "action": "EXIT"}]}},
                    containerOverrides={"environment": [{"name": "EXIT_CODES", "value": "76,0"}]}, **extra)
    assert len(job["attempts"]) == len(ran) == attempts
    assert job["status"] == ("SUCCEEDED" if attempts == 2 else "FAILED")


@mock_aws(config=MOTO)
def test_timeouts_under_60_seconds_are_refused(tiny: ImageConfig) -> None:
    """https://docs.aws.amazon.com/batch/latest/userguide/job_timeouts.html ("attemptDurationSeconds ... must be
    at least 60 seconds, either in your job definition, or when you submit the job")."""
    assert timeout_problem({"attemptDurationSeconds": 59}) and not timeout_problem({"attemptDurationSeconds": 60})
    runner = LocalBatch(events=lambda e: None, images={IMAGE: tiny})
    batch = boto3.client("batch")
    with runner.install(), moto_shims(batch=runner):
        queue = _queue(batch)
        with pytest.raises(ClientError, match="ClientException"):
            _definition(batch, ["run"], timeout={"attemptDurationSeconds": 30})
        jd = _definition(batch, ["run"])
        with pytest.raises(ClientError, match="ClientException"):
            batch.submit_job(jobName="j", jobQueue=queue, jobDefinition=jd, timeout={"attemptDurationSeconds": 5})


@mock_aws(config=MOTO)
def test_submitted_timeout_stops_the_attempt_and_is_not_retried(tiny: ImageConfig) -> None:
    """https://docs.aws.amazon.com/batch/latest/userguide/job_timeouts.html (the container gets SIGTERM, then
    SIGKILL; "If a job is terminated for exceeding the timeout duration, it isn't retried") and
    https://docs.aws.amazon.com/batch/latest/APIReference/API_SubmitJob.html (timeout overrides the definition's).
    """
    image = ImageConfig(entrypoint=(sys.executable, "-c", "import time; time.sleep(30)"))
    started = time.monotonic()
    job, _ = _run(LocalBatch(events=lambda e: None, images={IMAGE: image}, time_scale=120, terminate_grace_s=1),
                  None, definition={"timeout": {"attemptDurationSeconds": 3600}, "retryStrategy": {"attempts": 3}},
                  timeout={"attemptDurationSeconds": 60})
    assert time.monotonic() - started < 5
    assert job["status"] == "FAILED"
    assert job["statusReason"] == TIMED_OUT
    assert len(job["attempts"]) == 1
    assert job["attempts"][0]["statusReason"] == TIMED_OUT


@mock_aws(config=MOTO)
def test_node_overrides_set_the_node_count_and_the_main_nodes_container(tiny: ImageConfig) -> None:
    """https://docs.aws.amazon.com/batch/latest/APIReference/API_NodeOverrides.html (numNodes and
    nodePropertyOverrides by targetNodes); moto drops nodeOverrides, the runner keeps them from the request."""
    runner = LocalBatch(events=lambda e: None, images={IMAGE: tiny})
    progress: list[dict[str, Any]] = []
    runner.progress = lambda job, record: progress.append(record)
    batch = boto3.client("batch")
    with runner.install(), moto_shims(batch=runner):
        queue = _queue(batch)
        jd = batch.register_job_definition(jobDefinitionName="mnp", type="multinode", nodeProperties={
            "numNodes": 2, "mainNode": 0, "nodeRangeProperties": [{"targetNodes": "0:", "container": {
                "image": IMAGE, "command": ["run"], "environment": [{"name": "FROM_OVERRIDE", "value": "def"}],
                "resourceRequirements": [{"type": "VCPU", "value": "1"}, {"type": "MEMORY", "value": "512"}]}}]},
        )["jobDefinitionArn"]
        job_id = batch.submit_job(jobName="j", jobQueue=queue, jobDefinition=jd, nodeOverrides={
            "numNodes": 3, "nodePropertyOverrides": [{"targetNodes": "0", "containerOverrides": {
                "command": ["run", "--steps", "2"], "environment": [{"name": "FROM_OVERRIDE", "value": "node0"}]}}]},
        )["jobId"]
        job = _wait(batch, job_id)
        runner.wait(5)
    ran = [p for p in progress if p["event"] == "ran"]
    assert job["status"] == "SUCCEEDED"
    assert ran[0]["argv"] == ["run", "--steps", "2"]
    assert ran[0]["env"]["FROM_OVERRIDE"] == "node0"
    assert ran[0]["env"]["AWS_BATCH_JOB_NUM_NODES"] == "3"


# ---- job queues without capacity -------------------------------------------------------------------------
LIMIT: list[JsonObject] = [
    {"reason": INSUFFICIENT_CAPACITY, "state": "RUNNABLE", "action": "CANCEL", "maxTimeSeconds": 600}]


def test_time_limit_actions_are_validated() -> None:
    """https://docs.aws.amazon.com/batch/latest/APIReference/API_JobStateTimeLimitAction.html (state RUNNABLE,
    action CANCEL, maxTimeSeconds 600..86400)."""
    assert time_limit_actions_problem(LIMIT) is None
    assert time_limit_actions_problem([{**LIMIT[0], "maxTimeSeconds": 300}])
    assert time_limit_actions_problem([{**LIMIT[0], "state": "STARTING"}])


@mock_aws(config=MOTO)
def test_no_capacity_with_a_time_limit_action_cancels_the_job(tiny: ImageConfig) -> None:
    """https://docs.aws.amazon.com/batch/latest/userguide/job_stuck_in_runnable_capacity.html (the RUNNABLE
    statusReason, and "Canceled by JobStateTimeLimit action due to reason: ..." after maxTimeSeconds) and
    https://docs.aws.amazon.com/batch/latest/userguide/job_stuck_in_runnable_time_limit_actions.html."""
    events: list[dict[str, Any]] = []
    runner = LocalBatch(events=events.append, images={IMAGE: tiny}, no_capacity={"queue"}, time_scale=600,
                        instance_types={"queue": ["trn2.48xlarge"]})
    batch = boto3.client("batch")
    with runner.install(), moto_shims(batch=runner):
        queue = _queue(batch, jobStateTimeLimitActions=LIMIT)
        with pytest.raises(ClientError, match="ClientException"):
            _queue(batch, "refused", jobStateTimeLimitActions=[{**LIMIT[0], "maxTimeSeconds": 60}])
        jd = _definition(batch, ["run"])
        job_id = batch.submit_job(jobName="j", jobQueue=queue, jobDefinition=jd)["jobId"]
        time.sleep(0.3)
        waiting = batch.describe_jobs(jobs=[job_id])["jobs"][0]
        job = _wait(batch, job_id)
    assert waiting["status"] == "RUNNABLE"
    assert waiting["statusReason"] == (f"{INSUFFICIENT_CAPACITY} - Service cannot fulfill the capacity requested "
                                       "for instance type [trn2.48xlarge]")
    assert job["status"] == "FAILED"
    assert job["statusReason"] == CANCELED_BY_TIME_LIMIT.format(INSUFFICIENT_CAPACITY)
    assert job["attempts"] == []
    assert [e["detail"]["status"] for e in events] == ["SUBMITTED", "PENDING", "RUNNABLE", "FAILED"]


@mock_aws(config=MOTO)
def test_no_capacity_without_an_action_stays_runnable_until_cancelled(tiny: ImageConfig) -> None:
    """https://docs.aws.amazon.com/batch/latest/userguide/job_stuck_in_runnable_capacity.html ("Manually canceling
    the job will allow the subsequent job to move to the head of the queue")."""
    runner = LocalBatch(events=lambda e: None, images={IMAGE: tiny}, no_capacity={"queue"}, time_scale=10**6)
    batch = boto3.client("batch")
    with runner.install(), moto_shims(batch=runner):
        queue = _queue(batch)
        jd = _definition(batch, ["run"])
        job_id = batch.submit_job(jobName="j", jobQueue=queue, jobDefinition=jd)["jobId"]
        time.sleep(0.5)
        assert batch.describe_jobs(jobs=[job_id])["jobs"][0]["status"] == "RUNNABLE"
        batch.cancel_job(jobId=job_id, reason="no capacity: given up")
        job = _wait(batch, job_id)
    assert job["status"] == "FAILED"
    assert job["statusReason"] == "no capacity: given up"


def _template(timeout: int) -> dict[str, Any]:
    return {"Resources": {
        "GpuCapacityEnv": {"Type": "AWS::Batch::ComputeEnvironment",
                           "Properties": {"ComputeResources": {"InstanceTypes": ["g6e.48xlarge"]}}},
        "GpuCapacityQueue": {"Type": "AWS::Batch::JobQueue", "Properties": {
            "Priority": 10, "ComputeEnvironmentOrder": [
                {"Order": 1, "ComputeEnvironment": {"Fn::GetAtt": ["GpuCapacityEnv", "ComputeEnvironmentArn"]}}],
            "JobStateTimeLimitActions": [{"Reason": INSUFFICIENT_CAPACITY, "State": "RUNNABLE", "Action": "CANCEL",
                                          "MaxTimeSeconds": 600}]}},
        "Jobs": {"Type": "AWS::Batch::JobDefinition", "Properties": {
            "Type": "container", "Timeout": {"AttemptDurationSeconds": timeout},
            "ContainerProperties": {"Image": IMAGE, "Command": ["run"], "ResourceRequirements": [
                {"Type": "VCPU", "Value": "1"}, {"Type": "MEMORY", "Value": "512"}]}}}}}


@mock_aws(config=MOTO)
@pytest.mark.parametrize("timeout", [60, 59])
def test_template_keeps_time_limit_actions_and_refuses_short_timeouts(timeout: int) -> None:
    """https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-properties-batch-jobqueue-jobstatetimelimitaction.html
    and https://docs.aws.amazon.com/batch/latest/userguide/job_timeouts.html (at least 60 seconds)."""
    from dualtrack.local.aws.template import LocalDeployment, TemplateResolver, _batch
    from dualtrack.local.batch_rules import BatchClientError

    resolver = TemplateResolver({"App-Compute": _template(timeout)}, region="us-east-1")
    out = LocalDeployment(region="us-east-1", state_machine_arn="arn")
    if timeout < 60:
        with pytest.raises(BatchClientError, match="RegisterJobDefinition ClientException"):
            _batch(resolver, boto3.client("batch"), boto3.client("iam"), out)
        return
    _batch(resolver, boto3.client("batch"), boto3.client("iam"), out)
    assert out.job_state_time_limit_actions == {"App-Compute-GpuCapacityQueue": [
        {"reason": INSUFFICIENT_CAPACITY, "state": "RUNNABLE", "action": "CANCEL", "maxTimeSeconds": 600}]}
    assert out.queue_instance_types == {"App-Compute-GpuCapacityQueue": ["g6e.48xlarge"]}
