"""No execution outlives its trial: the start and stop interleavings that used to leave an execution (and its
jobs) running after the trial was closed and its booking released, each finished by the component named in
docs/reliability.md. In-memory ports (``tests/fakes.py``, pinned against DynamoDB by the port contract tests)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest

from lambdas.domain.events import BatchJobStateChangeDetail
from lambdas.domain.money import ledger as L
from lambdas.domain.money.cost import compute_run_cost
from lambdas.domain.money.ledger import cost_body
from lambdas.domain.money.prices import load_price_table
from lambdas.domain.trial.rules import parse_trial
from lambdas.domain.trial.spec import TrialSpec
from lambdas.domain.trial.trial_record import ExecutionInput, TrialRecord
from lambdas.services.cache_observation import RefusedClaim
from lambdas.services.limit_guard import LimitGuard
from lambdas.services.ports import Started
from lambdas.services.reconciliation import reconcile
from lambdas.services.run_events import RunEvents
from lambdas.services.run_settlement import RunSettlement
from lambdas.services.trial_status import START_CUT_SHORT_S, Stopper
from lambdas.services.trial_submission import cancel, decide
from tests import fakes
from tests.money import NLP, NLP_LEAD, NOW, STAMP, Ports, governance, job, submit_trial, usage, who

PENDING = governance(approval_threshold_usd="1000")  # the example trial's worst case (3,500 USD) needs an approver
LATER = NOW + timedelta(seconds=START_CUT_SHORT_S + 60)


@pytest.fixture
def spec(example_trial: dict[str, Any]) -> TrialSpec:
    return parse_trial(example_trial)


def _stamp(at: Any) -> str:
    return at.isoformat().replace("+00:00", "Z")


class AnswerLost(fakes.InMemoryWorkflow):
    """StartExecution makes the execution, then its answer is lost (a read timeout): the caller sees an error."""

    lose = 1

    def start(self, name: str, execution_input: ExecutionInput) -> Started:
        started = super().start(name, execution_input)
        if self.lose:
            self.lose -= 1
            raise TimeoutError("read timeout on the StartExecution answer")
        return started


# 1. An approval whose StartExecution answer is lost ------------------------------------------------------------------

def test_an_approval_whose_start_answer_is_lost_records_the_execution_it_made(spec: TrialSpec) -> None:
    """The execution exists although the call raised: the approval finds it by its name (the trial id) and records
    it, instead of putting the trial back to PENDING_APPROVAL, where a later rejection released the whole booking
    while the execution ran."""
    ports = Ports(AnswerLost())
    submit_trial(ports, spec, rules=PENDING)
    approved = decide(spec.trial_id, approve=True, comment="go", caller=who(NLP_LEAD, PENDING), plane=ports.plane(),
                      now=NOW)
    record = ports.trials.get(spec.trial_id)
    assert approved["status"] == "SUBMITTED" and record is not None and record.execution_arn is not None
    assert ports.workflow.status(record.execution_arn) == "RUNNING" and usage(ports)["active"] == 1
    with pytest.raises(Exception, match="SUBMITTED, not PENDING_APPROVAL"):
        decide(spec.trial_id, approve=False, comment="no", caller=who(NLP_LEAD, PENDING), plane=ports.plane(),
               now=NOW)
    stopped = cancel(spec.trial_id, caller=who(NLP, PENDING), stopper=ports.stopper(), now=STAMP, reason="no")
    assert stopped["status"] == "CANCELLED" and ports.workflow.status(record.execution_arn) == "ABORTED"


def test_a_rejection_after_a_start_that_landed_late_stops_the_execution(spec: TrialSpec) -> None:
    """A start whose answer was lost and that the look-up did not see yet lands afterwards: the trial is
    PENDING_APPROVAL with an execution running. Rejecting it stops that execution through STOPPING (its booking is
    kept until the stop is complete), instead of closing it REJECTED as never started."""
    ports = Ports()
    submit_trial(ports, spec, rules=PENDING)
    arn = ports.workflow.start(spec.trial_id, fakes.execution_input(spec.trial_id)).execution_arn  # the late start
    rejected = decide(spec.trial_id, approve=False, comment="too dear", caller=who(NLP_LEAD, PENDING),
                      plane=ports.plane(), now=NOW)
    assert rejected["status"] == "STOPPING" and ports.workflow.status(arn) == "ABORTED"
    assert usage(ports)["active"] == 1  # held until the stop is complete
    swept = reconcile(ports.stopper(jobs=True), NOW + timedelta(minutes=5), overdue_after_s=900)
    assert swept.stops_finished == [spec.trial_id] and usage(ports)["active"] == 0


# 2. A cancel that lands during a start -------------------------------------------------------------------------------

class StopThrottled(fakes.InMemoryWorkflow):
    """A cancel lands while StartExecution is in flight; the submission's StopExecution is then throttled."""

    def __init__(self, ports: Ports) -> None:
        super().__init__()
        self.ports, self.throttles = ports, 1

    def start(self, name: str, execution_input: ExecutionInput) -> Started:
        cancel(name, caller=who(NLP), stopper=self.ports.stopper(self), now=STAMP, reason="changed my mind")
        return super().start(name, execution_input)

    def stop(self, execution_arn: str, cause: str) -> str:
        if self.throttles:
            self.throttles -= 1
            raise ConnectionError("ThrottlingException: Rate exceeded")
        return super().stop(execution_arn, cause)


def test_a_cancel_during_a_start_whose_stop_is_throttled_is_finished_by_the_reconciler(spec: TrialSpec) -> None:
    """The trial goes STOPPING (not CANCELLED at once) with the execution recorded on it, so the reconciler finds
    it and stops the execution the throttled call missed; only then is it CANCELLED and its place released."""
    ports = Ports()
    ports.workflow = StopThrottled(ports)
    submitted = submit_trial(ports, spec)
    record = ports.trials.get(spec.trial_id)
    assert submitted.body["status"] == "STOPPING" and record is not None and record.execution_arn is not None
    assert ports.workflow.status(record.execution_arn) == "RUNNING" and usage(ports)["active"] == 1
    swept = reconcile(ports.stopper(jobs=True), NOW + timedelta(minutes=5), overdue_after_s=900)
    assert swept.stops_finished == [spec.trial_id]
    assert ports.workflow.status(record.execution_arn) == "ABORTED" and usage(ports)["active"] == 0


def test_a_cancel_during_a_start_waits_for_the_start_and_closes_once_none_can_land(spec: TrialSpec) -> None:
    """Cancelled while SUBMITTING, before the submission's StartExecution: the stop stays pending while a start
    may still be in flight (a CANCELLED trial is never looked at again, so an execution started afterwards would
    run unseen). If the function died before starting anything, the reconciler closes it once the start window has
    passed, giving back the whole booking (it never started); if the start landed, it is found by name and
    stopped."""
    for starts in (False, True):
        ports = Ports()
        item = spec if not starts else parse_trial({**spec.model_dump(mode="json", exclude_none=True), "name": "x"})
        ports.trials.admit(TrialRecord.from_item({"trial_id": item.trial_id, "team": "team-nlp",
                                                  "status": "SUBMITTING", "created_at": STAMP, "updated_at": STAMP}),
                           {"active": Decimal(1), "usd#2026-12": Decimal(10)}, {})
        ports.trials.update(item.trial_id, booking={"team": "team-nlp", "month": "2026-12", "usd": "10"})
        first = cancel(item.trial_id, caller=who(NLP), stopper=ports.stopper(), now=STAMP, reason="no")
        assert first["status"] == "STOPPING" and "may still be starting" in str(first["pending"])
        if starts:  # the submission's start lands after the cancel, and its function dies before recording it
            arn = ports.workflow.start(item.trial_id, fakes.execution_input(item.trial_id)).execution_arn
        soon = reconcile(ports.stopper(jobs=True), NOW + timedelta(minutes=1), overdue_after_s=900)
        if starts:
            assert soon.stops_finished == [item.trial_id] and ports.workflow.status(arn) == "ABORTED"
            assert usage(ports)["usd#2026-12"] == 10  # it started: its dollars stay booked, its place is back
        else:
            assert soon.stops_pending == [item.trial_id]
            late = reconcile(ports.stopper(jobs=True), LATER, overdue_after_s=900)
            assert late.stops_finished == [item.trial_id] and usage(ports)["usd#2026-12"] == 0
        assert ports.trials.items[item.trial_id]["status"] == "CANCELLED" and usage(ports)["active"] == 0


# 3. A job first seen after its trial was cancelled -------------------------------------------------------------------

class Counted:
    """The run-events service's telemetry, kept for the test to read."""

    def __init__(self) -> None:
        self.closed: list[tuple[str, dict[str, str | None]]] = []

    def run_outcomes(self, statuses: Iterable[str]) -> None:
        pass

    def cache_outcomes(self, counted: Mapping[str, int]) -> None:
        pass

    def refused_claims(self, refused: Iterable[RefusedClaim]) -> None:
        pass

    def rejected_event(self, reason: str, **context: str | None) -> None:
        pass

    def limit_stop(self, limit: str, **context: str | None) -> None:
        pass

    def closed_trial_job(self, job_id: str, **context: str | None) -> None:
        self.closed.append((job_id, context))

    def recorded(self, message: str, **context: str | int | bool | None) -> None:
        pass


def _events(ports: Ports, telemetry: Counted) -> RunEvents:
    settlement = RunSettlement(ports.ledger, ports.trials, ports.artifacts, load_price_table(), "us-east-1")
    return RunEvents(settlement, LimitGuard(settlement, ports.workflow), fakes.InMemoryCacheRegistry(), telemetry,
                     jobs=ports.jobs)


def _detail(trial_id: str, run: str, job_id: str, status: str) -> BatchJobStateChangeDetail:
    return BatchJobStateChangeDetail.model_validate({
        "jobId": job_id, "jobName": f"{trial_id}-{run}", "jobQueue": "q", "status": status, "attempts": [],
        "container": {"environment": [{"name": "DUALTRACK_TRIAL_ID", "value": trial_id},
                                      {"name": "DUALTRACK_RUN", "value": run}]}})


@pytest.mark.parametrize("closed", ["CANCELLED", "STOPPING", "REJECTED"])
def test_a_job_first_seen_after_its_trial_closed_is_terminated_and_counted(spec: TrialSpec, closed: str) -> None:
    """A RUNNING event for a job the ledger did not know when the trial closed (it was submitted as the stop
    looked): the run-events function terminates it (TerminateJob: "Terminates a job in a job queue. Jobs that are
    in the STARTING or RUNNING state are terminated", AWS Batch API reference, "TerminateJob",
    https://docs.aws.amazon.com/batch/latest/APIReference/API_TerminateJob.html) and counts it, instead of
    recording it and leaving it billing. A job of a trial that never started is terminated too."""
    ports, telemetry = Ports(), Counted()
    submit_trial(ports, spec, rules=PENDING if closed == "REJECTED" else None)
    if closed == "REJECTED":
        decide(spec.trial_id, approve=False, comment="no", caller=who(NLP_LEAD, PENDING), plane=ports.plane(),
               now=NOW)
    else:
        cancel(spec.trial_id, caller=who(NLP), stopper=ports.stopper(), now=STAMP, reason="no")
        if closed == "STOPPING":
            ports.trials.update(spec.trial_id, status="STOPPING")
    assert ports.trials.items[spec.trial_id]["status"] == closed
    ports.jobs.statuses["late-job"] = "RUNNING"
    _events(ports, telemetry).on_job_state(_detail(spec.trial_id, "gpu", "late-job", "RUNNING"), NOW)
    assert ports.jobs.terminated == ["late-job"] and ports.jobs.statuses["late-job"] == "FAILED"
    assert [(job_id, context["trial_status"]) for job_id, context in telemetry.closed] == [("late-job", closed)]


def test_a_job_of_a_running_trial_is_left_alone(spec: TrialSpec) -> None:
    ports, telemetry = Ports(), Counted()
    submit_trial(ports, spec)
    ports.jobs.statuses["job-1"] = "RUNNING"
    _events(ports, telemetry).on_job_state(_detail(spec.trial_id, "gpu", "job-1", "RUNNING"), NOW)
    assert ports.jobs.terminated == [] and telemetry.closed == []


# 4. Withdraw racing a resubmission -----------------------------------------------------------------------------------

def _cut_short(ports: Ports, spec: TrialSpec) -> None:
    """The first submission stored the trial and died before StartExecution: SUBMITTING, no execution."""
    class Dies(fakes.InMemoryWorkflow):
        def start(self, name: str, execution_input: ExecutionInput) -> Started:
            raise SystemExit("the function timed out")

    with pytest.raises(SystemExit):
        submit_trial(ports, spec, workflow=Dies())
    assert ports.trials.items[spec.trial_id]["status"] == "SUBMITTING"


@dataclass
class AsRead(fakes.InMemoryTrials):
    """The trials table whose sweep returns the items as an earlier scan read them."""

    read: list[TrialRecord] = field(default_factory=list)

    def with_status(self, statuses: tuple[str, ...]) -> Iterator[TrialRecord]:
        return iter(self.read)


class SweptWhileStarting(fakes.InMemoryWorkflow):
    """The reconciler sweeps while the resubmission's StartExecution is in flight, from the item as it read it
    before the resubmission touched it (a scan is not a consistent read of what follows)."""

    def __init__(self, ports: Ports, stale: TrialRecord) -> None:
        super().__init__()
        self.ports, self.stale = ports, stale
        self.swept: Any = None

    def start(self, name: str, execution_input: ExecutionInput) -> Started:
        if self.swept is None:
            view = AsRead(items=self.ports.trials.items, usage_items=self.ports.trials.usage_items,
                          read=[self.stale])
            self.swept = reconcile(Stopper(view, self, self.ports.ledger), LATER, overdue_after_s=900)
        return super().start(name, execution_input)


def test_the_reconciler_never_withdraws_a_trial_whose_resubmission_is_starting_it(spec: TrialSpec) -> None:
    """The reconciler found no execution (the resubmission's start had not landed) and withdrew the trial, deleting
    the item and releasing its booking, while the resubmission started one: an execution with no trial, and a
    client told 200. The resubmission now claims the start on the item it read, and the withdrawal is conditional on
    the item the sweep read, so the withdrawal finds it changed and deletes nothing."""
    ports = Ports()
    _cut_short(ports, spec)
    stale = ports.trials.get(spec.trial_id)
    assert stale is not None
    ports.workflow = SweptWhileStarting(ports, stale)
    answer = submit_trial(ports, spec, now=LATER)
    assert ports.workflow.swept is not None and ports.workflow.swept.submissions_withdrawn == []
    record = ports.trials.get(spec.trial_id)
    assert answer.body["status"] == "SUBMITTED" and record is not None and record.execution_arn is not None
    assert ports.workflow.status(record.execution_arn) == "RUNNING" and usage(ports)["active"] == 1


def test_a_resubmission_that_loses_to_the_withdrawal_is_admitted_afresh(spec: TrialSpec) -> None:
    """The resubmission read the stale item; the reconciler withdrew it before the resubmission claimed the start:
    the claim fails, nothing is started for the deleted item, and the submission is admitted as a new one."""
    ports = Ports()
    _cut_short(ports, spec)

    class Withdrawn(fakes.InMemoryTrials):
        def transition(self, trial_id: str, statuses: tuple[str, ...], *, if_updated_at: str | None = None,
                       **fields: Any) -> bool:
            if if_updated_at is not None and not getattr(self, "raced", False):
                self.raced = True
                assert reconcile(ports.stopper(), LATER, overdue_after_s=900).submissions_withdrawn == [trial_id]
            return super().transition(trial_id, statuses, if_updated_at=if_updated_at, **fields)

    ports.trials = Withdrawn(items=ports.trials.items, usage_items=ports.trials.usage_items)
    answer = submit_trial(ports, spec, now=LATER)
    record = ports.trials.get(spec.trial_id)
    assert answer.created and record is not None and record.status == "SUBMITTED"
    assert list(ports.workflow.executions) == [record.execution_arn] and usage(ports)["active"] == 1


# 5. An execution that ended without SetTrialStatus -------------------------------------------------------------------

def _settled(ports: Ports, trial_id: str, run: str, usd: str) -> None:
    """The run's job ended and its terminal event settled its cost in the ledger."""
    job(ports, trial_id, run, f"job-{run}", "RUNNING")
    job(ports, trial_id, run, f"job-{run}", "SUCCEEDED", 10)
    fold = L.fold_run(ports.ledger.entries(L.run_key(trial_id, run)), trial_id=trial_id, run=run,
                      instance_type="p5.48xlarge")
    body = cost_body(fold, compute_run_cost(fold.usage, load_price_table()))
    body = body.model_copy(update={"cost": body.cost.model_copy(update={"total_usd": Decimal(usd)})})
    ports.ledger.put_cost(L.run_key(trial_id, run), body, fold.facts)


@pytest.mark.parametrize(("ended", "closed"), [("ABORTED", "CANCELLED"), ("TIMED_OUT", "FAILED"),
                                               ("FAILED", "FAILED")])
def test_an_execution_that_ended_without_closing_its_trial_is_closed_by_the_reconciler(
        spec: TrialSpec, ended: str, closed: str) -> None:
    """Aborted from the console, timed out, or failed in its last step: the workflow never recorded the trial's
    outcome, so it held its place and worst case forever (the team's next trial got 429). The reconciler closes it
    with its settled cost from the ledger and releases its place."""
    ports = Ports()
    submit_trial(ports, spec)
    _settled(ports, spec.trial_id, "gpu", "12.5")
    _settled(ports, spec.trial_id, "trn2", "7.5")
    ports.workflow.finish(spec.trial_id, ended)
    swept = reconcile(ports.stopper(jobs=True), NOW + timedelta(minutes=5), overdue_after_s=900)
    item = ports.trials.items[spec.trial_id]
    assert swept.ended_closed == [spec.trial_id] and item["status"] == closed and item["total_usd"] == "20.0"
    assert f"ended {ended}" in str(item["status_cause"])
    assert usage(ports)["active"] == 0 and usage(ports)["usd#2026-12"] == 20


def test_an_ended_execution_whose_jobs_still_run_is_stopped_before_it_is_closed(spec: TrialSpec) -> None:
    ports = Ports()
    submit_trial(ports, spec)
    job(ports, spec.trial_id, "gpu", "job-gpu", "RUNNING")
    ports.workflow.finish(spec.trial_id, "ABORTED")
    first = reconcile(ports.stopper(jobs=True), NOW + timedelta(minutes=5), overdue_after_s=900)
    assert first.ended_closed == [spec.trial_id] and ports.jobs.terminated == ["job-gpu"]
    assert ports.trials.items[spec.trial_id]["status"] == "STOPPING" and usage(ports)["active"] == 1
    job(ports, spec.trial_id, "gpu", "job-gpu", "FAILED", 6)  # the termination's event
    second = reconcile(ports.stopper(jobs=True), NOW + timedelta(minutes=10), overdue_after_s=900)
    assert second.stops_finished == [spec.trial_id] and usage(ports)["active"] == 0


def test_a_running_execution_is_not_closed(spec: TrialSpec) -> None:
    ports = Ports()
    submit_trial(ports, spec)
    swept = reconcile(ports.stopper(jobs=True), NOW + timedelta(minutes=5), overdue_after_s=900)
    assert swept.ended_closed == [] and ports.trials.items[spec.trial_id]["status"] == "SUBMITTED"


def test_a_late_job_is_terminated_even_when_the_environment_read_its_trial_before_the_close(
        spec: TrialSpec) -> None:
    """The run-events function keeps the trial it read for the life of its execution environment; the closed-trial
    check reads the trial afresh, so a job of another run first seen after the close is ended, not judged by the
    copy read while the trial was running."""
    ports, telemetry = Ports(), Counted()
    submit_trial(ports, spec)
    events = _events(ports, telemetry)
    ports.jobs.statuses["job-gpu"] = "RUNNING"
    events.on_job_state(_detail(spec.trial_id, "gpu", "job-gpu", "RUNNING"), NOW)  # the trial read: SUBMITTED
    cancel(spec.trial_id, caller=who(NLP), stopper=ports.stopper(), now=STAMP, reason="no")
    ports.jobs.statuses["job-gpu"] = "FAILED"
    events.on_job_state(_detail(spec.trial_id, "gpu", "job-gpu", "FAILED"), NOW)  # the stop completes
    assert ports.trials.items[spec.trial_id]["status"] == "CANCELLED"
    ports.jobs.statuses["late-trn2"] = "RUNNING"
    events.on_job_state(_detail(spec.trial_id, "trn2", "late-trn2", "RUNNING"), NOW)  # same environment
    assert ports.jobs.terminated == ["late-trn2"]
