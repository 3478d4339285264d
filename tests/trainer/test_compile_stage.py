"""The warm-up compile stage (run ``trn2-compile``): a few steps on every rank to build the graphs, nothing kept
but the compile cache, and every second of it compile time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from trainer.config import ConfigError, RunConfig
from trainer.launch import COMPILE_ONLY_VARIABLE, NEURON_PARALLEL_COMPILE, launch_plan
from trainer.runner import COMPILE_STAGE_STEPS

from tests.trainer.conftest import ROOT
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


def test_a_torchneuron_compile_stage_runs_its_steps_on_the_trn2_hosts_compile_only_by_opt_in() -> None:
    """"How torch.compile works on Neuron" (awsdocs-neuron torch/compile/about-torch-compile): a graph compiles on
    its first call into the NEFF cache, so the stage runs its few steps as training does, with no
    neuron_parallel_compile. The same page lists a compile-only mode, whose switch only vLLM Neuron's "TorchNeuron
    Native backend" design names ("enables TorchNeuron Native compile-only mode via ``TORCH_NEURONX_COMPILE_ONLY=1``",
    for inference graphs); "TorchNeuron environment variables": boolean settings take 1 or 0. Undocumented for a
    training step, it is the job's opt-in. The TorchNeuron FAQ ("Native PyTorch for AWS Trainium": "Can I compile
    my model using torch.compile on a compute instance without Trainium hardware? No. ... requires compilation on
    Trainium2 or Trainium3") keeps the stage on Trn2 hosts, where the target is detected: no
    ``NEURON_PLATFORM_TARGET_OVERRIDE`` (vLLM Neuron "CPU Compilation": needed only "since no hardware is present
    to auto-detect it")."""
    stage = launch_plan(backend="neuron", devices_per_node=64, worker_args=ARGS, env={}, compile_only=True)
    assert stage.env[COMPILE_ONLY_VARIABLE] == "0" and stage.torchrun_args is not None
    assert NEURON_PARALLEL_COMPILE not in stage.argv and "NEURON_PLATFORM_TARGET_OVERRIDE" not in stage.env
    single = launch_plan(backend="neuron", devices_per_node=1, worker_args=ARGS, env={}, compile_only=True)
    assert single.argv[0] == "python" and single.env == {COMPILE_ONLY_VARIABLE: "0"}
    # A deployment that has tried compile-only mode on its hosts opts the stage in through the job's environment.
    opted_in = launch_plan(backend="neuron", devices_per_node=64, worker_args=ARGS,
                           env={COMPILE_ONLY_VARIABLE: "1"}, compile_only=True)
    assert opted_in.env[COMPILE_ONLY_VARIABLE] == "1"
    # Training never compiles without running, whatever the image or the job sets.
    training = launch_plan(backend="neuron", devices_per_node=64, worker_args=ARGS, env={COMPILE_ONLY_VARIABLE: "1"})
    assert training.env[COMPILE_ONLY_VARIABLE] == "0"
    # The retired XLA path and the stand-in know nothing of it.
    for backend in ("xla", "compiled"):
        plan = launch_plan(backend=backend, devices_per_node=64, worker_args=ARGS, env={}, compile_only=True)
        assert COMPILE_ONLY_VARIABLE not in plan.env


@pytest.mark.parametrize(("execution", "expected"), [("compiled", "1"), ("eager", "0")])
def test_compile_only_reaches_a_torchneuron_rank_only_when_its_step_is_torch_compiled(
        tmp_path: Path, execution: str, expected: str) -> None:
    """"How torch.compile works on Neuron": compile-only mode is a mode of ``torch.compile(backend="neuron")``; an
    eager step compiles its operations as it runs them, so an eager stage runs its steps (behind the seam: a stand-in
    ``torch_neuronx`` registers the ``neuron`` device, as in the one-code-path test)."""
    fake = tmp_path / "fake"
    (fake / "torch_neuronx").mkdir(parents=True)
    (fake / "torch_neuronx" / "__init__.py").write_text(
        "import torch\ntorch.utils.rename_privateuse1_backend('neuron')\n")
    script = textwrap.dedent(f"""
        import json, os
        from trainer.backends import make_backend
        make_backend("neuron", "bf16", execution={execution!r})
        print(json.dumps({{k: os.environ.get(k) for k in ({COMPILE_ONLY_VARIABLE!r},
                                                         "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION")}}))
    """)
    env = {**os.environ, COMPILE_ONLY_VARIABLE: "1",
           "PYTHONPATH": os.pathsep.join([str(fake), str(ROOT), str(ROOT / "containers")])}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    # Either way a graph that fails to compile fails the stage ("TorchNeuron environment variables").
    assert seen == {COMPILE_ONLY_VARIABLE: expected, "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION": "1"}


def test_torchneuron_reaches_the_s3_cache_entry_through_a_local_mirror(tmp_path: Path) -> None:
    """"TorchNeuron environment variables": ``TORCH_NEURONX_NEFF_CACHE_DIR`` is a directory (default
    ``/tmp/neff_cache``); no TorchNeuron page has it read an s3:// URL. So the TorchNeuron backend does not claim the
    URL (only the retired PyTorch/XLA torch-neuronx reads ``NEURON_COMPILE_CACHE_URL`` itself) and gets the entry
    mirrored into a local directory, which publishing copies back."""
    from trainer.backends import TorchNeuronBackend
    from trainer.cache import CompileCache

    assert getattr(TorchNeuronBackend, "reads_cache_url", False) is False
    cache = CompileCache.open(str(tmp_path / "entry"), compiles=True, on_neuron=False)
    assert cache.directory is not None and cache.directory.is_dir()
    (cache.directory / "neff" / "graph.neff").parent.mkdir(parents=True)
    (cache.directory / "neff" / "graph.neff").write_bytes(b"neff")
    assert cache.publish() >= 2  # the artefact, then the completion marker
    assert (tmp_path / "entry" / "neff" / "graph.neff").read_bytes() == b"neff"
