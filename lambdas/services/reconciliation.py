"""The reconciler's sweep: every spend the plane recorded as pending is finished, never forgotten.

- A STOPPING trial is finished again (``trial_status.finish_stop``): its execution stopped, its live jobs
  terminated, and CANCELLED once nothing of it runs. A stop pending longer than ``overdue_after_s`` is counted as
  overdue, which raises the StopsPending alarm.
- A trial left SUBMITTING without an execution (the function that was starting it ended before it could record the
  execution) is finished the way its request said: an approved trial is started (the execution name is the trial
  id, so a start that did happen is found, not repeated), and a direct submission, whose caller was told to send
  it again, is withdrawn with its booking. The withdrawal is conditional on the item the sweep read (its status and
  ``updated_at``): a resubmission that claimed the start meanwhile keeps it.
- A SUBMITTED trial whose execution has ended without its last step recording the trial's outcome (aborted from the
  console, timed out, a failed last step) is closed: FAILED (CANCELLED when the execution was aborted) with its
  settled cost, its place released. If jobs of it still run, it is stopped through the cancel path instead, which
  terminates them first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from lambdas.domain.money import ledger as L
from lambdas.domain.trial.trial_record import TrialRecord
from lambdas.domain.vocabulary import EXECUTION_TERMINAL
from lambdas.services.ports import Ledger, Started
from lambdas.services.trial_status import (
    START_CUT_SHORT_S,
    Stopper,
    age_s,
    finish_stop,
    live_jobs,
    record_start,
    release_of,
    request_stop,
)

__all__ = ["START_CUT_SHORT_S", "Reconciled", "age_s", "reconcile", "settled_usd"]

SWEPT = ("STOPPING", "SUBMITTING", "SUBMITTED")  # one scan of the trials table reads every status the sweep finishes


@dataclass
class Reconciled:
    stops_finished: list[str] = field(default_factory=list)
    stops_pending: list[str] = field(default_factory=list)
    stops_overdue: list[str] = field(default_factory=list)  # pending for longer than overdue_after_s
    stop_errors: dict[str, str] = field(default_factory=dict)
    starts_finished: list[str] = field(default_factory=list)
    submissions_withdrawn: list[str] = field(default_factory=list)
    ended_closed: list[str] = field(default_factory=list)  # executions that ended without closing their trial


def _iso(now: datetime) -> str:
    return now.isoformat().replace("+00:00", "Z")


def reconcile(stopper: Stopper, now: datetime, *, overdue_after_s: int) -> Reconciled:
    """One sweep over the trials whose spend may still be pending. One trial's failing call never holds up the
    others: its error is recorded and it is swept again next time."""
    done = Reconciled()
    for record in stopper.trials.with_status(SWEPT):
        try:
            if record.status == "STOPPING":
                _finish_stop(record, stopper, now, overdue_after_s, done)
            elif record.status == "SUBMITTING":
                _finish_submission(record, stopper, now, done)
            else:
                _close_ended(record, stopper, now, done)
        except Exception as exc:  # recorded for the log; the trial keeps its state for the next sweep
            done.stop_errors[record.trial_id] = f"{type(exc).__name__}: {exc}"[:500]
            if record.status == "STOPPING":
                _pending(record, now, overdue_after_s, done)
    return done


def _finish_stop(record: TrialRecord, stopper: Stopper, now: datetime, overdue_after_s: int,
                 done: Reconciled) -> None:
    state = finish_stop(record, stopper, now=_iso(now))
    if state.status == "CANCELLED":
        done.stops_finished.append(record.trial_id)
    else:
        _pending(record, now, overdue_after_s, done)


def _pending(record: TrialRecord, now: datetime, overdue_after_s: int, done: Reconciled) -> None:
    done.stops_pending.append(record.trial_id)
    if age_s(record.stop_requested_at or record.updated_at, now) > overdue_after_s:
        done.stops_overdue.append(record.trial_id)


def _finish_submission(record: TrialRecord, stopper: Stopper, now: datetime, done: Reconciled) -> None:
    """A SUBMITTING trial whose start was cut short: started (approved) or withdrawn (a direct submission)."""
    if record.execution_arn or age_s(record.updated_at, now) < START_CUT_SHORT_S:
        return
    trial_id, stamp = record.trial_id, _iso(now)
    if record.approval is not None and record.approval.status == "APPROVED" and record.execution_input:
        started = stopper.workflow.start(trial_id, record.execution_input)
        if started.already_submitted and stopper.workflow.status(started.execution_arn) in EXECUTION_TERMINAL:
            return  # an execution of an earlier life of this trial: leave it for a person to look at
        if record_start(stopper.trials, stopper.workflow, record, started, stamp).status == "SUBMITTED":
            done.starts_finished.append(trial_id)
        return
    arn = stopper.workflow.execution_arn(trial_id)
    if stopper.workflow.status(arn) is not None:  # it did start; only the record of it was lost
        found = Started(arn, already_submitted=True)
        if record_start(stopper.trials, stopper.workflow, record, found, stamp).status == "SUBMITTED":
            done.starts_finished.append(trial_id)
    elif stopper.trials.withdraw(trial_id, ("SUBMITTING",), team=str(record.team), release=release_of(record),
                                 if_updated_at=record.updated_at):
        done.submissions_withdrawn.append(trial_id)


def _close_ended(record: TrialRecord, stopper: Stopper, now: datetime, done: Reconciled) -> None:
    """A SUBMITTED trial whose execution has ended without recording the trial's outcome."""
    if record.execution_arn is None:
        return
    execution = stopper.workflow.status(record.execution_arn)
    if execution not in EXECUTION_TERMINAL:
        return
    trial_id, stamp = record.trial_id, _iso(now)
    cause = f"its workflow execution ended {execution} without recording the trial's outcome"
    if live_jobs(stopper.ledger, record):  # jobs of it still run: stop them through the cancel path first
        request_stop(record, stopper, cause=cause, now=stamp)
        done.ended_closed.append(trial_id)
        return
    settled = settled_usd(stopper.ledger, record)
    fields = {"total_usd": str(settled)} if settled is not None else {}
    if stopper.trials.close(trial_id, ("SUBMITTED",), team=str(record.team), release=release_of(record, settled),
                            status="CANCELLED" if execution == "ABORTED" else "FAILED", status_cause=cause,
                            stopped_at=stamp, updated_at=stamp, **fields):
        done.ended_closed.append(trial_id)


def settled_usd(ledger: Ledger, record: TrialRecord) -> Decimal | None:
    """The trial's cost from its runs' stored costs (each run's terminal event settled it); None while any run
    with facts has no complete cost, so its worst case stays booked."""
    total = Decimal(0)
    for run in record.run_names():
        key = L.run_key(record.trial_id, run)
        stored = ledger.cost(key)
        if stored is None:
            if ledger.entries(key):
                return None
            continue
        if not stored.complete:
            return None
        total += stored.cost.total_usd
    return total
