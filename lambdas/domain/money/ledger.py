"""The run ledger: one immutable entry per real-world fact, and the fold from entries to ``cost.RunUsage``.

Entries are keyed by the fact they record (a Batch transition is job id + attempt + status; a checkpoint is its
step), written with "create if absent", so at-least-once, out-of-order delivery converges on the same set of
entries. The fold below depends only on that set, never on arrival order, and the cost entry is the fold's
canonical JSON: recomputing from the same ledger gives the same bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, TypeAdapter

from lambdas.domain.canonical import canonical_json
from lambdas.domain.json_types import JsonIn, JsonMapping, JsonObject
from lambdas.domain.money.cost import AttemptUsage, Phases, RunCost, RunUsage
from lambdas.domain.vocabulary import BATCH_TERMINAL, BatchStatus, track_of

COST_ENTRY_KEY = "cost"


def run_key(trial_id: str, run: str) -> str:
    return f"{trial_id}#{run}"


class _OfRun:
    """The trial and run of something keyed by ``run_key``."""

    run_key: str

    @property
    def trial_id(self) -> str:
        return self.run_key.rsplit("#", 1)[0]

    @property
    def run(self) -> str:
        return self.run_key.rsplit("#", 1)[1]


# ---- the facts ---------------------------------------------------------------------------------------------
# One model per kind of fact; the ledger stores each as its body (the model without ``kind``) next to the kind,
# and reads it back into the same model. Unknown fields in a stored body are ignored, so a body written by an
# older or newer version still reads.


class _Fact(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)

    KEY: ClassVar[str]  # the entry key: the fact's identity, so a second delivery of it is the same entry

    def body(self) -> JsonObject:
        return self.model_dump(mode="json", exclude={"kind"})

    def entry_key(self) -> str:
        return self.KEY.format(**dict(self))


class TransitionFact(_Fact):
    """A Batch job state change, as the event (or DescribeJobs) reported it."""

    KEY: ClassVar[str] = "transition#{job_id}#a{attempt:03d}#{status}"
    kind: Literal["transition"] = "transition"
    job_id: str
    job_name: str = ""
    attempt: int = Field(ge=0)
    status: BatchStatus
    at: str = Field(description="ISO 8601, UTC")
    status_reason: str | None = None
    exit_code: int | None = None
    instance_type: str | None = None
    nodes: int = Field(default=1, ge=1)
    created_at_ms: int | None = None



class AttemptFact(_Fact):
    """A finished attempt as Batch lists it in the job's ``attempts`` (present on every later event)."""

    KEY: ClassVar[str] = "attempt#{job_id}#a{attempt:03d}"
    kind: Literal["attempt"] = "attempt"
    job_id: str
    attempt: int = Field(ge=0)
    started_at_ms: int | None = None
    stopped_at_ms: int | None = None
    exit_code: int | None = None
    status_reason: str | None = None



class SummaryFact(_Fact):
    """The cost-relevant part of the trainer's run summary for one attempt (the full summary stays in S3)."""

    KEY: ClassVar[str] = "summary#a{attempt:03d}"
    kind: Literal["summary"] = "summary"
    status: str | None = None
    exit_code: int | None = None
    backend: str | None = None
    stand_in: bool | None = None
    global_step: int | None = None
    start_step: int | None = None
    resumed_from_step: int | None = None
    rerun_steps: int | None = None
    steps_this_attempt: int | None = None
    tokens_this_attempt: int | None = None
    phases: dict[str, float] | None = None
    compile: JsonObject | None = Field(default=None, description="the summary's compile record, as reported")
    started_at: str | None = None
    ended_at: str | None = None
    attempt: int = Field(ge=0)
    final_loss: float | None = None

    def compile_use(self) -> CompileUse:
        """What the attempt reported about its compile-cache entry (fields of another type read as absent)."""
        record = self.compile or {}
        key, cache = record.get("cache_key"), record.get("cache")
        seconds = record.get("seconds")
        reason = next((r for r in (record.get("error"), record.get("reason")) if isinstance(r, str) and r), None)
        return CompileUse(
            cache_key=key if isinstance(key, str) and key else None,
            cache=cache if isinstance(cache, str) else None,
            failed=record.get("status") == "failed" or bool(record.get("failed")),
            seconds=float(seconds) if isinstance(seconds, int | float) and not isinstance(seconds, bool) else 0.0,
            reason=reason,
        )


@dataclass(frozen=True)
class CompileUse:
    """An attempt's use of its compile-cache entry: the key, the lookup's outcome (hit, miss, none...), whether the
    compile failed, its seconds and the compiler's message."""

    cache_key: str | None
    cache: str | None
    failed: bool
    seconds: float
    reason: str | None

    @property
    def outcome(self) -> str | None:
        """The outcome the registry counts: a failed compile is ``failed`` whatever the lookup found."""
        return "failed" if self.failed else self.cache



class MetricsFact(_Fact):
    """Phase seconds from CloudWatch, used only for an attempt whose summary never arrived."""

    KEY: ClassVar[str] = "metrics#a{attempt:03d}"
    kind: Literal["metrics"] = "metrics"
    attempt: int = Field(ge=0)
    phases: dict[str, float] = Field(default_factory=dict)
    global_step: int | None = None



class CheckpointFact(_Fact):
    """A committed checkpoint: its manifest was written."""

    KEY: ClassVar[str] = "checkpoint#{step:010d}"
    kind: Literal["checkpoint"] = "checkpoint"
    step: int = Field(ge=0)
    bytes: int = Field(default=0, ge=0)
    files: int = Field(default=0, ge=0)
    save_s: float = Field(default=0.0, ge=0)
    uri: str = ""



Fact = Annotated[TransitionFact | AttemptFact | SummaryFact | MetricsFact | CheckpointFact,
                 Field(discriminator="kind")]
FACTS: TypeAdapter[Fact] = TypeAdapter(Fact, config=ConfigDict(defer_build=True))  # built by the first fact read
EntryKind = Literal["transition", "attempt", "summary", "metrics", "checkpoint"]
F = TypeVar("F", TransitionFact, AttemptFact, SummaryFact, MetricsFact, CheckpointFact)


def fact_of(kind: str, body: JsonMapping) -> Fact:
    """A stored body read as the fact of its kind (a ValidationError for an unknown kind or a malformed body)."""
    return FACTS.validate_python({**body, "kind": kind})


class LedgerEntry(_OfRun, BaseModel):
    """A fact as the ledger stores it: its run, its key, its kind and its body (``fact`` reads the body typed)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    run_key: str
    entry_key: str
    kind: EntryKind
    body: JsonObject
    _fact: Fact = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        self._fact = fact_of(self.kind, self.body)

    @classmethod
    def of(cls, trial_id: str, run: str, fact: Fact) -> LedgerEntry:
        return cls(run_key=run_key(trial_id, run), entry_key=fact.entry_key(), kind=fact.kind, body=fact.body())

    @property
    def fact(self) -> Fact:
        return self._fact

    def body_json(self) -> str:
        return canonical_json(self.body)


def facts_of(entries: Iterable[LedgerEntry], kind: type[F]) -> list[F]:
    """The facts of one kind among ``entries``, typed."""
    return [e.fact for e in entries if isinstance(e.fact, kind)]


def transition_entry(
    trial_id: str,
    run: str,
    *,
    job_id: str,
    attempt: int,
    status: str,
    at: datetime,
    status_reason: str | None = None,
    exit_code: int | None = None,
    instance_type: str | None = None,
    nodes: int = 1,
    created_at_ms: int | None = None,
    job_name: str = "",
) -> LedgerEntry:
    return LedgerEntry.of(trial_id, run, TransitionFact(
        job_id=job_id, job_name=job_name, attempt=attempt, status=status, at=_iso(at),  # type: ignore[arg-type]
        status_reason=status_reason, exit_code=exit_code, instance_type=instance_type, nodes=nodes,
        created_at_ms=created_at_ms))


def attempt_entry(
    trial_id: str,
    run: str,
    *,
    job_id: str,
    attempt: int,
    started_at_ms: int | None,
    stopped_at_ms: int | None,
    exit_code: int | None,
    status_reason: str | None,
) -> LedgerEntry:
    return LedgerEntry.of(trial_id, run, AttemptFact(
        job_id=job_id, attempt=attempt, started_at_ms=started_at_ms, stopped_at_ms=stopped_at_ms,
        exit_code=exit_code, status_reason=status_reason))


def summary_entry(trial_id: str, run: str, attempt: int, summary: JsonMapping) -> LedgerEntry:
    """The cost-relevant part of the trainer's run summary for one attempt."""
    fields: dict[str, JsonIn] = {name: summary.get(name) for name in SummaryFact.model_fields
                                 if name not in ("kind", "final_loss")}
    loss = summary.get("loss")
    final_loss = loss.get("final") if isinstance(loss, Mapping) else None
    fields.update(attempt=attempt, final_loss=float(final_loss) if isinstance(final_loss, int | float) else None)
    return LedgerEntry.of(trial_id, run, SummaryFact.model_validate(fields))


def metrics_entry(
    trial_id: str, run: str, attempt: int, phases: Mapping[str, float], global_step: int | None
) -> LedgerEntry:
    return LedgerEntry.of(trial_id, run, MetricsFact(
        attempt=attempt, phases={k: float(v) for k, v in sorted(phases.items())}, global_step=global_step))


def checkpoint_entry(
    trial_id: str, run: str, *, step: int, bytes_: int, files: int, save_s: float, uri: str
) -> LedgerEntry:
    return LedgerEntry.of(trial_id, run, CheckpointFact(step=step, bytes=bytes_, files=files, save_s=save_s, uri=uri))


def _iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


# ---- the fold ----------------------------------------------------------------------------------------------


class RunFold(BaseModel):
    """What the ledger says about one run: the usage the cost model prices, and whether it is final."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    usage: RunUsage
    terminal_status: Literal["SUCCEEDED", "FAILED"] | None
    complete: bool = Field(description="terminal, and every attempt has a start and an end")
    facts: int = Field(description="ledger entries folded; a later fold over more facts supersedes this one")
    fingerprint: str
    ended_at: str | None = None
    suspect: dict[int, list[str]] = Field(
        default_factory=dict,
        description="attempt -> why its Batch attempt record was set aside and the attempt billed from its "
                    "transitions instead")
    instance_mismatch: str | None = Field(
        default=None, description="the instance types Batch reported for the run's jobs when they are not the one "
                                  "it was submitted for (the run is priced as submitted)")


# EventBridge gives an event's time in whole seconds, so a transition can read up to a second before the
# millisecond timestamps Batch puts on the job and its attempts.
CLOCK_SLACK_MS = 1_000


class _Attempt:
    def __init__(self, job_id: str, attempt: int) -> None:
        self.job_id = job_id
        self.attempt = attempt
        self.transitions: dict[str, TransitionFact] = {}
        self.record: AttemptFact | None = None


def fold_run(
    entries: Iterable[LedgerEntry],
    *,
    trial_id: str,
    run: str,
    instance_type: str,
    nodes: int = 1,
    region: str | None = None,
    storage_days: Decimal = Decimal(30),
    open_until: datetime | None = None,
) -> RunFold:
    """Fold a run's entries (any order, any duplicates) into the usage its cost is computed from. With
    ``open_until``, an attempt that has started and not ended is billed up to that time (a projection of an open
    run's spend; the fold is then never complete)."""
    facts = sorted({e.entry_key: e for e in entries}.values(), key=lambda e: e.entry_key)
    reported: set[str] = set()  # what Batch said the run's queue runs on, checked against ``instance_type``
    attempts: dict[tuple[str, int], _Attempt] = {}
    job_created: dict[str, int] = {}
    summaries: dict[int, SummaryFact] = {}
    metrics: dict[int, MetricsFact] = {}
    checkpoints: dict[int, CheckpointFact] = {}
    for entry in facts:
        fact = entry.fact
        if isinstance(fact, TransitionFact | AttemptFact):
            slot = attempts.setdefault((fact.job_id, fact.attempt), _Attempt(fact.job_id, fact.attempt))
            if isinstance(fact, TransitionFact):
                slot.transitions[fact.status] = fact
                created = fact.created_at_ms or _ms(fact.at)
                job_created[fact.job_id] = min(job_created.get(fact.job_id, created), created)
                if fact.instance_type:
                    reported.add(fact.instance_type)
                nodes = max(nodes, fact.nodes)
            else:
                slot.record = fact
        elif isinstance(fact, SummaryFact):
            summaries[fact.attempt] = fact
        elif isinstance(fact, MetricsFact):
            metrics[fact.attempt] = fact
        else:
            checkpoints[fact.step] = fact

    job_ended = _job_ends(attempts)

    ordered = sorted(attempts.values(), key=lambda a: (job_created.get(a.job_id, 0), a.job_id, a.attempt))
    usages: list[AttemptUsage] = []
    suspect: dict[int, list[str]] = {}
    terminal: Literal["SUCCEEDED", "FAILED"] | None = None
    complete = True
    previous_end: int | None = None
    ended_at: str | None = None
    for index, slot in enumerate(ordered, start=1):
        reason = _impossible(slot.record, job_created.get(slot.job_id), job_ended.get(slot.job_id))
        if reason is not None:
            suspect[index] = [reason]
        start, end, bounded = _billing_interval(slot, attempts.get((slot.job_id, slot.attempt + 1)),
                                                trust_record=reason is None, open_until=open_until)
        status = next((s for s in BATCH_TERMINAL if s in slot.transitions), None)
        if status is not None:
            terminal = status  # type: ignore[assignment]
            ended_at = slot.transitions[status].at
        complete = complete and bounded
        queue_from = _queue_start(slot, previous_end, job_created.get(slot.job_id))
        usages.append(_attempt_usage(index, slot, start=start, end=end, queue_from=queue_from, status=status,
                                     summary=summaries.get(slot.attempt), fallback=metrics.get(slot.attempt)))
        previous_end = end
    if terminal is None or not ordered:
        complete = False
    # A later job for the run (a redrive) reopens it until that job ends too.
    if ordered and not any(s in ordered[-1].transitions for s in BATCH_TERMINAL):
        terminal, complete = None, False

    puts, gets = _checkpoint_requests(checkpoints, usages)
    instance_type, mismatch = _priced_instance(instance_type, reported)
    run_usage = RunUsage(
        trial_id=trial_id,
        run=run,
        track=track_of(run),
        instance_type=instance_type,
        nodes=nodes,
        region=region,
        attempts=usages,
        checkpoint_bytes=sum(c.bytes for c in checkpoints.values()),
        checkpoint_put_requests=puts,
        checkpoint_get_requests=gets,
        storage_days=storage_days,
    )
    digest = hashlib.sha256("\n".join(f"{e.entry_key}={e.body_json()}" for e in facts).encode()).hexdigest()
    return RunFold(
        usage=run_usage,
        terminal_status=terminal,
        complete=complete,
        facts=len(facts),
        fingerprint=digest,
        ended_at=ended_at,
        suspect=suspect,
        instance_mismatch=mismatch,
    )


def _priced_instance(submitted: str, reported: set[str]) -> tuple[str, str | None]:
    """The instance type a run is priced at: the one it was submitted for. Batch's answer (the one type its queue's
    compute environments allow) is checked against it; it prices the run only for a record that never said (an
    item stored before runs kept their instance type)."""
    if submitted == "unknown" and len(reported) == 1:
        return next(iter(reported)), None
    others = sorted(reported - {submitted})
    if not others:
        return submitted, None
    return submitted, (f"Batch reported {', '.join(others)} for the queue of a run submitted for {submitted}; "
                       f"priced as {submitted}")


def _job_ends(attempts: Mapping[tuple[str, int], _Attempt]) -> dict[str, int]:
    """Job id -> the latest terminal transition of any of its attempts."""
    job_ended: dict[str, int] = {}
    for slot in attempts.values():
        for ending in BATCH_TERMINAL:
            if ending in slot.transitions:
                at = _ms(slot.transitions[ending].at)
                job_ended[slot.job_id] = max(job_ended.get(slot.job_id, at), at)
    return job_ended


def _billing_interval(slot: _Attempt, later: _Attempt | None, *, trust_record: bool, open_until: datetime | None
                      ) -> tuple[int | None, int | None, bool]:
    """An attempt's billed (start, end), and whether both were known before ``open_until`` closed an attempt that
    has started and not ended. ``later`` is the job's next attempt, whose first transition ends an attempt whose
    record is not trusted."""
    retried = min((_ms(t.at) for t in later.transitions.values()), default=None) if later else None
    start, end = _bounds(slot, trust_record=trust_record, retried_at=retried)
    bounded = start is not None and end is not None
    if end is None and start is not None and open_until is not None:
        end = max(start, int(open_until.timestamp() * 1000))
    return start, end, bounded


def _queue_start(slot: _Attempt, previous_end: int | None, created: int | None) -> int | None:
    """Where an attempt's queue time starts: the run's previous attempt's end, else the job's SUBMITTED, else its
    creation."""
    submitted = slot.transitions.get("SUBMITTED")
    if previous_end is None and submitted is not None:
        return submitted.created_at_ms or _ms(submitted.at)
    return previous_end if previous_end is not None else created


def _attempt_usage(index: int, slot: _Attempt, *, start: int | None, end: int | None, queue_from: int | None,
                   status: str | None, summary: SummaryFact | None, fallback: MetricsFact | None) -> AttemptUsage:
    """One attempt's usage: its billed and queued time, and its steps and phases from its summary (else its
    metrics)."""
    phases = (summary.phases if summary else None) or (fallback.phases if fallback else None) or {}
    exit_code = slot.record.exit_code if slot.record else None
    return AttemptUsage(
        attempt=index,
        billed_seconds=_seconds(start, end),
        queue_seconds=_seconds(queue_from, start),
        phases=Phases(**{k: float(v) for k, v in phases.items() if k in Phases.model_fields}),
        start_step=(summary.start_step if summary else None) or 0,
        end_step=(summary.global_step if summary else None) or (fallback.global_step if fallback else None)
        or 0,
        resumed_from_step=summary.resumed_from_step if summary else None,
        rerun_steps=(summary.rerun_steps if summary else None) or 0,
        succeeded=status == "SUCCEEDED" or (exit_code == 0 and status is None),
    )


def _checkpoint_requests(checkpoints: Mapping[int, CheckpointFact], usages: Iterable[AttemptUsage]
                         ) -> tuple[int, int]:
    """(PUT, GET) requests: every checkpoint's files and manifest written once; read again by each resume."""
    puts = sum(c.files + 1 for c in checkpoints.values())
    gets = 0
    for attempt_usage in usages:
        step = attempt_usage.resumed_from_step
        restored = checkpoints.get(step) if step is not None else None
        if restored is not None:
            gets += restored.files + 1
    return puts, gets


def _impossible(record: AttemptFact | None, created: int | None, ended: int | None) -> str | None:
    """Why an attempt record cannot be what Batch reported (None when it can): Batch's AttemptDetail starts when the
    attempt goes RUNNING and stops when it leaves RUNNING, so it stops no earlier than it starts, and lies between
    the job's creation and the job's terminal transition."""
    if record is None:
        return None
    stamps = [t for t in (record.started_at_ms, record.stopped_at_ms) if t]
    if record.started_at_ms and record.stopped_at_ms and record.stopped_at_ms < record.started_at_ms:
        return "attempt record stopped before it started"
    if created is not None and any(t < created - CLOCK_SLACK_MS for t in stamps):
        return "attempt record before the job was created"
    if ended is not None and any(t > ended + CLOCK_SLACK_MS for t in stamps):
        return "attempt record after the job ended"
    return None


def _bounds(slot: _Attempt, *, trust_record: bool = True, retried_at: int | None = None
            ) -> tuple[int | None, int | None]:
    """Instance time of an attempt: STARTING (else the attempt's startedAt, else RUNNING) to its end (the attempt's
    stoppedAt, else its terminal transition). An attempt record that is not trusted is left out: the transitions
    alone bound the attempt, ending at its terminal transition, else at the job's next attempt's first one."""
    record = slot.record if trust_record else None
    start: int | None = None
    if "STARTING" in slot.transitions:
        start = _ms(slot.transitions["STARTING"].at)
    elif record is not None and record.started_at_ms:
        start = record.started_at_ms
    elif "RUNNING" in slot.transitions:
        start = _ms(slot.transitions["RUNNING"].at)
    end: int | None = record.stopped_at_ms if record is not None and record.stopped_at_ms else None
    if end is None:
        status = next((s for s in BATCH_TERMINAL if s in slot.transitions), None)
        end = _ms(slot.transitions[status].at) if status else None
    if end is None and not trust_record:
        end = retried_at
    return start, end


def _seconds(start: int | None, end: int | None) -> Decimal:
    if start is None or end is None or end <= start:
        return Decimal(0)
    return Decimal(end - start) / Decimal(1000)


# ---- the cost entry ----------------------------------------------------------------------------------------


class SettledAttempt(AttemptUsage):
    """An attempt as the cost entry records it; ``suspect`` (only present when set) says why its Batch attempt record
    was set aside and the attempt billed from its transitions."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    suspect: list[str] | None = Field(default=None, exclude_if=lambda value: value is None)


class SettledUsage(RunUsage):
    """The usage a cost entry was priced from."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    attempts: Sequence[SettledAttempt] = Field(default_factory=list)


class StoredCost(BaseModel):
    """A run's cost entry: the priced fold plus what it was computed from (so a reader can re-check it). The ledger
    stores it as its canonical JSON, one entry per run, replaced only by a fold over more facts."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)

    cost: RunCost
    facts: int = Field(ge=0, description="ledger entries folded; a later fold over more facts supersedes this one")
    fingerprint: str
    complete: bool = Field(description="terminal, and every attempt has a start and an end")
    terminal_status: Literal["SUCCEEDED", "FAILED"] | None
    ended_at: str | None
    usage: SettledUsage
    instance_mismatch: str | None = Field(
        default=None, exclude_if=lambda value: value is None,
        description="Batch reported another instance type than the run was submitted for (priced as submitted)")


def cost_body(fold: RunFold, cost: RunCost) -> StoredCost:
    """The cost entry of a priced fold. An attempt billed from its transitions because its Batch record was
    impossible carries ``suspect``: why."""
    attempts = [SettledAttempt(**attempt.model_dump(), suspect=fold.suspect.get(attempt.attempt))
                for attempt in fold.usage.attempts]
    return StoredCost(
        cost=cost,
        facts=fold.facts,
        fingerprint=fold.fingerprint,
        complete=fold.complete,
        terminal_status=fold.terminal_status,
        ended_at=fold.ended_at,
        usage=SettledUsage(**fold.usage.model_dump(exclude={"attempts"}), attempts=attempts),
        instance_mismatch=fold.instance_mismatch,
    )


RowKind = Literal["cost", "transition", "attempt", "summary", "metrics", "checkpoint"]


@dataclass(frozen=True)
class LedgerRow(_OfRun):
    """An entry as a pass over the whole ledger returns it: its run, its kind, and its body read as that kind's
    model (the cost entry, or a fact)."""

    run_key: str
    kind: RowKind
    body: StoredCost | Fact


def _runs(entries: Iterable[LedgerEntry]) -> dict[str, list[LedgerEntry]]:
    by_run: dict[str, list[LedgerEntry]] = {}
    for entry in entries:
        by_run.setdefault(entry.run_key, []).append(entry)
    return by_run


def _terminal(entries: list[LedgerEntry]) -> Literal["SUCCEEDED", "FAILED"] | None:
    if not entries:
        return None
    return fold_run(entries, trial_id=entries[0].trial_id, run=entries[0].run, instance_type="unknown").terminal_status


def suspect_attempts(entries: Iterable[LedgerEntry]) -> dict[str, dict[int, list[str]]]:
    """Per run, the attempts whose Batch attempt record its fold set aside (``RunFold.suspect``)."""
    out: dict[str, dict[int, list[str]]] = {}
    for _, group in sorted(_runs(entries).items()):
        fold = fold_run(group, trial_id=group[0].trial_id, run=group[0].run, instance_type="unknown")
        if fold.suspect:
            out[group[0].run] = fold.suspect
    return out


def new_outcome(entries: Iterable[LedgerEntry], added: Iterable[LedgerEntry]
                ) -> Literal["SUCCEEDED", "FAILED"] | None:
    """The run's folded terminal status when ``added`` (facts one call was first to record) is what made it terminal;
    None while it is open, and for facts about a run that was terminal without them (a late or forged terminal
    transition for a job already ended: a success wins, and the run's outcome was already decided)."""
    new = {e.entry_key: e for e in added}
    if not new:
        return None
    every = {e.entry_key: e for e in entries} | new
    after = _terminal(list(every.values()))
    if after is None:
        return None
    before = _terminal([e for key, e in every.items() if key not in new])
    return after if before is None else None
