"""The FSDP2 helpers on a one-process device mesh, on the CPU and (where there is one) an NVIDIA GPU: sharded
weights gathered whole and loaded back, and optimizer state moved to the host and back to the parameter's device.
The multi-process behaviour (sums over processes, checkpoints across layouts) is in ``test_sharded_checkpoints``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from trainer import fsdp
from trainer.modeling import build_model, build_tokenizer

from lambdas.domain.trial import parse_trial

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


def _model(write_spec: Any, device: str) -> torch.nn.Module:
    spec = parse_trial(Path(write_spec(method="full", lora=None)).read_text(), allow_local_paths=True)
    return build_model(spec, build_tokenizer(spec)).to(device)


@pytest.mark.parametrize("one_process", DEVICES, indirect=True)
def test_sharded_weights_gather_whole_and_load_back(one_process: str, write_spec: Any) -> None:
    from torch.distributed.tensor import DTensor

    model = _model(write_spec, one_process)
    reference = {k: v.detach().to("cpu").clone() for k, v in model.state_dict().items()}
    fsdp.shard_model(model, one_process, 1)
    assert all(isinstance(p, DTensor) for p in model.parameters())
    gathered = fsdp.full_weights(model, main=True)
    assert gathered is not None and sorted(gathered) == sorted(reference)
    assert all(torch.equal(gathered[k], reference[k]) for k in reference)

    with torch.no_grad():
        for p in model.parameters():
            p.to_local().zero_()
    fsdp.load_full_weights(model, reference)
    again = fsdp.full_weights(model, main=True)
    assert again is not None and all(torch.equal(again[k], reference[k]) for k in reference)
    with pytest.raises(ValueError, match="missing"):
        fsdp.load_full_weights(model, {k: v for k, v in reference.items() if "lm_head" not in k})


@pytest.mark.parametrize("one_process", DEVICES, indirect=True)
def test_optimizer_state_goes_to_the_host_and_back_to_the_parameters_device(one_process: str,
                                                                            write_spec: Any) -> None:
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor

    model = _model(write_spec, one_process)
    fsdp.shard_model(model, one_process, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    model(input_ids=torch.ones((1, 8), dtype=torch.long, device=one_process)).logits.sum().backward()
    optimizer.step()
    cpu_mesh = DeviceMesh.from_group(dist.group.WORLD, "cpu")
    param = next(iter(model.parameters()))
    state = optimizer.state[param]["exp_avg"]
    host = fsdp.to_cpu(state, cpu_mesh)
    assert isinstance(host, DTensor) and host.to_local().device.type == "cpu"
    assert host.placements == state.placements and host.shape == state.shape
    empty = fsdp.empty_like_shard(param, torch.float32, cpu_mesh)
    assert empty.shape == param.shape and empty.to_local().device.type == "cpu"
    back = fsdp.to_param(host, param)
    assert isinstance(back, DTensor) and back.to_local().device == param.to_local().device
    assert torch.equal(back.to_local(), state.to_local())
    assert fsdp.to_cpu(optimizer.state[param]["step"], cpu_mesh).device.type == "cpu"
