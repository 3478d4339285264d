"""The optimizer (AdamW over the trainable parameters) and its state by parameter name.

The layout decides how the state is held, not this module: a replicated run (a single process, or DDP) holds the
whole state on every process; FSDP2 and tensor parallelism make the parameters DTensors, so AdamW's state is a
DTensor sharded like them. A checkpoint keeps the state under the parameters' names: every process writes its share
of each DTensor state (process 0 alone the replicated ones) with ``torch.distributed.checkpoint``, and every process
reads back what its own layout holds, so a checkpoint of any layout and process count loads into any other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from trainer.sharded import CpuTwin, to_param

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from trainer.backends import Backend

STATE_KEYS = ("step", "exp_avg", "exp_avg_sq")


def _mesh_of(param: torch.Tensor) -> DeviceMesh | None:
    from torch.distributed.tensor import DTensor

    return param.device_mesh if isinstance(param, DTensor) else None


class Optimizer:
    """AdamW over ``named`` (see the module doc). ``twin`` is the CPU twin of the run's device mesh where the
    parameters are DTensors (None otherwise); ``main`` whether this is process 0; ``sharding`` the layout's name."""

    def __init__(self, named: list[tuple[str, torch.nn.Parameter]], *, lr: float, weight_decay: float,
                 twin: CpuTwin | None, main: bool, sharding: str):
        self.named, self.twin, self.main, self.sharding = named, twin, main, sharding
        # The foreach kernels take one kind of tensor per call: DTensors on one mesh, or plain tensors. A layout that
        # mixes them (LoRA under tensor parallelism, FSDP2 over tensor parallelism) steps parameter by parameter.
        kinds = {id(_mesh_of(p)) for _, p in named}
        self.local = torch.optim.AdamW([p for _, p in named], lr=lr, weight_decay=weight_decay,
                                       foreach=False if len(kinds) > 1 else None)

    def step(self, backend: Backend) -> None:
        backend.optimizer_step(self.local)

    def zero_grad(self) -> None:
        for _, p in self.named:
            p.grad = None

    # ---- state by parameter name ---------------------------------------------------------------------------
    def loaded_names(self) -> list[str]:
        """The parameters whose state this process reads from a checkpoint: all of them (its share of each)."""
        return [n for n, _ in self.named]

    def state_shard(self) -> dict[str, dict[str, torch.Tensor]]:
        """This process's part of the state, on the CPU, keyed by parameter name: its share of every DTensor
        state, and (process 0 only) the replicated ones."""
        out: dict[str, dict[str, torch.Tensor]] = {}
        for name, param in self.named:  # the same names, in the same order, on every process
            state = self.local.state.get(param)
            if not state:
                continue
            if _mesh_of(param) is None and not self.main:
                continue
            out[name] = {k: self._host_copy(state[k]) for k in STATE_KEYS}
        return out

    def _host_copy(self, value: torch.Tensor) -> torch.Tensor:
        if self.twin is not None:
            return self.twin.to_cpu(value)
        return torch.as_tensor(value).detach().to("cpu", copy=True)

    def make_template(self, name: str, key: str, size: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """The tensor a checkpoint reader fills for one state entry: whole, or this process's share of it."""
        param = dict(self.named)[name]
        if self.twin is not None and key != "step":
            return self.twin.empty_like(param, dtype)
        return torch.empty(size, dtype=dtype)

    def load_shard(self, shard: dict[str, dict[str, torch.Tensor]]) -> None:
        params = dict(self.named)
        for name, state in shard.items():
            param = params[name]
            self.local.state[param] = {
                "step": torch.as_tensor(state["step"]).to(torch.float32),  # AdamW's non-capturable step: CPU
                "exp_avg": to_param(state["exp_avg"], param),
                "exp_avg_sq": to_param(state["exp_avg_sq"], param)}
