"""The ledger fold is a function of the set of entries: order and duplicates do not matter."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from lambdas.domain import ledger as L
from lambdas.domain.cost import compute_run_cost
from lambdas.domain.prices import load_price_table

T0 = datetime(2026, 11, 20, 10, tzinfo=UTC)
MS0 = int(T0.timestamp() * 1000)


def entries() -> list[L.LedgerEntry]:
    tr = lambda status, s, attempt=1: L.transition_entry(  # noqa: E731
        "t-1",
        "gpu",
        job_id="j1",
        attempt=attempt,
        status=status,
        at=T0 + timedelta(seconds=s),
        instance_type="p5.48xlarge",
        created_at_ms=MS0,
    )
    return [
        tr("SUBMITTED", 0),
        tr("RUNNABLE", 5),
        tr("STARTING", 60),
        tr("RUNNING", 90),
        tr("SUCCEEDED", 3660),
        L.attempt_entry(
            "t-1",
            "gpu",
            job_id="j1",
            attempt=1,
            started_at_ms=MS0 + 90_000,
            stopped_at_ms=MS0 + 3_660_000,
            exit_code=0,
            status_reason="done",
        ),
        L.summary_entry(
            "t-1",
            "gpu",
            1,
            {"global_step": 1000, "start_step": 0, "phases": {"train_s": 3000.0, "environment_s": 100.0}},
        ),
        L.checkpoint_entry("t-1", "gpu", step=500, bytes_=2**30, files=4, save_s=3.0, uri="s3://a/b/"),
    ]


def test_billed_and_queue_seconds_follow_the_contract() -> None:
    fold = L.fold_run(entries(), trial_id="t-1", run="gpu", instance_type="unknown", region="us-east-1")
    attempt = fold.usage.attempts[0]
    assert attempt.billed_seconds == Decimal(3600)  # STARTING -> stoppedAt
    assert attempt.queue_seconds == Decimal(60)  # SUBMITTED -> STARTING
    assert fold.complete and fold.terminal_status == "SUCCEEDED"
    assert fold.usage.instance_type == "p5.48xlarge" and fold.usage.checkpoint_put_requests == 5
    cost = compute_run_cost(fold.usage, load_price_table())
    assert cost.total_usd == sum(
        (
            cost.effective_training_usd,
            cost.compile_usd,
            cost.failed_reruns_usd,
            cost.checkpoint_storage_usd,
            cost.queue_environment_usd,
        ),
        Decimal(0),
    )


def test_order_and_duplicates_do_not_change_the_fold() -> None:
    base = L.fold_run(entries(), trial_id="t-1", run="gpu", instance_type="unknown")
    rng = random.Random(7)
    for _ in range(20):
        shuffled = entries() + rng.sample(entries(), 3)
        rng.shuffle(shuffled)
        again = L.fold_run(shuffled, trial_id="t-1", run="gpu", instance_type="unknown")
        assert again == base


def test_open_run_is_not_complete() -> None:
    open_entries = [e for e in entries() if "SUCCEEDED" not in e.entry_key and e.kind != "attempt"]
    fold = L.fold_run(open_entries, trial_id="t-1", run="gpu", instance_type="p5.48xlarge")
    assert fold.terminal_status is None and not fold.complete
