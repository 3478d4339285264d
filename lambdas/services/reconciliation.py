"""The reconciler's sweep: every spend the plane recorded as pending is finished, never forgotten.

- A STOPPING trial is finished again (``trial_status.finish_stop``): its execution stopped, its live jobs
  terminated, and CANCELLED once nothing of it runs. A stop pending longer than ``overdue_after_s`` is counted as
  overdue, which raises the StopsPending alarm.
- A trial left SUBMITTING without an execution (the function that was starting it ended before it could record the
  execution) is finished the way its request said: an approved trial is started (the execution name is the trial
  id, so a start that did happen is found, not repeated), and a direct submission, whose caller was told to send
  it again, is withdrawn with its booking.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from lambdas.domain.vocabulary import EXECUTION_TERMINAL
from lambdas.services.trial_status import Stopper, finish_stop, release_of

# A submission's own function times out before this (the API function's timeout is 29 s): a trial SUBMITTING for
# longer without an execution was cut short.
START_CUT_SHORT_S = 300


@dataclass
class Reconciled:
    stops_finished: list[str] = field(default_factory=list)
    stops_pending: list[str] = field(default_factory=list)
    stops_overdue: list[str] = field(default_factory=list)  # pending for longer than overdue_after_s
    stop_errors: dict[str, str] = field(default_factory=dict)
    starts_finished: list[str] = field(default_factory=list)
    submissions_withdrawn: list[str] = field(default_factory=list)


def age_s(stamp: object, now: datetime) -> float:
    """Seconds since an ISO 8601 stamp; an unreadable or missing one counts as old."""
    try:
        at = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return float("inf")  # no readable time: treat it as old
    return (now - at).total_seconds()


def _iso(now: datetime) -> str:
    return now.isoformat().replace("+00:00", "Z")


def reconcile(stopper: Stopper, now: datetime, *, overdue_after_s: int) -> Reconciled:
    done = Reconciled()
    stamp = _iso(now)
    for record in stopper.trials.with_status(("STOPPING",)):
        trial_id = record.trial_id
        try:
            state = finish_stop(record, stopper, now=stamp)
        except Exception as exc:  # one trial's failing call must not hold up the others; it stays STOPPING
            done.stop_errors[trial_id] = f"{type(exc).__name__}: {exc}"[:500]
            state = None
        if state is not None and state.status == "CANCELLED":
            done.stops_finished.append(trial_id)
            continue
        done.stops_pending.append(trial_id)
        if age_s(record.stop_requested_at or record.updated_at, now) > overdue_after_s:
            done.stops_overdue.append(trial_id)
    for record in stopper.trials.with_status(("SUBMITTING",)):
        if record.execution_arn or age_s(record.updated_at, now) < START_CUT_SHORT_S:
            continue
        trial_id = record.trial_id
        if record.approval is not None and record.approval.status == "APPROVED" and record.execution_input:
            started = stopper.workflow.start(trial_id, record.execution_input)
            if stopper.workflow.status(started.execution_arn) in EXECUTION_TERMINAL:
                continue  # an execution of an earlier life of this trial: leave it for a person to look at
            if stopper.trials.transition(trial_id, ("SUBMITTING",), status="SUBMITTED",
                                         execution_arn=started.execution_arn, updated_at=stamp):
                done.starts_finished.append(trial_id)
            continue
        arn = stopper.workflow.execution_arn(trial_id)
        if stopper.workflow.status(arn) is not None:  # it did start; only the record of it was lost
            if stopper.trials.transition(trial_id, ("SUBMITTING",), status="SUBMITTED", execution_arn=arn,
                                         updated_at=stamp):
                done.starts_finished.append(trial_id)
        elif stopper.trials.withdraw(trial_id, ("SUBMITTING",), team=str(record.team),
                                     release=release_of(record)):
            done.submissions_withdrawn.append(trial_id)
    return done
