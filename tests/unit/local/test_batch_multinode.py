"""The local Batch runs a multi-node parallel job as AWS Batch does: one container (process group) per node, with
the node variables, the main node deciding the attempt, and retries, timeouts and TerminateJob covering all nodes.

https://docs.aws.amazon.com/batch/latest/userguide/multi-node-parallel-jobs.html ("The job is finished only if the
main node exits. All child nodes are then stopped."; "The final job status (SUCCEEDED or FAILED) is determined by the
final job status of the main node.") and https://docs.aws.amazon.com/batch/latest/userguide/job-lifecycle.html (a
child node that dies leaves the other nodes running; child node failures don't cause more attempts)."""

from __future__ import annotations

import json
import sys
import textwrap
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

if TYPE_CHECKING:
    from mypy_boto3_batch.type_defs import ContainerPropertiesTypeDef, NodeRangePropertyTypeDef

MOTO: DefaultConfig = {"batch": {"use_docker": False}}
IMAGE = "registry.example/node:1"
CHILD_IMAGE = "registry.example/child:1"
KEYS = ("AWS_BATCH_JOB_NODE_INDEX", "AWS_BATCH_JOB_NUM_NODES", "AWS_BATCH_JOB_MAIN_NODE_INDEX",
        "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS", "AWS_BATCH_JOB_ATTEMPT", "DUALTRACK_RENDEZVOUS_PORT",
        "ROLE")
# A node: reports what it sees, marks "started" in $MARKS once it handles SIGTERM (marking "sigterm" when it gets
# one), then does what $BEHAVIOUR says for "<attempt>.<node>", else "<node>", else "*":
#   "exit:N"             exit N at once (marking "failed" or "done")
#   "wait:M1,M2,...:N"   wait until this attempt has every marker ("n1.started", ...), then exit N
#   "fail-if-child-failed"  exit 7 once a child marked "failed" (as a rank does when a peer leaves a collective),
#                        exit 0 once every child marked "done"
#   "sleep"              sleep until stopped
NODE = textwrap.dedent("""
    import json, os, pathlib, signal, sys, time
    keys = %r
    index = int(os.environ["AWS_BATCH_JOB_NODE_INDEX"])
    nodes = int(os.environ["AWS_BATCH_JOB_NUM_NODES"])
    attempt = os.environ["AWS_BATCH_JOB_ATTEMPT"]
    marks = pathlib.Path(os.environ["MARKS"])
    print(json.dumps({"event": "node", "argv": sys.argv[1:], "env": {k: os.environ.get(k) for k in keys}}))
    sys.stdout.flush()
    def mark(what):
        (marks / f"a{attempt}.n{index}.{what}").write_text(str(time.time()))
    def stopped(*_):
        mark("sigterm")
        sys.exit(143)
    signal.signal(signal.SIGTERM, stopped)
    mark("started")
    behaviour = dict(item.split("=", 1) for item in os.environ["BEHAVIOUR"].split(";"))
    what = behaviour.get(f"{attempt}.{index}") or behaviour.get(str(index)) or behaviour["*"]
    deadline = time.time() + 20
    if what.startswith("exit:"):
        code = int(what[5:])
        mark("failed" if code else "done")
        sys.exit(code)
    if what.startswith("wait:"):
        _, names, code = what.split(":")
        while time.time() < deadline:
            if all((marks / f"a{attempt}.{name}").exists() for name in names.split(",")):
                time.sleep(0.2)
                sys.exit(int(code))
            time.sleep(0.02)
        sys.exit(9)
    if what == "fail-if-child-failed":
        while time.time() < deadline:
            if any(marks.glob(f"a{attempt}.n*.failed")):
                time.sleep(0.2)
                sys.exit(7)
            if all((marks / f"a{attempt}.n{i}.done").exists() for i in range(1, nodes)):
                sys.exit(0)
            time.sleep(0.02)
        sys.exit(9)
    while time.time() < deadline:
        time.sleep(0.02)
    sys.exit(9)
""") % (KEYS,)


@pytest.fixture
def marks(tmp_path: Path) -> Path:
    out = tmp_path / "marks"
    out.mkdir()
    return out


def _image(tmp_path: Path, role: str) -> ImageConfig:
    (tmp_path / "node.py").write_text(NODE)
    return ImageConfig(entrypoint=(sys.executable, str(tmp_path / "node.py")), cmd=("serve",), env={"ROLE": role})


def _queue(batch: Any) -> str:
    role = boto3.client("iam").create_role(RoleName="q-role", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    ce = batch.create_compute_environment(computeEnvironmentName="q-ce", type="UNMANAGED", state="ENABLED",
                                          serviceRole=role)["computeEnvironmentArn"]
    return str(batch.create_job_queue(jobQueueName="q", state="ENABLED", priority=1,
                                      computeEnvironmentOrder=[{"order": 1, "computeEnvironment": ce}])["jobQueueArn"])


def _container(image: str, behaviour: str, marks: Path,
               command: list[str] | None = None) -> ContainerPropertiesTypeDef:
    container: ContainerPropertiesTypeDef = {
        "image": image,
        "resourceRequirements": [{"type": "VCPU", "value": "1"}, {"type": "MEMORY", "value": "512"}],
        "environment": [{"name": "BEHAVIOUR", "value": behaviour}, {"name": "MARKS", "value": str(marks)}]}
    if command is not None:
        container["command"] = command
    return container


def _wait(batch: Any, job_id: str, timeout: float = 10) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = batch.describe_jobs(jobs=[job_id])["jobs"][0]
        if job["status"] in ("SUCCEEDED", "FAILED"):
            return job  # type: ignore[no-any-return]
        time.sleep(0.05)
    raise AssertionError("job did not finish")


def _run(runner: LocalBatch, ranges: list[NodeRangePropertyTypeDef], *, num_nodes: int = 2, main: int = 0,
         terminate_after: float | None = None, **submit: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    progress: list[dict[str, Any]] = []
    runner.progress = lambda job, record: progress.append(record)
    batch = boto3.client("batch")
    with runner.install(), moto_shims(batch=runner):
        queue = _queue(batch)
        jd = batch.register_job_definition(jobDefinitionName="mnp", type="multinode", nodeProperties={
            "numNodes": num_nodes, "mainNode": main, "nodeRangeProperties": ranges})["jobDefinitionArn"]
        job_id = batch.submit_job(jobName="j", jobQueue=queue, jobDefinition=jd, **submit)["jobId"]
        if terminate_after is not None:
            time.sleep(terminate_after)
            batch.terminate_job(jobId=job_id, reason="stopped by the operator")
        job = _wait(batch, job_id)
        runner.wait(5)
    return job, progress


def _seen(log_dir: Path, attempt: int, node: int) -> dict[str, Any]:
    for line in (log_dir / f"j.attempt-{attempt}.node-{node}.log").read_text().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("event") == "node":
                return record  # type: ignore[no-any-return]
    raise AssertionError(f"node {node} reported nothing")


@mock_aws(config=MOTO)
def test_every_node_runs_with_its_variables_and_its_ranges_container(tmp_path: Path, marks: Path) -> None:
    """https://docs.aws.amazon.com/batch/latest/userguide/job_env_vars.html (node index, node count, main node
    index; the main node's address on child nodes only) and
    https://docs.aws.amazon.com/batch/latest/APIReference/API_NodeOverrides.html (numNodes, and overrides by
    targetNodes)."""
    logs = tmp_path / "logs"
    runner = LocalBatch(events=lambda e: None, log_dir=logs, terminate_grace_s=1,
                        images={IMAGE: _image(tmp_path, "main"), CHILD_IMAGE: _image(tmp_path, "child")})
    started = time.monotonic()
    job, progress = _run(runner, [
        {"targetNodes": "0", "container": _container(IMAGE, "*=wait:n1.started,n2.started:0", marks,
                                                                command=["main"])},
        {"targetNodes": "1:", "container": _container(CHILD_IMAGE, "*=sleep", marks)}],
        nodeOverrides={"numNodes": 3, "nodePropertyOverrides": [
            {"targetNodes": "2", "containerOverrides": {"command": ["child", "two"]}}]})
    assert time.monotonic() - started < 5
    assert job["status"] == "SUCCEEDED" and len(job["attempts"]) == 1
    seen = {i: _seen(logs, 1, i) for i in range(3)}
    assert [seen[i]["argv"] for i in range(3)] == [["main"], ["serve"], ["child", "two"]]
    assert [seen[i]["env"]["ROLE"] for i in range(3)] == ["main", "child", "child"]
    for i in range(3):
        env = seen[i]["env"]
        assert (env["AWS_BATCH_JOB_NODE_INDEX"], env["AWS_BATCH_JOB_NUM_NODES"],
                env["AWS_BATCH_JOB_MAIN_NODE_INDEX"]) == (str(i), "3", "0")
        assert env["AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"] == (None if i == 0 else "127.0.0.1")
    ports = {seen[i]["env"]["DUALTRACK_RENDEZVOUS_PORT"] for i in range(3)}
    assert len(ports) == 1 and int(ports.pop()) > 0  # one rendezvous port for the attempt, on every node
    # Progress lines come from the main node only.
    assert [p["argv"] for p in progress if p["event"] == "node"] == [["main"]]
    # The main node exited: the children still running were stopped (SIGTERM first).
    assert (marks / "a1.n1.sigterm").exists() and (marks / "a1.n2.sigterm").exists()


@mock_aws(config=MOTO)
def test_the_main_node_index_is_the_definitions(tmp_path: Path, marks: Path) -> None:
    """https://docs.aws.amazon.com/batch/latest/APIReference/API_NodeProperties.html (mainNode)."""
    logs = tmp_path / "logs"
    runner = LocalBatch(events=lambda e: None, log_dir=logs, terminate_grace_s=1,
                        images={IMAGE: _image(tmp_path, "node")})
    job, _ = _run(runner, [{"targetNodes": "0:", "container": _container(IMAGE, "1=wait:n0.started:3;*=sleep", marks)}],
                  main=1)
    assert job["status"] == "FAILED"
    assert [a["container"]["exitCode"] for a in job["attempts"]] == [3]
    assert _seen(logs, 1, 0)["env"]["AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"] == "127.0.0.1"
    assert _seen(logs, 1, 1)["env"]["AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"] is None


@mock_aws(config=MOTO)
def test_the_main_nodes_exit_code_is_the_attempts_and_stops_the_children(tmp_path: Path, marks: Path) -> None:
    runner = LocalBatch(events=lambda e: None, terminate_grace_s=1, images={IMAGE: _image(tmp_path, "node")})
    started = time.monotonic()
    behaviour = "0=wait:n1.started,n2.started:5;*=sleep"
    job, _ = _run(runner, [{"targetNodes": "0:", "container": _container(IMAGE, behaviour, marks)}], num_nodes=3)
    assert time.monotonic() - started < 5
    assert job["status"] == "FAILED"
    assert [a["container"]["exitCode"] for a in job["attempts"]] == [5]
    assert (marks / "a1.n1.sigterm").exists() and (marks / "a1.n2.sigterm").exists()


@mock_aws(config=MOTO)
def test_a_failed_child_leaves_the_main_node_to_decide(tmp_path: Path, marks: Path) -> None:
    """A child node that exits non-zero neither stops the others nor fails the attempt by itself: the main node
    finishing well makes the job SUCCEEDED, with one attempt ("Child node failures don't cause more attempts")."""
    runner = LocalBatch(events=lambda e: None, terminate_grace_s=1, images={IMAGE: _image(tmp_path, "node")})
    job, progress = _run(runner, [{"targetNodes": "0:", "container": _container(
        IMAGE, "1=exit:4;0=wait:n1.failed,n2.started:0;*=sleep", marks)}], num_nodes=3,
        retryStrategy={"attempts": 2})
    assert job["status"] == "SUCCEEDED"
    assert len(job["attempts"]) == 1
    assert {"node": 1, "exit_code": 4, "attempt": 1} in [
        {k: p[k] for k in ("node", "exit_code", "attempt")} for p in progress if p["event"] == "node_exit"]
    assert (marks / "a1.n2.sigterm").exists()  # node 2 ran on after node 1 failed, until the main node exited


@mock_aws(config=MOTO)
def test_a_main_node_failing_after_a_child_failed_retries_every_node(tmp_path: Path, marks: Path) -> None:
    """The main node fails once a child fails (as a rank does when a peer leaves a collective): the attempt fails
    with the main node's exit code, and the retry strategy runs the whole job again, every node
    (https://docs.aws.amazon.com/batch/latest/userguide/multi-node-parallel-jobs.html: a main node failure causes
    another attempt)."""
    logs = tmp_path / "logs"
    runner = LocalBatch(events=lambda e: None, log_dir=logs, terminate_grace_s=1,
                        images={IMAGE: _image(tmp_path, "node")})
    job, _ = _run(runner, [{"targetNodes": "0:", "container": _container(
        IMAGE, "1.1=exit:4;0=fail-if-child-failed;*=exit:0", marks)}], retryStrategy={"attempts": 2})
    assert job["status"] == "SUCCEEDED"
    assert [a["container"]["exitCode"] for a in job["attempts"]] == [7, 0]
    for attempt in (1, 2):
        for node in (0, 1):
            assert (marks / f"a{attempt}.n{node}.started").exists()
            assert _seen(logs, attempt, node)["env"]["AWS_BATCH_JOB_ATTEMPT"] == str(attempt)


@mock_aws(config=MOTO)
def test_terminate_job_stops_every_node(tmp_path: Path, marks: Path) -> None:
    """https://docs.aws.amazon.com/batch/latest/APIReference/API_TerminateJob.html (running jobs are terminated,
    SIGTERM first; no retry)."""
    runner = LocalBatch(events=lambda e: None, terminate_grace_s=1, images={IMAGE: _image(tmp_path, "node")})
    started = time.monotonic()
    job, _ = _run(runner, [{"targetNodes": "0:", "container": _container(IMAGE, "*=sleep", marks)}],
                  terminate_after=1.0, retryStrategy={"attempts": 3})
    assert time.monotonic() - started < 5
    assert job["status"] == "FAILED"
    assert job["statusReason"] == "stopped by the operator"
    assert len(job["attempts"]) == 1
    assert (marks / "a1.n0.sigterm").exists() and (marks / "a1.n1.sigterm").exists()


def test_job_parameters_are_substituted_into_the_command() -> None:
    """Batch replaces ``Ref::name`` with the submission's parameter, else the definition's default, and leaves an
    unknown one as written (https://docs.aws.amazon.com/batch/latest/userguide/job_definition_parameters.html#parameters)."""
    from dualtrack.local.batch_runner import substitute_parameters

    command = ["launch", "--spec", "Ref::spec_uri", "--resume-from", "Ref::resume_from", "x=Ref::run", "Ref::other"]
    assert substitute_parameters(command, {"spec_uri": "s3://b/s.json", "resume_from": "none", "run": "trn2"}) == [
        "launch", "--spec", "s3://b/s.json", "--resume-from", "none", "x=trn2", "Ref::other"]
