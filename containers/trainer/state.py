"""``TrainState``: everything a checkpoint holds of a run (the model's weights, the optimizer's state, the
learning-rate schedule, the RNG and the data position), as a ``torch.distributed.checkpoint`` ``Stateful``
(torchtitan's shape): ``state_dict`` takes what this process contributes, ``load_state_dict`` puts a loaded
checkpoint back. The ``Checkpointer`` (``trainer.checkpoint``) decides when to save and writes it."""

from __future__ import annotations

from typing import TypedDict

import torch
from torch.optim.lr_scheduler import LRScheduler

from trainer import checkpoint, sharded
from trainer.checkpoint import CheckpointMeta, TrainStateDict
from trainer.modeling import adapter_config, is_lora, load_weights, model_keys, weights_state
from trainer.optim import Optimizer


class Identity(TypedDict):
    """The run a checkpoint belongs to, recorded in its trainer state."""

    trial: str
    spec_hash: str


class TrainState:
    """The run's state on this process. ``step`` and ``position`` (samples consumed) advance with the loop;
    ``meta`` and ``identity`` (the trial's name and spec hash) go into each checkpoint unchanged."""

    def __init__(self, model: torch.nn.Module, optimizer: Optimizer, scheduler: LRScheduler, *, main: bool,
                 device: torch.device, meta: CheckpointMeta, identity: Identity):
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.main, self.device, self.meta, self.identity = main, device, meta, identity
        self.distributed = sharded.is_sharded(model)  # its parameters are DTensors (FSDP2, tensor parallelism)
        self.step = 0
        self.position = 0

    # ---- torch.distributed.checkpoint.stateful.Stateful ---------------------------------------------------------
    def state_dict(self) -> TrainStateDict:
        """This process's part, on the CPU: its share of the optimizer state; on process 0 also the weights
        (gathered whole where they are sharded: every process takes part), the schedule, the RNG and the trainer
        state. Collective where the model is sharded."""
        full = sharded.full_state(self.model, main=self.main) if self.distributed else None
        out: TrainStateDict = {"step": self.step, "optimizer": self.optimizer.state_shard()}
        if self.main:
            out.update({"weights": weights_state(self.model, full), "lora_config": adapter_config(self.model),
                        "scheduler": self.scheduler.state_dict(), "rng": checkpoint.rng_state(),
                        "trainer": {"global_step": self.step, "data_position": {"samples_consumed": self.position},
                                    **self.identity}})
        return out

    def load_state_dict(self, state: TrainStateDict) -> None:
        """Put a loaded checkpoint back (``trainer.checkpoint.LoadedCheckpoint.state``): every process its share."""
        weights = state["weights"]
        if self.distributed:  # each process cuts its share out of the whole weights loaded
            sharded.load_full(self.model, model_keys(self.model, weights), strict=not is_lora(self.model))
        else:
            load_weights(self.model, {k: v.to(self.device) for k, v in weights.items()})
        self.optimizer.load_shard(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        # The scheduler's state holds the step's rate; the param group (rebuilt, not loaded) must carry it too.
        for group, rate in zip(self.optimizer.local.param_groups, self.scheduler.get_last_lr(), strict=True):
            group["lr"] = rate
        checkpoint.restore_rng(state["rng"])
        self.step = int(state["trainer"]["global_step"])
        self.position = int(state["trainer"]["data_position"]["samples_consumed"])

    # ---- the checkpoint's shape ------------------------------------------------------------------------------
    def snapshot(self) -> checkpoint.Snapshot:
        """The step's state as the checkpoint files take it (``state_dict``, split into its files)."""
        state = self.state_dict()
        main = None
        if self.main:
            main = checkpoint.MainFiles(weights=state["weights"], lora_config=state["lora_config"],
                                        scheduler=state["scheduler"], rng=state["rng"], state=state["trainer"],
                                        meta=self.meta)
        return checkpoint.Snapshot(self.step, state["optimizer"], main)
