"""Two Batch nodes on loopback: ``python -m trainer launch`` on node 0 and node 1 of a 2-node job forms one gloo
process group (torchrun, one CPU rank per node), and trains to the same losses as one process simulating both
data-parallel ranks."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from trainer import FAULT_EXIT_CODE

from dualtrack.local.processes import stop_nodes
from tests.trainer.conftest import ROOT

pytestmark = pytest.mark.slow

STEPS = 10
# One GPU per node on two nodes: data_parallel 2, the same as the two CPU ranks.
TRACKS = {"gpu": {"instance_type": "g6e.xlarge", "nodes": 2, "tensor_parallel": 1, "pipeline_parallel": 1}}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(spec: str, run_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_BATCH_JOB_")}
    env.update({"PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "containers")]), "DUALTRACK_SPEC_URI": spec,
                "DUALTRACK_TRACK": "gpu", "DUALTRACK_RUN_DIR": str(run_dir), "DUALTRACK_BACKEND": "cpu",
                "AWS_BATCH_JOB_ATTEMPT": "1", "DUALTRACK_IMDS_ENDPOINT": "off", "OMP_NUM_THREADS": "1",
                # A rank whose peer node is gone fails within a minute, well inside the waits below.
                "DUALTRACK_COLLECTIVE_TIMEOUT_S": "60", **extra})
    return env


def _losses(run_dir: Path) -> dict[int, float]:
    lines = (run_dir / "attempt-1" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    return {r["step"]: r["loss"] for r in records if r["kind"] == "step"}


def test_two_nodes_train_like_one_process(write_spec: Any, tmp_path: Path) -> None:
    spec = write_spec(max_steps=STEPS, checkpoint_interval_steps=STEPS, fault_injection=None, tracks=TRACKS,
                      evaluation={"interval_steps": STEPS, "prompts": [], "max_new_tokens": 1})
    single = subprocess.run([sys.executable, "-m", "trainer", "run", "--quiet"], env=_env(spec, tmp_path / "one"),
                            capture_output=True, text=True, timeout=120)
    assert single.returncode == 0, single.stderr[-3000:]

    run_dir = tmp_path / "two"
    _run_nodes(spec, run_dir, 1, per_node=1, timeout=180)

    one, two = _losses(tmp_path / "one"), _losses(run_dir)
    assert sorted(one) == sorted(two) == list(range(1, STEPS + 1))
    for step in one:
        assert two[step] == pytest.approx(one[step], abs=1e-5), (step, one[step], two[step])
    summary = json.loads((run_dir / "attempt-1" / "summary.json").read_text())
    assert summary["status"] == "succeeded"
    # The two processes' collectives are timed; the single process records none.
    comm = summary["communication"]
    assert comm["world_size"] == 2 and comm["measured"] and comm["steps_timed"] == STEPS
    assert comm["communication_s"] > 0 and 0 < comm["communication_share"] < 1
    assert comm["sync_samples"] == STEPS and 0 <= comm["sync_wait_median_s"] <= comm["sync_wait_max_s"]
    single = json.loads((tmp_path / "one" / "attempt-1" / "summary.json").read_text())["communication"]
    assert (single["communication_s"], single["sync_wait_max_s"]) == (0.0, None)


# Eight GPUs per node on two nodes: data_parallel 16, simulated by two CPU processes, eight ranks each.
WIDE_STEPS = 8
WIDE_TRACKS = {"gpu": {"instance_type": "p5.48xlarge", "nodes": 2, "tensor_parallel": 1, "pipeline_parallel": 1}}


def test_two_processes_simulate_sixteen_data_parallel_ranks_like_one(write_spec: Any, tmp_path: Path) -> None:
    from lambdas.domain.trial.layout import gradient_accumulation_steps, track_layout
    from lambdas.domain.trial.rules import parse_trial

    spec = write_spec(max_steps=WIDE_STEPS, checkpoint_interval_steps=4, fault_injection=None, tracks=WIDE_TRACKS,
                      effective_batch_size=32, micro_batch_size=1,
                      evaluation={"interval_steps": WIDE_STEPS, "prompts": [], "max_new_tokens": 1})
    trial = parse_trial(Path(spec).read_text(), allow_local_paths=True)
    layout = track_layout(trial, "gpu")
    assert (layout.data_parallel, gradient_accumulation_steps(trial, layout)) == (16, 2)

    single = subprocess.run([sys.executable, "-m", "trainer", "run", "--quiet"], env=_env(spec, tmp_path / "one"),
                            capture_output=True, text=True, timeout=120)
    assert single.returncode == 0, single.stderr[-3000:]

    run_dir = tmp_path / "two"
    _run_nodes(spec, run_dir, 1, per_node=1, timeout=180)

    one, two = _losses(tmp_path / "one"), _losses(run_dir)
    assert sorted(one) == sorted(two) == list(range(1, WIDE_STEPS + 1))
    for step in one:
        assert two[step] == pytest.approx(one[step], abs=1e-5), (step, one[step], two[step])
    summary = json.loads((run_dir / "attempt-1" / "summary.json").read_text())
    single_summary = json.loads((tmp_path / "one" / "attempt-1" / "summary.json").read_text())
    assert summary["status"] == "succeeded"
    assert summary["layout"]["world_size_run"] == 2 and single_summary["layout"]["world_size_run"] == 1
    assert summary["layout"]["data_parallel"] == single_summary["layout"]["data_parallel"] == 16
    # The data position in the checkpoints is the frozen spec's, whatever the number of processes.
    assert summary["samples_consumed"] == single_summary["samples_consumed"] == WIDE_STEPS * 32
    for step in (4, 8):
        for where in (run_dir, tmp_path / "one"):
            state = json.loads((where / "checkpoints" / f"step-{step}" / "trainer_state.json").read_text())
            assert state["data_position"]["samples_consumed"] == step * 32


# Two nodes of four GPUs (data_parallel 8), two CPU processes per node, each simulating two ranks.
KILL_STEPS = 40
KILL_TRACKS = {"gpu": {"instance_type": "g6e.12xlarge", "nodes": 2, "tensor_parallel": 1, "pipeline_parallel": 1}}


def _start_nodes(spec: str, run_dir: Path, attempt: int, per_node: int = 2,
                 **extra: str) -> list[subprocess.Popen[str]]:
    nodes = {"AWS_BATCH_JOB_NUM_NODES": "2", "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0",
             "DUALTRACK_RENDEZVOUS_PORT": str(_free_port()), "DUALTRACK_STANDIN_PROCESSES_PER_NODE": str(per_node),
             "AWS_BATCH_JOB_ATTEMPT": str(attempt), **extra}
    # Each node in its own session, so a node can be killed whole (launcher and ranks), as a lost host would be. Its
    # output goes to a file: a pipe nobody reads while the test waits would fill up (the failing ranks' tracebacks)
    # and block the launcher on its write, which would then look like a node that never noticed its lost peer.
    procs = []
    for index in (0, 1):
        log = _log(run_dir, attempt, index).open("w")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "trainer", "launch", "--quiet"],
            env=_env(spec, run_dir, **nodes, AWS_BATCH_JOB_NODE_INDEX=str(index),
                     **({"AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": "127.0.0.1"} if index else {})),
            stdout=subprocess.DEVNULL, stderr=log, text=True, start_new_session=True))
        log.close()  # the child holds its own copy
    return procs


def _run_nodes(spec: str, run_dir: Path, attempt: int, *, per_node: int, timeout: float) -> None:
    """Both nodes of one attempt, to the end; each must exit 0 (their logs say why not)."""
    procs = _start_nodes(spec, run_dir, attempt, per_node)
    try:
        for proc in procs:
            proc.wait(timeout=timeout)
    finally:
        for proc in procs:
            _kill_node(proc)
    assert [p.returncode for p in procs] == [0, 0], [_log(run_dir, attempt, i).read_text()[-3000:] for i in (0, 1)]


def _log(run_dir: Path, attempt: int, index: int) -> Path:
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    return run_dir.parent / f"{run_dir.name}-attempt{attempt}-node{index}.log"


def _kill_node(proc: subprocess.Popen[str]) -> None:
    stop_nodes([proc], 0.0)  # the launcher and the ranks torchrun started in sessions of their own


def test_a_node_lost_mid_run_fails_the_job_and_the_retry_resumes_like_the_uninterrupted_run(
        write_spec: Any, tmp_path: Path) -> None:
    """AWS Batch, "Multi-node parallel jobs" (https://docs.aws.amazon.com/batch/latest/userguide/
    multi-node-parallel-jobs.html): the job's final status is its main node's, the job ends only when the main node
    exits, and a child node's failure causes no further attempt by itself. So when a child node is lost, the main
    node's ranks must notice the missing peer and exit on their own, with the code the retry strategy retries
    (a lost peer after a checkpoint is resumable); only then does Batch start a new attempt of every node, which
    resumes from the sharded checkpoint."""
    spec = write_spec(max_steps=KILL_STEPS, checkpoint_interval_steps=4, fault_injection=None, tracks=KILL_TRACKS,
                      evaluation={"interval_steps": KILL_STEPS, "prompts": [], "max_new_tokens": 1})
    single = subprocess.run([sys.executable, "-m", "trainer", "run", "--quiet"], env=_env(spec, tmp_path / "one"),
                            capture_output=True, text=True, timeout=240)
    assert single.returncode == 0, single.stderr[-3000:]
    expected = _losses(tmp_path / "one")

    run_dir = tmp_path / "two-by-two"
    first = _start_nodes(spec, run_dir, 1)
    try:
        deadline = time.monotonic() + 180
        while not (run_dir / "checkpoints" / "step-4" / "manifest.json").exists():
            assert time.monotonic() < deadline and first[0].poll() is None, "no checkpoint before the kill"
            time.sleep(0.02)
        _kill_node(first[1])  # node 1 is lost: its launcher and both its ranks die at once
        # The surviving node's ranks find their peers gone at the next collective and the attempt fails.
        code = first[0].wait(timeout=120)
    finally:
        for proc in first:
            _kill_node(proc)
            proc.wait()
    # A lost peer after a checkpoint is resumable: the main node exits with the code the job definitions retry.
    assert code == FAULT_EXIT_CODE, _log(run_dir, 1, 0).read_text()[-3000:]
    killed = json.loads((run_dir / "attempt-1" / "summary.json").read_text())
    assert killed["status"] == "interrupted" and killed["global_step"] < KILL_STEPS
    # The collective that found the peer gone (closed at once, or timed out: whichever the transport saw first).
    assert killed["exit_code"] == FAULT_EXIT_CODE and killed["error"]

    _run_nodes(spec, run_dir, 2, per_node=2, timeout=240)  # Batch retries the whole job: every node, attempt 2
    resumed = json.loads((run_dir / "attempt-2" / "summary.json").read_text())
    assert resumed["status"] == "succeeded" and resumed["layout"]["world_size_run"] == 4
    assert resumed["resumed_from_step"] is not None and resumed["resumed_from_step"] >= 4
    assert resumed["continuity"]["global_step_continuous"] is True
    records = [json.loads(line) for line in (run_dir / "attempt-2" / "metrics.jsonl").read_text().splitlines()]
    after = {r["step"]: r["loss"] for r in records if r["kind"] == "step"}
    assert sorted(after) == list(range(resumed["resumed_from_step"] + 1, KILL_STEPS + 1))
    for step, value in after.items():
        assert value == pytest.approx(expected[step], abs=1e-5), (step, expected[step], value)


def test_a_planned_fault_on_a_child_node_alone_ends_the_job_as_resumable_and_the_retry_resumes(
        write_spec: Any, tmp_path: Path) -> None:
    """AWS Batch, "Multi-node parallel jobs" (https://docs.aws.amazon.com/batch/latest/userguide/
    multi-node-parallel-jobs.html): the job's status is its main node's. A fault planned on node 1 only
    (``fault_injection.node``) makes node 1 exit with the reserved code; node 0 finds its peer gone at the next
    collective and, with the fault's checkpoint committed, exits with the same resumable code and records the
    planned fault as fired, so the retry strategy starts attempt 2, which resumes from that checkpoint."""
    spec = write_spec(max_steps=STEPS, checkpoint_interval_steps=4, tracks=TRACKS,
                      fault_injection={"track": "gpu", "at_step": 6, "mode": "retryable", "node": 1},
                      evaluation={"interval_steps": STEPS, "prompts": [], "max_new_tokens": 1})
    run_dir = tmp_path / "child-fault"
    # A collective timeout far beyond the wait below: node 0 must learn of its lost peer at once, not time out.
    first = _start_nodes(spec, run_dir, 1, per_node=1, DUALTRACK_COLLECTIVE_TIMEOUT_S="1800")
    try:
        codes = [proc.wait(timeout=120) for proc in first]
    finally:
        for proc in first:
            _kill_node(proc)
    assert codes == [FAULT_EXIT_CODE, FAULT_EXIT_CODE], [_log(run_dir, 1, i).read_text()[-3000:] for i in (0, 1)]
    faulted = json.loads((run_dir / "attempt-1" / "summary.json").read_text())
    assert faulted["status"] == "faulted" and faulted["fault"]["fired"] is True
    assert faulted["global_step"] == 6  # node 0 completed step 6 with node 1, then lost it
    assert faulted["learning"]["weights_changed"] is True  # its own weights were read: the run counts as evidence
    _run_nodes(spec, run_dir, 2, per_node=1, timeout=180)
    resumed = json.loads((run_dir / "attempt-2" / "summary.json").read_text())
    assert resumed["status"] == "succeeded" and resumed["resumed_from_step"] == 4
    assert resumed["continuity"]["global_step_continuous"] is True
