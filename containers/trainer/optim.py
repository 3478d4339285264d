"""The optimizer, replicated, sharded ZeRO-1 style, or over FSDP2's sharded parameters, and its state by parameter
name.

Replicated (LoRA, a single process, Neuron): every process holds the whole AdamW state and steps every parameter;
process 0 saves it and every process loads all of it.

Sharded (full-parameter with several processes on the CPU stand-ins and CUDA): each parameter has one owning
process (a deterministic greedy partition by size). Gradients are still all-reduced whole, so every process clips
the same global norm; each process then runs AdamW for the parameters it owns only, so its optimizer state is
1/N of the total, and the owners broadcast the updated parameters (one flat broadcast per process, timed as
communication). A checkpoint keeps each process's state under the parameters' names, so it loads at any process
count: each process asks for the names it owns now. ``torch.distributed.optim.ZeroRedundancyOptimizer`` does the
same partitioning but fuses the update and the broadcast in one ``step``, which leaves the broadcast untimeable.

Fully sharded (full-parameter on the GPU track with several processes, ``trainer.fsdp``): the parameters
themselves are DTensor shards, so AdamW's state is sharded like them; every process writes and reads its shard of
every parameter's state, and a checkpoint of any of the three layouts loads into any other.
"""

from __future__ import annotations

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
                 dist: Distributed, sharded: bool, cpu_mesh: Any = None):
        self.dist = dist
        self.named = named
        # A CPU device mesh over the checkpoint group: the parameters are FSDP2 shards (see the module doc).
        self.cpu_mesh = cpu_mesh
        self.sharded = sharded and dist.world_size > 1 and cpu_mesh is None
        self.owners = partition(named, dist.world_size) if self.sharded else {n: 0 for n, _ in named}
        own = [p for n, p in named if not self.sharded or self.owners[n] == dist.rank]
        # A process that owns nothing (more processes than parameters) still needs a param group for the schedule.
        self.local = torch.optim.AdamW(own or [torch.nn.Parameter(torch.zeros(0))], lr=lr,
                                       weight_decay=weight_decay)
        self._by_owner = [[p for n, p in named if self.owners[n] == r] for r in range(dist.world_size)] \
            if self.sharded else []

    @property
    def fully_sharded(self) -> bool:
        return self.cpu_mesh is not None

    @property
    def sharding(self) -> str:
        return "fsdp2" if self.fully_sharded else ("zero-1" if self.sharded else "replicated")

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
        """The parameters whose state this process writes into a checkpoint (its shard of each when fully
        sharded)."""
        if self.fully_sharded:
            return [n for n, _ in self.named]
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
                out[name] = {k: self._host_copy(state[k]) for k in STATE_KEYS}
        return out

    def _host_copy(self, value: Any) -> torch.Tensor:
        if self.fully_sharded:
            from trainer.fsdp import to_cpu

            return to_cpu(value, self.cpu_mesh)
        return torch.as_tensor(value).detach().to("cpu", copy=True)

    def make_template(self, name: str, key: str, size: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """The tensor a checkpoint reader fills for one state entry: whole, or this process's shard of it."""
        param = dict(self.named)[name]
        if self.fully_sharded and key != "step":
            from trainer.fsdp import empty_like_shard

            return empty_like_shard(param, dtype, self.cpu_mesh)
        return torch.empty(size, dtype=dtype)

    def load_shard(self, shard: dict[str, dict[str, torch.Tensor]]) -> None:
        params = dict(self.named)
        for name, state in shard.items():
            param = params[name]
            place = self._placer(param)
            self.local.state[param] = {
                "step": state["step"].to(torch.float32),  # AdamW keeps a non-capturable step on the CPU
                "exp_avg": place(state["exp_avg"]),
                "exp_avg_sq": place(state["exp_avg_sq"])}

    def _placer(self, param: torch.nn.Parameter) -> Any:
        if self.fully_sharded:
            from trainer.fsdp import to_param

            return lambda value: to_param(value, param)
        return lambda value: value.to(param.device, param.dtype)
