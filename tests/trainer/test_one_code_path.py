"""Both tracks run one training path: a track differs only in device, process-group backend and compile backend.

AWS's TorchNeuron tutorial ("Tutorial: Train with DDP, FSDP2, and DTensor on Neuron") runs one script on ``cpu`` +
``gloo`` and on ``neuron`` + ``neuron``, changing only ``--device`` and ``--backend``; the stand-in here does the same
with Inductor's ``torch.compile`` in place of the Neuron compiler."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from trainer.backends import CPU, CUDA, NEURON, TRACK_DEVICES, make_backend
from trainer.launch import NEURON_EFA, launch_plan

from lambdas.domain.vocabulary import XLA_LABEL, NoTrainingStack, trn2_backend
from tests.trainer.conftest import ROOT, tiny_trial
from tests.trainer.helpers import launched, losses, summary_of

ARGS = ["--quiet"]


def test_a_track_differs_only_in_device_process_group_and_compile_backend() -> None:
    """"What is TorchNeuron?": the ``neuron`` device; "How to use torch.distributed on Neuron":
    ``init_process_group(backend="neuron")``; "torch.compile backend reference": ``torch.compile(backend="neuron",
    fullgraph=True)``. CUDA: ``nccl`` and Inductor; the stand-ins: ``cpu``, ``gloo`` and Inductor."""
    assert (NEURON.device, NEURON.process_group, NEURON.compile_backend) == ("neuron", "neuron", "neuron")
    assert (CUDA.device, CUDA.process_group, CUDA.compile_backend) == ("cuda", "nccl", "inductor")
    assert (CPU.device, CPU.process_group, CPU.compile_backend) == ("cpu", "gloo", "inductor")
    assert TRACK_DEVICES["compiled"] is CPU and TRACK_DEVICES["cpu"] is CPU
    for name in ("cpu", "compiled"):
        backend = make_backend(name, "bf16")
        # The same wrappers on both tracks: DDP for LoRA, FSDP2 for full-parameter runs.
        assert backend.torch_data_parallel and backend.process_group == "gloo"


def test_the_trainium2_stand_in_follows_the_trials_execution_mode() -> None:
    import torch

    model = torch.nn.Linear(2, 2)
    assert make_backend("compiled", "fp32", execution="eager").compiled(model) is model
    compiled = make_backend("compiled", "fp32", execution="compiled").compiled(model)
    assert compiled is not model and compiled(torch.ones(1, 2)).shape == (1, 2)


def test_an_image_up_to_neuron_2_31_runs_the_retired_xla_path() -> None:
    """"Neuron no longer supports PyTorch/XLA for training starting with Neuron 2.30", and the PyTorch/XLA-based
    torch-neuronx "last shipped in Neuron 2.31" ("Update a manual PyTorch installation", Neuron 2.33.0,
    https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/setup/pytorch/update-manual.html): an image pinning 2.31
    or older carries the retired stack (run, labelled, on the xla backend); from 2.33.0 it is TorchNeuron ("Neuron
    2.33.0 introduces the native torch-neuronx backend", "Release Notes for Neuron Component: TorchNeuron",
    https://awsdocs-neuron.readthedocs-hosted.com/en/latest/release-notes/components/torchneuron.html)."""
    assert trn2_backend("2.26.0") == trn2_backend("2.31") == "xla"
    assert trn2_backend("2.33.0") == trn2_backend("2.33.1") == trn2_backend("2.34") == "neuron"
    assert trn2_backend("2.34.0") == trn2_backend(None) == "neuron"
    assert XLA_LABEL == "PyTorch/XLA (end of support for training)"


@pytest.mark.parametrize("release", ["2.32", "2.32.0"])
def test_neuron_sdk_2_32_carries_no_training_stack_and_is_refused(release: str) -> None:
    """Neuron 2.32.0 ships neither stack: "torch-neuronx (PyTorch/XLA) is not included in Neuron 2.32.0. To update to
    torch-neuronx, use the latest Neuron release that ships it, Neuron 2.31" ("Update a manual PyTorch installation",
    Neuron 2.32.0, https://awsdocs-neuron.readthedocs-hosted.com/en/v2.32.0/setup/pytorch/update-manual.html), and
    TorchNeuron's first release is 2.33.0 ("Release Notes for Neuron Component: TorchNeuron",
    https://awsdocs-neuron.readthedocs-hosted.com/en/latest/release-notes/components/torchneuron.html). An image
    pinning it is refused, with the releases to pin instead, rather than run as TorchNeuron."""
    with pytest.raises(NoTrainingStack) as refused:
        trn2_backend(release)
    message = str(refused.value)
    assert f"Neuron SDK {release} ships neither TorchNeuron nor PyTorch/XLA" in message
    assert "2.33.0 or later" in message and "2.31 or earlier" in message


def test_a_torchneuron_rank_gets_the_neuron_device_process_group_and_compile_settings(tmp_path: Path) -> None:
    """Behind the seam (no Neuron device here): a stand-in ``torch_neuronx`` registers the ``neuron`` device the way
    TorchNeuron does (PyTorch's PrivateUse1 device, renamed); the backend then names the device, the ``neuron``
    process group, the NEFF cache directory and keeps ``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=1` ("TorchNeuron
    environment variables": a graph that fails to compile raises instead of running eagerly)."""
    fake = tmp_path / "fake"
    (fake / "torch_neuronx").mkdir(parents=True)
    (fake / "torch_neuronx" / "__init__.py").write_text(
        "import torch\ntorch.utils.rename_privateuse1_backend('neuron')\n")
    script = textwrap.dedent(f"""
        import json, os
        from pathlib import Path
        from trainer.backends import make_backend
        os.environ["TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"] = "0"  # an image or a user turning fallback on
        backend = make_backend("neuron", "bf16", ["--optlevel=2"], execution="compiled")
        backend.configure_cache(Path({str(tmp_path / 'neff')!r}))
        print(json.dumps({{"device": str(backend.device), "pg": backend.process_group,
                          "stand_in": backend.stand_in, "ddp": backend.torch_data_parallel,
                          "in_graph": backend.collectives_in_graph, "execution": backend.execution,
                          "env": {{k: os.environ.get(k) for k in ("TORCH_NEURONX_NEFF_CACHE_DIR", "NEURON_CC_FLAGS",
                                                                "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION")}}}}))
    """)
    env = {**os.environ, "LOCAL_RANK": "3",
           "PYTHONPATH": os.pathsep.join([str(fake), str(ROOT), str(ROOT / "containers")])}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["device"] == "neuron" and seen["pg"] == "neuron" and seen["stand_in"] is False
    assert seen["ddp"] is True and seen["in_graph"] is False and seen["execution"] == "compiled"
    assert seen["env"] == {"TORCH_NEURONX_NEFF_CACHE_DIR": str(tmp_path / "neff"), "NEURON_CC_FLAGS": "--optlevel=2",
                           "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION": "1"}


@pytest.mark.parametrize("local_rank", ["0", "5"])
def test_a_torchneuron_rank_takes_the_neuron_device_without_an_index(tmp_path: Path, local_rank: str) -> None:
    """"How to use torch.distributed on Neuron"
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/guides/torch-distributed.html) runs its torchrun
    workers with ``torch.tensor([float(rank + 1)], device=torch.device("neuron"))``: no device index, ``LOCAL_RANK``
    only printed. Which logical NeuronCore a worker gets is TorchNeuron's to decide, and so is the runtime's placement:
    "Neuron framework extensions set most of these on your behalf, so set them explicitly only when you need a
    specific behavior" ("Reference: Neuron Runtime environment variables",
    https://awsdocs-neuron.readthedocs-hosted.com/en/latest/neuron-runtime/api/nrt-env-var-reference.html). So
    every local rank names ``neuron`` (not ``neuron:<LOCAL_RANK>``, the CUDA pattern) and the backend sets no
    ``NEURON_RT_VISIBLE_CORES`` / ``NEURON_RT_NUM_CORES``."""
    fake = tmp_path / "fake"
    (fake / "torch_neuronx").mkdir(parents=True)
    (fake / "torch_neuronx" / "__init__.py").write_text(
        "import torch\ntorch.utils.rename_privateuse1_backend('neuron')\n")
    script = textwrap.dedent("""
        import json, os
        from trainer.backends import make_backend
        backend = make_backend("neuron", "bf16", execution="eager")
        print(json.dumps({"device": str(backend.device), "index": backend.device.index,
                          "collective": str(backend.collective_device()),
                          "placement": {k: os.environ.get(k) for k in ("NEURON_RT_VISIBLE_CORES",
                                                                       "NEURON_RT_NUM_CORES")}}))
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURON_RT_")}
    env.update({"LOCAL_RANK": local_rank, "RANK": local_rank, "WORLD_SIZE": "8",
                "PYTHONPATH": os.pathsep.join([str(fake), str(ROOT), str(ROOT / "containers")])})
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"device": "neuron", "index": None, "collective": "neuron",
                    "placement": {"NEURON_RT_VISIBLE_CORES": None, "NEURON_RT_NUM_CORES": None}}


def test_a_trainium2_node_launches_one_rank_per_logical_core_with_efa_between_nodes() -> None:
    """"How to use torch.distributed on Neuron": torchrun starts one process per NeuronCore, 64 on a trn2.48xlarge
    (LNC 2); across nodes, libfabric on EFA (``FI_PROVIDER=efa``, device RDMA, fork safety)."""
    env = {"AWS_BATCH_JOB_NUM_NODES": "2", "AWS_BATCH_JOB_NODE_INDEX": "0"}
    plan = launch_plan(backend="neuron", devices_per_node=64, worker_args=ARGS, env=env, local_address="10.0.0.5")
    assert "--nproc_per_node=64" in plan.argv and "--nnodes=2" in plan.argv
    assert {k: plan.env[k] for k in NEURON_EFA} == {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1",
                                                    "FI_EFA_FORK_SAFE": "1"}
    assert plan.env["NEURON_RT_ROOT_COMM_ID"] == "10.0.0.5:62182"


@pytest.mark.slow
def test_two_ddp_ranks_of_the_compiled_stand_in_train_like_one(data_dir: Path, tmp_path: Path) -> None:
    """LoRA on the Trainium2 stand-in: 2 processes under DDP with the step compiled give the losses of 1 process
    (same global batch, same data order) within 1e-5."""
    tracks = {"trn2": {"instance_type": "trn2.3xlarge", "nodes": 1, "tensor_parallel": 1, "pipeline_parallel": 1,
                       "neuron_sdk": "2.26.0"}}
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(tiny_trial(str(data_dir), tracks=tracks, fault_injection=None, max_steps=6,
                                          evaluation={"interval_steps": 6, "prompts": [], "max_new_tokens": 1})))
    runs: dict[int, dict[str, Any]] = {}
    for processes in (1, 2):
        done = launched(str(spec), tmp_path / f"p{processes}", processes, 1, "trn2", backend="compiled")
        assert done.returncode == 0, done.stderr[-3000:]
        runs[processes] = summary_of(tmp_path / f"p{processes}", 1)
    assert runs[2]["backend"] == "compiled" and runs[2]["layout"]["world_size_run"] == 2
    assert runs[2]["communication"]["measured"] is True and runs[2]["communication"]["communication_s"] > 0
    one, two = losses(runs[1]), losses(runs[2])
    assert sorted(one) == sorted(two) == list(range(1, 7))
    for step, value in one.items():
        assert two[step] == pytest.approx(value, abs=1e-5), (step, value, two[step])
