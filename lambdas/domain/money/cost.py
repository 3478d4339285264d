"""The cost model: five components in USD, computed from a run's ledger only.

total task cost = effective training + compile + failed reruns + checkpoint & object storage
                  + queueing & environment maintenance

Instance time is split by what the trainer reported it spent each attempt's billed seconds on:

- first attempt: environment, data load and unattributed time -> queue_environment; compile -> compile;
  train time of redone steps -> failed_reruns; the rest of train and eval -> effective_training;
  checkpoint save and restore -> checkpoint_storage.
- a retry (attempt >= 2): environment, data load, unattributed, compile and checkpoint restore -> failed_reruns
  (node restart, data reload, compile-artefact restore); train time of redone steps -> failed_reruns; the rest of
  train and eval -> effective_training; checkpoint save -> checkpoint_storage.
- the warm-up compile stage (run ``trn2-compile``): all of its instance time, every attempt -> compile.
- queue time (SUBMITTED, or the previous attempt's end, to STARTING), every attempt of every run -> queue_environment,
  where the capacity is paid while a job waits for it (reserved capacity, a Capacity Block: ``prices.Capacity``);
  on on-demand and Spot capacity no instance runs yet and it costs nothing. The price's ``basis`` says which.

The instance-time components add up exactly (to the micro-dollar) to (billed instance seconds + billed queue
seconds) x hourly price x nodes; S3 storage and requests are added to checkpoint_storage on top. All arithmetic is
Decimal.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from decimal import ROUND_FLOOR, ROUND_HALF_EVEN, Decimal, localcontext
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from lambdas.domain.money.prices import CAPACITY_BASIS, HOURS, Capacity, PriceTable
from lambdas.domain.vocabulary import COMPILE_RUN

Component = Literal[
    "effective_training_usd", "compile_usd", "failed_reruns_usd", "checkpoint_storage_usd", "queue_environment_usd"
]
COMPONENTS: tuple[Component, ...] = (
    "effective_training_usd",
    "compile_usd",
    "failed_reruns_usd",
    "checkpoint_storage_usd",
    "queue_environment_usd",
)
QUANTUM = Decimal("0.000001")  # micro-dollars: fine enough for per-second billing of the cheapest instance
GIB = Decimal(2**30)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class Phases(_Model):
    """Seconds the trainer reports per phase of one attempt."""

    environment_s: float = Field(default=0.0, ge=0)
    data_load_s: float = Field(default=0.0, ge=0)
    compile_s: float = Field(default=0.0, ge=0)
    train_s: float = Field(default=0.0, ge=0)
    checkpoint_save_s: float = Field(default=0.0, ge=0)
    checkpoint_restore_s: float = Field(default=0.0, ge=0)
    eval_s: float = Field(default=0.0, ge=0)


class AttemptUsage(_Model):
    attempt: int = Field(ge=1)
    billed_seconds: Decimal = Field(ge=0, description="instance time of the attempt: STARTING (else RUNNING) to end")
    queue_seconds: Decimal = Field(default=Decimal(0), ge=0, description=(
        "SUBMITTED (or the previous attempt's end) to STARTING; billed only on capacity paid while jobs wait for it "
        "(reserved, Capacity Block)"))
    phases: Phases = Field(default_factory=Phases)
    start_step: int = Field(default=0, ge=0)
    end_step: int = Field(default=0, ge=0)
    resumed_from_step: int | None = None
    rerun_steps: int = Field(default=0, ge=0, description="steps this attempt executed again after a resume")
    succeeded: bool = False


class RunUsage(_Model):
    trial_id: str
    run: str
    track: Literal["gpu", "trn2"]
    instance_type: str
    nodes: int = Field(default=1, ge=1)
    region: str | None = None
    attempts: Sequence[AttemptUsage] = Field(default_factory=list)
    checkpoint_bytes: int = Field(default=0, ge=0)
    checkpoint_put_requests: int = Field(default=0, ge=0)
    checkpoint_get_requests: int = Field(default=0, ge=0)
    storage_days: Decimal = Field(default=Decimal(30), ge=0)


class PriceUsed(_Model):
    instance_type: str
    region: str
    hourly_usd: Decimal
    confidence: str
    table_version: str
    capacity: Capacity = "on_demand"
    basis: str = Field(default="", description="when the capacity is paid for, so what the cost bills (queue time or "
                                               "not)")


class CostBreakdown(_Model):
    effective_training_usd: Decimal = Decimal(0)
    compile_usd: Decimal = Decimal(0)
    failed_reruns_usd: Decimal = Decimal(0)
    checkpoint_storage_usd: Decimal = Decimal(0)
    queue_environment_usd: Decimal = Decimal(0)
    total_usd: Decimal = Decimal(0)

    def amounts(self) -> dict[str, Decimal]:
        """USD by component (in ``COMPONENTS`` order), then ``total_usd``."""
        return {"effective_training_usd": self.effective_training_usd, "compile_usd": self.compile_usd,
                "failed_reruns_usd": self.failed_reruns_usd, "checkpoint_storage_usd": self.checkpoint_storage_usd,
                "queue_environment_usd": self.queue_environment_usd, "total_usd": self.total_usd}


class RunCost(CostBreakdown):
    trial_id: str
    run: str
    track: str
    instance_usd: Decimal
    storage_usd: Decimal
    billed_instance_seconds: Decimal
    queue_seconds: Decimal
    billed_queue_seconds: Decimal = Field(
        default=Decimal(0), description="queue time billed at the instance rate (x nodes not applied): all of it on "
        "reserved capacity or a Capacity Block, none on on-demand or Spot capacity")
    seconds: dict[str, Decimal] = Field(description="instance seconds per component (x nodes not applied)")
    effective_steps: int
    rerun_steps: int
    attempts: int
    price: PriceUsed


def _d(value: float | Decimal | int) -> Decimal:
    return value if isinstance(value, Decimal) else Decimal(str(value))


def _attempt_seconds(usage: AttemptUsage) -> dict[Component, Decimal]:
    """Split one attempt's billed seconds over the five components (sums to billed_seconds)."""
    p = usage.phases
    billed = usage.billed_seconds
    reported = {name: _d(getattr(p, name)) for name in Phases.model_fields}
    total_reported = sum(reported.values(), Decimal(0))
    if total_reported > billed and total_reported > 0:
        # The trainer's clocks can overlap the scheduler's by a little; never bill more than the instance ran.
        reported = {k: v * billed / total_reported for k, v in reported.items()}
        unattributed = Decimal(0)
    else:
        unattributed = billed - total_reported
    steps = max(usage.end_step - usage.start_step, 0)
    rerun_share = min(Decimal(usage.rerun_steps) / Decimal(steps), Decimal(1)) if steps else Decimal(0)
    train_rerun = reported["train_s"] * rerun_share
    out: dict[Component, Decimal] = dict.fromkeys(COMPONENTS, Decimal(0))
    out["effective_training_usd"] = reported["train_s"] - train_rerun + reported["eval_s"]
    out["failed_reruns_usd"] = train_rerun
    out["checkpoint_storage_usd"] = reported["checkpoint_save_s"]
    setup = reported["environment_s"] + reported["data_load_s"] + unattributed
    if usage.attempt == 1:
        out["queue_environment_usd"] = setup
        out["compile_usd"] = reported["compile_s"]
        out["checkpoint_storage_usd"] += reported["checkpoint_restore_s"]
    else:
        out["failed_reruns_usd"] += setup + reported["compile_s"] + reported["checkpoint_restore_s"]
    return out


def _allocate(total: Decimal, weights: dict[Component, Decimal]) -> dict[Component, Decimal]:
    """Split a quantized total by weights so the parts are quantized and add up to it exactly (largest remainder)."""
    weight_sum = sum(weights.values(), Decimal(0))
    if weight_sum == 0 or total == 0:
        return dict.fromkeys(weights, Decimal(0))
    raw = {k: total * w / weight_sum for k, w in weights.items()}
    floors = {k: v.quantize(QUANTUM, rounding=ROUND_FLOOR) for k, v in raw.items()}
    left = int(((total - sum(floors.values(), Decimal(0))) / QUANTUM).to_integral_value())
    order = sorted(weights, key=lambda k: (-(raw[k] - floors[k]), COMPONENTS.index(k)))
    for k in order[:left]:
        floors[k] += QUANTUM
    return floors


def compute_run_cost(usage: RunUsage, prices: PriceTable) -> RunCost:
    region = usage.region or prices.default_region
    price = prices.instance_price(usage.instance_type, region)
    rates = prices.s3_rates(region)
    with localcontext() as ctx:
        ctx.prec = 60
        seconds: dict[Component, Decimal] = dict.fromkeys(COMPONENTS, Decimal(0))
        for attempt in usage.attempts:
            for key, value in _attempt_seconds(attempt).items():
                # The warm-up compile stage exists only to compile: all of its instance time, every attempt and
                # every phase, is compile cost (the source document books compile apart from training).
                seconds["compile_usd" if usage.run == COMPILE_RUN else key] += value
        billed = sum((a.billed_seconds for a in usage.attempts), Decimal(0))
        queued = sum((a.queue_seconds for a in usage.attempts), Decimal(0))
        # Held capacity is paid while the job waits for it: the wait is queueing cost, whichever run waited.
        billed_queue = queued if price.paid_while_queued else Decimal(0)
        seconds["queue_environment_usd"] += billed_queue
        instance_usd = ((billed + billed_queue) * price.hourly_usd * usage.nodes / HOURS).quantize(
            QUANTUM, ROUND_HALF_EVEN)
        parts = _allocate(instance_usd, seconds)
        storage_usd = (
            Decimal(usage.checkpoint_bytes) / GIB * rates.storage_gb_month_usd * usage.storage_days / Decimal(30)
            + Decimal(usage.checkpoint_put_requests) / 1000 * rates.put_per_1000_usd
            + Decimal(usage.checkpoint_get_requests) / 1000 * rates.get_per_1000_usd
        ).quantize(QUANTUM, ROUND_HALF_EVEN)
        parts["checkpoint_storage_usd"] += storage_usd
        total = sum(parts.values(), Decimal(0))
    final = usage.attempts[-1] if usage.attempts else None
    return RunCost(
        trial_id=usage.trial_id,
        run=usage.run,
        track=usage.track,
        **parts,
        total_usd=total,
        instance_usd=instance_usd,
        storage_usd=storage_usd,
        billed_instance_seconds=billed,
        queue_seconds=queued,
        billed_queue_seconds=billed_queue,
        seconds={k.removesuffix("_usd"): v.quantize(Decimal("0.001")) for k, v in seconds.items()},
        effective_steps=final.end_step if final else 0,
        rerun_steps=sum(a.rerun_steps for a in usage.attempts),
        attempts=len(usage.attempts),
        price=PriceUsed(instance_type=usage.instance_type, region=region, hourly_usd=price.hourly_usd,
                        confidence=price.confidence, table_version=prices.version, capacity=price.capacity,
                        basis=CAPACITY_BASIS[price.capacity]),
    )


def sum_costs(costs: Iterable[CostBreakdown]) -> CostBreakdown:
    totals = dict.fromkeys((*COMPONENTS, "total_usd"), Decimal(0))
    for cost in costs:
        for key in totals:
            totals[key] += getattr(cost, key)
    return CostBreakdown(**totals)
