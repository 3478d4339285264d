"""The trainer's exit codes through the local Batch: a planned, retryable fault on a node running several ranks
reaches the retry strategy as 75, so Batch starts a second attempt and it resumes from the checkpoint.

AWS Batch "Automated job retries" (https://docs.aws.amazon.com/batch/latest/userguide/job_retries.html) and
``RetryStrategy`` / ``EvaluateOnExit`` (https://docs.aws.amazon.com/batch/latest/APIReference/API_RetryStrategy.html,
https://docs.aws.amazon.com/batch/latest/APIReference/API_EvaluateOnExit.html): the rules are evaluated in order
against the attempt's exit code and status reason, the first match decides, and the job definitions retry exit code
75 and a Spot reclaim ("Host EC2*") and end the job on anything else."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from moto import mock_aws
from moto.core.config import DefaultConfig

from dualtrack.local.aws.moto_shims import moto_shims
from dualtrack.local.batch_runner import LocalBatch
from dualtrack.local.dockerfile import ImageConfig
from tests.trainer.conftest import tiny_trial, write_tiny_data

if TYPE_CHECKING:
    from mypy_boto3_batch.type_defs import EvaluateOnExitTypeDef, JobDetailTypeDef, RetryStrategyTypeDef

pytestmark = pytest.mark.slow

MOTO: DefaultConfig = {"batch": {"use_docker": False}}
IMAGE = "registry.example/trainer:1"
# The trainer image: ENTRYPOINT python -m trainer; the job definitions' command ["launch"] replaces its CMD.
TRAINER_IMAGE = ImageConfig(entrypoint=("python", "-m", "trainer"), cmd=("run",))
# infra/constructs/job_definitions.py retry_strategies(), as the synthesized job definitions carry them.
RULES: list[EvaluateOnExitTypeDef] = [{"onExitCode": "75", "action": "RETRY"},
                                      {"onStatusReason": "Host EC2*", "action": "RETRY"},
                                      {"onExitCode": "*", "action": "EXIT"}]
STRATEGY: RetryStrategyTypeDef = {"attempts": 2, "evaluateOnExit": RULES}
FAULT = {"track": "gpu", "at_step": 3, "mode": "retryable"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _spec(tmp_path: Path, **overrides: Any) -> str:
    data = write_tiny_data(tmp_path / "data")
    spec = tiny_trial(str(data), max_steps=4, checkpoint_interval_steps=2, fault_injection=FAULT,
                      evaluation={"interval_steps": 4, "prompts": [], "max_new_tokens": 1}, **overrides)
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return str(path)


def _environment(spec: str, run_dir: Path, **extra: str) -> list[dict[str, str]]:
    env = {"DUALTRACK_SPEC_URI": spec, "DUALTRACK_TRACK": "gpu", "DUALTRACK_RUN_DIR": str(run_dir),
           "DUALTRACK_BACKEND": "cpu", "DUALTRACK_METRICS": "off", "OMP_NUM_THREADS": "1",
           "DUALTRACK_COLLECTIVE_TIMEOUT_S": "60", **extra}
    return [{"name": k, "value": v} for k, v in env.items()]


def _container(environment: list[dict[str, str]]) -> dict[str, Any]:
    return {"image": IMAGE, "command": ["launch"], "environment": environment,
            "resourceRequirements": [{"type": "VCPU", "value": "2"}, {"type": "MEMORY", "value": "2048"}]}


def _submit(definition: dict[str, Any]) -> tuple[JobDetailTypeDef, list[dict[str, Any]]]:
    """Register ``definition`` with the real retry strategy, submit it, and wait for the job to end."""
    progress: list[dict[str, Any]] = []
    runner = LocalBatch(events=lambda e: None, images={IMAGE: TRAINER_IMAGE}, terminate_grace_s=5,
                        progress=lambda job, record: progress.append(record))
    batch = boto3.client("batch")
    with runner.install(), moto_shims(batch=runner):
        role = boto3.client("iam").create_role(RoleName="q-role", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
        ce = batch.create_compute_environment(computeEnvironmentName="q-ce", type="UNMANAGED", state="ENABLED",
                                              serviceRole=role)["computeEnvironmentArn"]
        queue = batch.create_job_queue(jobQueueName="q", state="ENABLED", priority=1,
                                       computeEnvironmentOrder=[{"order": 1, "computeEnvironment": ce}])["jobQueueArn"]
        jd = batch.register_job_definition(jobDefinitionName="trainer", retryStrategy=STRATEGY,
                                           **definition)["jobDefinitionArn"]
        job_id = batch.submit_job(jobName="j", jobQueue=queue, jobDefinition=jd)["jobId"]
        deadline = time.monotonic() + 240
        while True:
            job = batch.describe_jobs(jobs=[job_id])["jobs"][0]
            if job["status"] in ("SUCCEEDED", "FAILED"):
                break
            assert time.monotonic() < deadline, "the job did not finish"
            time.sleep(0.1)
        runner.wait(10)
    return job, progress


def _check_retried_and_resumed(job: JobDetailTypeDef, progress: list[dict[str, Any]], run_dir: Path,
                               world_size: int) -> None:
    assert [a["container"]["exitCode"] for a in job["attempts"]] == [75, 0], progress[-5:]
    assert job["status"] == "SUCCEEDED"
    faults = [p for p in progress if p["event"] == "fault"]
    assert [(p["attempt"], p["step"], p["exit_code"]) for p in faults] == [(1, 3, 75)]
    faulted = json.loads((run_dir / "attempt-1" / "summary.json").read_text())
    assert faulted["status"] == "faulted" and faulted["layout"]["world_size_run"] == world_size
    resumed = json.loads((run_dir / "attempt-2" / "summary.json").read_text())
    assert resumed["status"] == "succeeded" and resumed["resumed_from_step"] == 2
    assert resumed["global_step"] == 4 and resumed["layout"]["world_size_run"] == world_size


@mock_aws(config=MOTO)
def test_a_planned_fault_on_two_ranks_is_retried_and_the_second_attempt_resumes(tmp_path: Path) -> None:
    """A container job whose one node runs two ranks (``python -m trainer launch``, two CPU stand-in processes):
    attempt 1 faults at step 3 and exits 75, which the retry strategy retries
    (https://docs.aws.amazon.com/batch/latest/userguide/job_retries.html); attempt 2 resumes from step 2."""
    run_dir = tmp_path / "run"
    env = _environment(_spec(tmp_path), run_dir, DUALTRACK_STANDIN_PROCESSES_PER_NODE="2",
                       DUALTRACK_RENDEZVOUS_PORT=str(_free_port()))
    job, progress = _submit({"type": "container", "containerProperties": _container(env)})
    _check_retried_and_resumed(job, progress, run_dir, world_size=2)


@mock_aws(config=MOTO)
def test_a_planned_fault_in_a_multi_node_job_is_retried_and_every_node_resumes(tmp_path: Path) -> None:
    """A two-node multi-node parallel job, one rank per node: the job's exit code and status are its main node's
    (https://docs.aws.amazon.com/batch/latest/userguide/multi-node-parallel-jobs.html: "The final job status
    (SUCCEEDED or FAILED) is determined by the final job status of the main node"), so the main node's launcher must
    exit 75 for the retry strategy to start attempt 2 on every node, which resumes from step 2."""
    run_dir = tmp_path / "run"
    tracks = {"gpu": {"instance_type": "g6e.xlarge", "nodes": 2, "tensor_parallel": 1, "pipeline_parallel": 1}}
    env = _environment(_spec(tmp_path, tracks=tracks), run_dir)
    job, progress = _submit({"type": "multinode", "nodeProperties": {
        "numNodes": 2, "mainNode": 0, "nodeRangeProperties": [{"targetNodes": "0:", "container": _container(env)}]}})
    _check_retried_and_resumed(job, progress, run_dir, world_size=2)
