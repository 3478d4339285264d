"""In-memory implementations of the ports (``lambdas.services.ports``) for service tests that need no AWS: each keeps
the guarantee its AWS adapter gives (a fact or a trial is created once, the cost entry only moves forward, an
object written ``if_absent`` is never overwritten, a registry outcome is counted once per observation).
``tests/integration/test_port_contracts.py`` runs the same contract against these and the AWS adapters (on moto),
so a fake cannot drift from what it stands for."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

from lambdas.domain.cache.compile_cache import RegistryEntry
from lambdas.domain.canonical import canonical_json
from lambdas.domain.events import BatchJobStateChangeDetail
from lambdas.domain.json_types import JsonObject, JsonValue
from lambdas.domain.money.booking import Booking
from lambdas.domain.money.ledger import LedgerEntry, LedgerRow, RowKind, StoredCost, fact_of
from lambdas.domain.trial.trial_record import ExecutionInput, TrialRecord
from lambdas.services.ports import Outcome, Started


def _plain(value: Any) -> Any:
    """What a round trip through JSON (S3) or DynamoDB gives back: no shared references, plain containers."""
    return json.loads(json.dumps(value, default=str))


@dataclass
class InMemoryLedger:
    facts: dict[str, dict[str, LedgerEntry]] = field(default_factory=dict)
    costs: dict[str, tuple[int, str]] = field(default_factory=dict)  # run -> (facts folded, the entry's JSON)

    def append(self, entry: LedgerEntry) -> bool:
        run = self.facts.setdefault(entry.run_key, {})
        if entry.entry_key in run:
            return False
        run[entry.entry_key] = copy.deepcopy(entry)
        return True

    def entries(self, run_key: str) -> list[LedgerEntry]:
        return [copy.deepcopy(e) for _, e in sorted(self.facts.get(run_key, {}).items())]

    def put_cost(self, run_key: str, body: StoredCost, facts: int) -> bool:
        stored = self.costs.get(run_key)
        if stored is not None and stored[0] >= facts:
            return False
        self.costs[run_key] = (facts, canonical_json(body.model_dump(mode="json")))
        return True

    def cost(self, run_key: str) -> StoredCost | None:
        stored = self.costs.get(run_key)
        return None if stored is None else StoredCost.model_validate_json(stored[1])

    def iter_costs(self) -> Iterator[LedgerRow]:
        return self.iter_kinds(("cost",))

    def iter_kinds(self, kinds: tuple[RowKind, ...]) -> Iterator[LedgerRow]:
        if "cost" in kinds:
            for run_key, (_, text) in sorted(self.costs.items()):
                yield LedgerRow(run_key, "cost", StoredCost.model_validate_json(text))
        for run_key, run in sorted(self.facts.items()):
            for entry in run.values():
                if entry.kind in kinds:
                    yield LedgerRow(run_key, entry.kind, fact_of(entry.kind, _plain(entry.body)))


def execution_input(trial_id: str, tracks: tuple[str, ...] = ("gpu",), timeout_s: int = 3600) -> ExecutionInput:
    """A workflow input for tests that start executions directly."""
    return ExecutionInput(trial_id=trial_id, spec_uri=f"s3://artifacts/trials/{trial_id}/spec.json",
                          tracks=list(tracks), run_dirs={t: f"s3://artifacts/trials/{trial_id}/{t}" for t in tracks},
                          attempt_timeout_s=timeout_s, compile_timeout_s=timeout_s)


def _record(item: dict[str, JsonValue]) -> TrialRecord:
    return TrialRecord.from_item(_plain(item))


@dataclass
class InMemoryTrials:
    """Items are kept in the table's layout (``TrialRecord.to_item``), and read back through the same migration."""

    items: dict[str, dict[str, JsonValue]] = field(default_factory=dict)
    usage_items: dict[str, dict[str, Decimal]] = field(default_factory=dict)  # per team, as the usage table
    counted: set[tuple[str, str]] = field(default_factory=set)  # (trial, fact) writes already counted

    def put_item(self, item: dict[str, JsonValue]) -> None:
        """Store a raw item as an older version of the plane may have written it."""
        self.items[str(item["trial_id"])] = _plain(item)

    def create(self, record: TrialRecord) -> bool:
        if record.trial_id in self.items:
            return False
        self.items[record.trial_id] = _plain(record.to_item())
        return True

    def get(self, trial_id: str) -> TrialRecord | None:
        item = self.items.get(trial_id)
        return None if item is None else _record(item)

    def delete(self, trial_id: str) -> None:
        self.items.pop(trial_id, None)

    def update(self, trial_id: str, **fields: JsonValue) -> None:
        if trial_id not in self.items:  # DynamoTrials updates on condition attribute_exists(trial_id)
            raise KeyError(f"no trial {trial_id!r}")
        for name, value in fields.items():
            if value is None:
                self.items[trial_id].pop(name, None)
            else:
                self.items[trial_id][name] = _plain(value)

    def transition(self, trial_id: str, statuses: tuple[str, ...], *, if_updated_at: str | None = None,
                   **fields: JsonValue) -> bool:
        if not self._holds(trial_id, statuses, if_updated_at):
            return False
        self.update(trial_id, **fields)
        return True

    def tally(self, trial_id: str, *, set_fields: Mapping[str, JsonValue] | None = None,
              add: Mapping[str, int] | None = None) -> TrialRecord | None:
        if trial_id not in self.items:
            return None
        item = self.items[trial_id]
        item.update(_plain(dict(set_fields or {})))
        for name, amount in (add or {}).items():
            before = item.get(name, 0)
            item[name] = (before if isinstance(before, int) else 0) + amount
        return _record(item)

    def list(self, limit: int, start: str | None, team: str | None = None) -> tuple[list[TrialRecord], str | None]:
        if team is None:
            ids = sorted(self.items)
        else:  # newest first, as the team index answers
            ids = [i for i in sorted(self.items, key=lambda i: (str(self.items[i].get("created_at", "")), i),
                                     reverse=True)
                   if self.items[i].get("team") == team]
        first = ids.index(start) + 1 if start in ids else 0
        page = ids[first:first + limit]
        token = page[-1] if first + limit < len(ids) and page else None
        return [_record(self.items[i]) for i in page], token

    def of_team(self, team: str) -> Iterator[TrialRecord]:
        for trial_id in sorted(self.items):
            if self.items[trial_id].get("team") == team:
                yield _record(self.items[trial_id])

    def iter_all(self) -> Iterator[TrialRecord]:
        for trial_id in sorted(self.items):
            yield _record(self.items[trial_id])

    def with_status(self, statuses: tuple[str, ...]) -> Iterator[TrialRecord]:
        for record in self.iter_all():
            if record.status in statuses:
                yield record

    def usage(self, team: str) -> dict[str, int | float] | None:
        found = self.usage_items.get(team)
        if found is None:
            return None
        return {k: int(v) if v == v.to_integral_value() else float(v) for k, v in found.items()}

    def seed_usage(self, team: str, values: Mapping[str, Decimal], bookings: Mapping[str, Booking]) -> bool:
        if team in self.usage_items:
            return False
        self.usage_items[team] = {k: Decimal(v) for k, v in values.items()}
        for trial_id, booking in bookings.items():
            if trial_id in self.items:
                self.items[trial_id].setdefault("booking", booking.model_dump(mode="json"))
        return True

    def admit(self, record: TrialRecord, additions: Mapping[str, Decimal],
              limits: Mapping[str, Decimal]) -> Literal["created", "exists", "over_quota"]:
        if record.trial_id in self.items:
            return "exists"
        usage = self.usage_items.setdefault(str(record.team), {})
        if any(name in usage and usage[name] > most for name, most in limits.items()):
            return "over_quota"
        self._add(str(record.team), additions)
        self.items[record.trial_id] = _plain(record.to_item())
        return "created"

    def _add(self, team: str, values: Mapping[str, Decimal]) -> None:
        usage = self.usage_items.setdefault(team, {})
        for name, value in values.items():
            usage[name] = usage.get(name, Decimal(0)) + Decimal(value)

    def close(self, trial_id: str, statuses: tuple[str, ...], *, team: str, release: Mapping[str, Decimal],
              **fields: JsonValue) -> bool:
        if not self.transition(trial_id, statuses, if_updated_at=None, **fields):
            return False
        if release:
            self._add(team, release)
        return True

    def _holds(self, trial_id: str, statuses: tuple[str, ...], if_updated_at: str | None) -> bool:
        item = self.items.get(trial_id, {})
        return item.get("status") in statuses and (if_updated_at is None or item.get("updated_at") == if_updated_at)

    def withdraw(self, trial_id: str, statuses: tuple[str, ...], *, team: str, release: Mapping[str, Decimal],
                 if_updated_at: str | None = None) -> bool:
        item = self.items.get(trial_id)
        if item is None or not self._holds(trial_id, statuses, if_updated_at) or item.get("execution_arn"):
            return False
        del self.items[trial_id]
        self._add(team, release)
        return True

    def tally_once(self, trial_id: str, fact: str, add: Mapping[str, int], *, now_s: int) -> TrialRecord | None:
        if trial_id not in self.items or (trial_id, fact) in self.counted:
            return None
        self.counted.add((trial_id, fact))
        return self.tally(trial_id, add=add)


@dataclass
class InMemoryObjects:
    bucket: str = "artifacts"
    blobs: dict[str, bytes] = field(default_factory=dict)

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def put_json(self, key: str, value: Any, *, if_absent: bool = False) -> bool:
        if if_absent and key in self.blobs:
            return False
        self.blobs[key] = json.dumps(value, sort_keys=True, indent=1, default=str).encode()
        return True

    def put_text(self, key: str, text: str, content_type: str) -> None:
        self.blobs[key] = text.encode()

    def get_json(self, key: str) -> Any | None:
        raw = self.blobs.get(key)
        return None if raw is None else json.loads(raw)

    def list_keys(self, prefix: str) -> list[str]:
        return sorted(k for k in self.blobs if k.startswith(prefix))

    def sizes(self, prefix: str) -> dict[str, int]:
        return {k: len(self.blobs[k]) for k in self.list_keys(prefix)}

    def delete_key(self, key: str) -> None:
        self.blobs.pop(key, None)

    def presigned_get(self, key: str, expires_s: int) -> str:
        return f"https://{self.bucket}.s3.amazonaws.com/{key}?X-Amz-Expires={expires_s}"


@dataclass
class InMemoryCacheRegistry:
    entries: dict[str, RegistryEntry] = field(default_factory=dict)

    def _entry(self, key: str) -> RegistryEntry:
        return self.entries.get(key) or RegistryEntry(cache_key=key)

    def ensure(self, key: str, *, prefix: str, model_slug: str, compiler_version: str,
               components: JsonObject | None, at: str) -> None:
        entry = self._entry(key)
        first = {"prefix": entry.prefix or prefix, "model_slug": entry.model_slug or model_slug,
                 "compiler_version": entry.compiler_version or compiler_version, "created_at": entry.created_at or at}
        self.entries[key] = entry.model_copy(update={**first, **({"components": _plain(components)} if components
                                                                   else {})})

    def record_object(self, key: str, name: str, size: int, at: str) -> None:
        entry = self._entry(key)
        self.entries[key] = entry.model_copy(update={"objects": {**entry.objects, name: size}})
        self.touch(key, at, field="last_object_at")

    def touch(self, key: str, at: str, field: str = "last_used_at") -> None:
        entry = self._entry(key)
        current = getattr(entry, field, None)
        if current is None or current < at:
            self.entries[key] = entry.model_copy(update={field: at})

    def observe(self, key: str, observation: str, outcome: Outcome, compile_s: float, at: str,
                reason: str | None = None) -> bool:
        entry = self._entry(key)
        counted = observation not in entry.observed
        if counted:
            seen = sorted({*entry.observed, observation})
            if outcome == "hit":
                entry = entry.model_copy(update={
                    "observed": seen, "hits": entry.hits + 1,
                    "hit_compile_s_total": entry.hit_compile_s_total + compile_s,
                    "hit_trials": sorted({*entry.hit_trials, observation.split("#", 1)[0]})})
            elif outcome == "miss":
                first = compile_s if entry.first_compile_s is None else entry.first_compile_s
                entry = entry.model_copy(update={"observed": seen, "misses": entry.misses + 1, "status": "ready",
                                                 "first_compile_s": first})
            else:
                entry = entry.model_copy(update={"observed": seen, "failures": entry.failures + 1, "status": "failed",
                                                 "failure_reason": reason or "compilation failed",
                                                 "retry_requested": False})
        self.entries[key] = entry
        self.touch(key, at)
        return counted

    def request_retry(self, key: str) -> bool:
        entry = self.entries.get(key)
        if entry is None or entry.status != "failed":
            return False
        self.entries[key] = entry.model_copy(update={"retry_requested": True, "status": "retry_requested"})
        return True

    def reject(self, key: str, reason: str, at: str) -> None:
        entry = self._entry(key)
        self.entries[key] = entry.model_copy(update={"status": "rejected", "rejected_reason": reason[:1000],
                                                     "rejected_at": at, "rejections": entry.rejections + 1})

    def get(self, key: str) -> RegistryEntry | None:
        entry = self.entries.get(key)
        return None if entry is None else entry.model_copy(deep=True)

    def iter_all(self) -> Iterator[RegistryEntry]:
        for key in sorted(self.entries):
            yield self.entries[key].model_copy(deep=True)

    def delete(self, key: str) -> None:
        self.entries.pop(key, None)


@dataclass
class InMemoryBatchJobs:
    """Jobs by id with their status; ``terminate`` ends a job that has not ended FAILED, as TerminateJob does."""

    statuses: dict[str, str] = field(default_factory=dict)
    terminated: list[str] = field(default_factory=list)

    def queue_instance_type(self, job_queue: str) -> str | None:
        return None

    def describe(self, job_id: str) -> BatchJobStateChangeDetail | None:
        if job_id not in self.statuses:
            return None
        return BatchJobStateChangeDetail.model_validate({
            "jobId": job_id, "jobName": job_id, "jobQueue": "q", "status": self.statuses[job_id],
            "jobArn": f"arn:aws:batch:us-east-1:123456789012:job/{job_id}"})

    def terminate(self, job_id: str, reason: str) -> None:
        self.terminated.append(job_id)
        if self.statuses.get(job_id) not in ("SUCCEEDED", "FAILED"):
            self.statuses[job_id] = "FAILED"


@dataclass
class InMemoryWorkflow:
    """Executions by name; a started one stays RUNNING until stopped (or ``finish`` says how it ended)."""

    state_machine_arn: str = "arn:aws:states:us-east-1:123456789012:stateMachine:trial-workflow"
    executions: dict[str, dict[str, Any]] = field(default_factory=dict)

    def execution_arn(self, name: str) -> str:
        prefix, machine = self.state_machine_arn.split(":stateMachine:", 1)
        return f"{prefix}:execution:{machine}:{name}"

    def start(self, name: str, execution_input: ExecutionInput) -> Started:
        arn = self.execution_arn(name)
        if arn in self.executions:
            return Started(arn, already_submitted=True)
        self.executions[arn] = {"status": "RUNNING", "input": _plain(execution_input.payload())}
        return Started(arn, already_submitted=False)

    def status(self, execution_arn: str) -> str | None:
        execution = self.executions.get(execution_arn)
        return None if execution is None else str(execution["status"])

    def stop(self, execution_arn: str, cause: str) -> str:
        execution = self.executions.get(execution_arn)
        if execution is None:
            raise KeyError(f"no execution {execution_arn}")
        if execution["status"] == "RUNNING":
            execution.update(status="ABORTED", cause=cause)
        return str(execution["status"])

    def finish(self, name: str, status: str) -> None:
        self.executions[self.execution_arn(name)]["status"] = status


@dataclass
class RecordedRunMetrics:
    """Metrics an attempt published, keyed by (trial, run, attempt): progress and phase totals."""

    published: dict[tuple[str, str, int], dict[str, Any]] = field(default_factory=dict)

    def publish(self, trial_id: str, run: str, attempt: int, *, step: int | None = None, loss: float | None = None,
                phases: dict[str, float] | None = None) -> None:
        self.published[(trial_id, run, attempt)] = {"step": step, "loss": loss, "phases": dict(phases or {})}

    def progress(self, trial_id: str, run: str, attempt: int, start: datetime, end: datetime
                 ) -> tuple[int | None, float | None]:
        got = self.published.get((trial_id, run, attempt), {})
        return got.get("step"), got.get("loss")

    def phases(self, trial_id: str, run: str, attempt: int, start: datetime, end: datetime
               ) -> tuple[dict[str, float], int | None]:
        got = self.published.get((trial_id, run, attempt), {})
        return dict(got.get("phases", {})), got.get("step")
