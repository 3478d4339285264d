"""Data-parallel process group when launched under torchrun (``WORLD_SIZE`` > 1); a no-op single process
otherwise. Either way the processes together run every data-parallel rank's micro-batches of the declared layout:
with fewer processes than ranks each one simulates several (``trainer.data.simulated_ranks``), and the summed
gradients over the processes are the one-process gradients."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from trainer.backends import Backend


@dataclass
class Distributed:
    rank: int = 0
    world_size: int = 1
    backend_name: str = "cpu"

    @classmethod
    def from_env(cls, backend: Backend) -> Distributed:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return cls(backend_name=backend.name)
        import torch.distributed as dist

        if not dist.is_initialized():
            if backend.name == "neuron":
                import torch_xla.distributed.xla_backend  # noqa: F401  registers the "xla" process group

                dist.init_process_group("xla")
            else:
                dist.init_process_group("nccl" if backend.name == "cuda" else "gloo")
        return cls(rank=dist.get_rank(), world_size=dist.get_world_size(), backend_name=backend.name)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def loss_scale(self) -> float:
        # xm.optimizer_step averages gradients over replicas; scaling the loss by the world size turns that
        # average back into the global-batch token mean. Elsewhere gradients are summed explicitly.
        return float(self.world_size) if self.backend_name == "neuron" else 1.0

    def reduce_gradients(self, params: list[torch.nn.Parameter]) -> None:
        if self.world_size <= 1 or self.backend_name == "neuron":
            return
        import torch.distributed as dist

        for p in params:
            if p.grad is not None:
                dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)

    def reduce_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """The step's global loss, still on the device (reading it is the caller's choice of when to sync)."""
        if self.world_size > 1:
            import torch.distributed as dist

            loss = loss.clone()
            dist.all_reduce(loss, op=dist.ReduceOp.SUM)
            if self.backend_name == "neuron":
                loss = loss / self.world_size
        return loss

    def close(self) -> None:
        if self.world_size > 1:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
