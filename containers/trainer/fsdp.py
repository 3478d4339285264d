"""Fully sharded data parallel (FSDP2, ``torch.distributed.fsdp.fully_shard``) on both tracks: for full-parameter
runs over several processes, and for any run whose tensor-parallel groups form several replicas (DDP takes no
DTensor parameters on a 2-D mesh; torchtitan shards over the data-parallel dimension instead). Every process holds
its share of the weights, gradients and optimizer state (the source document's ZeRO-1 point, on Trainium2 too),
gathers a decoder layer's weights for its forward and backward, and reduce-scatters that layer's gradients as its
backward ends.

The trainer keeps its own accounting: the loss is already normalised by the global batch's tokens, so gradients
are summed over the processes (divide factor 1); micro-batches other than a process's last accumulate locally
without communication. What FSDP2 shards are DTensors (``trainer.sharded`` moves their state to and from
checkpoints at any process count and layout).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from trainer.tensor_parallel import decoder_layers

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup, ReduceOp
    from torch.distributed.device_mesh import DeviceMesh

    from trainer.distributed import CollectiveStats


def shard_model(model: torch.nn.Module, mesh: DeviceMesh) -> None:
    """Shard each decoder layer, then the rest of ``model`` (embeddings, final norm, head), over the data-parallel
    ``mesh`` (1-D; with tensor parallelism its parameters are already DTensors over the sibling ``"tp"`` dimension,
    and FSDP2 shards them over both: torchtitan's 2-D layout)."""
    from torch.distributed.fsdp import FSDPModule, fully_shard

    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            # A plain SUM, not a mean: the loss carries the normalisation. With a divide factor alone FSDP2 would
            # use PREMUL_SUM, which gloo lacks; forcing sum-only collectives makes it a SUM and a division by 1.
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)


def time_collectives(model: torch.nn.Module, stats: CollectiveStats) -> bool:
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
        def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: ProcessGroup,
                     async_op: bool = False) -> None:
            started = stats.start()
            super().__call__(output_tensor, input_tensor, group, async_op=False)
            stats.stop(started)
            return None  # done: FSDP2 waits only on a Work it is given

    class TimedReduceScatter(DefaultReduceScatter):  # type: ignore[misc]
        # Any: torch annotates DefaultReduceScatter's result as a Work, yet a synchronous call returns None (the
        # ReduceScatter interface FSDP2 calls through allows either).
        def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: ProcessGroup,
                     op: ReduceOp | ReduceOp.RedOpType, async_op: bool = False) -> Any:
            started = stats.start()
            super().__call__(output_tensor, input_tensor, group, op, async_op=False)
            stats.stop(started)
            return None

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_custom_all_gather(TimedAllGather())
            module.set_custom_reduce_scatter(TimedReduceScatter())
    return True


def sync_gradients(model: torch.nn.Module, enabled: bool) -> None:
    """Whether the next backward reduce-scatters (the last micro-batch) or only accumulates (the others)."""
    model.set_requires_gradient_sync(enabled)  # type: ignore[operator]
