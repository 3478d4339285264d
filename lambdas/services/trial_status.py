"""The trial's status as the workflow moves it on, and stops that finish.

A stop is a recorded state, not a call that may fail unseen. A cancel or a crossed limit first moves the trial to
STOPPING with its reason; then ``finish_stop`` stops the workflow execution (Step Functions terminates the Batch job
of the running task) and terminates any job of the trial that is still live. Only when the execution is seen
stopped and every job the ledger knows has ended does the trial become CANCELLED, releasing its booking in the same
write. Until then each of these finishes it: the same cancel sent again, the next event of one of its runs (its
jobs' FAILED events), and the reconciler that sweeps STOPPING trials on a schedule (and raises an alarm for a stop
left pending).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from lambdas.domain import ledger as L
from lambdas.domain.json_types import JsonValue
from lambdas.domain.trial_record import TrialRecord
from lambdas.domain.vocabulary import BATCH_TERMINAL, TRIAL_ACTIVE, TRIAL_STOPPABLE, TRIAL_TERMINAL
from lambdas.services.ports import JobTerminator, Ledger, Trials, Workflow


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
    nothing left running once its workflow reaches its end: the stop is complete."""
    current = trials.get(trial_id)
    if current is None:
        raise LookupError(f"unknown trial {trial_id!r}: submit it through POST /trials first")
    if current.status == "CANCELLED" and status != "CANCELLED":
        return StatusSet(trial_id, "CANCELLED", changed=False)
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
    """Record a stop (STOPPING, with why and who) and try to finish it at once. A trial already STOPPING is
    finished again: this is how a stop whose first attempt failed is retried. Of two racing stops one reason is
    recorded."""
    trial_id = record.trial_id
    requested = record.status in TRIAL_STOPPABLE and stopper.trials.transition(
        trial_id, TRIAL_STOPPABLE, status="STOPPING", status_cause=cause, stop_requested_at=now, updated_at=now,
        **fields)
    current = stopper.trials.get(trial_id) or record
    if current.status != "STOPPING":
        return StopState(trial_id, current.status, changed=False)
    done = finish_stop(current, stopper, now=now)
    return StopState(trial_id, done.status, changed=requested or done.status == "CANCELLED",
                     execution_status=done.execution_status, pending=done.pending)


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
    """One attempt to finish the STOPPING trial ``record``: stop its execution, terminate its live jobs (when the
    caller reaches Batch), and make it CANCELLED once nothing of it runs. Raises whatever the AWS calls raise: the
    trial stays STOPPING, and the next attempt starts again from here."""
    trial_id, cause = record.trial_id, record.status_cause or "stopped"
    pending: list[str] = []
    execution: str | None = None
    arn = record.execution_arn
    if arn:
        stopper.workflow.stop(arn, cause)
        execution = stopper.workflow.status(arn)
        if execution == "RUNNING":
            pending.append(f"execution {arn} is still RUNNING")
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
