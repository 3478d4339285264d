"""Test data builders: whole, valid domain objects with only the fields a test cares about given. A builder fills
every field the model requires with a plain value, so a test that builds a report or a cost from them exercises
the same typed objects the Lambdas read back from S3 and DynamoDB."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from lambdas.domain.evidence.run_summary import RunSummary
from lambdas.domain.money.cost import RunCost
from lambdas.domain.money.ledger import SettledUsage, StoredCost
from lambdas.domain.vocabulary import track_of

_ENVIRONMENT = {"python": "3.11.9", "torch": "2.5.1", "hostname": "test-host"}


# The device each track trains on: a verdict is given only on real devices, so a builder's default is one. A test of
# a rehearsal passes backend="cpu" (or "compiled") with stand_in=True.
DEVICE = {"gpu": "cuda", "trn2": "neuron"}


def run_summary(run: str = "gpu", **fields: Any) -> RunSummary:
    """A RunSummary of ``run``'s first attempt that trained 1000 steps on its track's device (cuda, neuron) and
    learned (its weights changed and its training loss fell), with ``fields`` over it (nested records as dicts or
    models)."""
    base: dict[str, Any] = {
        "trial_id": "trial-1", "run": run, "track": track_of(run), "attempt": 1,
        "backend": DEVICE[track_of(run)], "stand_in": False, "precision": "bf16", "status": "succeeded",
        "exit_code": 0,
        "global_step": 1000, "max_steps": 1000, "start_step": 0, "environment": _ENVIRONMENT,
        "started_at": "2026-11-20T09:00:00Z", "ended_at": "2026-11-20T10:00:00Z",
    }
    if fields.get("status") not in (None, "succeeded") and "exit_code" not in fields:
        base["exit_code"] = 1
    merged = {**base, **fields}
    if "loss" not in fields:  # a training loss that fell over the steps it ran
        first, last = merged["start_step"] + 1, merged["global_step"]
        merged["loss"] = {"per_step": [[first, 2.5], [last, 1.25]] if last > first else []}
    if "learning" not in fields:  # its weights changed over the steps it ran (learning=None: no record)
        merged["learning"] = {"weights_changed": True, "steps": max(0, merged["global_step"] - merged["start_step"]),
                              "trainable_params": 4_194_304, "trainable_tensors": 128, "tensors_changed": 128,
                              "norm_start": 12.5, "norm_end": 12.75}
    return RunSummary.model_validate(merged)


def steady_times(mean: float, n: int = 40) -> list[float]:
    """``n`` steady-state step times within 1% of ``mean`` (a repeatable spread; with ``n`` a multiple of 11 each
    offset occurs equally often, so their median is ``mean``)."""
    return [round(mean * (1 + 0.01 * ((i * 7919) % 11 - 5) / 5), 6) for i in range(n)]


def trained_summary(run: str, step: float, times: list[float], **fields: Any) -> RunSummary:
    """A run that trained, evaluated, checkpointed at step 500 and resumed from step 2 with continuity, at median
    step time ``step`` over steady steps ``times``, with ``fields`` over it: what a comparable run reports."""
    return run_summary(run, **{
        "tokens_this_attempt": 2_000_000,
        "phases": {"environment_s": 10.0, "compile_s": 5.0, "train_s": 100.0},
        "loss": {"initial": 2.5, "final": 1.2, "per_step": [[1, 2.5], [2, 2.0], [3, 1.2]],
                 "eval": [{"step": 100, "loss": 2.2}, {"step": 1000, "loss": 1.25}]},
        "validation_loss": 1.25,
        "compile": {"seconds": 5.0, "cache": "miss"},
        "throughput": {"tokens_per_s": 1000.0, "step_time_s": step, "samples_per_s": 10.0, "step_times_s": times},
        "checkpoints": [{"step": 500, "bytes": 10, "files": 2, "save_s": 1.0, "uri": "s3://a/ckpt/500"}],
        "resumed_from_step": 2, "continuity": {"global_step_continuous": True, "loss_continuous": True},
        **fields,
    })


def run_cost(total: str | Decimal, run: str = "gpu", **fields: Any) -> RunCost:
    """A RunCost whose whole total is effective training on an instance at 1 USD/h, with ``fields`` over it."""
    base: dict[str, Any] = {
        "trial_id": "trial-1", "run": run, "track": track_of(run),
        "effective_training_usd": total, "total_usd": total, "instance_usd": total, "storage_usd": "0",
        "billed_instance_seconds": "3600", "queue_seconds": "0", "seconds": {}, "effective_steps": 1000,
        "rerun_steps": 0, "attempts": 1,
        "price": {"instance_type": "x", "region": "us-east-1", "hourly_usd": "1", "confidence": "list",
                  "table_version": "v"},
    }
    return RunCost.model_validate({**base, **fields})


def stored_cost(cost: RunCost, *, ended_at: str | None = "2026-11-20T10:00:00Z", facts: int = 3,
                complete: bool = True) -> StoredCost:
    """The ledger's cost entry of a run that ended SUCCEEDED at ``ended_at`` and was priced at ``cost`` (its usage
    has no attempts: a test that reads them folds real facts instead)."""
    usage = SettledUsage(trial_id=cost.trial_id, run=cost.run, track=track_of(cost.run),
                         instance_type=cost.price.instance_type)
    return StoredCost(cost=cost, facts=facts, fingerprint="0" * 64, complete=complete, terminal_status="SUCCEEDED",
                      ended_at=ended_at, usage=usage)
