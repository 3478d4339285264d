"""The money invariant (docs/architecture.md, "The money invariant") over random interleavings of everything that
starts, stops or ends a trial: submissions and resubmissions, approvals and rejections, cancels, Batch job events,
executions that end (through their last step, or aborted and timed out without it), and reconciler sweeps. Any
call may be cut by a fault (StartExecution's answer lost, StartExecution or StopExecution throttled), and another
operation may run between a call's reads and its writes (at each Step Functions call). The ports are the in-memory
ones (``tests/fakes.py``), whose conditional writes ``tests/integration/test_port_contracts.py`` pins against
DynamoDB.

After every operation: no usage counter is negative, and no trial's booking has been released more often than it
was booked. After a quiet period (the start window passed, the jobs' last events delivered, one reconciler sweep):
no execution runs and no job is queued or running for a trial that is closed or absent, and each booking still held
belongs to a trial that is active.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from lambdas.domain.events import BatchJobStateChangeDetail
from lambdas.domain.money.prices import load_price_table
from lambdas.domain.trial.rules import parse_trial
from lambdas.domain.trial.spec import TrialSpec
from lambdas.domain.trial.trial_record import ExecutionInput, TrialRecord
from lambdas.domain.vocabulary import BATCH_TERMINAL, TRIAL_ACTIVE
from lambdas.services.cache_observation import RefusedClaim
from lambdas.services.limit_guard import LimitGuard
from lambdas.services.ports import Started
from lambdas.services.reconciliation import reconcile
from lambdas.services.run_events import RunEvents
from lambdas.services.run_settlement import RunSettlement
from lambdas.services.trial_status import START_CUT_SHORT_S, set_status
from lambdas.services.trial_submission import (
    DecisionConflict,
    QuotaExceeded,
    SubmissionRefused,
    TrialClosed,
    TrialNotFound,
    cancel,
    decide,
)
from tests import fakes
from tests.conftest import load_example
from tests.money import NLP, NLP_LEAD, NOW, Ports, governance, submit_trial, who

RULES = {"direct": governance(), "approved": governance(approval_threshold_usd="1000")}
SPECS = {name: parse_trial({**load_example("trial-llama31-8b-lora.json"), "name": name}) for name in ("alpha", "beta")}
RUNS = ("gpu", "trn2")
# What a step may do; the common ones twice, so a short sequence gets as far as jobs, stops and ends.
OPERATIONS = ("submit", "job starts", "cancel", "approve", "deliver", "reconcile", "execution ends", "wait",
              "job ends", "reject", "submit", "job starts", "deliver", "wait")


class Fault(Exception):
    """An AWS call that failed (throttled, timed out): the caller sees an error."""


CLIENT_ERRORS = (Fault, DecisionConflict, QuotaExceeded, SubmissionRefused, TrialClosed, TrialNotFound)


@dataclass
class Booked(fakes.InMemoryTrials):
    """The trials table, counting each trial's bookings (admissions) and releases (closes and withdrawals that
    give something back)."""

    admitted: Counter[str] = field(default_factory=Counter)
    released: Counter[str] = field(default_factory=Counter)

    def admit(self, record: TrialRecord, additions: Mapping[str, Decimal], limits: Mapping[str, Decimal]) -> Any:
        answer = super().admit(record, additions, limits)
        if answer == "created":
            self.admitted[record.trial_id] += 1
        return answer

    def close(self, trial_id: str, statuses: tuple[str, ...], *, team: str, release: Mapping[str, Decimal],
              **fields: Any) -> bool:
        closed = super().close(trial_id, statuses, team=team, release=release, **fields)
        if closed and release:
            self.released[trial_id] += 1
        return closed

    def withdraw(self, trial_id: str, statuses: tuple[str, ...], *, team: str, release: Mapping[str, Decimal],
                 if_updated_at: str | None = None) -> bool:
        withdrawn = super().withdraw(trial_id, statuses, team=team, release=release, if_updated_at=if_updated_at)
        if withdrawn:
            self.released[trial_id] += 1
        return withdrawn


class Counted:
    """The run-events service's telemetry: nothing to keep."""

    def run_outcomes(self, statuses: Iterable[str]) -> None: ...

    def cache_outcomes(self, counted: Mapping[str, int]) -> None: ...

    def refused_claims(self, refused: Iterable[RefusedClaim]) -> None: ...

    def rejected_event(self, reason: str, **context: str | None) -> None: ...

    def limit_stop(self, limit: str, **context: str | None) -> None: ...

    def closed_trial_job(self, job_id: str, **context: str | None) -> None: ...

    def recorded(self, message: str, **context: str | int | bool | None) -> None: ...


class World:
    """One stage, its clock, its Batch, and the operations a test draws."""

    def __init__(self, draw: Callable[[st.SearchStrategy[Any]], Any], rules: str) -> None:
        self.draw, self.rules = draw, RULES[rules]
        self.now: datetime = NOW
        self.ports = Ports(Chaotic(self))
        self.ports.trials = Booked()
        self.jobs: dict[str, tuple[str, str]] = {}  # job id -> (trial, run)
        self.events: list[tuple[str, str]] = []  # (job id, status) still to be delivered
        self.reported: set[str] = set()  # terminated jobs whose end is among the events
        self.nesting = 0
        self.faults = True
        self.settlement = RunSettlement(self.ports.ledger, self.ports.trials, self.ports.artifacts,
                                        load_price_table(), "us-east-1")

    @property
    def stamp(self) -> str:
        return self.now.isoformat().replace("+00:00", "Z")

    # The operations ------------------------------------------------------------------------------------------------

    def submit(self, spec: TrialSpec) -> None:
        submit_trial(self.ports, spec, rules=self.rules, now=self.now)

    def decide(self, spec: TrialSpec, approve: bool) -> None:
        decide(spec.trial_id, approve=approve, comment="decided", caller=who(NLP_LEAD, self.rules),
               plane=self.ports.plane(), now=self.now)

    def cancel(self, spec: TrialSpec) -> None:
        cancel(spec.trial_id, caller=who(NLP, self.rules), stopper=self.ports.stopper(), now=self.stamp,
               reason="cancelled")

    def reconcile(self) -> None:
        reconcile(self.ports.stopper(jobs=True), self.now, overdue_after_s=900)

    def job_starts(self, spec: TrialSpec, run: str) -> None:
        """The execution's task submits a job (only while the execution runs), which reports RUNNING."""
        arn = self.ports.workflow.execution_arn(spec.trial_id)
        if self.ports.workflow.status(arn) != "RUNNING":
            return
        job_id = f"{spec.trial_id}-{run}-{len(self.jobs)}"
        self.jobs[job_id] = (spec.trial_id, run)
        self.ports.jobs.statuses[job_id] = "RUNNING"
        self.events.append((job_id, "RUNNING"))

    def job_ends(self, index: int, status: str) -> None:
        live = [job for job in sorted(self.jobs) if self.ports.jobs.statuses[job] not in BATCH_TERMINAL]
        if live:
            job_id = live[index % len(live)]
            self.ports.jobs.statuses[job_id] = status
            self.events.append((job_id, status))

    def deliver(self) -> None:
        """EventBridge delivers the oldest state change still pending (terminations included)."""
        for job_id in self.ports.jobs.terminated:  # a terminated job reports its end
            if job_id not in self.reported:
                self.reported.add(job_id)
                self.events.append((job_id, "FAILED"))
        if self.events:
            job_id, status = self.events.pop(0)
            trial_id, run = self.jobs[job_id]
            events = RunEvents(self.settlement, LimitGuard(self.settlement, self.ports.workflow),
                               fakes.InMemoryCacheRegistry(), Counted(), jobs=self.ports.jobs)
            events.on_job_state(_detail(trial_id, run, job_id, status), self.now)

    def execution_ends(self, spec: TrialSpec, how: str) -> None:
        """The workflow reaches its end: through its last step (SetTrialStatus, once its jobs have ended), or
        aborted from the console or timed out without it."""
        arn = self.ports.workflow.execution_arn(spec.trial_id)
        if self.ports.workflow.status(arn) != "RUNNING":
            return
        if how == "last step":
            if any(self.ports.jobs.statuses[j] not in BATCH_TERMINAL for j, (t, _) in self.jobs.items()
                   if t == spec.trial_id):
                return  # its .sync tasks wait for their jobs
            set_status(self.ports.trials, spec.trial_id, "SUCCEEDED", None, self.stamp, settled_usd=Decimal(7))
            how = "SUCCEEDED"
        self.ports.workflow.finish(spec.trial_id, how)

    def wait(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)

    # Interleaving ------------------------------------------------------------------------------------------------

    def step(self) -> None:
        """Draw one operation and run it; an operation that fails leaves what it wrote, as a failed call would."""
        kind = self.draw(st.sampled_from(OPERATIONS))
        spec = SPECS[self.draw(st.sampled_from(sorted(SPECS)))]
        operations: dict[str, Callable[[], None]] = {
            "submit": lambda: self.submit(spec),
            "approve": lambda: self.decide(spec, True),
            "reject": lambda: self.decide(spec, False),
            "cancel": lambda: self.cancel(spec),
            "reconcile": self.reconcile,
            "job starts": lambda: self.job_starts(spec, self.draw(st.sampled_from(RUNS))),
            "job ends": lambda: self.job_ends(self.draw(st.integers(0, 5)),
                                              self.draw(st.sampled_from(BATCH_TERMINAL))),
            "deliver": self.deliver,
            "execution ends": lambda: self.execution_ends(
                spec, self.draw(st.sampled_from(["last step", "ABORTED", "TIMED_OUT", "FAILED"]))),
            "wait": lambda: self.wait(self.draw(st.sampled_from([30, 120, START_CUT_SHORT_S + 1]))),
        }
        try:
            operations[kind]()
        except CLIENT_ERRORS as error:  # what a client sees (a 4xx, or a 5xx for a fault); its writes stay
            note(f"{kind} failed: {type(error).__name__}: {error}")

    def meanwhile(self) -> None:
        """Before an AWS call: maybe another operation runs between this one's reads and its call."""
        if self.faults and self.nesting == 0 and self.draw(st.booleans()):
            self.nesting += 1
            try:
                self.step()
            finally:
                self.nesting -= 1

    def fault(self) -> str:
        return self.draw(st.sampled_from(["none", "none", "before", "after"])) if self.faults else "none"

    def quiet(self) -> None:
        """No more clients: the start window passes, every job event is delivered, the reconciler sweeps; the
        terminations it made are delivered and it sweeps once more (its next period)."""
        self.faults = False
        for _ in range(2):
            self.wait(START_CUT_SHORT_S + 1)
            while self.events or set(self.ports.jobs.terminated) - self.reported:
                self.deliver()
            self.reconcile()


class Chaotic(fakes.InMemoryWorkflow):
    """Step Functions whose calls may be preceded by another operation and cut by a fault: StartExecution's
    answer lost after the execution was made, or the call refused before it; StopExecution throttled."""

    def __init__(self, world: World) -> None:
        super().__init__()
        self.world = world

    def start(self, name: str, execution_input: ExecutionInput) -> Started:
        self.world.meanwhile()
        fault = self.world.fault()
        if fault == "before":
            raise Fault("ThrottlingException on StartExecution")
        started = super().start(name, execution_input)
        if fault == "after":
            raise Fault("read timeout: StartExecution's answer was lost")
        return started

    def status(self, execution_arn: str) -> str | None:
        self.world.meanwhile()
        return super().status(execution_arn)

    def stop(self, execution_arn: str, cause: str) -> str:
        self.world.meanwhile()
        if self.world.fault() != "none":
            raise Fault("ThrottlingException on StopExecution")
        return super().stop(execution_arn, cause)


def _detail(trial_id: str, run: str, job_id: str, status: str) -> BatchJobStateChangeDetail:
    return BatchJobStateChangeDetail.model_validate({
        "jobId": job_id, "jobName": f"{trial_id}-{run}", "jobQueue": "q", "status": status, "attempts": [],
        "container": {"environment": [{"name": "DUALTRACK_TRIAL_ID", "value": trial_id},
                                      {"name": "DUALTRACK_RUN", "value": run}]}})


def _check_bookings(world: World) -> None:
    trials = world.ports.trials
    assert isinstance(trials, Booked)
    for name, value in (trials.usage_items.get("team-nlp") or {}).items():
        assert value >= 0, f"usage {name} went negative: {value}"
    for trial_id, released in trials.released.items():
        assert released <= trials.admitted[trial_id], f"{trial_id} released {released}x, booked " \
                                                      f"{trials.admitted[trial_id]}x"


def _check_nothing_runs_for_a_closed_trial(world: World) -> None:
    trials = world.ports.trials
    assert isinstance(trials, Booked)
    for arn, execution in world.ports.workflow.executions.items():
        trial_id = arn.rsplit(":", 1)[-1]
        record = trials.get(trial_id)
        if execution["status"] == "RUNNING":
            assert record is not None and record.status in TRIAL_ACTIVE, \
                f"execution of {trial_id} runs while the trial is {record.status if record else 'absent'}"
    for job_id, (trial_id, _) in world.jobs.items():
        record = trials.get(trial_id)
        if world.ports.jobs.statuses[job_id] not in BATCH_TERMINAL:
            assert record is not None and record.status in TRIAL_ACTIVE, \
                f"job {job_id} runs while its trial is {record.status if record else 'absent'}"
    for trial_id in trials.admitted:
        record = trials.get(trial_id)
        held = trials.admitted[trial_id] - trials.released[trial_id]
        assert held == (1 if record is not None and record.status in TRIAL_ACTIVE else 0), \
            f"{trial_id} ({record.status if record else 'absent'}) holds {held} bookings"
    active = sum(1 for record in trials.iter_all() if record.status in TRIAL_ACTIVE)
    assert trials.usage_items.get("team-nlp", {}).get("active", Decimal(0)) == active


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), rules=st.sampled_from(sorted(RULES)), steps=st.integers(1, 24))
def test_no_execution_outlives_its_trial_and_every_booking_is_released_once(data: st.DataObject, rules: str,
                                                                           steps: int) -> None:
    world = World(data.draw, rules)
    for _ in range(steps):
        world.step()
        _check_bookings(world)
    world.quiet()
    for record in world.ports.trials.iter_all():
        event(f"ends {record.status}")
    event(f"{len(world.ports.jobs.terminated)} jobs terminated")
    _check_bookings(world)
    _check_nothing_runs_for_a_closed_trial(world)
