"""Queue and environment time, priced where the stage's capacity pays for it: held capacity (reserved, a Capacity
Block) is paid while a job waits for it; on-demand and Spot capacity only once an instance runs."""

from __future__ import annotations

from decimal import Decimal

import pytest

from lambdas.domain.json_types import JsonObject
from lambdas.domain.money.cost import COMPONENTS, QUANTUM, AttemptUsage, Phases, RunCost, RunUsage, compute_run_cost
from lambdas.domain.money.prices import PricesInvalid, PriceTable, load_price_table

TYPE = "trn2.48xlarge"
RATE = Decimal(36)  # USD per hour: 1 cent per second


def _table(capacity: str | None) -> PriceTable:
    row: JsonObject = {"hourly_usd": str(RATE)}
    if capacity is not None:
        row["capacity"] = capacity
    return load_price_table({"instances": {"us-east-1": {TYPE: row}}})


def _usage(run: str = "trn2", nodes: int = 1) -> RunUsage:
    first = AttemptUsage(attempt=1, billed_seconds=Decimal(1000), queue_seconds=Decimal(300), end_step=100,
                         phases=Phases(environment_s=100, train_s=900))
    retry = AttemptUsage(attempt=2, billed_seconds=Decimal(500), queue_seconds=Decimal(200), start_step=100,
                         end_step=150, succeeded=True, phases=Phases(environment_s=50, train_s=450))
    return RunUsage(trial_id="t", run=run, track="trn2", instance_type=TYPE, nodes=nodes, attempts=[first, retry])


def _cost(capacity: str | None, run: str = "trn2", nodes: int = 1) -> RunCost:
    return compute_run_cost(_usage(run, nodes), _table(capacity))


@pytest.mark.parametrize("capacity", ["reserved", "capacity_block"])
def test_held_capacity_bills_queue_time_at_the_instance_rate(capacity: str) -> None:
    """A Capacity Block's price is charged up front for the whole block
    (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-pricing-billing.html, and the block is
    reserved for its duration: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-capacity-blocks.html), and an
    On-Demand Capacity Reservation is charged at the On-Demand rate whether instances run in it or not
    (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-reservations-pricing-billing.html): the instances
    a job waits for in RUNNABLE (https://docs.aws.amazon.com/batch/latest/userguide/job_states.html) are paid all
    the while, so its queue time is queueing cost at the instance rate."""
    cost = _cost(capacity)
    queued = Decimal(300 + 200)
    assert cost.queue_seconds == cost.billed_queue_seconds == queued
    # Attempt 1's environment start (100 s) and both attempts' waits; the retry's environment start is rerun cost.
    assert cost.seconds["queue_environment"] == Decimal(100) + queued
    assert cost.seconds["failed_reruns"] == Decimal(50)
    assert cost.queue_environment_usd == ((Decimal(100) + queued) * RATE / 3600).quantize(QUANTUM)
    assert cost.instance_usd == ((Decimal(1500) + queued) * RATE / 3600).quantize(QUANTUM)
    assert sum(getattr(cost, c) for c in COMPONENTS) == cost.total_usd == cost.instance_usd + cost.storage_usd
    assert cost.price.capacity == capacity and "queue time" in cost.price.basis and "billed" in cost.price.basis


@pytest.mark.parametrize("capacity", [None, "on_demand", "spot"])
def test_on_demand_and_spot_capacity_bill_environment_start_but_not_queue_time(capacity: str | None) -> None:
    """An On-Demand or Spot instance's usage is billed in the running state only
    (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-lifecycle.html); a job waiting RUNNABLE has
    none yet (https://docs.aws.amazon.com/batch/latest/userguide/job_states.html), so only its environment start,
    from STARTING on, is queue-and-environment cost."""
    cost = _cost(capacity)
    assert cost.queue_seconds == Decimal(500) and cost.billed_queue_seconds == 0
    assert cost.seconds["queue_environment"] == Decimal(100)
    assert cost.instance_usd == (Decimal(1500) * RATE / 3600).quantize(QUANTUM)
    assert cost.price.capacity == (capacity or "on_demand")
    assert "queue time (SUBMITTED to STARTING) costs nothing" in cost.price.basis


def test_held_capacity_waits_multiply_by_nodes_and_are_queueing_even_for_the_compile_stage() -> None:
    """Every node of a multi-node job is held while it waits; the warm-up compile stage's wait is queueing, not
    compile."""
    on_demand = _cost("on_demand", run="trn2-compile", nodes=2)
    block = _cost("capacity_block", run="trn2-compile", nodes=2)
    assert block.compile_usd == on_demand.compile_usd == on_demand.instance_usd
    assert block.queue_environment_usd == (Decimal(500) * RATE * 2 / 3600).quantize(QUANTUM)
    assert block.total_usd - on_demand.total_usd == block.queue_environment_usd


def test_a_capacity_only_override_keeps_the_rate_and_an_unknown_capacity_names_the_choices() -> None:
    table = load_price_table({"instances": {"us-east-1": {TYPE: {"capacity": "reserved"}}}})
    shipped = load_price_table().instance_price(TYPE)
    row = table.instance_price(TYPE)
    assert (row.capacity, row.hourly_usd, row.confidence) == ("reserved", shipped.hourly_usd, shipped.confidence)
    with pytest.raises(PricesInvalid, match=r"instances\.us-east-1\.trn2\.48xlarge\.capacity: .*on_demand, spot, "
                                            r"reserved, capacity_block"):
        load_price_table({"instances": {"us-east-1": {TYPE: {"hourly_usd": "1", "capacity": "block"}}}})
