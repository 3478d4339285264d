"""At-least-once, out-of-order delivery: nothing lost, nothing double-counted.

EventBridge delivers Batch and S3 events at least once and in no particular order, retries a function that fails,
and may run two copies of the same delivery at once. Whatever the stream, the ledger must end up with exactly the
facts of one clean delivery and each run's stored cost must be the same to the last digit.
"""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.reliability import figures
from tests.reliability.trial_events import (
    clear_tables,
    costs,
    deliver,
    deliver_one,
    facts,
    submit_trial,
    total_usd,
)

pytestmark = pytest.mark.slow


def _baseline(aws: dict[str, Any], example: dict[str, Any]) -> tuple[Any, list[Any], dict[str, Any]]:
    trial = submit_trial(aws, example)
    deliver(trial.events)
    baseline_facts, baseline_costs = facts(aws), costs(aws)
    assert {b["terminal_status"] for b in baseline_costs.values()} == {"SUCCEEDED"}
    assert all(b["complete"] for b in baseline_costs.values())
    clear_tables(aws)
    return trial, baseline_facts, baseline_costs


def _same_as_baseline(aws: dict[str, Any], baseline_facts: list[Any], baseline_costs: dict[str, Any]) -> None:
    got_facts, got_costs = facts(aws), costs(aws)
    assert got_facts == baseline_facts
    assert got_costs == baseline_costs


def test_clean_delivery_prices_both_runs(aws: dict[str, Any], example: dict[str, Any]) -> None:
    trial, baseline_facts, baseline_costs = _baseline(aws, example)
    figures.record("faults.clean_delivery", events=len(trial.events), ledger_entries=len(baseline_facts),
                   runs_costed=len(baseline_costs), total_usd=f"{total_usd(baseline_costs):.6f}")
    trn2 = baseline_costs[f"{trial.trial_id}#trn2"]
    assert [a["rerun_steps"] for a in trn2["usage"]["attempts"]] == [0, 100]


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                               HealthCheck.too_slow])
@given(data=st.data())
def test_hundreds_of_duplicated_reordered_late_events_converge(aws: dict[str, Any], example: dict[str, Any],
                                                               data: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # The ledger's own conditional writes must converge without help: idempotency records off (as after they
    # expire), every event delivered 3 to 10 times, all in one random order.
    monkeypatch.setenv("POWERTOOLS_IDEMPOTENCY_DISABLED", "true")
    clear_tables(aws)
    trial, baseline_facts, baseline_costs = _baseline(aws, example)
    copies = data.draw(st.lists(st.integers(3, 10), min_size=len(trial.events), max_size=len(trial.events)))
    stream = [event for event, n in zip(trial.events, copies, strict=True) for _ in range(n)]
    stream = data.draw(st.permutations(stream))
    deliver(stream)
    _same_as_baseline(aws, baseline_facts, baseline_costs)
    figures.add("faults.duplicated_reordered", "streams")
    figures.add("faults.duplicated_reordered", "deliveries", len(stream))
    figures.record("faults.duplicated_reordered", ledger_entries=len(facts(aws)),
                   ledger_entries_expected=len(baseline_facts),
                   cost_delta_usd=f"{total_usd(costs(aws)) - total_usd(baseline_costs):.6f}")


def test_duplicates_with_idempotency_records_converge(aws: dict[str, Any], example: dict[str, Any]) -> None:
    trial, baseline_facts, baseline_costs = _baseline(aws, example)
    rng = random.Random(20261120)
    stream = [e for e in trial.events for _ in range(rng.randint(2, 4))]
    rng.shuffle(stream)
    deliver(stream)
    _same_as_baseline(aws, baseline_facts, baseline_costs)
    figures.record("faults.duplicated_with_idempotency", deliveries=len(stream), ledger_entries=len(facts(aws)),
                   ledger_entries_expected=len(baseline_facts),
                   cost_delta_usd=f"{total_usd(costs(aws)) - total_usd(baseline_costs):.6f}")


class Crash(RuntimeError):
    """The function's container dies here (timeout, OOM, a bug): the invocation fails and EventBridge retries."""


# A retried invocation finds its facts already in the ledger ("added" = 0) and so never re-settles the run: the
# stored cost stays at the fold from before the crash. Fix: after recording, settle a terminal run whether or not
# this invocation added facts (put_cost only ever moves forward, so the extra settle is safe).

@pytest.mark.parametrize("crash_point", ["append_after_first_fact", "put_cost_after_fold_read"])
def test_lambda_crash_between_reading_and_writing_the_ledger(aws: dict[str, Any], example: dict[str, Any],
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             crash_point: str) -> None:
    from lambdas.adapters.ledger_table import DynamoLedger

    trial, baseline_facts, baseline_costs = _baseline(aws, example)
    original_append, original_put_cost = DynamoLedger.append, DynamoLedger.put_cost
    state = {"armed": False, "appends": 0}

    def append(self: Any, entry: Any) -> bool:
        done = original_append(self, entry)
        state["appends"] += 1
        if crash_point == "append_after_first_fact" and state["armed"]:
            state["armed"] = False
            raise Crash("after the first fact of the event was written")
        return done

    def put_cost(self: Any, run_key: str, body: Any, n: int) -> bool:
        if crash_point == "put_cost_after_fold_read" and state["armed"]:
            state["armed"] = False
            raise Crash("after folding the ledger, before storing the cost")
        return original_put_cost(self, run_key, body, n)

    monkeypatch.setattr(DynamoLedger, "append", append)
    monkeypatch.setattr(DynamoLedger, "put_cost", put_cost)
    # Every event's first delivery crashes at the crash point (when it gets there); EventBridge retries it
    # three deliveries later, so other events land in between.
    crashed, pending, rng = 0, [], random.Random(7)
    stream = list(trial.events)
    rng.shuffle(stream)
    for event in stream:
        state["armed"] = True
        try:
            deliver_one(*event)
        except Crash:
            crashed += 1
            pending.append([3, event])
        state["armed"] = False
        for retry in list(pending):
            retry[0] -= 1
            if retry[0] == 0:
                pending.remove(retry)
                deliver_one(*retry[1])
    for _, event in pending:
        deliver_one(*event)
    assert crashed > 0
    figures.record(f"faults.crash.{crash_point}", crashes_injected=crashed, events=len(trial.events),
                   ledger_entries=len(facts(aws)), ledger_entries_expected=len(baseline_facts),
                   facts_match=facts(aws) == baseline_facts, costs_match=costs(aws) == baseline_costs,
                   cost_delta_usd=f"{total_usd(costs(aws)) - total_usd(baseline_costs):.6f}")
    _same_as_baseline(aws, baseline_facts, baseline_costs)


def test_concurrent_duplicate_deliveries(aws: dict[str, Any], example: dict[str, Any]) -> None:
    from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyAlreadyInProgressError

    trial, baseline_facts, baseline_costs = _baseline(aws, example)
    threads_per_event, in_progress, completed = 4, 0, 0
    lock = threading.Lock()
    retries: list[Any] = []

    def run(event: Any) -> None:
        nonlocal in_progress, completed
        try:
            deliver_one(*event)
        except IdempotencyAlreadyInProgressError:
            # Powertools' documented answer to a concurrent duplicate: fail it so EventBridge retries later.
            with lock:
                in_progress += 1
                retries.append(event)
            return
        with lock:
            completed += 1

    for event in trial.events:
        workers = [threading.Thread(target=run, args=(event,)) for _ in range(threads_per_event)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=60)
    for event in retries:
        deliver_one(*event)
    _same_as_baseline(aws, baseline_facts, baseline_costs)
    figures.record("faults.concurrent_duplicates", threads_per_event=threads_per_event,
                   deliveries=threads_per_event * len(trial.events), completed=completed,
                   rejected_in_progress=in_progress, ledger_entries=len(facts(aws)),
                   ledger_entries_expected=len(baseline_facts),
                   cost_delta_usd=f"{total_usd(costs(aws)) - total_usd(baseline_costs):.6f}")
