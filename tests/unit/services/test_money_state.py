"""Anything that spends is a recorded state that a retry or the reconciler finishes: stops that really stop,
terminal trials that stay terminal, approvals that cannot strand a trial, quotas booked atomically. In-memory ports
(``tests/fakes.py``), whose transactional behaviour ``tests/integration/test_port_contracts.py`` pins against
DynamoDB on moto."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from decimal import Decimal
from typing import Any, Literal

import pytest

from lambdas.domain.money.prices import load_price_table
from lambdas.domain.trial.rules import parse_trial
from lambdas.domain.trial.spec import TrialSpec
from lambdas.domain.trial.trial_record import ExecutionInput, TrialRecord
from lambdas.services.limit_guard import LimitGuard
from lambdas.services.ports import Started
from lambdas.services.reconciliation import reconcile
from lambdas.services.run_settlement import RunSettlement
from lambdas.services.trial_status import set_status
from lambdas.services.trial_submission import (
    QuotaExceeded,
    TrialClosed,
    cancel,
    decide,
)
from tests import fakes
from tests.json_access import arr, obj
from tests.money import NLP, NLP_LEAD, NOW, STAMP, Ports, governance, job, submit_trial, usage, who


@pytest.fixture
def spec(example_trial: dict[str, Any]) -> TrialSpec:
    return parse_trial(example_trial)


class FailingOnce(fakes.InMemoryWorkflow):
    """StopExecution throws once (a throttle, a timeout), then works."""

    failures = 1

    def stop(self, execution_arn: str, cause: str) -> str:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("states endpoint timed out")
        return super().stop(execution_arn, cause)


# 1. A stop that fails once is not forgotten -------------------------------------------------------------------------

def test_a_cancel_whose_stop_fails_stays_stopping_and_the_same_cancel_finishes_it(spec: TrialSpec) -> None:
    ports = Ports(FailingOnce())
    submit_trial(ports, spec)
    with pytest.raises(ConnectionError):  # the API answers 503: send it again
        cancel(spec.trial_id, caller=who(NLP), stopper=ports.stopper(), now=STAMP, reason="not needed")
    record = ports.trials.get(spec.trial_id)
    assert record is not None and record.status == "STOPPING" and record.status_cause == "not needed"
    assert record.execution_arn is not None
    assert ports.workflow.status(record.execution_arn) == "RUNNING"  # still billing: the stop is pending
    again = cancel(spec.trial_id, caller=who(NLP), stopper=ports.stopper(), now=STAMP, reason="again")
    assert again["status"] == "CANCELLED" and again["changed"] is True
    assert ports.workflow.status(record.execution_arn) == "ABORTED"
    assert ports.trials.items[spec.trial_id]["status_cause"] == "not needed"


def test_a_stop_waits_until_every_job_has_ended_and_terminates_those_still_running(spec: TrialSpec) -> None:
    """StopExecution makes Step Functions terminate the job of the running task, best effort; a job it missed is
    terminated here. The trial is CANCELLED only once the ledger (or Batch) shows every job ended."""
    ports = Ports()
    submit_trial(ports, spec)
    job(ports, spec.trial_id, "gpu", "job-gpu", "RUNNING")
    job(ports, spec.trial_id, "trn2", "job-trn2", "RUNNING")
    first = cancel(spec.trial_id, caller=who(NLP), stopper=ports.stopper(), now=STAMP, reason="stop")
    assert first["status"] == "STOPPING" and len(arr(first["pending"])) == 2  # the API does not reach Batch
    assert usage(ports)["active"] == 1  # still holds its place
    swept = reconcile(ports.stopper(jobs=True), NOW + timedelta(minutes=1), overdue_after_s=900)
    assert sorted(ports.jobs.terminated) == ["job-gpu", "job-trn2"] and swept.stops_pending == [spec.trial_id]
    job(ports, spec.trial_id, "gpu", "job-gpu", "FAILED", 2)  # the terminations' events arrive
    job(ports, spec.trial_id, "trn2", "job-trn2", "FAILED", 2)
    swept = reconcile(ports.stopper(jobs=True), NOW + timedelta(minutes=5), overdue_after_s=900)
    assert swept.stops_finished == [spec.trial_id]
    assert ports.trials.items[spec.trial_id]["status"] == "CANCELLED"
    assert usage(ports)["active"] == 0  # released once


def test_a_stop_left_pending_past_its_deadline_is_counted_for_the_alarm(spec: TrialSpec) -> None:
    ports = Ports(FailingOnce())
    submit_trial(ports, spec)
    ports.workflow.failures = 5  # type: ignore[attr-defined]
    with pytest.raises(ConnectionError):
        cancel(spec.trial_id, caller=who(NLP), stopper=ports.stopper(), now=STAMP, reason="stop")
    soon = reconcile(ports.stopper(), NOW + timedelta(minutes=5), overdue_after_s=900)
    assert soon.stops_pending == [spec.trial_id] and soon.stops_overdue == [] and spec.trial_id in soon.stop_errors
    late = reconcile(ports.stopper(), NOW + timedelta(minutes=20), overdue_after_s=900)
    assert late.stops_overdue == [spec.trial_id]


def test_the_workflow_ending_while_a_stop_is_pending_completes_the_stop(spec: TrialSpec) -> None:
    ports = Ports(FailingOnce())
    submit_trial(ports, spec)
    with pytest.raises(ConnectionError):
        cancel(spec.trial_id, caller=who(NLP), stopper=ports.stopper(), now=STAMP, reason="stop")
    done = set_status(ports.trials, spec.trial_id, "SUCCEEDED", None, STAMP, settled_usd=Decimal("10"))
    assert (done.status, done.changed) == ("CANCELLED", True)
    assert usage(ports)["active"] == 0


def _guarded(ports: Ports, workflow: Any) -> LimitGuard:
    settlement = RunSettlement(ports.ledger, ports.trials, ports.artifacts, load_price_table(), "us-east-1")
    return LimitGuard(settlement, workflow)


def test_the_limit_guard_finishes_a_stop_that_failed_when_the_event_is_delivered_again(
        spec: TrialSpec) -> None:
    ports = Ports(FailingOnce())
    submit_trial(ports, spec, rules=governance(quotas={"write_requests_per_trial": 1}))
    guard = _guarded(ports, ports.workflow)
    guard.after_write(spec.trial_id, 10, NOW, fact="a#v1")
    with pytest.raises(ConnectionError):  # the write that crosses the quota: StopExecution fails
        guard.after_write(spec.trial_id, 10, NOW, fact="b#v1")
    record = ports.trials.get(spec.trial_id)
    assert record is not None and record.status == "STOPPING"
    assert record.stopped_by is not None and record.stopped_by.limit == "write_requests"
    # EventBridge delivers the event again (the invocation failed): the same environment, the same guard.
    guard.after_write(spec.trial_id, 10, NOW, fact="b#v1")
    record = ports.trials.get(spec.trial_id)
    assert record is not None and record.status == "CANCELLED" and record.execution_arn is not None
    assert ports.workflow.status(record.execution_arn) == "ABORTED"
    assert record.written_objects == 2  # the redelivered write was not counted again


def test_a_redelivered_write_counts_once_toward_the_write_quota(spec: TrialSpec) -> None:
    ports = Ports()
    submit_trial(ports, spec, rules=governance(quotas={"write_requests_per_trial": 2}))
    guard = _guarded(ports, ports.workflow)
    for _ in range(3):  # one object, its event delivered three times
        assert guard.after_write(spec.trial_id, 10, NOW, fact="trials/x/gpu/a.json#v1") is None
    item = ports.trials.items[spec.trial_id]
    assert item is not None and (item["written_objects"], item["status"]) == (1, "SUBMITTED")


# 2. Terminal means terminal -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("ending", ["REJECTED", "CANCELLED"])
def test_a_rejected_or_cancelled_trial_is_never_started_by_resubmitting_it(spec: TrialSpec, ending: str) -> None:
    ports = Ports()
    rules = governance(approval_threshold_usd="1000")  # pending first: nothing started
    submit_trial(ports, spec, rules=rules)
    if ending == "REJECTED":
        decide(spec.trial_id, approve=False, comment="no", caller=who(NLP_LEAD, rules), plane=ports.plane(),
               now=NOW)
    else:
        cancel(spec.trial_id, caller=who(NLP, rules), stopper=ports.stopper(), now=STAMP, reason="no")
    with pytest.raises(TrialClosed, match=f"is {ending}") as raised:
        submit_trial(ports, spec, rules=governance())  # the same body, now under the threshold
    assert raised.value.status == ending and ports.workflow.executions == {}
    assert ports.trials.usage("team-nlp") == {"active": 0, "usd#2026-12": 0, "jobs#dualtrack-test-gpu-p5-48xlarge": 0,
                                              "jobs#dualtrack-test-trn2-trn2-48xlarge": 0}


# 3. A failed approval does not strand the trial ---------------------------------------------------------------------

class StartFails(fakes.InMemoryWorkflow):
    failures = 1

    def start(self, name: str, execution_input: ExecutionInput) -> Started:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("states endpoint unreachable")
        return super().start(name, execution_input)


def test_an_approval_whose_start_fails_goes_back_to_pending_and_can_be_approved_again(spec: TrialSpec) -> None:
    ports = Ports(StartFails())
    rules = governance(approval_threshold_usd="1000")
    submit_trial(ports, spec, rules=rules)
    lead = who(NLP_LEAD, rules)
    with pytest.raises(ConnectionError):
        decide(spec.trial_id, approve=True, comment="go", caller=lead, plane=ports.plane(), now=NOW)
    record = ports.trials.get(spec.trial_id)
    assert record is not None and record.status == "PENDING_APPROVAL"
    assert record.approval is not None and record.approval.status == "PENDING"
    approved = decide(spec.trial_id, approve=True, comment="go", caller=lead, plane=ports.plane(), now=NOW)
    assert approved["status"] == "SUBMITTED" and len(ports.workflow.executions) == 1


def test_an_approval_cut_short_after_its_decision_is_finished_by_approving_again_or_by_the_reconciler(
        spec: TrialSpec) -> None:
    """The function died between the decision and the start: the trial is SUBMITTING, approved, with no
    execution. Approving again starts it; so does the reconciler once the start is overdue."""
    ports = Ports()
    rules = governance(approval_threshold_usd="1000")
    submit_trial(ports, spec, rules=rules)
    ports.trials.update(spec.trial_id, status="SUBMITTING", approval={"status": "APPROVED"})
    again = decide(spec.trial_id, approve=True, comment="go", caller=who(NLP_LEAD, rules),
                   plane=ports.plane(), now=NOW)
    assert again["status"] == "SUBMITTED" and len(ports.workflow.executions) == 1

    other = parse_trial({**spec.model_dump(mode="json", exclude_none=True), "name": "other"})
    submit_trial(ports, other, rules=rules)
    ports.trials.update(other.trial_id, status="SUBMITTING", approval={"status": "APPROVED"})
    swept = reconcile(ports.stopper(), NOW + timedelta(minutes=10), overdue_after_s=900)
    assert swept.starts_finished == [other.trial_id]
    assert ports.trials.items[other.trial_id]["status"] == "SUBMITTED"


# 4. Quotas are booked atomically; 11. interleaved submissions ---------------------------------------------------------

class Interleaving(fakes.InMemoryTrials):
    """Runs ``during`` once, just before the first admission's conditional write: a submission racing this one."""

    during: Any = None

    def admit(self, record: TrialRecord, additions: Mapping[str, Decimal],
              limits: Mapping[str, Decimal]) -> Literal["created", "exists", "over_quota"]:
        if self.during is not None:
            race, self.during = self.during, None
            race()
        return super().admit(record, additions, limits)


def test_two_interleaved_submissions_of_one_team_cannot_both_pass_concurrent_trials(
        spec: TrialSpec, example_trial: dict[str, Any]) -> None:
    ports = Ports()
    ports.trials = Interleaving()
    rules = governance(quotas={"concurrent_trials": 1})
    other = parse_trial({**example_trial, "name": "other"})
    ports.trials.during = lambda: submit_trial(ports, other, rules=rules)
    with pytest.raises(QuotaExceeded) as raised:
        submit_trial(ports, spec, rules=rules)  # read the team's usage before the other was booked
    assert [b.quota for b in raised.value.breaches] == ["concurrent_trials"]
    assert [i.trial_id for i in ports.trials.iter_all()] == [other.trial_id]
    assert usage(ports)["active"] == 1


def test_two_interleaved_submissions_of_one_team_cannot_both_pass_the_monthly_dollars(
        spec: TrialSpec, example_trial: dict[str, Any]) -> None:
    ports = Ports()
    ports.trials = Interleaving()
    rules = governance(quotas={"usd_per_month": "6000"})  # one worst case (3,500.23 USD) fits, two do not
    other = parse_trial({**example_trial, "name": "other"})
    ports.trials.during = lambda: submit_trial(ports, other, rules=rules)
    with pytest.raises(QuotaExceeded) as raised:
        submit_trial(ports, spec, rules=rules)
    assert [b.quota for b in raised.value.breaches] == ["usd_per_month"]
    assert usage(ports)["usd#2026-12"] == 3500.23


def test_two_interleaved_submissions_of_one_trial_start_one_execution_and_answer_201_once(spec: TrialSpec) -> None:
    ports = Ports()
    ports.trials = Interleaving()
    answers: list[Any] = []
    ports.trials.during = lambda: answers.append(submit_trial(ports, spec))
    answers.append(submit_trial(ports, spec))
    assert sorted(a.created for a in answers) == [False, True]
    assert len(ports.workflow.executions) == 1
    assert usage(ports)["active"] == 1  # booked once


def test_a_team_stored_before_bookings_is_seeded_from_its_trials_once(spec: TrialSpec,
                                                                    example_trial: dict[str, Any]) -> None:
    ports = Ports()
    ports.trials.put_item({"trial_id": "old-1", "team": "team-nlp", "status": "SUBMITTED", "created_at": STAMP,
                           "execution_arn": "arn:old", "worst_case_usd": {"total": "100"}, "queues": {"gpu": "q-gpu"}})
    submit_trial(ports, spec)
    seeded = usage(ports)
    assert seeded["active"] == 2 and seeded["usd#2026-12"] == 3600.23
    assert obj(ports.trials.items["old-1"]["booking"])["usd"] == "100"  # its end releases it
    set_status(ports.trials, "old-1", "SUCCEEDED", None, STAMP, settled_usd=Decimal("40"))
    assert usage(ports)["usd#2026-12"] == 3540.23


def test_seeding_counts_a_settled_trial_at_its_settled_cost_not_its_worst_case(spec: TrialSpec) -> None:
    """``Quotas.usd_per_month`` counts settled trials at their cost: a team stored before bookings whose settled
    trial of the month cost 100 USD (worst case 3,500) has room for a 3,500.23 USD worst case under a 3,700 quota
    (seeding it at its worst case refused the trial)."""
    ports = Ports()
    ports.trials.put_item({"trial_id": "old-1", "team": "team-nlp", "status": "SUCCEEDED", "created_at": STAMP,
                           "execution_arn": "arn:old", "worst_case_usd": {"total": "3500"}, "total_usd": "100",
                           "queues": {"gpu": "q-gpu"}})
    submit_trial(ports, spec, rules=governance(quotas={"usd_per_month": "3700"}))
    seeded = usage(ports)
    assert seeded["active"] == 1 and seeded["usd#2026-12"] == 3600.23
