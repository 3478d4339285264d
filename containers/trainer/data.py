"""Training data: JSONL rows tokenised once into fixed shapes, served in a fixed order from ``data.shuffle_seed``.

The position in the stream is one integer (samples consumed), so a checkpoint records exactly where the next
optimizer step starts and a resume neither repeats nor skips samples. Sample ``i`` of the stream is row
``perm(epoch)[i % rows]`` with ``epoch = i // rows``: the order depends only on the seed, never on the layout.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from trainer import storage
from trainer.json_types import JsonMapping, JsonObject

IGNORE_INDEX = -100


class Tokenizer(Protocol):
    @property
    def pad_token_id(self) -> int: ...

    def encode(self, text: str, *, bos: bool = True, eos: bool = False) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class DataError(ValueError):
    pass


def read_rows(uri: str) -> list[JsonObject]:
    rows: list[JsonObject] = []
    for number, line in enumerate(storage.read_text(uri).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{uri} line {number}: not JSON ({exc.msg}); each line must be one JSON object") from None
        if not isinstance(row, dict) or not ("text" in row or ("prompt" in row and "completion" in row)):
            raise DataError(f"{uri} line {number}: a row needs a 'text' field, or 'prompt' and 'completion'")
        rows.append(row)
    if not rows:
        raise DataError(f"{uri}: no rows; data.train_uri and data.validation_uri must name non-empty JSONL files")
    return rows


def encode_row(row: JsonMapping, tokenizer: Tokenizer, length: int) -> tuple[list[int], list[int]]:
    """Input ids and labels of exactly ``length`` tokens; prompt tokens and padding carry no loss."""
    if "text" in row:
        ids = tokenizer.encode(str(row["text"]), bos=True, eos=True)
        labels = list(ids)
    else:
        prompt = tokenizer.encode(str(row["prompt"]), bos=True, eos=False)
        completion = tokenizer.encode(str(row["completion"]), bos=False, eos=True)
        ids = prompt + completion
        labels = [IGNORE_INDEX] * len(prompt) + completion
    ids, labels = ids[:length], labels[:length]
    pad = length - len(ids)
    return ids + [tokenizer.pad_token_id] * pad, labels + [IGNORE_INDEX] * pad


@dataclass
class TokenisedSet:
    input_ids: torch.Tensor  # (rows, length) int64
    labels: torch.Tensor  # (rows, length) int64

    @classmethod
    def build(cls, rows: Sequence[JsonMapping], tokenizer: Tokenizer, length: int) -> TokenisedSet:
        pairs = [encode_row(row, tokenizer, length) for row in rows]
        return cls(torch.tensor([p[0] for p in pairs], dtype=torch.long),
                   torch.tensor([p[1] for p in pairs], dtype=torch.long))

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])


class SampleStream:
    """The fixed-order training stream; ``take(position, n)`` returns samples position..position+n-1."""

    def __init__(self, data: TokenisedSet, seed: int):
        self.data = data
        self.seed = seed
        self._perms: dict[int, torch.Tensor] = {}

    def _perm(self, epoch: int) -> torch.Tensor:
        if epoch not in self._perms:
            gen = torch.Generator().manual_seed(self.seed + epoch)
            self._perms = {epoch: torch.randperm(len(self.data), generator=gen)}
        return self._perms[epoch]

    def indices(self, position: int, count: int) -> list[int]:
        rows = len(self.data)
        return [int(self._perm(i // rows)[i % rows]) for i in range(position, position + count)]

    def take(self, position: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        index = torch.tensor(self.indices(position, count), dtype=torch.long)
        return self.data.input_ids[index], self.data.labels[index]


def simulated_ranks(data_parallel: int, processes: int, process: int) -> list[int]:
    """The data-parallel ranks that process ``process`` of ``processes`` runs, strided: {process, process + N, ...}.

    With fewer processes than data-parallel ranks (``N`` must divide ``dp``) each process simulates ``dp / N``
    ranks, so the processes together run every rank exactly once (N = 1 runs them all). With one process per
    device and model parallelism (``N`` a multiple of ``dp``), processes ``0..dp-1`` are the data-parallel ranks
    and the rest train no samples of their own: they contribute zero gradients to the summed all-reduce.
    """
    if data_parallel < 1 or processes < 1 or not 0 <= process < processes:
        raise DataError(f"process {process} of {processes} is outside the {data_parallel} data-parallel rank(s)")
    if processes <= data_parallel:
        if data_parallel % processes:
            raise DataError(f"{processes} processes cannot share {data_parallel} data-parallel ranks evenly; "
                            f"run a number of processes that divides {data_parallel} (WORLD_SIZE)")
        return list(range(process, data_parallel, processes))
    if processes % data_parallel:
        raise DataError(f"{processes} processes are not a whole number of model-parallel groups for "
                        f"{data_parallel} data-parallel ranks; run a multiple of {data_parallel} (WORLD_SIZE)")
    return [process] if process < data_parallel else []


@dataclass(frozen=True)
class BatchPlan:
    """How one optimizer step's global batch is cut: ``data_parallel`` ranks x ``accumulation`` micro-batches.

    Micro-batch ``m`` of the step belongs to data-parallel rank ``m % data_parallel``; which process runs which
    ranks is ``simulated_ranks``. Every process reads the whole global batch, so the data position advances by
    ``global_batch`` per step whatever the number of processes.
    """

    micro_batch_size: int
    data_parallel: int
    accumulation: int

    @property
    def global_batch(self) -> int:
        return self.micro_batch_size * self.data_parallel * self.accumulation

    def ranks(self, process: int = 0, processes: int = 1) -> list[int]:
        return simulated_ranks(self.data_parallel, processes, process)

    def micro_batches(self, input_ids: torch.Tensor, labels: torch.Tensor, *, process: int = 0, processes: int = 1
                      ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Micro-batches in order, those of the data-parallel ranks this process runs (all of them by default)."""
        if input_ids.shape[0] != self.global_batch:
            raise DataError(f"got {input_ids.shape[0]} samples for a global batch of {self.global_batch}")
        mine = set(self.ranks(process, processes))
        mbs = self.micro_batch_size
        chunks = [(input_ids[i:i + mbs], labels[i:i + mbs]) for i in range(0, self.global_batch, mbs)]
        return [chunk for m, chunk in enumerate(chunks) if m % self.data_parallel in mine]


def loss_tokens(labels: torch.Tensor) -> int:
    """Tokens that carry loss after the causal shift."""
    return int((labels[:, 1:] != IGNORE_INDEX).sum())
