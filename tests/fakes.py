"""In-memory implementations of the ports (``lambdas.services.ports``) for service tests that need no AWS: each keeps
the guarantee its AWS adapter gives (a fact or a trial is created once, the cost entry only moves forward, an
object written ``if_absent`` is never overwritten, a registry outcome is counted once per observation).
``tests/integration/test_port_contracts.py`` runs the same contract against these and the AWS adapters (on moto),
so a fake cannot drift from what it stands for."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

from lambdas.domain.events import BatchJobStateChangeDetail
from lambdas.domain.ledger import LedgerEntry
from lambdas.services.ports import Outcome, Started


def _plain(value: Any) -> Any:
    """What a round trip through JSON (S3) or DynamoDB gives back: no shared references, plain containers."""
    return json.loads(json.dumps(value, default=str))


@dataclass
class InMemoryLedger:
    facts: dict[str, dict[str, LedgerEntry]] = field(default_factory=dict)
    costs: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)

    def append(self, entry: LedgerEntry) -> bool:
        run = self.facts.setdefault(entry.run_key, {})
        if entry.entry_key in run:
            return False
        run[entry.entry_key] = copy.deepcopy(entry)
        return True

    def entries(self, run_key: str) -> list[LedgerEntry]:
        return [copy.deepcopy(e) for _, e in sorted(self.facts.get(run_key, {}).items())]

    def put_cost(self, run_key: str, body: dict[str, Any], facts: int) -> bool:
        stored = self.costs.get(run_key)
        if stored is not None and stored[0] >= facts:
            return False
        self.costs[run_key] = (facts, _plain(body))
        return True

    def cost(self, run_key: str) -> dict[str, Any] | None:
        stored = self.costs.get(run_key)
        return None if stored is None else copy.deepcopy(stored[1])

    def iter_costs(self) -> Iterator[dict[str, Any]]:
        return self.iter_kinds(("cost",))

    def iter_kinds(self, kinds: tuple[str, ...]) -> Iterator[dict[str, Any]]:
        if "cost" in kinds:
            for run_key, (_, body) in sorted(self.costs.items()):
                yield {"run_key": run_key, "kind": "cost", **copy.deepcopy(body)}
        for run_key, run in sorted(self.facts.items()):
            for entry in run.values():
                if entry.kind in kinds:
                    yield {"run_key": run_key, "kind": entry.kind, **_plain(entry.body)}


@dataclass
class InMemoryTrials:
    items: dict[str, dict[str, Any]] = field(default_factory=dict)
    usage_items: dict[str, dict[str, Decimal]] = field(default_factory=dict)  # per team, as the usage table
    counted: set[tuple[str, str]] = field(default_factory=set)  # (trial, fact) writes already counted

    def create(self, item: dict[str, Any]) -> bool:
        if item["trial_id"] in self.items:
            return False
        self.items[item["trial_id"]] = _plain(item)
        return True

    def get(self, trial_id: str) -> dict[str, Any] | None:
        item = self.items.get(trial_id)
        return None if item is None else copy.deepcopy(item)

    def delete(self, trial_id: str) -> None:
        self.items.pop(trial_id, None)

    def update(self, trial_id: str, **fields: Any) -> None:
        if trial_id not in self.items:  # DynamoTrials updates on condition attribute_exists(trial_id)
            raise KeyError(f"no trial {trial_id!r}")
        for name, value in fields.items():
            if value is None:
                self.items[trial_id].pop(name, None)
            else:
                self.items[trial_id][name] = _plain(value)

    def transition(self, trial_id: str, statuses: tuple[str, ...], **fields: Any) -> bool:
        if self.items.get(trial_id, {}).get("status") not in statuses:
            return False
        self.update(trial_id, **fields)
        return True

    def tally(self, trial_id: str, *, set_fields: dict[str, Any] | None = None,
              add: dict[str, int] | None = None) -> dict[str, Any] | None:
        if trial_id not in self.items:
            return None
        item = self.items[trial_id]
        item.update(_plain(set_fields or {}))
        for name, amount in (add or {}).items():
            item[name] = item.get(name, 0) + amount
        return copy.deepcopy(item)

    def list(self, limit: int, start: str | None, team: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
        if team is None:
            ids = sorted(self.items)
        else:  # newest first, as the team index answers
            ids = [i for i in sorted(self.items, key=lambda i: (self.items[i].get("created_at", ""), i), reverse=True)
                   if self.items[i].get("team") == team]
        first = ids.index(start) + 1 if start in ids else 0
        page = ids[first:first + limit]
        token = page[-1] if first + limit < len(ids) and page else None
        return [copy.deepcopy(self.items[i]) for i in page], token

    def of_team(self, team: str) -> Iterator[dict[str, Any]]:
        for trial_id in sorted(self.items):
            if self.items[trial_id].get("team") == team:
                yield copy.deepcopy(self.items[trial_id])

    def iter_all(self) -> Iterator[dict[str, Any]]:
        for trial_id in sorted(self.items):
            yield copy.deepcopy(self.items[trial_id])

    def with_status(self, statuses: tuple[str, ...]) -> Iterator[dict[str, Any]]:
        for item in self.iter_all():
            if item.get("status") in statuses:
                yield item

    def usage(self, team: str) -> dict[str, Any] | None:
        found = self.usage_items.get(team)
        if found is None:
            return None
        return {k: int(v) if v == v.to_integral_value() else float(v) for k, v in found.items()}

    def seed_usage(self, team: str, values: dict[str, Decimal], bookings: dict[str, dict[str, Any]]) -> bool:
        if team in self.usage_items:
            return False
        self.usage_items[team] = {k: Decimal(v) for k, v in values.items()}
        for trial_id, booking in bookings.items():
            if trial_id in self.items:
                self.items[trial_id].setdefault("booking", _plain(booking))
        return True

    def admit(self, item: dict[str, Any], additions: dict[str, Decimal],
              limits: dict[str, Decimal]) -> Literal["created", "exists", "over_quota"]:
        if item["trial_id"] in self.items:
            return "exists"
        usage = self.usage_items.setdefault(str(item["team"]), {})
        if any(name in usage and usage[name] > most for name, most in limits.items()):
            return "over_quota"
        self._add(str(item["team"]), additions)
        self.items[item["trial_id"]] = _plain(item)
        return "created"

    def _add(self, team: str, values: dict[str, Decimal]) -> None:
        usage = self.usage_items.setdefault(team, {})
        for name, value in values.items():
            usage[name] = usage.get(name, Decimal(0)) + Decimal(value)

    def close(self, trial_id: str, statuses: tuple[str, ...], *, team: str, release: dict[str, Decimal],
              **fields: Any) -> bool:
        if not self.transition(trial_id, statuses, **fields):
            return False
        if release:
            self._add(team, release)
        return True

    def withdraw(self, trial_id: str, statuses: tuple[str, ...], *, team: str, release: dict[str, Decimal]) -> bool:
        item = self.items.get(trial_id)
        if item is None or item.get("status") not in statuses or item.get("execution_arn"):
            return False
        del self.items[trial_id]
        self._add(team, release)
        return True

    def tally_once(self, trial_id: str, fact: str, add: dict[str, int], *, now_s: int) -> dict[str, Any] | None:
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
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)

    def ensure(self, key: str, *, prefix: str, model_slug: str, compiler_version: str,
               components: dict[str, Any] | None, at: str) -> None:
        entry = self.entries.setdefault(key, {"cache_key": key})
        for name, value in (("prefix", prefix), ("model_slug", model_slug), ("compiler_version", compiler_version),
                            ("created_at", at), ("hits", 0), ("misses", 0), ("failures", 0), ("objects", {}),
                            ("status", "new")):
            entry.setdefault(name, value)
        if components:
            entry["components"] = _plain(components)

    def record_object(self, key: str, name: str, size: int, at: str) -> None:
        self.entries.setdefault(key, {"cache_key": key}).setdefault("objects", {})[name] = size
        self.touch(key, at, field="last_object_at")

    def touch(self, key: str, at: str, field: str = "last_used_at") -> None:
        entry = self.entries.setdefault(key, {"cache_key": key})
        if field not in entry or entry[field] < at:
            entry[field] = at

    def observe(self, key: str, observation: str, outcome: Outcome, compile_s: float, at: str,
                reason: str | None = None) -> bool:
        entry = self.entries.setdefault(key, {"cache_key": key})
        observed = entry.setdefault("observed", set())
        counted = observation not in observed
        if counted:
            observed.add(observation)
            if outcome == "hit":
                entry["hits"] = entry.get("hits", 0) + 1
                entry["hit_compile_s_total"] = entry.get("hit_compile_s_total", 0) + compile_s
                entry.setdefault("hit_trials", set()).add(observation.split("#", 1)[0])
            elif outcome == "miss":
                entry["misses"] = entry.get("misses", 0) + 1
                entry.setdefault("first_compile_s", compile_s)
                entry["status"] = "ready"
            else:
                entry["failures"] = entry.get("failures", 0) + 1
                entry.update(status="failed", failure_reason=reason or "compilation failed", retry_requested=False)
        self.touch(key, at)
        return counted

    def request_retry(self, key: str) -> bool:
        entry = self.entries.get(key)
        if entry is None or entry.get("status") != "failed":
            return False
        entry.update(retry_requested=True, status="retry_requested")
        return True

    def reject(self, key: str, reason: str, at: str) -> None:
        entry = self.entries.setdefault(key, {"cache_key": key})
        entry.update(status="rejected", rejected_reason=reason[:1000], rejected_at=at,
                     rejections=entry.get("rejections", 0) + 1)

    def get(self, key: str) -> dict[str, Any] | None:
        entry = self.entries.get(key)
        return None if entry is None else copy.deepcopy(entry)

    def iter_all(self) -> Iterator[dict[str, Any]]:
        for key in sorted(self.entries):
            yield copy.deepcopy(self.entries[key])

    def delete(self, key: str) -> None:
        self.entries.pop(key, None)


@dataclass
class InMemoryBatchJobs:
    """Jobs by id with their status; ``terminate`` ends a job that has not ended FAILED, as TerminateJob does."""

    statuses: dict[str, str] = field(default_factory=dict)
    terminated: list[str] = field(default_factory=list)

    def instance_type(self, job_queue: str) -> str | None:
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

    def start(self, name: str, payload: dict[str, Any]) -> Started:
        arn = self.execution_arn(name)
        if arn in self.executions:
            return Started(arn, already_submitted=True)
        self.executions[arn] = {"status": "RUNNING", "input": _plain(payload)}
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
