"""Launch commands from the Batch multi-node environment, and flags vs environment variables."""

from __future__ import annotations

import json
from typing import Any

import pytest
from trainer.config import ConfigError, RunConfig
from trainer.launch import LaunchError, launch_plan

ARGS = ["--spec", "s3://b/spec.json", "--track", "gpu", "--run-dir", "s3://b/run"]


def test_single_device_stand_ins_run_the_worker_directly() -> None:
    plan = launch_plan(backend="cpu", devices_per_node=8, worker_args=ARGS, env={})
    assert plan.argv == ["python", "-m", "trainer", "run", *ARGS] and plan.nodes == 1


def test_main_node_of_a_gpu_mnp_job_uses_its_own_address() -> None:
    env = {"AWS_BATCH_JOB_NUM_NODES": "2", "AWS_BATCH_JOB_NODE_INDEX": "0"}
    plan = launch_plan(backend="cuda", devices_per_node=8, worker_args=ARGS, env=env, local_address="10.0.0.5",
                       expected_nodes=2)
    assert plan.argv[:8] == ["python", "-m", "torch.distributed.run", "--nnodes=2", "--node_rank=0",
                             "--nproc_per_node=8", "--master_addr=10.0.0.5", "--master_port=29500"]
    assert plan.argv[8:12] == ["-m", "trainer", "run", "--spec"] and plan.env["FI_PROVIDER"] == "efa"


def test_child_trn2_node_joins_the_main_node() -> None:
    env = {"AWS_BATCH_JOB_NUM_NODES": "4", "AWS_BATCH_JOB_NODE_INDEX": "3",
           "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": "10.0.1.9"}
    plan = launch_plan(backend="neuron", devices_per_node=64, worker_args=ARGS, env=env, local_address="10.0.1.7")
    assert "--node_rank=3" in plan.argv and "--master_addr=10.0.1.9" in plan.argv
    assert "--nproc_per_node=64" in plan.argv
    assert plan.env["NEURON_RT_ROOT_COMM_ID"] == "10.0.1.9:62182"


@pytest.mark.parametrize(("env", "expected", "message"), [
    ({"AWS_BATCH_JOB_NUM_NODES": "2", "AWS_BATCH_JOB_NODE_INDEX": "1"}, None, "MAIN_NODE_PRIVATE_IPV4"),
    ({"AWS_BATCH_JOB_NUM_NODES": "2", "AWS_BATCH_JOB_NODE_INDEX": "2"}, None, "outside 0..1"),
    ({"AWS_BATCH_JOB_NUM_NODES": "1"}, 2, "declares 2 node"),
])
def test_inconsistent_batch_environments_are_rejected(env, expected, message) -> None:
    with pytest.raises(LaunchError, match=message):
        launch_plan(backend="cuda", devices_per_node=8, worker_args=ARGS, env=env, expected_nodes=expected)


def test_environment_variables_stand_in_for_flags() -> None:
    env = {"DUALTRACK_SPEC_URI": "s3://b/t/spec.json", "DUALTRACK_TRACK": "gpu",
           "DUALTRACK_RUN_DIR": "s3://b/trials/t/gpu-fallback/", "DUALTRACK_RESUME_FROM": "s3://b/trials/t/trn2",
           "DUALTRACK_BACKEND": "cpu", "NEURON_COMPILE_CACHE_URL": "s3://c/neuron/x/", "DUALTRACK_TRIAL_ID": "t",
           "AWS_BATCH_JOB_ATTEMPT": "2"}
    cfg = RunConfig.resolve(spec=None, track=None, run_dir=None, env=env)
    assert (cfg.spec_uri, cfg.track, cfg.run_dir, cfg.backend) == ("s3://b/t/spec.json", "gpu",
                                                                   "s3://b/trials/t/gpu-fallback", "cpu")
    assert cfg.resume_from == "s3://b/trials/t/trn2" and cfg.run == "gpu-fallback" and cfg.attempt == 2
    assert cfg.compile_cache_url == "s3://c/neuron/x/" and cfg.trial_id == "t"
    flagged = RunConfig.resolve(spec="a.json", track="trn2", run_dir="/tmp/x", backend="compiled", env=env)
    assert (flagged.spec_uri, flagged.track, flagged.backend, flagged.run) == ("a.json", "trn2", "compiled", "trn2")


def test_missing_settings_name_both_the_flag_and_the_variable() -> None:
    with pytest.raises(ConfigError, match=r"--spec / DUALTRACK_SPEC_URI.*--run-dir / DUALTRACK_RUN_DIR"):
        RunConfig.resolve(spec=None, track="gpu", run_dir=None, env={})
    with pytest.raises(ConfigError, match="DUALTRACK_BACKEND must be one of"):
        RunConfig.resolve(spec="a", track="gpu", run_dir="b", env={"DUALTRACK_BACKEND": "tpu"})


def test_default_backend_follows_the_track() -> None:
    from trainer.backends import default_backend

    assert default_backend("gpu") in ("cuda", "cpu")
    assert default_backend("trn2") in ("neuron", "compiled")


def test_instance_type_comes_from_the_job_or_from_imdsv2(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from trainer.environment import instance_type, instance_type_from_imds

    class Imds(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            ok = self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
            self._answer(200 if ok else 400, b"tok-123")

        def do_GET(self) -> None:
            authorised = self.headers.get("X-aws-ec2-metadata-token") == "tok-123"
            found = self.path == "/latest/meta-data/instance-type"
            self._answer(200 if authorised and found else 401, b"trn2.48xlarge")

        def _answer(self, code: int, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Imds)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_port}"
    try:
        assert instance_type_from_imds(endpoint) == "trn2.48xlarge"
        monkeypatch.delenv("DUALTRACK_INSTANCE_TYPE", raising=False)
        monkeypatch.setenv("DUALTRACK_IMDS_ENDPOINT", endpoint)
        monkeypatch.delenv("AWS_BATCH_JOB_ID", raising=False)
        assert instance_type() is None  # not a Batch job: never asks
        monkeypatch.setenv("AWS_BATCH_JOB_ID", "job-1")
        assert instance_type() == "trn2.48xlarge"
        monkeypatch.setenv("DUALTRACK_INSTANCE_TYPE", "p5.48xlarge")
        assert instance_type() == "p5.48xlarge"  # declared by the job definition wins
    finally:
        server.shutdown()
    # Nothing listening (off EC2): None, quickly, no exception; and "off" never asks.
    assert instance_type_from_imds(endpoint, timeout=0.5) is None
    assert instance_type_from_imds("off") is None


def test_launch_becomes_the_rank_so_batch_signals_reach_it(write_spec: Any, tmp_path: Any) -> None:
    """ECS stops a container by sending SIGTERM to its main process, then SIGKILL after the stop timeout
    (https://docs.aws.amazon.com/batch/latest/userguide/job_timeouts.html): the launcher the job starts must not sit
    between that signal and the rank, or the rank never checkpoints. ``launch`` replaces itself (exec) with the
    rank command, so the job's PID is the trainer's and the trainer's exit code is the job's."""
    import os
    import signal
    import subprocess
    import sys

    from trainer import SIGTERM_EXIT_CODE

    from tests.trainer.conftest import ROOT

    spec = write_spec(max_steps=400, checkpoint_interval_steps=200, fault_injection=None)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "containers")]),
           "DUALTRACK_SPEC_URI": spec, "DUALTRACK_TRACK": "gpu", "DUALTRACK_RUN_DIR": str(tmp_path / "run"),
           "DUALTRACK_BACKEND": "cpu", "AWS_BATCH_JOB_ATTEMPT": "1", "DUALTRACK_IMDS_ENDPOINT": "off"}
    proc = subprocess.Popen([sys.executable, "-m", "trainer", "launch"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:  # the rank's own progress lines, on the launcher's PID
        if '"event": "step"' in line or '"event":"step"' in line:
            break
    os.kill(proc.pid, signal.SIGTERM)
    code = proc.wait(timeout=120)
    assert code == SIGTERM_EXIT_CODE, proc.stderr.read()[-2000:] if proc.stderr else code
    summary = json.loads((tmp_path / "run" / "attempt-1" / "summary.json").read_text())
    assert summary["status"] == "interrupted"


def test_cpu_stand_ins_span_the_nodes_of_a_multi_node_job_with_one_rank_per_node() -> None:
    """A single-node CPU run stays one process (it simulates every data-parallel rank); on a multi-node job the
    CPU ranks still form one process group across the nodes: torchrun, one process per node, gloo."""
    for backend in ("cpu", "compiled"):
        main = launch_plan(backend=backend, devices_per_node=8, worker_args=ARGS, expected_nodes=2,
                           env={"AWS_BATCH_JOB_NUM_NODES": "2", "AWS_BATCH_JOB_NODE_INDEX": "0"},
                           local_address="10.0.0.5")
        assert main.argv == ["python", "-m", "torch.distributed.run", "--nnodes=2", "--node_rank=0",
                             "--nproc_per_node=1", "--master_addr=10.0.0.5", "--master_port=29500",
                             "-m", "trainer", "run", *ARGS]
        assert (main.nodes, main.node_rank, main.processes_per_node, main.env) == (2, 0, 1, {})
        child = launch_plan(backend=backend, devices_per_node=8, worker_args=ARGS, local_address="10.0.0.7",
                            env={"AWS_BATCH_JOB_NUM_NODES": "2", "AWS_BATCH_JOB_NODE_INDEX": "1",
                                 "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": "10.0.0.5"})
        assert "--node_rank=1" in child.argv and "--master_addr=10.0.0.5" in child.argv
        assert "--nproc_per_node=1" in child.argv
        single = launch_plan(backend=backend, devices_per_node=8, worker_args=ARGS,
                             env={"AWS_BATCH_JOB_NUM_NODES": "1", "AWS_BATCH_JOB_NODE_INDEX": "0"})
        assert single.argv == ["python", "-m", "trainer", "run", *ARGS]


def test_the_rendezvous_port_comes_from_the_environment() -> None:
    env = {"AWS_BATCH_JOB_NUM_NODES": "2", "AWS_BATCH_JOB_NODE_INDEX": "1",
           "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": "127.0.0.1", "DUALTRACK_RENDEZVOUS_PORT": "41234"}
    for backend in ("cpu", "cuda"):
        plan = launch_plan(backend=backend, devices_per_node=8, worker_args=ARGS, env=env)
        assert "--master_port=41234" in plan.argv
    with pytest.raises(LaunchError, match="DUALTRACK_RENDEZVOUS_PORT"):
        launch_plan(backend="cpu", devices_per_node=1, worker_args=ARGS,
                    env={**env, "DUALTRACK_RENDEZVOUS_PORT": "port"})
    # A single-node run never rendezvouses, so it never reads the port.
    assert launch_plan(backend="cpu", devices_per_node=1, worker_args=ARGS,
                       env={"DUALTRACK_RENDEZVOUS_PORT": "port"}).argv[:4] == ["python", "-m", "trainer", "run"]


def test_cpu_stand_ins_can_run_several_processes_per_node() -> None:
    env = {"AWS_BATCH_JOB_NUM_NODES": "2", "AWS_BATCH_JOB_NODE_INDEX": "0",
           "DUALTRACK_STANDIN_PROCESSES_PER_NODE": "2"}
    plan = launch_plan(backend="cpu", devices_per_node=4, worker_args=ARGS, env=env)
    assert "--nproc_per_node=2" in plan.argv and plan.processes_per_node == 2
    one_node = launch_plan(backend="compiled", devices_per_node=4, worker_args=ARGS,
                           env={"DUALTRACK_STANDIN_PROCESSES_PER_NODE": "2"})
    assert one_node.argv[:3] == ["python", "-m", "torch.distributed.run"] and "--nnodes=1" in one_node.argv
    for bad in ("0", "5", "two"):
        with pytest.raises(LaunchError, match="DUALTRACK_STANDIN_PROCESSES_PER_NODE must be a whole number"):
            launch_plan(backend="cpu", devices_per_node=4, worker_args=ARGS,
                        env={"DUALTRACK_STANDIN_PROCESSES_PER_NODE": bad})
    # A device backend runs one process per device whatever the variable says.
    cuda = launch_plan(backend="cuda", devices_per_node=4, worker_args=ARGS,
                       env={"DUALTRACK_STANDIN_PROCESSES_PER_NODE": "2"})
    assert "--nproc_per_node=4" in cuda.argv
