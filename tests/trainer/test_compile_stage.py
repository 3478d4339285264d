"""The warm-up compile stage (run ``trn2-compile``): a few steps on every rank to build the graphs, nothing kept
but the compile cache, and every second of it compile time."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainer.config import ConfigError, RunConfig
from trainer.launch import NEURON_PARALLEL_COMPILE, launch_plan
from trainer.runner import COMPILE_STAGE_STEPS

from tests.trainer.helpers import attempt

ARGS = ["--spec", "s3://b/spec.json", "--track", "trn2", "--run-dir", "s3://b/trn2-compile"]


def test_the_compile_stage_builds_graphs_and_keeps_no_training_results(write_spec, tmp_path: Path) -> None:
    spec = write_spec()
    run_dir = tmp_path / "trials" / "t" / "trn2-compile"
    code, summary = attempt(spec, str(run_dir), track="trn2", run_name="trn2-compile")
    assert code == 0 and summary["status"] == "succeeded" and summary["run"] == "trn2-compile"
    assert summary["steps_this_attempt"] == COMPILE_STAGE_STEPS < summary["max_steps"]
    assert summary["checkpoints"] == [] and not (run_dir / "checkpoints").exists()
    phases = summary["phases"]
    # The whole loop is compile time: nothing is booked as training or evaluation.
    assert phases["compile_s"] > 0 and phases["train_s"] == phases["eval_s"] == 0.0
    assert summary["final_samples"] == []


def test_a_compile_stage_failure_is_a_failed_compile_with_its_message(write_spec, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DUALTRACK_FORCE_FAIL", "step")
    code, summary = attempt(write_spec(), str(tmp_path / "trn2-compile"), track="trn2", run_name="trn2-compile")
    assert code == 1 and summary["status"] == "failed"
    assert summary["compile"]["status"] == "failed"
    assert "failing in the step phase" in summary["compile"]["error"]


def test_the_compile_stage_runs_on_the_trn2_track_only() -> None:
    with pytest.raises(ConfigError, match="runs on the trn2 track"):
        RunConfig.resolve(spec="s.json", track="gpu", run_dir="/tmp/x", run="trn2-compile", env={})
    cfg = RunConfig.resolve(spec="s.json", track="trn2", run_dir="/tmp/trials/t/trn2-compile", env={})
    assert cfg.run == "trn2-compile" and cfg.compile_only  # named by its run directory, like every run


def test_the_retired_xla_path_compiles_through_neuron_parallel_compile_and_torchneuron_in_its_ranks() -> None:
    """PyTorch NeuronX neuron_parallel_compile CLI (PyTorch/XLA only): ``neuron_parallel_compile <run commands>`` runs
    a short trial run to extract the graphs, then compiles them in parallel into the persistent cache. "How
    torch.compile works on Neuron": TorchNeuron compiles a graph on its first call with a given input signature, so
    its compile stage runs the ranks like training, compile-only."""
    plan = launch_plan(backend="xla", devices_per_node=64, worker_args=ARGS, env={}, compile_only=True)
    assert plan.argv[0] == NEURON_PARALLEL_COMPILE
    assert plan.argv[1:4] == ["python", "-m", "torch.distributed.run"] and "--nproc_per_node=64" in plan.argv
    torchneuron = launch_plan(backend="neuron", devices_per_node=64, worker_args=ARGS, env={}, compile_only=True)
    assert NEURON_PARALLEL_COMPILE not in torchneuron.argv and torchneuron.torchrun_args is not None
    training = launch_plan(backend="neuron", devices_per_node=64, worker_args=ARGS, env={})
    assert training.argv[0] == "python"
    # The stand-in has no such driver: it compiles with torch.compile in the ranks themselves.
    standin = launch_plan(backend="compiled", devices_per_node=64, worker_args=ARGS, env={}, compile_only=True)
    assert NEURON_PARALLEL_COMPILE not in standin.argv
