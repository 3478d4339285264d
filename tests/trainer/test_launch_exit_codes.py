"""How the ranks' exit codes become the job's when ``python -m trainer launch`` starts several processes.

AWS Batch decides on the exit code of the container's main process: the job definitions retry exit code 75 and end
the job on any other ("Automated job retries", https://docs.aws.amazon.com/batch/latest/userguide/job_retries.html;
``evaluateOnExit``, https://docs.aws.amazon.com/batch/latest/APIReference/API_EvaluateOnExit.html). torchrun exits 1
whenever a rank fails, so the launcher runs the elastic launch in its own process and maps the ranks' codes itself.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from trainer import FAILURE_EXIT_CODE, FAULT_EXIT_CODE, PERMANENT_FAULT_EXIT_CODE, SIGTERM_EXIT_CODE
from trainer.launch import TORCHRUN_MODULE, job_exit_code, launch_plan, signal_exit_code

from tests.trainer.conftest import ROOT

ARGS = ["--quiet"]
PYTHONPATH = os.pathsep.join([str(ROOT), str(ROOT / "containers")])


# ---- the mapping -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("codes", "expected"), [
    ([FAULT_EXIT_CODE, 1], FAULT_EXIT_CODE),  # the faulting rank first, a peer's failed collective after
    ([1, FAULT_EXIT_CODE], FAULT_EXIT_CODE),  # a peer noticed first: the planned fault still wins
    ([FAULT_EXIT_CODE, -15], FAULT_EXIT_CODE),  # the agent's SIGTERM to the surviving rank
    ([FAULT_EXIT_CODE, SIGTERM_EXIT_CODE], FAULT_EXIT_CODE),
    ([1, PERMANENT_FAULT_EXIT_CODE, FAULT_EXIT_CODE], PERMANENT_FAULT_EXIT_CODE),
    ([PERMANENT_FAULT_EXIT_CODE, -15], PERMANENT_FAULT_EXIT_CODE),
    ([-15], SIGTERM_EXIT_CODE),
    ([-9, -15], 137),
    ([1], FAILURE_EXIT_CODE),
    ([1, SIGTERM_EXIT_CODE, -15], FAILURE_EXIT_CODE),  # a crash stays a crash: its peers' 143s are collateral
    ([3, 1], 3),
    ([], FAILURE_EXIT_CODE),
])
def test_the_job_exit_code_prefers_planned_faults_then_the_first_failure(codes: list[int], expected: int) -> None:
    assert job_exit_code(codes) == expected


def test_a_signal_exit_is_128_plus_the_signal() -> None:
    assert signal_exit_code(signal.SIGTERM) == SIGTERM_EXIT_CODE == 143
    assert signal_exit_code(signal.SIGINT) == 130


# ---- the plan ----------------------------------------------------------------------------------------------------
def test_several_processes_run_torchruns_launch_in_process_and_one_process_is_execd() -> None:
    from torch.distributed.run import config_from_args, parse_args

    env = {"AWS_BATCH_JOB_NUM_NODES": "2", "AWS_BATCH_JOB_NODE_INDEX": "1",
           "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": "10.0.0.5", "DUALTRACK_STANDIN_PROCESSES_PER_NODE": "2"}
    plan = launch_plan(backend="cpu", devices_per_node=4, worker_args=ARGS, env=env, python="/py")
    assert plan.torchrun_args is not None
    assert plan.argv == ["/py", "-m", TORCHRUN_MODULE, *plan.torchrun_args]
    # torchrun's own parser reads them as torchrun would: a static rendezvous on the main node, two ranks here.
    config, entrypoint, args = config_from_args(parse_args(plan.torchrun_args))
    assert (config.min_nodes, config.max_nodes, config.nproc_per_node, config.max_restarts) == (2, 2, 2, 0)
    assert config.rdzv_backend == "static" and config.rdzv_configs["rank"] == 1
    assert config.rdzv_endpoint == "10.0.0.5:29500"
    assert entrypoint == sys.executable and args == ["-u", "-m", "trainer", "run", *ARGS]
    assert launch_plan(backend="cpu", devices_per_node=4, worker_args=ARGS, env={}).torchrun_args is None
    # The retired XLA path's compile driver starts torchrun itself: exec'd as before.
    compile_only = launch_plan(backend="xla", devices_per_node=64, worker_args=ARGS, env={}, compile_only=True)
    assert compile_only.torchrun_args is None and compile_only.argv[0] == "neuron_parallel_compile"
    training = launch_plan(backend="neuron", devices_per_node=64, worker_args=ARGS, env={})
    assert training.torchrun_args is not None and "--nproc_per_node=64" in training.torchrun_args


# ---- the launcher with scripted ranks ------------------------------------------------------------------------------
# A rank: marks "<rank>.started", exits 143 on SIGTERM (marking "<rank>.sigterm"), as the trainer does, then does
# what $RANK_CODES says for its rank: exit with that code a moment after starting, or "wait" until stopped.
RANK = textwrap.dedent("""
    import os, pathlib, signal, sys, time
    rank = int(os.environ["RANK"])
    marks = pathlib.Path(os.environ["MARKS"])
    def stopped(*_):
        (marks / f"{rank}.sigterm").write_text("")
        sys.exit(143)
    signal.signal(signal.SIGTERM, stopped)
    (marks / f"{rank}.started").write_text(str(os.getpid()))
    what = os.environ["RANK_CODES"].split(",")[rank]
    if what == "wait":
        time.sleep(60)
        sys.exit(9)
    time.sleep(0.3)
    sys.exit(int(what))
""")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _scripted_launcher(tmp_path: Path, codes: str) -> tuple[subprocess.Popen[str], Path]:
    """The launcher's elastic launch (``trainer.cli._elastic_launch``) over two scripted ranks on one node."""
    script, marks = tmp_path / "rank.py", tmp_path / "marks"
    script.write_text(RANK)
    marks.mkdir()
    torchrun = ["--nnodes=1", "--node_rank=0", "--nproc_per_node=2", "--master_addr=127.0.0.1",
                f"--master_port={_free_port()}", str(script)]
    code = f"import sys; from trainer.cli import _elastic_launch; sys.exit(_elastic_launch({torchrun!r}))"
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "MARKS": str(marks), "RANK_CODES": codes,
           "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    return proc, marks


@pytest.mark.parametrize(("codes", "expected"), [
    ("wait,75", FAULT_EXIT_CODE),  # rank 0 is stopped by the agent (143) after rank 1's planned fault
    ("1,75", FAULT_EXIT_CODE),  # both fail at once, rank 0 as a peer's collective would
    ("76,wait", PERMANENT_FAULT_EXIT_CODE),
    ("wait,1", FAILURE_EXIT_CODE),  # rank 0's 143 (stopped by the agent) does not hide rank 1's crash
])
def test_the_launcher_exits_with_the_job_exit_code_of_its_ranks(tmp_path: Path, codes: str, expected: int) -> None:
    proc, _ = _scripted_launcher(tmp_path, codes)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == expected, err[-3000:]


def test_sigterm_to_the_launcher_reaches_every_rank_and_the_job_exits_143(tmp_path: Path) -> None:
    """ECS stops a container by sending SIGTERM to its main process, then SIGKILL after the stop timeout
    (https://docs.aws.amazon.com/batch/latest/userguide/job_timeouts.html; a Spot reclaim or TerminateJob stops it
    the same way): the launcher must pass the signal to every rank so each can checkpoint, and exit 143."""
    proc, marks = _scripted_launcher(tmp_path, "wait,wait")
    deadline = time.monotonic() + 60
    while not ((marks / "0.started").exists() and (marks / "1.started").exists()):
        assert time.monotonic() < deadline and proc.poll() is None, "the ranks never started"
        time.sleep(0.05)
    ranks = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == SIGTERM_EXIT_CODE, err[-3000:]
    assert (marks / "0.sigterm").exists() and (marks / "1.sigterm").exists()
    _, alive = psutil.wait_procs(ranks, timeout=5)
    assert alive == []


# ---- the launcher with the trainer's ranks -------------------------------------------------------------------------
def _trainer_env(spec: str, run_dir: Path, attempt: int, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_BATCH_JOB_")}
    env.update({"PYTHONPATH": PYTHONPATH, "DUALTRACK_SPEC_URI": spec, "DUALTRACK_TRACK": "gpu",
                "DUALTRACK_RUN_DIR": str(run_dir), "DUALTRACK_BACKEND": "cpu", "AWS_BATCH_JOB_ATTEMPT": str(attempt),
                "DUALTRACK_IMDS_ENDPOINT": "off", "DUALTRACK_METRICS": "off", "OMP_NUM_THREADS": "1",
                "DUALTRACK_STANDIN_PROCESSES_PER_NODE": "2", "DUALTRACK_RENDEZVOUS_PORT": str(_free_port()), **extra})
    return env


def _launch(spec: str, run_dir: Path, attempt: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trainer", "launch", "--quiet"],
                          env=_trainer_env(spec, run_dir, attempt), capture_output=True, text=True, timeout=180)


@pytest.mark.slow
def test_a_planned_fault_on_two_ranks_exits_75_and_the_retry_resumes(write_spec: Any, tmp_path: Path) -> None:
    """The retry strategy retries exit code 75 (https://docs.aws.amazon.com/batch/latest/userguide/job_retries.html):
    a retryable fault on a node running two ranks must reach Batch as 75, not torchrun's 1, and the next attempt
    (``AWS_BATCH_JOB_ATTEMPT`` 2) resumes from the checkpoint written before the fault."""
    spec = write_spec(max_steps=4, checkpoint_interval_steps=2,
                      fault_injection={"track": "gpu", "at_step": 3, "mode": "retryable"},
                      evaluation={"interval_steps": 4, "prompts": [], "max_new_tokens": 1})
    run_dir = tmp_path / "run"
    first = _launch(spec, run_dir, 1)
    assert first.returncode == FAULT_EXIT_CODE, first.stderr[-3000:]
    faulted = json.loads((run_dir / "attempt-1" / "summary.json").read_text())
    assert faulted["status"] == "faulted" and faulted["layout"]["world_size_run"] == 2

    second = _launch(spec, run_dir, 2)
    assert second.returncode == 0, second.stderr[-3000:]
    resumed = json.loads((run_dir / "attempt-2" / "summary.json").read_text())
    assert resumed["status"] == "succeeded" and resumed["resumed_from_step"] == 2
    assert resumed["global_step"] == 4 and resumed["layout"]["world_size_run"] == 2


@pytest.mark.slow
def test_sigterm_to_a_launcher_of_training_ranks_exits_143_and_leaves_no_rank(write_spec: Any, tmp_path: Path) -> None:
    """ECS's stop (https://docs.aws.amazon.com/batch/latest/userguide/job_timeouts.html): SIGTERM to the container's
    main process, SIGKILL after the stop timeout. The launcher forwards the SIGTERM to both training ranks, waits for
    them (at most ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``, then SIGKILL) and exits 143; no rank outlives it. The signal
    reaches the ranks a moment apart, so they agree after every step whether any got it: both stop at the same step,
    checkpoint it and leave well before the SIGKILL, and the summary says the attempt was interrupted there."""
    spec = write_spec(max_steps=400, checkpoint_interval_steps=200, fault_injection=None,
                      evaluation={"interval_steps": 400, "prompts": [], "max_new_tokens": 1})
    run_dir = tmp_path / "run"
    env = _trainer_env(spec, run_dir, 1, TORCH_ELASTIC_SHUTDOWN_TIMEOUT="10")
    proc = subprocess.Popen([sys.executable, "-m", "trainer", "launch"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # rank 0's progress lines come out on the launcher's stdout
            if line.startswith("{") and json.loads(line).get("event") == "step":
                break
        ranks = psutil.Process(proc.pid).children(recursive=True)
        assert len(ranks) >= 2  # the two ranks (and anything they started)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.stdout.read()
        assert proc.wait(timeout=60) == SIGTERM_EXIT_CODE
        assert time.monotonic() - started < 10  # the ranks left by themselves: no 10 s wait for the SIGKILL
        _, alive = psutil.wait_procs(ranks, timeout=5)
        assert alive == []
        summary = json.loads((run_dir / "attempt-1" / "summary.json").read_text())
        assert summary["status"] == "interrupted", summary["status"]
        assert (run_dir / "checkpoints" / f"step-{summary['global_step']}" / "manifest.json").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
