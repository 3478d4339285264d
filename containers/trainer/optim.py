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

With tensor parallelism (``trainer.tensor_parallel``) each process holds slices of the split parameters: the
owners are data-parallel indices (every slice of a parameter has the same owner), the broadcasts run over the
processes holding the same slice, and a checkpoint keeps each parameter's state whole (the slices gathered by the
first process of the group, sliced again on load), so it too loads at any process count and layout.

Fully sharded (full-parameter on the GPU track with several processes, ``trainer.fsdp``): the parameters
themselves are DTensor shards, so AdamW's state is sharded like them; every process writes and reads its shard of
every parameter's state, and a checkpoint of any of the three layouts loads into any other.
"""

from __future__ import annotations

from typing import Any

import torch

from trainer.distributed import Distributed
from trainer.tensor_parallel import Sharding

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
                 dist: Distributed, sharded: bool, cpu_mesh: Any = None, split: Sharding | None = None):
        self.dist = dist
        self.named = named
        # A CPU device mesh over the checkpoint group: the parameters are FSDP2 shards (see the module doc).
        self.cpu_mesh = cpu_mesh
        self.split = split  # tensor-parallel slices (see the module doc)
        self.sharded = sharded and dist.replicas > 1 and cpu_mesh is None
        self.owners = partition(named, dist.replicas) if self.sharded else {n: 0 for n, _ in named}
        own = [p for n, p in named if not self.sharded or self.owners[n] == dist.replica]
        # A process that owns nothing (more processes than parameters) still needs a param group for the schedule.
        self.local = torch.optim.AdamW(own or [torch.nn.Parameter(torch.zeros(0))], lr=lr,
                                       weight_decay=weight_decay)
        self._by_owner = [[p for n, p in named if self.owners[n] == r] for r in range(dist.replicas)] \
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
                groups = self.dist.groups
                dist.broadcast(flat, src=groups.data_rank(owner) if groups is not None else owner,
                               group=self.dist.data_group)
                if owner != self.dist.replica:
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
        sharded; with tensor parallelism, the first process of the group writes what its group owns)."""
        if self.fully_sharded:
            return [n for n, _ in self.named]
        return [n for n, _ in self.named if self.owners[n] == self.dist.replica]

    def loaded_names(self) -> list[str]:
        """The parameters whose state this process reads from a checkpoint (all of them when replicated)."""
        if self.sharded:
            return self.saved_names()
        return [n for n, _ in self.named]

    def state_shard(self) -> dict[str, dict[str, torch.Tensor]]:
        """This process's part of the state, on the CPU, keyed by parameter name."""
        params = dict(self.named)
        split = self.split
        writes = split is None or split.comm.rank == 0
        out: dict[str, dict[str, torch.Tensor]] = {}
        for name in self.saved_names():  # the same names, in the same order, on every process of a group
            state = self.local.state.get(params[name])
            if not state:
                continue
            if split is not None and split.is_split(name):
                state = {k: (state[k] if k == "step" else split.gather(name, state[k])) for k in STATE_KEYS}
            if writes:
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
            cut = (lambda value, n=name: self.split.slice(n, value)) if self.split is not None else (lambda v: v)
            self.local.state[param] = {
                "step": state["step"].to(torch.float32),  # AdamW keeps a non-capturable step on the CPU
                "exp_avg": place(cut(state["exp_avg"])),
                "exp_avg_sq": place(cut(state["exp_avg_sq"]))}

    def _placer(self, param: torch.nn.Parameter) -> Any:
        if self.fully_sharded:
            from trainer.fsdp import to_param

            return lambda value: to_param(value, param)
        return lambda value: value.to(param.device, param.dtype)
