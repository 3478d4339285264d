"""FSDP2 and the sharded-state helpers (``trainer.sharded``) on a one-process device mesh, on the CPU and (where
there is one) an NVIDIA GPU: sharded weights gathered whole and loaded back, and optimizer state moved to the host
and back to the parameter's device. The multi-process behaviour (sums over processes, checkpoints across layouts) is
in ``test_sharded_checkpoints`` and ``test_tensor_parallel``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from trainer import fsdp, sharded
from trainer.modeling import build_model, build_tokenizer

from lambdas.domain.trial.rules import parse_trial

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture
def one_process(request: pytest.FixtureRequest) -> Iterator[str]:
    """A one-process group (gloo for the CPU, NCCL for CUDA tensors), torn down after the test."""
    device = request.param
    backend = "cpu:gloo,cuda:nccl" if device == "cuda" else "gloo"
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield device
    finally:
        dist.destroy_process_group()


def _mesh(device: str) -> Any:
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device, (1, 1), mesh_dim_names=("dp", "tp"))


def _model(write_spec: Any, device: str) -> torch.nn.Module:
    spec = parse_trial(Path(write_spec(method="full", lora=None)).read_text(), allow_local_paths=True)
    return build_model(spec, build_tokenizer(spec)).to(device)


@pytest.mark.parametrize("one_process", DEVICES, indirect=True)
def test_sharded_weights_gather_whole_and_load_back(one_process: str, write_spec: Any) -> None:
    from torch.distributed.tensor import DTensor

    model = _model(write_spec, one_process)
    reference = {k: v.detach().to("cpu").clone() for k, v in model.state_dict().items()}
    fsdp.shard_model(model, _mesh(one_process)["dp"])
    assert all(isinstance(p, DTensor) for p in model.parameters()) and sharded.is_sharded(model)
    gathered = sharded.full_state(model, main=True)
    assert gathered is not None and sorted(gathered) == sorted(reference)
    assert all(torch.equal(gathered[k], reference[k]) for k in reference)

    with torch.no_grad():
        for p in model.parameters():
            assert isinstance(p, DTensor)
            p.to_local().zero_()
    sharded.load_full(model, reference)
    again = sharded.full_state(model, main=True)
    assert again is not None and all(torch.equal(again[k], reference[k]) for k in reference)
    with pytest.raises(ValueError, match="missing"):
        sharded.load_full(model, {k: v for k, v in reference.items() if "lm_head" not in k})
    with pytest.raises(ValueError, match="unexpected"):
        sharded.load_full(model, {"nope.weight": torch.zeros(1)}, strict=False)


@pytest.mark.parametrize("one_process", DEVICES, indirect=True)
def test_optimizer_state_goes_to_the_host_and_back_to_the_parameters_device(one_process: str,
                                                                            write_spec: Any) -> None:
    from torch.distributed.tensor import DTensor

    model = _model(write_spec, one_process)
    mesh = _mesh(one_process)
    fsdp.shard_model(model, mesh["dp"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    model(input_ids=torch.ones((1, 8), dtype=torch.long, device=one_process)).logits.sum().backward()
    optimizer.step()
    twin = sharded.CpuTwin(mesh)
    param = next(iter(model.parameters()))
    assert isinstance(param, DTensor)
    state = optimizer.state[param]["exp_avg"]
    host = twin.to_cpu(state)
    assert isinstance(host, DTensor) and host.to_local().device.type == "cpu"
    assert host.placements == state.placements and host.shape == state.shape
    assert host.device_mesh.device_type == "cpu" and host.device_mesh.mesh_dim_names == ("dp",)
    empty = twin.empty_like(param, torch.float32)
    assert isinstance(empty, DTensor) and empty.shape == param.shape and empty.to_local().device.type == "cpu"
    back = sharded.to_param(host, param)
    assert isinstance(back, DTensor) and back.to_local().device == param.to_local().device
    assert torch.equal(back.to_local(), state.to_local())
    assert twin.to_cpu(optimizer.state[param]["step"]).device.type == "cpu"
