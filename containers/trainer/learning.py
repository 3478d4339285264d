"""Whether an attempt's optimizer steps reached the weights: the summary's ``learning`` record.

A loop whose updates never land on the weights runs, reports a loss at every step and raises nothing, so the weights
themselves are read: a fingerprint of the trainable parameters (``requires_grad``: the adapters of a LoRA model,
every weight of a full fine-tune) before the attempt's first optimizer step and again after its last. Per tensor it
is the sum and the L2 norm, reduced in float32 on the device, and the whole fingerprint crosses to the host as one
small tensor, so it costs two passes over the trainable weights per attempt and no copy of them. A DTensor (FSDP2,
tensor parallelism) is read in this process's share, with no collective: a peer that is gone cannot stall the
summary, and the same code runs on every process and every backend.

An update too small to move a bf16 weight leaves the fingerprint unchanged, and rightly: the weight did not change.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

import torch


class LearningRecord(TypedDict):
    """The summary's ``learning`` block (``lambdas.domain.evidence.run_summary.LearningRecord``)."""

    weights_changed: bool
    steps: int
    trainable_params: int
    trainable_tensors: int
    tensors_changed: int
    norm_start: float | None
    norm_end: float | None


@dataclass(frozen=True)
class Fingerprint:
    """Per trainable tensor (in parameter order), the sum and the L2 norm of this process's share of it."""

    sums: tuple[float, ...]
    norms: tuple[float, ...]
    elements: int  # whole-model elements of the trainable parameters

    @property
    def norm(self) -> float | None:
        total = math.sqrt(sum(n * n for n in self.norms)) if self.norms else 0.0
        return total if math.isfinite(total) else None


def _local(param: torch.Tensor) -> torch.Tensor:
    """This process's share of ``param``: a DTensor's local shard, a plain tensor itself."""
    from torch.distributed.tensor import DTensor

    return param.to_local() if isinstance(param, DTensor) else param


def fingerprint(params: Sequence[torch.Tensor]) -> Fingerprint:
    """The fingerprint of ``params`` (the trainable parameters, all on one device)."""
    if not params:
        return Fingerprint((), (), 0)
    with torch.no_grad():
        local = [_local(p).detach() for p in params]
        sums = torch.stack([t.sum(dtype=torch.float32) for t in local])
        norms = torch.stack([torch.linalg.vector_norm(t, dtype=torch.float32) for t in local])
        both = torch.stack([sums, norms]).to("cpu").tolist()
    return Fingerprint(tuple(both[0]), tuple(both[1]), sum(p.numel() for p in params))


def learning_record(before: Fingerprint, after: Fingerprint, steps: int) -> LearningRecord:
    """The ``learning`` block from the readings before the first and after the last of ``steps`` optimizer steps.
    A tensor changed when its sum or its norm differs (exactly: the same reduction over the same values gives the
    same float)."""
    changed = sum(1 for a in zip(before.sums, before.norms, after.sums, after.norms, strict=True)
                  if (a[0], a[1]) != (a[2], a[3]))
    return {"weights_changed": changed > 0, "steps": steps, "trainable_params": after.elements,
            "trainable_tensors": len(after.sums), "tensors_changed": changed, "norm_start": before.norm,
            "norm_end": after.norm}
