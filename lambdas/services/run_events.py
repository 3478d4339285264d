"""What a run's events do, from the handler's parsed event to the ledger write and what follows it.

A Batch job state change (``on_job_state``) and an S3 object a job wrote (``on_object``) take the same path:

1. record: the event's facts go into the ledger, each once (``RunSettlement`` -> the ``Ledger`` port);
2. settle: the run's cost is folded again and stored when the run is terminal;
3. hold the limits: the run's projected spend and the trial's writes are checked (``LimitGuard``), and a trial
   over a limit is stopped through the cancel path;
4. observe the compile cache: the attempts' reported hits and misses are counted in the registry, once each;
5. end what must not run: a job of a trial that is closed or being stopped, seen queued or running for the first
   time, is terminated (``JobTerminator``): it was first seen after the stop looked at the trial's jobs, so
   nothing else would end it;
6. count: outcomes, stops, cache outcomes, refused claims and rejected events go to the ``Telemetry`` port.

An event about a trial or run the plane did not start, or a malformed object, is acknowledged and counted as
rejected: it never becomes a fact. Each step is a fold or a conditional write, so a redelivered event changes
nothing the first delivery wrote.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from lambdas.domain.evidence.artifacts import RUN_OBJECT, ArtifactRejected
from lambdas.domain.money import ledger as ledger_facts
from lambdas.domain.money.ledger import LedgerEntry
from lambdas.domain.money.run_limits import LimitCrossed
from lambdas.domain.vocabulary import BATCH_TERMINAL, TRIAL_TERMINAL
from lambdas.services.artifact_recording import record_artifact, record_cache_object
from lambdas.services.cache_observation import RefusedClaim, observe_run
from lambdas.services.limit_guard import LimitGuard
from lambdas.services.ports import CacheRegistry, JobTerminator
from lambdas.services.run_settlement import ForeignEvent, RunSettlement

if TYPE_CHECKING:
    from lambdas.domain.events import BatchJobStateChangeDetail
    from lambdas.domain.trial.trial_record import TrialRecord

class Telemetry(Protocol):
    """Where the run events' counts go (CloudWatch metrics and logs in the functions)."""

    def run_outcomes(self, statuses: Iterable[str]) -> None: ...

    def cache_outcomes(self, counted: Mapping[str, int]) -> None: ...

    def refused_claims(self, refused: Iterable[RefusedClaim]) -> None: ...

    def rejected_event(self, reason: str, **context: str | None) -> None: ...

    def limit_stop(self, limit: str, **context: str | None) -> None: ...

    def closed_trial_job(self, job_id: str, **context: str | None) -> None:
        """A job of a closed or stopping trial, found queued or running and terminated."""
        ...

    def recorded(self, message: str, **context: str | int | bool | None) -> None:
        """A structured log line for a fact recorded."""
        ...


class _Result(BaseModel):
    model_config = ConfigDict(defer_build=True)


class JobStateResult(_Result):
    trial_id: str | None = None
    run: str | None = None
    status: str
    attempt: int
    new_facts: int = 0
    cost_total_usd: str | None = None
    ignored: str | None = None
    stopped_by: str | None = None  # the limit this event's facts crossed (the trial was stopped)


class ObjectResult(_Result):
    kind: str
    recorded: bool = False
    trial_id: str | None = None
    run: str | None = None
    cache_key: str | None = None
    rejected: str | None = None  # why the object is not a fact (acknowledged, not retried)
    stopped_by: str | None = None  # the limit this object crossed (the trial was stopped)


@dataclass(frozen=True)
class ObjectWritten:
    """One S3 object, as its "Object Created" event reports it."""

    bucket: str
    key: str
    size: int
    at: datetime
    fact_key: str  # bucket + key + version (or etag): counted once however often its event is delivered


@dataclass(frozen=True)
class RunEvents:
    settlement: RunSettlement
    guard: LimitGuard
    registry: CacheRegistry
    telemetry: Telemetry
    artifacts_bucket: str = ""
    cache_bucket: str = ""
    jobs: JobTerminator | None = None  # Batch, to end a job of a closed trial

    def on_job_state(self, detail: BatchJobStateChangeDetail, at: datetime) -> JobStateResult:
        """Record a Batch job state change, settle the run, hold the trial's limits and observe its cache claims."""
        try:
            recorded = self.settlement.record_job_state(detail, at)
        except ForeignEvent as exc:
            self.telemetry.rejected_event(str(exc), job_id=detail.job_id, status=detail.status)
            if exc.trial_id is not None:  # a job of a trial that never started (rejected, cancelled) must not run
                self._end_job_of_closed_trial(detail, exc.trial_id, first_seen=True)
            return JobStateResult(status=detail.status, attempt=detail.attempt, ignored=str(exc))
        if recorded is None:
            return JobStateResult(status=detail.status, attempt=detail.attempt, ignored="not a dualtrack job")
        trial_id, run = recorded.identity.trial_id, recorded.identity.run
        # The run's outcome is counted from the one read of its ledger, before settling: a settlement that fails
        # still leaves it counted (its retry adds no fact, so counts nothing).
        entries = self.settlement.entries(trial_id, run)
        if recorded.added:
            self._end_job_of_closed_trial(detail, trial_id, read=recorded.trial,
                                          first_seen=_first_of_job(detail.job_id, entries, recorded.added))
        outcome = self.settlement.outcome(recorded, entries)
        self.telemetry.run_outcomes([outcome] if outcome else [])
        # Settle on every delivery, not only when facts were new: a retry after a crash between recording and
        # settling must still close the cost. Settling is a fold of the ledger, so repeating it changes nothing.
        settled = self.settlement.settle_run(trial_id, run, collect=detail.terminal, entries=entries)
        stopped = self.guard.after_run_facts(trial_id, run, settled.entries, at)
        self._stopped(stopped, trial_id=trial_id, run=run)
        if settled.cost is not None:
            self._observe_cache(trial_id, run, settled.entries)
        self.telemetry.recorded("job state recorded", trial_id=trial_id, run=run, status=detail.status,
                                attempt=detail.attempt, new=len(recorded.added))
        return JobStateResult(trial_id=trial_id, run=run, status=detail.status, attempt=detail.attempt,
                              new_facts=len(recorded.added),
                              cost_total_usd=str(settled.cost.cost.total_usd) if settled.cost else None,
                              stopped_by=stopped.message if stopped else None)

    def on_object(self, written: ObjectWritten) -> ObjectResult:
        """A compile-cache object goes into its registry entry; an object under trials/ counts against its trial's
        write limits, and a checkpoint manifest or attempt summary becomes a fact of its run."""
        if written.bucket == self.cache_bucket:
            return self._cache_object(written)
        if written.bucket != self.artifacts_bucket:
            return ObjectResult(kind="ignored")
        run_object = RUN_OBJECT.match(written.key)
        stopped = None
        try:
            if run_object:  # every object a run's job writes counts against the trial's write limits, fact or not
                self.settlement.check_started(run_object["trial"], run_object["run"])
                stopped = self.guard.after_write(run_object["trial"], written.size, written.at, fact=written.fact_key)
            outcome = record_artifact(self.settlement, written.key)
        except (ArtifactRejected, ForeignEvent) as exc:
            self.telemetry.rejected_event(str(exc), key=written.key)
            return ObjectResult(kind="rejected", rejected=str(exc))
        if outcome is not None and stopped is None:
            stopped = self.guard.after_run_facts(outcome.trial_id, outcome.run, outcome.entries, written.at)
        self._stopped(stopped, key=written.key)
        if outcome is None:
            return ObjectResult(kind="ignored" if run_object is None else "written",
                                trial_id=run_object["trial"] if run_object else None,
                                run=run_object["run"] if run_object else None,
                                stopped_by=stopped.message if stopped else None)
        if outcome.kind == "summary" and outcome.added:
            self._observe_cache(outcome.trial_id, outcome.run, outcome.entries)
        self.telemetry.recorded("artifact recorded", kind=outcome.kind, trial_id=outcome.trial_id, run=outcome.run,
                                new=outcome.added)
        return ObjectResult(kind=outcome.kind, recorded=outcome.added, trial_id=outcome.trial_id, run=outcome.run,
                            stopped_by=stopped.message if stopped else None)

    def _cache_object(self, written: ObjectWritten) -> ObjectResult:
        at = written.at.isoformat().replace("+00:00", "Z")
        try:
            key = record_cache_object(self.registry, written.key, written.size, at)
        except ArtifactRejected as exc:
            self.telemetry.rejected_event(str(exc), key=written.key)
            return ObjectResult(kind="rejected", rejected=str(exc))
        kind: Literal["compile-cache", "ignored"] = "compile-cache" if key else "ignored"
        return ObjectResult(kind=kind, recorded=key is not None, cache_key=key)

    def _observe_cache(self, trial_id: str, run: str, entries: list[LedgerEntry]) -> None:
        """The run's compile-cache hits and misses, from what its attempts reported."""
        observed = observe_run(self.settlement.ledger, self.registry, self.settlement.trials, trial_id, run,
                               entries, self.settlement.trial(trial_id))
        self.telemetry.cache_outcomes(observed.counted)
        self.telemetry.refused_claims(observed.refused)

    def _end_job_of_closed_trial(self, detail: BatchJobStateChangeDetail, trial_id: str, *, first_seen: bool,
                                 read: TrialRecord | None = None) -> None:
        """Terminate a queued or running job whose trial is closed or being stopped, when the ledger first sees the
        job, on a fresh read of the trial (``read``, when this event's recording has just read it, as it does for
        the first event of a run in an execution environment). A stop ends the jobs the ledger knows when it looks
        (it waits for each to end), so only a job first seen after that can outlive the trial: it is ended here."""
        if self.jobs is None or detail.status in BATCH_TERMINAL or not first_seen:
            return
        record = read or self.settlement.trials.get(trial_id)
        if record is None or record.status not in (*TRIAL_TERMINAL, "STOPPING"):
            return
        self.jobs.terminate(detail.job_id, f"dualtrack: trial {trial_id} is {record.status}; nothing of it runs")
        self.telemetry.closed_trial_job(detail.job_id, trial_id=trial_id, trial_status=record.status,
                                        job_status=detail.status)

    def _stopped(self, stopped: LimitCrossed | None, **context: str) -> None:
        if stopped is not None:
            self.telemetry.limit_stop(stopped.limit, stopped_by=stopped.message, **context)


def _first_of_job(job_id: str, entries: list[LedgerEntry], added: list[LedgerEntry]) -> bool:
    """Whether the facts just ``added`` are the first the run's ledger holds of job ``job_id``."""
    new = {entry.entry_key for entry in added}
    earlier = [entry for entry in entries if entry.entry_key not in new]
    return not any(fact.job_id == job_id for fact in ledger_facts.facts_of(earlier, ledger_facts.TransitionFact))
