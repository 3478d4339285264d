"""Telling a lost peer from a failure of this process's own.

AWS Batch takes a multi-node parallel job's status from its main node, and retries the job only on what the main
node's exit says ("Multi-node parallel jobs": the job ends when the main node exits; a child node's failure causes no
further attempt by itself). So when a child node is lost (its planned fault, a Spot reclaim, a crash), the main
node's processes must turn the failed collective they see into a resumable exit, or the job ends for good. A
collective with a peer that is gone fails at once with gloo ("Connection closed by peer ... typically caused by a
remote worker crashing"), or after the process group's timeout with NCCL and the Neuron runtime; torch raises
``torch.distributed.DistError`` subclasses for the store and the network, a plain ``RuntimeError`` for gloo's
transport."""

from __future__ import annotations

# What gloo's TCP transport, NCCL's watchdog, the c10d store and the Neuron collectives say when the other side of a
# collective is gone or never answered (matched case-insensitively).
PEER_GONE = ("connection closed by peer", "connection reset by peer", "broken pipe", "remote worker crashing",
             "nccl communicator was aborted", "watchdog caught collective operation timeout",
             "timed out", "socket closed", "connection refused")


def peer_lost(error: BaseException) -> bool:
    """Whether ``error`` (or the error it was raised from) is a collective that lost its peers."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if _distributed_error(current) or (isinstance(current, RuntimeError | ConnectionError | TimeoutError)
                                           and any(text in str(current).lower() for text in PEER_GONE)):
            return True
        current = current.__cause__ or current.__context__
    return False


def _distributed_error(error: BaseException) -> bool:
    """torch's own distributed errors (the store, the network, a backend's collective), imported lazily."""
    try:
        from torch.distributed import DistError
    except ImportError:  # a torch without the distributed package
        return False
    return isinstance(error, DistError)
