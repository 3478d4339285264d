"""Data parallel with ``torch.nn.parallel.DistributedDataParallel`` for the GPU track's LoRA (and other
non-sharded) runs over several processes: gradients are all-reduced bucket by bucket while the backward is still
running, instead of in one pass after it.

The trainer keeps its own accounting: the loss is already normalised by the global batch's tokens, so the buckets
are summed (a communication hook doing a plain SUM all-reduce, where DDP's own would average), and every bucket's
all-reduce is timed into the run's collective statistics. Micro-batches other than a process's last accumulate
locally (``no_sync``).
"""

# No ``from __future__ import annotations`` here: DDP checks the hook's annotations as objects.
import contextlib
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

if TYPE_CHECKING:
    from trainer.distributed import CollectiveStats


def wrap(model: torch.nn.Module, device: torch.device, stats: "CollectiveStats | None") -> torch.nn.Module:
    """``model`` under DDP with the summing, timed communication hook."""
    from torch.nn.parallel import DistributedDataParallel

    wrapped = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                      broadcast_buffers=False, gradient_as_bucket_view=True)
    wrapped.register_comm_hook(stats, _timed_sum)
    return wrapped


def _timed_sum(stats: "CollectiveStats | None", bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Sum one gradient bucket over the processes; its time, from launch to completion, counts as communication."""
    started = stats.start() if stats is not None else None
    future = dist.all_reduce(bucket.buffer(), op=dist.ReduceOp.SUM, async_op=True).get_future()

    def done(fut: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
        if stats is not None and started is not None:
            stats.stop(started)
        return fut.value()[0]

    return future.then(done)


def accumulating(model: torch.nn.Module) -> contextlib.AbstractContextManager[None]:
    """The context a non-final micro-batch's forward and backward run in: gradients accumulate, nothing is sent."""
    return model.no_sync()  # type: ignore[operator]
