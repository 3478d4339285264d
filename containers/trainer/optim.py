"""The optimizer, replicated or sharded ZeRO-1 style, and its state by parameter name.

Replicated (LoRA, a single process, Neuron): every process holds the whole AdamW state and steps every parameter;
process 0 saves it and every process loads all of it.

Sharded (full-parameter with several processes on the CPU stand-ins and CUDA): each parameter has one owning
process (a deterministic greedy partition by size). Gradients are still all-reduced whole, so every process clips
the same global norm; each process then runs AdamW for the parameters it owns only, so its optimizer state is
1/N of the total, and the owners broadcast the updated parameters (one flat broadcast per process, timed as
communication). A checkpoint keeps each process's state under the parameters' names, so it loads at any process
count: each process asks for the names it owns now. ``torch.distributed.optim.ZeroRedundancyOptimizer`` does the
same partitioning but fuses the update and the broadcast in one ``step``, which leaves the broadcast untimeable.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from trainer.distributed import Distributed

STATE_KEYS = ("step", "exp_avg", "exp_avg_sq")


def partition(named: list[tuple[str, torch.nn.Parameter]], processes: int) -> dict[str, int]:
    """Owner process of each parameter: largest first onto the least-loaded process (ties: lowest index)."""
    load = [0] * processes
    owners: dict[str, int] = {}
    for name, param in sorted(named, key=lambda item: (-item[1].numel(), item[0])):
        owner = min(range(processes), key=lambda r: (load[r], r))
        owners[name] = owner
        load[owner] += param.numel()
    return owners


class Optimizer:
    """AdamW over the trainable parameters, replicated or sharded across the processes (see the module doc)."""

    def __init__(self, named: list[tuple[str, torch.nn.Parameter]], *, lr: float, weight_decay: float,
                 dist: Distributed, sharded: bool):
        self.dist = dist
        self.named = named
        self.sharded = sharded and dist.world_size > 1
        self.owners = partition(named, dist.world_size) if self.sharded else {n: 0 for n, _ in named}
        own = [p for n, p in named if not self.sharded or self.owners[n] == dist.rank]
        # A process that owns nothing (more processes than parameters) still needs a param group for the schedule.
        self.local = torch.optim.AdamW(own or [torch.nn.Parameter(torch.zeros(0))], lr=lr,
                                       weight_decay=weight_decay)
        self._by_owner = [[p for n, p in named if self.owners[n] == r] for r in range(dist.world_size)] \
            if self.sharded else []

    @property
    def sharding(self) -> str:
        return "zero-1" if self.sharded else "replicated"

    def step(self, backend: Any) -> None:
        if not self.sharded:
            backend.optimizer_step(self.local)
            return
        self.local.step()
        self._broadcast_updates()

    def _broadcast_updates(self) -> None:
        import torch.distributed as dist

        stats = self.dist.stats
        started = stats.start() if stats is not None else None
        with torch.no_grad():
            for owner, params in enumerate(self._by_owner):
                if not params:
                    continue
                flat = torch.cat([p.detach().reshape(-1) for p in params])
                dist.broadcast(flat, src=owner)
                if owner != self.dist.rank:
                    offset = 0
                    for p in params:
                        p.copy_(flat[offset:offset + p.numel()].view_as(p))
                        offset += p.numel()
        if stats is not None:
            stats.stop(started)

    def zero_grad(self) -> None:
        for _, p in self.named:
            p.grad = None

    # ---- state by parameter name ---------------------------------------------------------------------------
    def saved_names(self) -> list[str]:
        """The parameters whose state this process writes into a checkpoint."""
        return [n for n, _ in self.named if self.owners[n] == self.dist.rank]

    def loaded_names(self) -> list[str]:
        """The parameters whose state this process reads from a checkpoint (all of them when replicated)."""
        if self.sharded:
            return self.saved_names()
        return [n for n, _ in self.named]

    def state_shard(self) -> dict[str, dict[str, torch.Tensor]]:
        """This process's part of the state, on the CPU, keyed by parameter name."""
        params = dict(self.named)
        out: dict[str, dict[str, torch.Tensor]] = {}
        for name in self.saved_names():
            state = self.local.state.get(params[name])
            if state:
                out[name] = {k: torch.as_tensor(state[k]).detach().to("cpu", copy=True) for k in STATE_KEYS}
        return out

    def template(self, names: Iterable[str]) -> dict[str, dict[str, torch.Tensor]]:
        """Empty CPU tensors shaped like the state of ``names``, for a checkpoint reader to fill in."""
        params = dict(self.named)
        return {n: {"step": torch.zeros((), dtype=torch.float32),
                    "exp_avg": torch.zeros(params[n].shape, dtype=params[n].dtype),
                    "exp_avg_sq": torch.zeros(params[n].shape, dtype=params[n].dtype)} for n in names}

    def load_shard(self, shard: dict[str, dict[str, torch.Tensor]]) -> None:
        params = dict(self.named)
        for name, state in shard.items():
            param = params[name]
            self.local.state[param] = {
                "step": state["step"].to(torch.float32),  # AdamW keeps a non-capturable step on the CPU
                "exp_avg": state["exp_avg"].to(param.device, param.dtype),
                "exp_avg_sq": state["exp_avg_sq"].to(param.device, param.dtype)}
