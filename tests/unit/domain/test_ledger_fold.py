"""The ledger fold is a function of the set of entries: order and duplicates do not matter."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from lambdas.domain.money import ledger as L
from lambdas.domain.money.cost import compute_run_cost
from lambdas.domain.money.prices import load_price_table

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


def _impossible_run(started_at_ms: int, stopped_at_ms: int, status: str = "FAILED") -> list[L.LedgerEntry]:
    """A job created at t0 - 60 s, RUNNING at t0, ``status`` at t0 + 3600 s, and an attempt record as given."""
    tr = lambda s, seconds: L.transition_entry(  # noqa: E731
        "t-1", "gpu", job_id="j1", attempt=1, status=s, at=T0 + timedelta(seconds=seconds),
        instance_type="p5.48xlarge", created_at_ms=MS0 - 60_000)
    return [tr("RUNNABLE", -30), tr("RUNNING", 0), tr(status, 3600),
            L.attempt_entry("t-1", "gpu", job_id="j1", attempt=1, started_at_ms=started_at_ms,
                            stopped_at_ms=stopped_at_ms, exit_code=1, status_reason="Essential container exited")]


def test_an_attempt_record_stopped_before_it_started_is_billed_from_the_transitions_and_marked_suspect() -> None:
    """AWS Batch API reference, AttemptDetail (https://docs.aws.amazon.com/batch/latest/APIReference/
    API_AttemptDetail.html): ``startedAt`` is when the attempt went STARTING -> RUNNING and ``stoppedAt`` when it went
    RUNNING -> SUCCEEDED/FAILED, so a record that stops before it starts is impossible. The job's own transitions
    (RUNNING at t0, FAILED at t0 + 3600 s) show an hour of instance time: the run is billed that hour, not $0, and the
    cost body says which attempt's record was set aside."""
    fold = L.fold_run(_impossible_run(MS0 + 3_600_000, MS0), trial_id="t-1", run="gpu", instance_type="unknown",
                      region="us-east-1")
    attempt = fold.usage.attempts[0]
    assert attempt.billed_seconds == Decimal(3600)
    assert fold.complete and fold.terminal_status == "FAILED"
    assert fold.suspect == {1: ["attempt record stopped before it started"]}
    cost = compute_run_cost(fold.usage, load_price_table())
    assert cost.total_usd > 0
    body = L.cost_body(fold, cost)
    assert body.usage.attempts[0].suspect == ["attempt record stopped before it started"]
    stored = body.model_dump(mode="json")
    assert stored["usage"]["attempts"][0]["suspect"] == ["attempt record stopped before it started"]


def test_an_attempt_record_outside_the_jobs_transitions_is_billed_from_the_transitions() -> None:
    """AWS Batch API reference, AttemptDetail and JobDetail (https://docs.aws.amazon.com/batch/latest/APIReference/
    API_AttemptDetail.html, API_JobDetail.html): an attempt starts after the job's ``createdAt`` and stops when the
    job reaches SUCCEEDED or FAILED. A record that claims ten days of running after the job's FAILED transition is
    not billed; the transitions' hour is, and the attempt is marked suspect."""
    ten_days = 10 * 86_400_000
    for started, stopped, reason in (
        (MS0, MS0 + ten_days, "attempt record after the job ended"),
        (MS0 - ten_days, MS0 + 3_600_000, "attempt record before the job was created"),
    ):
        fold = L.fold_run(_impossible_run(started, stopped), trial_id="t-1", run="gpu", instance_type="unknown")
        assert fold.usage.attempts[0].billed_seconds == Decimal(3600)
        assert fold.suspect == {1: [reason]}
    # A record inside the transitions is trusted as before, and nothing is suspect.
    fold = L.fold_run(_impossible_run(MS0 + 500, MS0 + 3_599_000), trial_id="t-1", run="gpu", instance_type="unknown")
    assert fold.usage.attempts[0].billed_seconds == Decimal("3598.5") and fold.suspect == {}
    stored = L.cost_body(fold, compute_run_cost(fold.usage, load_price_table())).model_dump(mode="json")
    assert "suspect" not in stored["usage"]["attempts"][0]
    assert L.fold_run(entries(), trial_id="t-1", run="gpu", instance_type="unknown").suspect == {}


def test_a_retried_attempts_impossible_record_ends_where_the_next_attempt_begins() -> None:
    """AWS Batch "Automated job retries" (https://docs.aws.amazon.com/batch/latest/userguide/job_retries.html): a
    failed attempt that is retried moves the job back to RUNNABLE, so the next attempt's first transition bounds the
    attempt before it. With attempt 1's record impossible, attempt 1 is billed STARTING -> that RUNNABLE."""
    tr = lambda s, seconds, attempt: L.transition_entry(  # noqa: E731
        "t-1", "trn2", job_id="j1", attempt=attempt, status=s, at=T0 + timedelta(seconds=seconds), created_at_ms=MS0)
    record = lambda attempt, started, stopped: L.attempt_entry(  # noqa: E731
        "t-1", "trn2", job_id="j1", attempt=attempt, started_at_ms=MS0 + started * 1000,
        stopped_at_ms=MS0 + stopped * 1000, exit_code=75 if attempt == 1 else 0, status_reason=None)
    fold = L.fold_run([tr("STARTING", 60, 1), tr("RUNNING", 90, 1), tr("RUNNABLE", 1800, 2), tr("STARTING", 1850, 2),
                       tr("SUCCEEDED", 5000, 2), record(1, 1700, 100), record(2, 1900, 5000)],
                      trial_id="t-1", run="trn2", instance_type="trn2.48xlarge")
    assert [a.billed_seconds for a in fold.usage.attempts] == [Decimal(1740), Decimal(3150)]
    assert fold.suspect == {1: ["attempt record stopped before it started"]} and fold.complete


def test_a_run_has_a_new_outcome_only_when_its_facts_make_it_terminal() -> None:
    """AWS Batch "Automated job retries" (https://docs.aws.amazon.com/batch/latest/userguide/job_retries.html): a job
    moves to either SUCCEEDED or FAILED, once. A second terminal transition for the same job (late or forged) is no
    new outcome, whichever it is; a later job for the run (a redrive) reopens it, and its end is a new outcome."""
    tr = lambda job, s, seconds, created: L.transition_entry(  # noqa: E731
        "t-1", "gpu", job_id=job, attempt=1, status=s, at=T0 + timedelta(seconds=seconds), created_at_ms=created)
    ledger = [tr("j1", "RUNNING", 0, MS0)]
    steps = [(tr("j1", "SUCCEEDED", 100, MS0), "SUCCEEDED"), (tr("j1", "FAILED", 200, MS0), None),
             (tr("j2", "RUNNING", 300, MS0 + 250_000), None), (tr("j2", "FAILED", 400, MS0 + 250_000), "FAILED")]
    for fact, outcome in steps:
        ledger.append(fact)
        assert L.new_outcome(ledger, [fact]) == outcome
        assert L.new_outcome(ledger, []) is None  # a delivery that added nothing


def test_a_run_is_priced_at_the_instance_type_it_was_submitted_for_and_batchs_answer_is_checked() -> None:
    """The transitions carry what Batch says the run's queue runs on (DescribeComputeEnvironments); the price is the
    submitted instance type's. A disagreement is kept on the stored cost, not used to reprice the run."""
    agreeing = L.fold_run(entries(), trial_id="t-1", run="gpu", instance_type="p5.48xlarge", region="us-east-1")
    assert agreeing.usage.instance_type == "p5.48xlarge" and agreeing.instance_mismatch is None
    disagreeing = L.fold_run(entries(), trial_id="t-1", run="gpu", instance_type="p4d.24xlarge", region="us-east-1")
    assert disagreeing.usage.instance_type == "p4d.24xlarge"
    assert disagreeing.instance_mismatch == ("Batch reported p5.48xlarge for the queue of a run submitted for "
                                             "p4d.24xlarge; priced as p4d.24xlarge")
    prices = load_price_table()
    stored = L.cost_body(disagreeing, compute_run_cost(disagreeing.usage, prices))
    assert stored.instance_mismatch == disagreeing.instance_mismatch
    assert "instance_mismatch" not in L.cost_body(agreeing, compute_run_cost(agreeing.usage, prices)).model_dump()
    assert compute_run_cost(disagreeing.usage, prices).instance_usd != compute_run_cost(agreeing.usage,
                                                                                          prices).instance_usd
