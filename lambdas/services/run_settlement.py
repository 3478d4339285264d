"""Recording a run's facts and closing its cost.

``record_job_event`` turns one Batch state change into ledger facts; ``settle_run`` folds the ledger and stores
the run's cost whenever the run is terminal. Settlement runs after every new fact about a terminal run (a late
STARTING, a checkpoint manifest), so the stored cost is the fold of the full ledger whatever order facts came in.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from lambdas.domain.evidence.artifacts import ATTEMPT_SUMMARY, CHECKPOINT_MANIFEST, ArtifactRejected, artifact_fact
from lambdas.domain.money import ledger as L
from lambdas.domain.money.cost import compute_run_cost
from lambdas.domain.money.prices import PriceTable
from lambdas.domain.trial.trial_record import TrialRecord
from lambdas.domain.vocabulary import BATCH_TERMINAL, RUNS, SCALING_RUN, is_run, runs_of
from lambdas.services.ports import BatchJobs, Ledger, Objects, RunMetrics, Trials
from lambdas.services.run_folds import RunFolds

if TYPE_CHECKING:  # the API settles runs without parsing Batch events: it need not build their models
    from lambdas.domain.events import BatchJobStateChangeDetail

log = logging.getLogger(__name__)
# Trial statuses of a trial whose workflow never started: no job or artifact can be the plane's.
NEVER_STARTED = ("PENDING_APPROVAL", "REJECTED")


class ForeignEvent(ValueError):
    """An event about a trial or run the plane did not start (unknown trial, a run the trial does not have, a
    trial that never started): acknowledged and dropped, never a ledger fact. ``trial_id`` names a trial of the
    plane that never started (rejected or cancelled before its execution), whose job must not run."""

    def __init__(self, message: str, trial_id: str | None = None) -> None:
        super().__init__(message)
        self.trial_id = trial_id


@dataclass(frozen=True)
class JobIdentity:
    trial_id: str
    run: str


def identify_job(environment: dict[str, str], tags: dict[str, str], job_name: str) -> JobIdentity | None:
    """Which trial and run a Batch job belongs to: container environment first, then tags, then its name
    (``<trial_id>-<run>``, a scaling run's ``<trial_id>-gpu-n1`` included)."""
    trial = environment.get("DUALTRACK_TRIAL_ID") or tags.get("dualtrack:trial")
    run = environment.get("DUALTRACK_RUN") or tags.get("dualtrack:run")
    if not (trial and run):
        trial, run = _job_name_parts(job_name) or (trial, run)
    if not (trial and run) or not is_run(run):
        return None
    return JobIdentity(trial, run)


def _job_name_parts(job_name: str) -> tuple[str, str] | None:
    """(trial, run) of a job named ``<trial_id>-<run>``: a scaling run's suffix first, then the fixed runs'."""
    trial, _, tail = job_name.rpartition("-")
    head, _, track = trial.rpartition("-")
    if head and SCALING_RUN.fullmatch(f"{track}-{tail}"):
        return head, f"{track}-{tail}"
    for candidate in RUNS:
        if job_name.endswith(f"-{candidate}") and not (candidate == "gpu" and job_name.endswith("fallback")):
            return job_name[: -len(candidate) - 1], candidate
    return None


def job_facts(identity: JobIdentity, detail: BatchJobStateChangeDetail, at: datetime,
              instance_type: str | None) -> list[L.LedgerEntry]:
    """The ledger facts one Batch job state change carries: the transition, plus every finished attempt."""
    container = detail.container
    exit_code = container.exit_code if container else None
    facts = [
        L.transition_entry(
            identity.trial_id,
            identity.run,
            job_id=detail.job_id,
            attempt=detail.attempt,
            status=detail.status,
            at=at,
            status_reason=detail.status_reason,
            exit_code=exit_code if detail.terminal else None,
            instance_type=instance_type,
            nodes=detail.nodes,
            created_at_ms=detail.created_at_ms,
            job_name=detail.job_name,
        )
    ]
    for number, attempt in enumerate(detail.attempts, start=1):
        facts.append(
            L.attempt_entry(
                identity.trial_id,
                identity.run,
                job_id=detail.job_id,
                attempt=number,
                started_at_ms=attempt.started_at_ms,
                stopped_at_ms=attempt.stopped_at_ms,
                exit_code=attempt.container.exit_code if attempt.container else None,
                status_reason=attempt.status_reason,
            )
        )
    return facts


class RunSettlement(RunFolds):
    def __init__(
        self, ledger: Ledger, trials: Trials, artifacts: Objects, prices: PriceTable, region: str,
        metrics: RunMetrics | None = None, jobs: BatchJobs | None = None,
    ) -> None:
        super().__init__(ledger, trials, artifacts, prices, region)
        self.metrics, self.jobs = metrics, jobs
        self._started: set[tuple[str, str]] = set()

    def check_started(self, trial_id: str, run: str) -> TrialRecord | None:
        """Raise ForeignEvent unless ``run`` is a run of a trial the plane started. A run once confirmed is kept for
        the life of the execution environment, so a trial's events cost one trials-table read per environment.
        Returns the record when this call read it from the table (None when it used what this environment read
        before, which may be stale: a caller that needs the trial's current status reads it again)."""
        if (trial_id, run) in self._started:
            return None
        cached = self._trials.get(trial_id)  # another run of the trial confirmed in this environment: no read
        record = cached or self.trials.get(trial_id)
        if record is None:
            raise ForeignEvent(f"no trial {trial_id!r} in the trials table")
        runs = runs_of(record.tracks, record.runs)  # the scaling runs it was placed with (gpu-n1) included
        if run not in runs:
            raise ForeignEvent(f"trial {trial_id} has no run {run!r} (its runs: {', '.join(sorted(runs))})")
        status = record.status
        if status in NEVER_STARTED or (status == "CANCELLED" and not record.started):
            raise ForeignEvent(f"trial {trial_id} never started (status {status})", trial_id=trial_id)
        self._trials[trial_id] = record
        self._started.add((trial_id, run))
        return None if cached else record

    def record_job_state(self, detail: BatchJobStateChangeDetail, at: datetime) -> JobRecorded | None:
        """The ledger facts of one Batch job state change, each appended once (None: not a dualtrack job). Raises
        ForeignEvent for a job that names a trial or run the plane did not start."""
        identity = identify_job(detail.environment(), detail.tags, detail.job_name)
        if identity is None:
            return None
        read = self.check_started(identity.trial_id, identity.run)
        instance_type = self.jobs.queue_instance_type(detail.job_queue) if self.jobs and detail.job_queue else None
        return JobRecorded(identity, self.record(job_facts(identity, detail, at, instance_type)), read)

    def reconcile_jobs(self, trial_id: str, job_ids: list[str]) -> list[str]:
        """Record each job's facts from DescribeJobs, so settling never waits on a late EventBridge event. Returns
        the outcome of each run this call's facts made terminal (``outcome``)."""
        terminal: list[str] = []
        for job_id in job_ids:
            detail = self.jobs.describe(job_id) if self.jobs else None
            if detail is None:
                continue
            identity = identify_job(detail.environment(), detail.tags, detail.job_name)
            if identity is None or identity.trial_id != trial_id:
                continue
            recorded = self.record_job_state(detail, detail.changed_at())
            outcome = self.outcome(recorded) if recorded is not None else None
            if outcome is not None:
                terminal.append(outcome)
        return terminal

    def outcome(self, recorded: JobRecorded, entries: list[L.LedgerEntry] | None = None) -> str | None:
        """The run's folded terminal status when the facts ``recorded`` added made the run terminal, else None: the
        outcome to count, once per time a run becomes terminal. A terminal transition for a run already terminal
        (a FAILED after the job's SUCCEEDED: a success wins) counts nothing. ``entries`` are the run's entries read
        after recording (read here, only when the call added a terminal transition, unless given)."""
        if not any(t.status in BATCH_TERMINAL for t in L.facts_of(recorded.added, L.TransitionFact)):
            return None
        if entries is None:
            entries = self.entries(recorded.identity.trial_id, recorded.identity.run)
        return L.new_outcome(entries, recorded.added)

    def record(self, facts: list[L.LedgerEntry]) -> list[L.LedgerEntry]:
        """Append each fact once; returns the facts this call added (a conditional write decides)."""
        return [fact for fact in facts if self.ledger.append(fact)]

    def collect_artifacts(self, trial_id: str, run: str) -> list[L.LedgerEntry]:
        """Read what the trainer left in S3 for a run (summaries, checkpoint manifests) into the ledger; returns the
        facts this call added."""
        found: list[L.LedgerEntry] = []
        sizes = self.artifacts.sizes(f"trials/{trial_id}/{run}/")
        for key in sizes:
            if not (ATTEMPT_SUMMARY.match(key) or CHECKPOINT_MANIFEST.match(key)):
                continue
            try:
                fact = self.artifact_fact(key, sizes)
            except ArtifactRejected as exc:
                log.warning("artifact rejected: %s", exc)  # never a ledger fact; the event function counted it
                continue
            if fact is not None:
                found.append(fact)
        return self.record(found)

    def artifact_fact(self, key: str, sizes: dict[str, int] | None) -> L.LedgerEntry | None:
        """The fact an object under trials/ carries (``artifact_fact``); an object that is not JSON is rejected."""
        try:
            document = self.artifacts.get_json(key)
        except ValueError as exc:  # json.JSONDecodeError and UnicodeDecodeError
            raise ArtifactRejected(key, f"not JSON: {exc}") from None
        return artifact_fact(key, document, self.artifacts.uri(key), sizes)

    def backfill_metrics(self, trial_id: str, run: str, fold: L.RunFold,
                         entries: list[L.LedgerEntry] | None = None) -> list[L.LedgerEntry]:
        """For attempts without a summary, take phase seconds and steps from CloudWatch (stored as facts); returns
        the facts this call added."""
        if self.metrics is None:
            return []
        if entries is None:
            entries = self.ledger.entries(L.run_key(trial_id, run))
        have = {f.attempt for f in L.facts_of(entries, L.SummaryFact)} | {
            f.attempt for f in L.facts_of(entries, L.MetricsFact)}
        ends = L.facts_of(entries, L.TransitionFact)
        if not ends:
            return []
        start = min(datetime.fromisoformat(t.at.replace("Z", "+00:00")) for t in ends)
        end = max(datetime.fromisoformat(t.at.replace("Z", "+00:00")) for t in ends)
        found: list[L.LedgerEntry] = []
        for usage in fold.usage.attempts:
            if usage.attempt in have:
                continue
            phases, step = self.metrics.phases(trial_id, run, usage.attempt, start.astimezone(UTC), end)
            if phases or step is not None:
                found.append(L.metrics_entry(trial_id, run, usage.attempt, phases, step))
        return self.record(found)

    def settle(self, trial_id: str, run: str, *, collect: bool = False) -> L.StoredCost | None:
        """Close the run's cost if it is terminal. Returns the stored cost body (or None while it is open)."""
        return self.settle_run(trial_id, run, collect=collect).cost

    def settle_run(self, trial_id: str, run: str, *, collect: bool = False,
                   entries: list[L.LedgerEntry] | None = None) -> Settled:
        """``settle``, and the run's ledger entries it read (with the facts it added), for the caller to reuse.

        Reads the ledger once (not at all when given the run's ``entries``, read after its facts were recorded). The
        trial item is read only when the run is terminal (the fold's terminal status depends on the entries alone),
        and not at all when this environment has already read it; collected and backfilled facts join the entries
        already read; a cost stored by this call is returned as written, and only a lost race reads back the one
        that won."""
        key = L.run_key(trial_id, run)
        if entries is None:
            entries = self.ledger.entries(key)
        if L.fold_run(entries, trial_id=trial_id, run=run, instance_type="unknown").terminal_status is None:
            return Settled(None, entries)
        trial = self.trial(trial_id)
        fold = self.fold(trial_id, run, entries, trial)
        if collect:
            added = self.collect_artifacts(trial_id, run)
            added += self.backfill_metrics(trial_id, run, fold, entries + added)
            if added:
                entries = entries + added
                fold = self.fold(trial_id, run, entries, trial)
        body = L.cost_body(fold, compute_run_cost(fold.usage, self.prices))
        if self.ledger.put_cost(key, body, fold.facts):
            return Settled(body, entries)
        return Settled(self.ledger.cost(key), entries)


@dataclass(frozen=True)
class Settled:
    """What settling a run left: its stored cost (None while the run is open) and the ledger entries it read."""

    cost: L.StoredCost | None
    entries: list[L.LedgerEntry]


@dataclass(frozen=True)
class JobRecorded:
    """A Batch job state change as recorded: whose job it was and the facts that were new to the ledger."""

    identity: JobIdentity
    added: list[L.LedgerEntry]
    trial: TrialRecord | None = None  # the trial as this call read it (None: this environment had read it before)
