"""Fully sharded data parallel (FSDP2, ``torch.distributed.fsdp.fully_shard``) for full-parameter runs on the GPU
track: every process holds 1/N of the weights, gradients and optimizer state, gathers a decoder layer's weights for
its forward and backward, and reduce-scatters that layer's gradients as its backward ends.

The trainer keeps its own accounting: the loss is already normalised by the global batch's tokens, so gradients
are summed over the processes (divide factor 1), exactly as the explicit all-reduce sums them; micro-batches other
than a process's last accumulate locally without communication. What FSDP2 shards are DTensors, which
``torch.distributed.checkpoint`` writes shard by shard and reads back at any process count and into any layout
(the ZeRO-1 and replicated ones included); the consolidated weights a checkpoint exports are gathered from them.
"""

from __future__ import annotations

from typing import Any

import torch


def shard_model(model: torch.nn.Module, device_type: str, world_size: int) -> Any:
    """Shard each decoder layer, then the rest of ``model`` (embeddings, final norm, head); returns the mesh."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, fully_shard

    mesh = init_device_mesh(device_type, (world_size,))
    for layer in _decoder_layers(model):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            # A plain SUM, not a mean: the loss carries the normalisation. With a divide factor alone FSDP2 would
            # use PREMUL_SUM, which gloo lacks; forcing sum-only collectives makes it a SUM and a division by 1.
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)
    return mesh


def time_collectives(model: torch.nn.Module, stats: Any) -> bool:
    """Route every FSDP2 all-gather and reduce-scatter of ``model`` through timed wrappers that add their time to
    ``stats`` (``trainer.distributed.CollectiveStats``: host clock on the CPU, CUDA events on the collective's
    stream). The wrappers run each collective synchronously on its stream, so the time is the collective's own.
    False where this torch release has no custom-collective hook (nothing is timed then)."""
    from torch.distributed.fsdp import FSDPModule

    try:
        from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultAllGather, DefaultReduceScatter
    except ImportError:
        return False
    if not hasattr(FSDPModule, "set_custom_all_gather") or not hasattr(FSDPModule, "set_custom_reduce_scatter"):
        return False

    class TimedAllGather(DefaultAllGather):  # type: ignore[misc]
        def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: Any,
                     async_op: bool = False) -> Any:
            started = stats.start()
            super().__call__(output_tensor, input_tensor, group, async_op=False)
            stats.stop(started)
            return None  # done: FSDP2 waits only on a Work it is given

    class TimedReduceScatter(DefaultReduceScatter):  # type: ignore[misc]
        def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: Any, op: Any,
                     async_op: bool = False) -> Any:
            started = stats.start()
            super().__call__(output_tensor, input_tensor, group, op, async_op=False)
            stats.stop(started)
            return None

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_custom_all_gather(TimedAllGather())
            module.set_custom_reduce_scatter(TimedReduceScatter())
    return True


def _decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise ValueError(f"cannot find the decoder layers of {type(model).__name__} to shard (model.layers)")
    return list(layers)


def sync_gradients(model: torch.nn.Module, enabled: bool) -> None:
    """Whether the next backward reduce-scatters (the last micro-batch) or only accumulates (the others)."""
    model.set_requires_gradient_sync(enabled)  # type: ignore[operator]


def full_weights(model: torch.nn.Module, *, main: bool) -> dict[str, torch.Tensor] | None:
    """Every weight, gathered whole onto the CPU of process 0 (collective: every process calls it)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if not main:
        return None
    return {k: torch.as_tensor(v).detach().to("cpu").contiguous().clone() for k, v in state.items()}


def load_full_weights(model: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> None:
    """Load whole weights (every process holds them) into the sharded model: each process copies its own shard out
    of them, with no communication (``src_data_rank=None``), so no process can wait on another here."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    state = model.state_dict()
    missing, unexpected = sorted(set(state) - set(tensors)), sorted(set(tensors) - set(state))
    if missing or unexpected:
        raise ValueError(f"checkpoint weights do not match the model: missing {missing[:3]}, "
                         f"unexpected {unexpected[:3]}")
    with torch.no_grad():
        for name, current in state.items():
            full = tensors[name].to(current.dtype)
            if isinstance(current, DTensor):
                mine = distribute_tensor(full, current.device_mesh, current.placements, src_data_rank=None)
                current.to_local().copy_(mine.to_local())
            else:
                current.copy_(full)


def to_cpu(value: torch.Tensor, cpu_mesh: Any) -> torch.Tensor:
    """A host copy of a (possibly sharded) state tensor that ``torch.distributed.checkpoint`` can write from a
    background thread: a DTensor stays a DTensor (its local shard on the CPU, over the CPU mesh)."""
    from torch.distributed.tensor import DTensor

    if isinstance(value, DTensor):
        local = value.to_local().detach().to("cpu", copy=True)
        return DTensor.from_local(local, device_mesh=cpu_mesh, placements=value.placements, run_check=False,
                                  shape=value.shape, stride=value.stride())
    return torch.as_tensor(value).detach().to("cpu", copy=True)


def empty_like_shard(param: torch.Tensor, dtype: torch.dtype, cpu_mesh: Any) -> torch.Tensor:
    """An empty CPU DTensor sharded like ``param``: a checkpoint reader fills in this process's part only."""
    from torch.distributed.tensor import empty

    return empty(param.shape, dtype=dtype, device_mesh=cpu_mesh, placements=param.placements)  # type: ignore[attr-defined]


def to_param(value: torch.Tensor, param: torch.Tensor) -> torch.Tensor:
    """A loaded CPU state tensor placed like ``param`` (its device, its mesh)."""
    from torch.distributed.tensor import DTensor

    if isinstance(value, DTensor) and isinstance(param, DTensor):
        local = value.to_local().to(param.to_local().device, param.dtype)
        return DTensor.from_local(local, device_mesh=param.device_mesh, placements=param.placements,
                                  run_check=False, shape=param.shape, stride=param.stride())
    return value.to(param.device, param.dtype)
