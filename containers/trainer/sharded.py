"""The state of a model whose parameters are DTensors (FSDP2, tensor parallelism, or both), to and from the
layout-free checkpoints: the weights gathered whole for a save and cut back to each process's share on a load, and
the optimizer's DTensor state moved to the host and back.

A checkpoint's optimizer state is written with ``torch.distributed.checkpoint`` from a background thread, so its
host copies live on a CPU twin of the run's device mesh (the same shape and dimension names, over gloo groups):
a DTensor stays a DTensor, each process writes its own shard, and any process count and layout reads them back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


def is_sharded(model: torch.nn.Module) -> bool:
    """Whether any of ``model``'s parameters is a DTensor."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())


def full_state(model: torch.nn.Module, *, main: bool) -> dict[str, torch.Tensor] | None:
    """Every entry of ``model``'s state dict, gathered whole onto the CPU of process 0 (collective: every process
    calls it); None elsewhere."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if not main:
        return None
    return {k: torch.as_tensor(v).detach().to("cpu").contiguous().clone() for k, v in state.items()}


def load_full(model: torch.nn.Module, tensors: dict[str, torch.Tensor], *, strict: bool = True) -> None:
    """Load whole tensors (every process holds them) by state-dict name: each process copies its own share out of
    them, with no communication (``src_data_rank=None``), so no process can wait on another here. ``strict``: the
    names must be exactly the model's; otherwise a subset of them (a LoRA adapter)."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    state = model.state_dict()
    missing = sorted(set(state) - set(tensors)) if strict else []
    unexpected = sorted(set(tensors) - set(state))
    if missing or unexpected:
        raise ValueError(f"checkpoint weights do not match the model: missing {missing[:3]}, "
                         f"unexpected {unexpected[:3]}")
    with torch.no_grad():
        for name, whole in tensors.items():
            current = state[name]
            full = whole.to(current.dtype)
            if isinstance(current, DTensor):
                mine = distribute_tensor(full, current.device_mesh, current.placements, src_data_rank=None)
                current.to_local().copy_(mine.to_local())
            else:
                current.copy_(full.to(current.device))


class CpuTwin:
    """The CPU twin of a device mesh (collective to build: every process calls it)."""

    def __init__(self, mesh: DeviceMesh):
        from torch.distributed.device_mesh import init_device_mesh

        assert mesh.mesh_dim_names is not None  # the run's mesh is named ("dp", "tp")
        names = tuple(mesh.mesh_dim_names)
        self.names = names
        self.mesh = init_device_mesh("cpu", tuple(mesh.shape), mesh_dim_names=names,
                                     backend_override=dict.fromkeys(names, "gloo"))

    def of(self, mesh: DeviceMesh) -> DeviceMesh:
        """The twin of ``mesh`` (the device mesh or one of its dimensions)."""
        assert mesh.mesh_dim_names is not None  # the run's mesh and its dimensions are named
        names = tuple(mesh.mesh_dim_names)
        return self.mesh if names == self.names else self.mesh[names]

    def to_cpu(self, value: torch.Tensor) -> torch.Tensor:
        """A host copy of a state tensor that can be written from a background thread (a DTensor stays one)."""
        from torch.distributed.tensor import DTensor

        if isinstance(value, DTensor):
            local = value.to_local().detach().to("cpu", copy=True)
            return DTensor.from_local(local, device_mesh=self.of(value.device_mesh), placements=value.placements,
                                      run_check=False, shape=value.shape, stride=value.stride())
        return torch.as_tensor(value).detach().to("cpu", copy=True)

    def empty_like(self, param: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """An empty CPU tensor a checkpoint reader fills: this process's share of a DTensor, or a whole tensor."""
        from torch.distributed.tensor import DTensor, empty

        if isinstance(param, DTensor):
            return empty(param.shape, dtype=dtype, device_mesh=self.of(param.device_mesh),  # type: ignore[attr-defined]
                         placements=param.placements)
        return torch.empty(param.shape, dtype=dtype)


def to_param(value: torch.Tensor, param: torch.Tensor) -> torch.Tensor:
    """A loaded CPU state tensor placed like ``param`` (its device, and its mesh for a DTensor)."""
    from torch.distributed.tensor import DTensor

    if isinstance(value, DTensor) and isinstance(param, DTensor):
        local = value.to_local().to(param.to_local().device, param.dtype)
        return DTensor.from_local(local, device_mesh=param.device_mesh, placements=param.placements,
                                  run_check=False, shape=param.shape, stride=param.stride())
    return value.to(param.device, param.dtype)


def clip_grad_norm_(params: list[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` over parameters that mix DTensors (on one or more meshes) and plain
    tensors: the norm of each mesh's gradients is made whole (``full_tensor``), the plain ones (the same on every
    process of a tensor-parallel group) count once, and every gradient is scaled by the one total."""
    from torch.distributed.tensor import DTensor

    groups: dict[DeviceMesh | None, list[torch.nn.Parameter]] = {}
    for p in params:
        if p.grad is not None:
            groups.setdefault(p.device_mesh if isinstance(p, DTensor) else None, []).append(p)
    if len(groups) <= 1:  # all plain, or all on one mesh: torch's own
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    squares: list[torch.Tensor] = []
    for members in groups.values():
        norm = torch.nn.utils.get_total_norm([p.grad for p in members if p.grad is not None])
        if isinstance(norm, DTensor):
            norm = norm.full_tensor()
        squares.append(norm.float().pow(2))
    device = squares[0].device
    total = torch.stack([s.to(device) for s in squares]).sum().sqrt()
    for members in groups.values():
        torch.nn.utils.clip_grads_with_norm_(members, max_norm, total)
    return total
