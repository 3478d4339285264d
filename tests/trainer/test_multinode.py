"""Two Batch nodes on loopback: ``python -m trainer launch`` on node 0 and node 1 of a 2-node job forms one gloo
process group (torchrun, one CPU rank per node), and trains to the same losses as one process simulating both
data-parallel ranks."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

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
                "AWS_BATCH_JOB_ATTEMPT": "1", "DUALTRACK_IMDS_ENDPOINT": "off", "OMP_NUM_THREADS": "1", **extra})
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

    port = str(_free_port())
    nodes = {"AWS_BATCH_JOB_NUM_NODES": "2", "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0",
             "DUALTRACK_RENDEZVOUS_PORT": port}
    run_dir = tmp_path / "two"
    procs = [subprocess.Popen([sys.executable, "-m", "trainer", "launch", "--quiet"],
                              env=_env(spec, run_dir, **nodes, AWS_BATCH_JOB_NODE_INDEX=str(index),
                                       **({"AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": "127.0.0.1"}
                                          if index else {})),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for index in (0, 1)]
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=180))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert [p.returncode for p in procs] == [0, 0], [err[-3000:] for _, err in outputs]

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
    from lambdas.domain.trial import gradient_accumulation_steps, parse_trial, track_layout

    spec = write_spec(max_steps=WIDE_STEPS, checkpoint_interval_steps=4, fault_injection=None, tracks=WIDE_TRACKS,
                      effective_batch_size=32, micro_batch_size=1,
                      evaluation={"interval_steps": WIDE_STEPS, "prompts": [], "max_new_tokens": 1})
    trial = parse_trial(Path(spec).read_text(), allow_local_paths=True)
    layout = track_layout(trial, "gpu")
    assert (layout.data_parallel, gradient_accumulation_steps(trial, layout)) == (16, 2)

    single = subprocess.run([sys.executable, "-m", "trainer", "run", "--quiet"], env=_env(spec, tmp_path / "one"),
                            capture_output=True, text=True, timeout=120)
    assert single.returncode == 0, single.stderr[-3000:]

    port = str(_free_port())
    nodes = {"AWS_BATCH_JOB_NUM_NODES": "2", "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0",
             "DUALTRACK_RENDEZVOUS_PORT": port}
    run_dir = tmp_path / "two"
    procs = [subprocess.Popen([sys.executable, "-m", "trainer", "launch", "--quiet"],
                              env=_env(spec, run_dir, **nodes, AWS_BATCH_JOB_NODE_INDEX=str(index),
                                       **({"AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": "127.0.0.1"}
                                          if index else {})),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for index in (0, 1)]
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=180))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert [p.returncode for p in procs] == [0, 0], [err[-3000:] for _, err in outputs]

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
