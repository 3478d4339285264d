"""The trial's status as the workflow moves it on, and stops that finish.

A stop is a recorded state, not a call that may fail unseen. A cancel or a crossed limit first moves the trial to
STOPPING with its reason; then ``finish_stop`` stops the workflow execution (Step Functions terminates the Batch job
of the running task) and terminates any job of the trial that is still live. Only when the execution is seen
stopped and every job the ledger knows has ended does the trial become CANCELLED, releasing its booking in the same
write. Until then each of these finishes it: the same cancel sent again, the next event of one of its runs (its
jobs' FAILED events), and the reconciler that sweeps STOPPING trials on a schedule (and raises an alarm for a stop
left pending).

A trial that has no execution on record may still have one: a start whose answer was lost, or a start in flight
when the stop was requested. The execution's name is the trial id, so a stop looks it up by name, records it and
stops it; a stop requested while the trial was SUBMITTING stays pending until no start can still be in flight
(``START_CUT_SHORT_S``), so an execution that starts late is still found and stopped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from lambdas.domain.json_types import JsonValue
from lambdas.domain.money import ledger as L
from lambdas.domain.trial.trial_record import TrialRecord
from lambdas.domain.vocabulary import BATCH_TERMINAL, TRIAL_ACTIVE, TRIAL_STOPPABLE, TRIAL_TERMINAL
from lambdas.services.ports import JobTerminator, Ledger, Started, Trials, Workflow

# A start's own function ends before this (the API function's timeout is 29 s, the reconciler's 300 s): a trial
# SUBMITTING for longer without an execution was cut short, and a start in flight when a stop was requested has
# ended (started or not) this long after the request.
START_CUT_SHORT_S = 300


def age_s(stamp: object, now: datetime | str) -> float:
    """Seconds from an ISO 8601 stamp to ``now``; an unreadable or missing stamp counts as old."""
    try:
        at = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
        when = now if isinstance(now, datetime) else datetime.fromisoformat(now.replace("Z", "+00:00"))
        return (when - at).total_seconds()
    except (TypeError, ValueError):
        return float("inf")  # no readable time: treat it as old


@dataclass(frozen=True)
class StatusSet:
    trial_id: str
    status: str
    changed: bool


def release_of(record: TrialRecord, settled_usd: Decimal | None = None) -> dict[str, Decimal]:
    """What the trial's end gives back to its team's usage item (nothing for a trial booked before bookings)."""
    if record.booking is None:
        return {}
    return record.booking.release(started=record.started, settled_usd=settled_usd)


def set_status(trials: Trials, trial_id: str, status: str, cause: str | None, now: str,
               settled_usd: Decimal | None = None) -> StatusSet:
    """Record the status the workflow reached (and why), releasing the trial's booking with its settled cost. A
    cancelled trial stays cancelled: late workflow steps do not revive it. A trial whose stop was pending has
    nothing left running once its workflow reaches its end: the stop is complete. A rejected trial stays rejected
    (an execution of it can only be one whose start landed after the rejection, which the stop path ends)."""
    current = trials.get(trial_id)
    if current is None:
        raise LookupError(f"unknown trial {trial_id!r}: submit it through POST /trials first")
    if current.status in ("CANCELLED", "REJECTED") and status != current.status:  # terminal means terminal
        return StatusSet(trial_id, current.status, changed=False)
    if current.status == "STOPPING":
        done = trials.close(trial_id, ("STOPPING",), team=str(current.team), release=release_of(current),
                            status="CANCELLED", stopped_at=now, stop_pending=None, updated_at=now)
        return StatusSet(trial_id, "CANCELLED", changed=done)
    fields: dict[str, JsonValue] = {"status": status, "status_cause": cause, "updated_at": now}
    if settled_usd is not None:
        fields["total_usd"] = str(settled_usd)
    if status in TRIAL_TERMINAL and current.status in TRIAL_ACTIVE:
        if trials.close(trial_id, TRIAL_ACTIVE, team=str(current.team),
                        release=release_of(current, settled_usd), **fields):
            return StatusSet(trial_id, status, changed=True)
        return set_status(trials, trial_id, status, cause, now, settled_usd)  # it moved meanwhile: look again
    trials.update(trial_id, **fields)
    return StatusSet(trial_id, status, changed=True)


@dataclass(frozen=True)
class StopState:
    """Where a stop stands: ``pending`` names what still runs (empty once the trial is CANCELLED)."""

    trial_id: str
    status: str
    changed: bool
    execution_status: str | None = None
    pending: list[str] = field(default_factory=list)

    def view(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = {"trial_id": self.trial_id, "status": self.status, "changed": self.changed}
        if self.execution_status is not None:
            out["execution_status"] = self.execution_status
        if self.pending:
            out["pending"] = list(self.pending)
        return out


@dataclass(frozen=True)
class Stopper:
    """What finishing a stop reaches: the trials table, the workflow, the ledger (which jobs a trial has), and Batch
    where the caller may terminate jobs itself (None: the execution's stop and the jobs' events finish it)."""

    trials: Trials
    workflow: Workflow
    ledger: Ledger
    jobs: JobTerminator | None = None


def request_stop(record: TrialRecord, stopper: Stopper, *, cause: str, now: str, **fields: JsonValue) -> StopState:
    """Record a stop (STOPPING, with why, who and the status it was requested in) and try to finish it at once. A
    trial already STOPPING is finished again: this is how a stop whose first attempt failed is retried. Of two
    racing stops one reason is recorded."""
    trial_id = record.trial_id
    requested, current = False, record
    for _ in range(3):  # the status read may move under the stop (an approval, a start): stop from the one read
        if current.status not in TRIAL_STOPPABLE:
            break
        requested = stopper.trials.transition(
            trial_id, (current.status,), status="STOPPING", status_cause=cause, stop_requested_at=now,
            stop_requested_from=current.status, updated_at=now, if_updated_at=None, **fields)
        if requested:
            break
        current = stopper.trials.get(trial_id) or current
    current = stopper.trials.get(trial_id) or current
    if current.status != "STOPPING":
        return StopState(trial_id, current.status, changed=False)
    done = finish_stop(current, stopper, now=now)
    return StopState(trial_id, done.status, changed=requested or done.status == "CANCELLED",
                     execution_status=done.execution_status, pending=done.pending)


def record_start(trials: Trials, workflow: Workflow, record: TrialRecord, started: Started,
                 stamp: str) -> TrialRecord:
    """Record the trial's execution once it started: SUBMITTING becomes SUBMITTED. A stop requested while the
    execution was being started is finished here: the execution is recorded on the STOPPING trial and stopped (if
    that stop fails, the trial stays STOPPING with its execution, which the reconciler or the cancel sent again
    stops). Returns the record as it now stands."""
    trial_id, arn = record.trial_id, started.execution_arn
    if trials.transition(trial_id, ("SUBMITTING",), status="SUBMITTED", execution_arn=arn, updated_at=stamp):
        return record.model_copy(update={"execution_arn": arn, "status": "SUBMITTED"})
    current = trials.get(trial_id)
    if current is None or current.status in TRIAL_TERMINAL:  # withdrawn or closed: nothing of it may run
        workflow.stop(arn, f"trial {trial_id} is {current.status if current else 'withdrawn'}: nothing of it runs")
        return current or record
    if current.started:
        return current
    if current.status == "STOPPING":
        trials.transition(trial_id, ("STOPPING",), execution_arn=arn, updated_at=stamp)
        current = current.model_copy(update={"execution_arn": arn})
        try:
            workflow.stop(arn, current.status_cause or "cancelled while submitting")
        except Exception:  # recorded as STOPPING with its execution: the reconciler finishes the stop
            return current
    return current


def live_jobs(ledger: Ledger, record: TrialRecord) -> dict[str, str]:
    """Each job of the trial whose last recorded status is not terminal, with its run (its scaling runs' too)."""
    live: dict[str, str] = {}
    for run in record.run_names():
        latest: dict[str, str] = {}
        for fact in L.facts_of(ledger.entries(L.run_key(record.trial_id, run)), L.TransitionFact):
            if latest.get(fact.job_id) not in BATCH_TERMINAL:
                latest[fact.job_id] = fact.status
        live.update({job: run for job, status in latest.items() if status not in BATCH_TERMINAL})
    return live


def finish_stop(record: TrialRecord, stopper: Stopper, *, now: str) -> StopState:
    """One attempt to finish the STOPPING trial ``record``: stop its execution (looked up by name when the trial
    has none on record), terminate its live jobs (when the caller reaches Batch), and make it CANCELLED once nothing
    of it runs. Raises whatever the AWS calls raise: the trial stays STOPPING, and the next attempt starts again
    from here."""
    trial_id, cause = record.trial_id, record.status_cause or "stopped"
    pending: list[str] = []
    record, execution = _stop_execution(record, stopper, cause, now)
    if execution == "RUNNING":
        pending.append(f"execution {record.execution_arn} is still RUNNING")
    elif execution is None and _start_in_flight(record, now):
        pending.append(f"its execution may still be starting (a stop requested while it was submitted waits "
                       f"{START_CUT_SHORT_S} s for the start to end)")
    for job_id, run in sorted(live_jobs(stopper.ledger, record).items()):
        if stopper.jobs is not None:
            described = stopper.jobs.describe(job_id)
            if described is None or described.status in BATCH_TERMINAL:
                continue  # ended (its event is on its way) or unknown to Batch: nothing of it bills
            stopper.jobs.terminate(job_id, f"dualtrack: {cause}"[:1024])
        pending.append(f"job {job_id} ({run}) has not ended yet")
    if pending:
        stopper.trials.update(trial_id, stop_pending=list(pending), stop_checked_at=now)
        return StopState(trial_id, "STOPPING", changed=False, execution_status=execution, pending=pending)
    closed = stopper.trials.close(trial_id, ("STOPPING",), team=str(record.team), release=release_of(record),
                                  status="CANCELLED", stopped_at=now, stop_pending=None, updated_at=now)
    current = stopper.trials.get(trial_id) or record
    return StopState(trial_id, current.status, changed=closed, execution_status=execution)


def _stop_execution(record: TrialRecord, stopper: Stopper, cause: str, now: str) -> tuple[TrialRecord, str | None]:
    """Stop the trial's execution; its status after (None: there is none). An execution the trial has no record of
    (a start whose answer was lost, or one that landed during the stop) is found by its name, the trial id, and
    recorded on the trial first, so its end is booked as a started trial's."""
    arn = record.execution_arn
    if arn is None:
        found = stopper.workflow.execution_arn(record.trial_id)
        if stopper.workflow.status(found) is None:
            return record, None
        stopper.trials.transition(record.trial_id, ("STOPPING",), execution_arn=found, updated_at=now)
        record, arn = record.model_copy(update={"execution_arn": found}), found
    stopper.workflow.stop(arn, cause)
    return record, stopper.workflow.status(arn)


def _start_in_flight(record: TrialRecord, now: str) -> bool:
    """Whether a start of the trial's execution may still be under way: the stop was requested while the trial was
    SUBMITTING, less than ``START_CUT_SHORT_S`` ago."""
    return (record.stop_requested_from == "SUBMITTING"
            and age_s(record.stop_requested_at or record.updated_at, now) < START_CUT_SHORT_S)
