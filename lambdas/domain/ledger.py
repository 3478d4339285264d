"""The run ledger: one immutable entry per real-world fact, and the fold from entries to ``cost.RunUsage``.

Entries are keyed by the fact they record (a Batch transition is job id + attempt + status; a checkpoint is its
step), written with "create if absent", so at-least-once, out-of-order delivery converges on the same set of
entries. The fold below depends only on that set, never on arrival order, and the cost entry is the fold's
canonical JSON: recomputing from the same ledger gives the same bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from lambdas.domain.canonical import canonical_json
from lambdas.domain.cost import AttemptUsage, Phases, RunUsage
from lambdas.domain.vocabulary import BATCH_TERMINAL

EntryKind = Literal["transition", "attempt", "summary", "metrics", "checkpoint", "cost"]
RunName = Literal["gpu", "trn2", "gpu-fallback"]
RUNS: tuple[RunName, ...] = ("gpu", "trn2", "gpu-fallback")
COST_ENTRY_KEY = "cost"


def run_key(trial_id: str, run: str) -> str:
    return f"{trial_id}#{run}"


def track_of(run: str) -> Literal["gpu", "trn2"]:
    return "trn2" if run == "trn2" else "gpu"


class LedgerEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    run_key: str
    entry_key: str
    kind: EntryKind
    body: dict[str, Any]

    @property
    def trial_id(self) -> str:
        return self.run_key.rsplit("#", 1)[0]

    @property
    def run(self) -> str:
        return self.run_key.rsplit("#", 1)[1]

    def body_json(self) -> str:
        return canonical_json(self.body)


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
    body = {
        "job_id": job_id,
        "job_name": job_name,
        "attempt": attempt,
        "status": status,
        "at": _iso(at),
        "status_reason": status_reason,
        "exit_code": exit_code,
        "instance_type": instance_type,
        "nodes": nodes,
        "created_at_ms": created_at_ms,
    }
    return LedgerEntry(
        run_key=run_key(trial_id, run),
        entry_key=f"transition#{job_id}#a{attempt:03d}#{status}",
        kind="transition",
        body=body,
    )


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
    """A finished attempt as Batch lists it in the job's ``attempts`` (present on every later event)."""
    body = {
        "job_id": job_id,
        "attempt": attempt,
        "started_at_ms": started_at_ms,
        "stopped_at_ms": stopped_at_ms,
        "exit_code": exit_code,
        "status_reason": status_reason,
    }
    return LedgerEntry(
        run_key=run_key(trial_id, run), entry_key=f"attempt#{job_id}#a{attempt:03d}", kind="attempt", body=body
    )


SUMMARY_FIELDS = (
    "status",
    "exit_code",
    "backend",
    "stand_in",
    "global_step",
    "start_step",
    "resumed_from_step",
    "rerun_steps",
    "steps_this_attempt",
    "tokens_this_attempt",
    "phases",
    "compile",
    "started_at",
    "ended_at",
)


def summary_entry(trial_id: str, run: str, attempt: int, summary: Mapping[str, Any]) -> LedgerEntry:
    """The cost-relevant part of the trainer's run summary for one attempt (the full summary stays in S3)."""
    body = {name: summary.get(name) for name in SUMMARY_FIELDS}
    body["attempt"] = attempt
    loss = summary.get("loss")
    final_loss = loss.get("final") if isinstance(loss, Mapping) else None
    body["final_loss"] = float(final_loss) if isinstance(final_loss, int | float) else None
    return LedgerEntry(run_key=run_key(trial_id, run), entry_key=f"summary#a{attempt:03d}", kind="summary", body=body)


def metrics_entry(
    trial_id: str, run: str, attempt: int, phases: Mapping[str, float], global_step: int | None
) -> LedgerEntry:
    """Phase seconds from CloudWatch, used only for an attempt whose summary never arrived."""
    body = {"attempt": attempt, "phases": {k: float(v) for k, v in sorted(phases.items())}, "global_step": global_step}
    return LedgerEntry(run_key=run_key(trial_id, run), entry_key=f"metrics#a{attempt:03d}", kind="metrics", body=body)


def checkpoint_entry(
    trial_id: str, run: str, *, step: int, bytes_: int, files: int, save_s: float, uri: str
) -> LedgerEntry:
    body = {"step": step, "bytes": bytes_, "files": files, "save_s": save_s, "uri": uri}
    return LedgerEntry(
        run_key=run_key(trial_id, run), entry_key=f"checkpoint#{step:010d}", kind="checkpoint", body=body
    )


def _iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


# ---- the fold ----------------------------------------------------------------------------------------------


class RunFold(BaseModel):
    """What the ledger says about one run: the usage the cost model prices, and whether it is final."""

    model_config = ConfigDict(frozen=True)

    usage: RunUsage
    terminal_status: Literal["SUCCEEDED", "FAILED"] | None
    complete: bool = Field(description="terminal, and every attempt has a start and an end")
    facts: int = Field(description="ledger entries folded; a later fold over more facts supersedes this one")
    fingerprint: str
    ended_at: str | None = None


class _Attempt:
    def __init__(self, job_id: str, attempt: int) -> None:
        self.job_id = job_id
        self.attempt = attempt
        self.transitions: dict[str, dict[str, Any]] = {}
        self.record: dict[str, Any] | None = None


def fold_run(
    entries: Iterable[LedgerEntry],
    *,
    trial_id: str,
    run: str,
    instance_type: str,
    nodes: int = 1,
    region: str | None = None,
    storage_days: Decimal = Decimal(30),
) -> RunFold:
    """Fold a run's entries (any order, any duplicates) into the usage its cost is computed from."""
    facts = sorted({e.entry_key: e for e in entries if e.kind != "cost"}.values(), key=lambda e: e.entry_key)
    attempts: dict[tuple[str, int], _Attempt] = {}
    job_created: dict[str, int] = {}
    summaries: dict[int, dict[str, Any]] = {}
    metrics: dict[int, dict[str, Any]] = {}
    checkpoints: dict[int, dict[str, Any]] = {}
    for entry in facts:
        body = entry.body
        if entry.kind in ("transition", "attempt"):
            slot = attempts.setdefault((body["job_id"], body["attempt"]), _Attempt(body["job_id"], body["attempt"]))
            if entry.kind == "transition":
                slot.transitions[body["status"]] = body
                created = body.get("created_at_ms") or _ms(body["at"])
                job_created[body["job_id"]] = min(job_created.get(body["job_id"], created), created)
                if body.get("instance_type"):
                    instance_type = body["instance_type"]
                nodes = max(nodes, int(body.get("nodes") or 1))
            else:
                slot.record = body
        elif entry.kind == "summary":
            summaries[int(body["attempt"])] = body
        elif entry.kind == "metrics":
            metrics[int(body["attempt"])] = body
        elif entry.kind == "checkpoint":
            checkpoints[int(body["step"])] = body

    ordered = sorted(attempts.values(), key=lambda a: (job_created.get(a.job_id, 0), a.job_id, a.attempt))
    usages: list[AttemptUsage] = []
    terminal: Literal["SUCCEEDED", "FAILED"] | None = None
    complete = True
    previous_end: int | None = None
    ended_at: str | None = None
    for index, slot in enumerate(ordered, start=1):
        start, end = _bounds(slot)
        status = next((s for s in BATCH_TERMINAL if s in slot.transitions), None)
        if status is not None:
            terminal = status  # type: ignore[assignment]
            ended_at = slot.transitions[status]["at"]
        if start is None or end is None:
            complete = False
        queue_from = previous_end if previous_end is not None else job_created.get(slot.job_id)
        submitted = slot.transitions.get("SUBMITTED")
        if previous_end is None and submitted is not None:
            queue_from = submitted.get("created_at_ms") or _ms(submitted["at"])
        summary = summaries.get(slot.attempt) or {}
        fallback = metrics.get(slot.attempt) or {}
        phases = summary.get("phases") or fallback.get("phases") or {}
        exit_code = (slot.record or {}).get("exit_code")
        usages.append(
            AttemptUsage(
                attempt=index,
                billed_seconds=_seconds(start, end),
                queue_seconds=_seconds(queue_from, start),
                phases=Phases(**{k: float(v) for k, v in phases.items() if k in Phases.model_fields}),
                start_step=int(summary.get("start_step") or 0),
                end_step=int(summary.get("global_step") or fallback.get("global_step") or 0),
                resumed_from_step=summary.get("resumed_from_step"),
                rerun_steps=int(summary.get("rerun_steps") or 0),
                succeeded=status == "SUCCEEDED" or (exit_code == 0 and status is None),
            )
        )
        previous_end = end
    if terminal is None or not ordered:
        complete = False
    # A later job for the run (a redrive) reopens it until that job ends too.
    if ordered and not any(s in ordered[-1].transitions for s in BATCH_TERMINAL):
        terminal, complete = None, False

    puts = sum(int(c.get("files") or 0) + 1 for c in checkpoints.values())
    gets = 0
    for attempt_usage in usages:
        step = attempt_usage.resumed_from_step
        restored = checkpoints.get(step) if step is not None else None
        if restored is not None:
            gets += int(restored.get("files") or 0) + 1
    run_usage = RunUsage(
        trial_id=trial_id,
        run=run,
        track=track_of(run),
        instance_type=instance_type,
        nodes=nodes,
        region=region,
        attempts=usages,
        checkpoint_bytes=sum(int(c.get("bytes") or 0) for c in checkpoints.values()),
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
    )


def _bounds(slot: _Attempt) -> tuple[int | None, int | None]:
    """Instance time of an attempt: STARTING (else the attempt's startedAt, else RUNNING) to its end."""
    record = slot.record or {}
    start: int | None = None
    if "STARTING" in slot.transitions:
        start = _ms(slot.transitions["STARTING"]["at"])
    elif record.get("started_at_ms"):
        start = int(record["started_at_ms"])
    elif "RUNNING" in slot.transitions:
        start = _ms(slot.transitions["RUNNING"]["at"])
    end: int | None = int(record["stopped_at_ms"]) if record.get("stopped_at_ms") else None
    if end is None:
        status = next((s for s in BATCH_TERMINAL if s in slot.transitions), None)
        end = _ms(slot.transitions[status]["at"]) if status else None
    return start, end


def _seconds(start: int | None, end: int | None) -> Decimal:
    if start is None or end is None or end <= start:
        return Decimal(0)
    return Decimal(end - start) / Decimal(1000)


def cost_body(fold: RunFold, cost: BaseModel) -> dict[str, Any]:
    """The cost entry's body: the priced fold plus what it was computed from (so a reader can re-check it)."""
    return {
        "cost": cost.model_dump(mode="json"),
        "facts": fold.facts,
        "fingerprint": fold.fingerprint,
        "complete": fold.complete,
        "terminal_status": fold.terminal_status,
        "ended_at": fold.ended_at,
        "usage": fold.usage.model_dump(mode="json"),
    }
