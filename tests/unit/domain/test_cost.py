"""The cost model: the instance-time identity, rerun accounting and monotonicity."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lambdas.domain.money.cost import COMPONENTS, QUANTUM, AttemptUsage, Phases, RunUsage, compute_run_cost, sum_costs
from lambdas.domain.money.prices import PriceMissing, load_price_table

TABLE = load_price_table()


def _run(attempts: list[AttemptUsage], **kw: object) -> RunUsage:
    return RunUsage(trial_id="t", run="trn2", track="trn2", instance_type="trn2.48xlarge", attempts=attempts,
                    **kw)  # type: ignore[arg-type]


phase = st.floats(min_value=0, max_value=5000, allow_nan=False, allow_infinity=False)
attempt_st = st.builds(
    lambda n, billed, ph, steps, rerun: AttemptUsage(
        attempt=n, billed_seconds=Decimal(billed).quantize(Decimal("0.001")), phases=ph, start_step=0,
        end_step=steps, rerun_steps=min(rerun, steps)),
    st.integers(1, 3), st.integers(0, 200_000),
    st.builds(Phases, environment_s=phase, data_load_s=phase, compile_s=phase, train_s=phase,
              checkpoint_save_s=phase, checkpoint_restore_s=phase, eval_s=phase),
    st.integers(0, 5000), st.integers(0, 5000),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(attempt_st, min_size=1, max_size=4), st.integers(1, 8), st.integers(0, 10**12))
def test_instance_components_add_up_exactly_to_billed_time_times_price(
        attempts: list[AttemptUsage], nodes: int, stored: int) -> None:
    cost = compute_run_cost(_run(attempts, nodes=nodes, checkpoint_bytes=stored), TABLE)
    billed = sum(a.billed_seconds for a in attempts)
    rate = TABLE.instance_hourly_usd("trn2.48xlarge")
    assert cost.instance_usd == (billed * rate * nodes / 3600).quantize(QUANTUM)
    parts = sum(getattr(cost, c) for c in COMPONENTS)
    assert parts == cost.total_usd
    assert cost.total_usd == cost.instance_usd + cost.storage_usd
    assert all(getattr(cost, c) >= 0 for c in COMPONENTS)


@settings(max_examples=100, deadline=None)
@given(attempt_st, st.integers(1, 100_000), st.integers(0, 10**11), st.integers(0, 10**11))
def test_more_billed_time_or_storage_never_costs_less(a: AttemptUsage, extra: int, stored: int, more: int) -> None:
    base = compute_run_cost(_run([a], checkpoint_bytes=stored), TABLE)
    longer = compute_run_cost(_run([a.model_copy(update={"billed_seconds": a.billed_seconds + extra})],
                                   checkpoint_bytes=stored), TABLE)
    bigger = compute_run_cost(_run([a], checkpoint_bytes=stored + more), TABLE)
    assert longer.total_usd >= base.total_usd
    assert bigger.total_usd >= base.total_usd
    assert bigger.checkpoint_storage_usd >= base.checkpoint_storage_usd


def test_retry_compile_and_redone_steps_are_rerun_cost() -> None:
    first = AttemptUsage(attempt=1, billed_seconds=Decimal(1000), end_step=300, phases=Phases(
        environment_s=60, compile_s=300, train_s=600, checkpoint_save_s=20))
    retry = AttemptUsage(attempt=2, billed_seconds=Decimal(1000), start_step=200, end_step=1000,
                         resumed_from_step=200, rerun_steps=100, succeeded=True,
                         phases=Phases(environment_s=50, compile_s=30, train_s=800, checkpoint_restore_s=10))
    cost = compute_run_cost(_run([first, retry]), TABLE)
    s = cost.seconds
    assert s["compile"] == Decimal(300)  # only the first attempt's compile
    # retry: environment 50 + compile 30 + restore 10 + unattributed 110 + redone train 800*100/800
    assert s["failed_reruns"] == Decimal(50 + 30 + 10 + 110 + 100)
    assert s["queue_environment"] == Decimal(60 + 20)  # first attempt's environment + its unattributed 20 s
    assert cost.rerun_steps == 100 and cost.effective_steps == 1000
    clean = compute_run_cost(_run([first.model_copy(update={"end_step": 1000})]), TABLE)
    assert clean.failed_reruns_usd == 0


def test_phases_longer_than_billed_time_are_scaled_not_overbilled() -> None:
    a = AttemptUsage(attempt=1, billed_seconds=Decimal(100), end_step=10, phases=Phases(train_s=150, compile_s=50))
    cost = compute_run_cost(_run([a]), TABLE)
    assert sum(cost.seconds.values()) == Decimal(100)
    assert cost.seconds["compile"] == Decimal(25)


def test_storage_and_requests_are_on_top() -> None:
    a = AttemptUsage(attempt=1, billed_seconds=Decimal(0))
    cost = compute_run_cost(_run([a], checkpoint_bytes=2**30 * 10, checkpoint_put_requests=2000,
                                 checkpoint_get_requests=1000), TABLE)
    rates = TABLE.s3_rates()
    expected = 10 * rates.storage_gb_month_usd + 2 * rates.put_per_1000_usd + rates.get_per_1000_usd
    assert cost.checkpoint_storage_usd == expected.quantize(QUANTUM) == cost.total_usd


def test_overrides_change_the_rate_and_are_labelled() -> None:
    table = load_price_table({"instances": {"us-east-1": {"trn2.48xlarge": "10"}}})
    a = AttemptUsage(attempt=1, billed_seconds=Decimal(3600))
    cost = compute_run_cost(_run([a]), table)
    assert cost.total_usd == Decimal(10) and cost.price.confidence == "override"


def test_missing_price_names_the_fix() -> None:
    with pytest.raises(PriceMissing, match="prices refresh"):
        compute_run_cost(_run([], region="eu-north-1"), TABLE)


def test_sum_costs_adds_components() -> None:
    a = compute_run_cost(_run([AttemptUsage(attempt=1, billed_seconds=Decimal(10))]), TABLE)
    total = sum_costs([a, a])
    assert total.total_usd == 2 * a.total_usd


def test_the_warm_up_compile_stage_is_all_compile_cost() -> None:
    """Its environment, data load, steps and unattributed time, on every attempt, exist only to compile."""
    first = AttemptUsage(attempt=1, billed_seconds=Decimal(1000), end_step=3, phases=Phases(
        environment_s=60, data_load_s=5, compile_s=800))
    retry = AttemptUsage(attempt=2, billed_seconds=Decimal(500), end_step=3, succeeded=True,
                         phases=Phases(environment_s=50, compile_s=400))
    usage = _run([first, retry]).model_copy(update={"run": "trn2-compile", "track": "trn2"})
    cost = compute_run_cost(usage, TABLE)
    assert cost.seconds["compile"] == Decimal(1500)
    assert cost.compile_usd == cost.instance_usd and cost.failed_reruns_usd == cost.queue_environment_usd == 0
