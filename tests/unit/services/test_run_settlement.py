"""Settling a run (``lambdas.services.run_settlement``) over in-memory ports: what it reads, what it stores, and
that a lost race returns the cost that won. No moto; the ports' behaviour is pinned against AWS by
``tests/integration/test_port_contracts.py``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lambdas.domain.money import ledger as L
from lambdas.domain.money.prices import load_price_table
from lambdas.domain.trial.trial_record import TrialRecord
from lambdas.services.run_settlement import RunSettlement
from tests import fakes
from tests.builders import run_cost, stored_cost

T0 = datetime(2026, 12, 4, 10, 0, tzinfo=UTC)


class CountingTrials(fakes.InMemoryTrials):
    reads = 0

    def get(self, trial_id: str) -> TrialRecord | None:
        self.reads += 1
        return super().get(trial_id)


class CountingLedger(fakes.InMemoryLedger):
    queries = 0

    def entries(self, run_key: str) -> list[L.LedgerEntry]:
        self.queries += 1
        return super().entries(run_key)


@pytest.fixture
def settlement() -> RunSettlement:
    trials = CountingTrials()
    trials.create(TrialRecord.from_item({"trial_id": "t-1", "status": "SUBMITTED",
                   "tracks": {"gpu": {"instance_type": "p5.48xlarge", "nodes": 1}}}))
    return RunSettlement(CountingLedger(), trials, fakes.InMemoryObjects(), load_price_table(), "us-east-1")


def _transition(status: str, minutes: int, **kw: Any) -> L.LedgerEntry:
    return L.transition_entry("t-1", "gpu", job_id="job-1", attempt=1, status=status,
                              at=T0 + timedelta(minutes=minutes), **kw)


def test_an_open_run_reads_the_ledger_once_and_never_the_trial(settlement: RunSettlement) -> None:
    settlement.record([_transition("SUBMITTED", 0), _transition("RUNNING", 5)])
    settled = settlement.settle_run("t-1", "gpu", collect=True)
    assert settled.cost is None and [e.body["status"] for e in settled.entries] == ["RUNNING", "SUBMITTED"]
    assert settlement.ledger.queries == 1 and settlement.trials.reads == 0  # type: ignore[attr-defined]
    assert settlement.ledger.cost("t-1#gpu") is None


def test_a_terminal_run_is_costed_at_its_declared_instance_and_returned_as_stored(settlement: RunSettlement) -> None:
    settlement.record([_transition("SUBMITTED", 0), _transition("STARTING", 1), _transition("RUNNING", 2),
                       _transition("SUCCEEDED", 62, exit_code=0),
                       L.attempt_entry("t-1", "gpu", job_id="job-1", attempt=1,
                                       started_at_ms=int((T0 + timedelta(minutes=2)).timestamp() * 1000),
                                       stopped_at_ms=int((T0 + timedelta(minutes=62)).timestamp() * 1000),
                                       exit_code=0, status_reason=None)])
    settled = settlement.settle_run("t-1", "gpu", collect=True)
    assert settled.cost is not None and settled.cost == settlement.ledger.cost("t-1#gpu")
    assert settled.cost.terminal_status == "SUCCEEDED" and settled.cost.usage.instance_type == "p5.48xlarge"
    assert settled.cost.cost.total_usd > 0
    assert settlement.ledger.queries == 1 and settlement.trials.reads == 1  # type: ignore[attr-defined]


def test_a_settlement_that_lost_the_race_returns_the_cost_that_won(settlement: RunSettlement) -> None:
    settlement.record([_transition("SUBMITTED", 0), _transition("FAILED", 3, exit_code=1)])
    winner = stored_cost(run_cost("9.99", trial_id="t-1"), facts=99)
    settlement.ledger.put_cost("t-1#gpu", winner, facts=99)  # a fold over more facts, stored by another delivery
    assert settlement.settle_run("t-1", "gpu").cost == winner


def test_only_runs_of_trials_the_plane_started_are_recorded(settlement: RunSettlement) -> None:
    from lambdas.services.run_settlement import ForeignEvent

    settlement.trials.create(TrialRecord.from_item({"trial_id": "t-2", "status": "PENDING_APPROVAL",
                                                    "tracks": {"gpu": {}, "trn2": {}}}))
    with pytest.raises(ForeignEvent, match="no trial 'nope'"):
        settlement.check_started("nope", "gpu")
    with pytest.raises(ForeignEvent, match=r"trial t-1 has no run 'trn2' \(its runs: gpu\)"):
        settlement.check_started("t-1", "trn2")
    with pytest.raises(ForeignEvent, match="never started"):
        settlement.check_started("t-2", "gpu-fallback")
    reads = settlement.trials.reads  # type: ignore[attr-defined]
    settlement.check_started("t-1", "gpu")
    settlement.check_started("t-1", "gpu")  # known now: no second read
    assert settlement.trials.reads == reads + 1  # type: ignore[attr-defined]


def _ms(minutes: int) -> int:
    return int((T0 + timedelta(minutes=minutes)).timestamp() * 1000)


def test_an_impossible_attempt_record_settles_from_the_transitions_and_the_stored_cost_says_so(
    settlement: RunSettlement,
) -> None:
    """AWS Batch "Job state change events" (https://docs.aws.amazon.com/batch/latest/userguide/batch_job_events.html):
    the event's ``detail`` is the job as DescribeJobs returns it, whose ``attempts`` are AttemptDetail objects
    (https://docs.aws.amazon.com/batch/latest/APIReference/API_AttemptDetail.html: ``startedAt`` STARTING ->
    RUNNING, ``stoppedAt`` RUNNING -> terminal, epoch milliseconds). An attempt that stops before it starts cannot
    settle the run at $0 when its transitions show an hour: the hour is billed and the stored cost marks the
    attempt suspect."""
    from lambdas.domain.events import BatchJobStateChangeDetail

    def detail(status: str, attempts: list[dict[str, Any]]) -> BatchJobStateChangeDetail:
        return BatchJobStateChangeDetail.model_validate({
            "jobArn": "arn:aws:batch:us-east-1:123456789012:job/job-1", "jobName": "t-1-gpu", "jobId": "job-1",
            "jobQueue": "q", "status": status, "createdAt": _ms(-1), "attempts": attempts,
            "container": {"environment": [{"name": "DUALTRACK_TRIAL_ID", "value": "t-1"},
                                          {"name": "DUALTRACK_RUN", "value": "gpu"}]}})

    forged = {"container": {"exitCode": 1}, "startedAt": _ms(60), "stoppedAt": _ms(0)}
    settlement.record_job_state(detail("RUNNING", []), T0)
    settlement.record_job_state(detail("FAILED", [forged]), T0 + timedelta(minutes=60))
    settled = settlement.settle_run("t-1", "gpu")
    assert settled.cost is not None and settled.cost.complete is True
    assert str(settled.cost.cost.billed_instance_seconds) == "3600"
    assert settled.cost.cost.total_usd > 0
    assert settled.cost.usage.attempts[0].suspect == ["attempt record stopped before it started"]
    stored = settlement.ledger.cost("t-1#gpu")
    assert stored is not None and stored.model_dump(mode="json")["usage"]["attempts"][0]["suspect"] == [
        "attempt record stopped before it started"]


def test_a_late_failed_after_success_is_no_new_outcome(settlement: RunSettlement) -> None:
    """AWS Batch "Automated job retries" (https://docs.aws.amazon.com/batch/latest/userguide/job_retries.html): each
    job moves to either SUCCEEDED or FAILED, and "Job states" (https://docs.aws.amazon.com/batch/latest/userguide/
    job_states.html) ends it there. A FAILED read from DescribeJobs after the job's SUCCEEDED was recorded does not
    change the run's outcome (a success wins), so the cost step reports no new outcome for it."""
    from lambdas.domain.events import BatchJobStateChangeDetail

    class Jobs:
        def __init__(self, statuses: dict[str, str]) -> None:
            self.statuses = statuses

        def queue_instance_type(self, job_queue: str) -> str | None:
            return None

        def terminate(self, job_id: str, reason: str) -> None:
            self.statuses[job_id] = "FAILED"

        def describe(self, job_id: str) -> BatchJobStateChangeDetail | None:
            return BatchJobStateChangeDetail.model_validate({
                "jobArn": f"arn:aws:batch:us-east-1:123456789012:job/{job_id}", "jobId": job_id,
                "jobName": "t-1-gpu", "jobQueue": "q", "status": self.statuses[job_id], "createdAt": _ms(0),
                "startedAt": _ms(1), "stoppedAt": _ms(61)})

    jobs = Jobs({"job-1": "SUCCEEDED"})
    settlement.jobs = jobs
    assert settlement.reconcile_jobs("t-1", ["job-1"]) == ["SUCCEEDED"]
    assert settlement.reconcile_jobs("t-1", ["job-1"]) == []
    jobs.statuses["job-1"] = "FAILED"
    assert settlement.reconcile_jobs("t-1", ["job-1"]) == []
    settled = settlement.settle_run("t-1", "gpu")
    assert settled.cost is not None and settled.cost.terminal_status == "SUCCEEDED"
