"""Many trials' events through the ledger path at once: the load simulation behind docs/capacity.md.

``simulate(trials=N)`` books N trials across teams (items as a submission leaves them, with limits frozen on them),
builds each run's real-shaped event stream (Batch transitions, a retried attempt on some Trn2 runs, attempt
summaries, checkpoint manifests and their shards, each written to S3 first), interleaves every trial's events in
one seeded shuffle with a share delivered twice, and delivers them to the two event handlers in this process against
moto. It counts every DynamoDB request by table and partition key, then checks that every run's stored cost
converged to what its events say it used (billed instance seconds, attempts, checkpoint bytes, a complete fold).

    bench/bench_plane_load.py runs it at 1,000 trials; tests/reliability/test_plane_load.py at a few.
"""

from __future__ import annotations

import copy
import json
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from dualtrack.local.aws.lambda_context import StaticContext
from dualtrack.local.json_shapes import integer, json_object, mapping
from lambdas.domain.evidence.run_summary import RunSummary
from lambdas.domain.json_types import JsonMapping, JsonObject, JsonValue
from lambdas.domain.trial.trial_record import TrialRecord
from lambdas.domain.vocabulary import track_of

if TYPE_CHECKING:
    from botocore.client import BaseClient
    from moto.dynamodb.models.dynamo_type import DynamoType, Item
    from moto.dynamodb.models.table import Table
    from mypy_boto3_s3 import S3Client

PARTITION_KEYS = {"trials": "trial_id", "ledger": "run_key", "idempotency": "id", "cache-registry": "cache_key"}
INSTANCE = {"gpu": "p5.48xlarge", "trn2": "trn2.48xlarge"}
SHARD_BYTES = 4096
T0 = 1_795_168_800_000  # 2026-11-20T10:00:00Z in ms: the first submission's earliest event time
REGION = "us-east-1"
Event = tuple[str, JsonObject]  # (which handler takes it: "batch" | "s3", the event)

# The EventBridge events the simulation delivers, as AWS sends them: a "Batch Job State Change" of a Trn2 job and an
# S3 "Object Created"; each event copies one and sets its job, status, attempts, object and time.
_BATCH_EVENT: JsonObject = {
    "version": "0",
    "id": "c8f9c4b5-76e5-d76a-f980-7011e206042b",
    "detail-type": "Batch Job State Change",
    "source": "aws.batch",
    "account": "123456789012",
    "time": "2026-11-20T10:00:00Z",
    "region": REGION,
    "resources": ["arn:aws:batch:us-east-1:123456789012:job/4c7599ae-0a82-49aa-ba5a-4727fcce14a8"],
    "detail": {
        "jobArn": "arn:aws:batch:us-east-1:123456789012:job/4c7599ae-0a82-49aa-ba5a-4727fcce14a8",
        "jobName": "event-test",
        "jobId": "4c7599ae-0a82-49aa-ba5a-4727fcce14a8",
        "jobQueue": "arn:aws:batch:us-east-1:123456789012:job-queue/dualtrack-trn2",
        "status": "RUNNABLE",
        "attempts": [],
        "createdAt": 1795168800000,
        "retryStrategy": {"attempts": 2, "evaluateOnExit": [{"onExitCode": "75", "action": "RETRY"},
                                                            {"onExitCode": "*", "action": "EXIT"}]},
        "dependsOn": [],
        "jobDefinition": "arn:aws:batch:us-east-1:123456789012:job-definition/dualtrack-trainer:1",
        "parameters": {},
        "container": {
            "image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/dualtrack-neuron:2.26.0",
            "command": ["python", "-m", "trainer", "run"],
            "volumes": [],
            "environment": [],
            "mountPoints": [],
            "ulimits": [],
            "networkInterfaces": [],
            "resourceRequirements": [{"value": "192", "type": "VCPU"}, {"value": "1900000", "type": "MEMORY"}],
            "secrets": [],
        },
        "tags": {"resourceArn": "arn:aws:batch:us-east-1:123456789012:job/4c7599ae-0a82-49aa-ba5a-4727fcce14a8"},
        "propagateTags": True,
        "platformCapabilities": ["EC2"],
    },
}
_S3_EVENT: JsonObject = {
    "version": "0",
    "id": "17793124-05d4-b198-2fde-7ededc63b103",
    "detail-type": "Object Created",
    "source": "aws.s3",
    "account": "123456789012",
    "time": "2026-11-20T10:05:00Z",
    "region": REGION,
    "resources": ["arn:aws:s3:::example-bucket"],
    "detail": {
        "version": "0",
        "bucket": {"name": "example-bucket"},
        "object": {"key": "example-key", "size": 5, "etag": "b1946ac92492d2347c6235b4d2611184",
                   "sequencer": "00617F08299329D189"},
        "request-id": "N4N7GDK58NMKJ12R",
        "requester": "123456789012",
        "source-ip-address": "1.2.3.4",
        "reason": "PutObject",
    },
}


@dataclass
class Expected:
    """What a run's events say it used: the truth its stored cost must converge to."""

    billed_ms: int = 0
    attempts: int = 0
    checkpoint_bytes: int = 0


@dataclass
class Figures:
    trials: int
    teams: int
    events: int
    duplicates: int
    wall_s: float
    requests: Counter[str] = field(default_factory=Counter)  # by table
    keys: Counter[tuple[str, str]] = field(default_factory=Counter)  # by (table, partition key)
    # By the minute of the event that made them (the events' own times: the load the plane would see in AWS).
    events_by_minute: Counter[str] = field(default_factory=Counter)
    key_minutes: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    converged: int = 0
    runs: int = 0
    stopped: int = 0
    mismatches: list[str] = field(default_factory=list)

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall_s if self.wall_s else 0.0

    def peak_minute(self) -> tuple[str, int]:
        """The busiest minute of event time and how many events it carried."""
        return max(self.events_by_minute.items(), key=lambda kv: kv[1]) if self.events_by_minute else ("", 0)

    def peak_key_minute(self) -> tuple[tuple[str, str, str], int]:
        """The (table, key, minute) with the most DynamoDB requests in one minute of event time."""
        return max(self.key_minutes.items(), key=lambda kv: kv[1]) if self.key_minutes else (("", "", ""), 0)

    def hottest(self, table: str | None = None) -> tuple[tuple[str, str], float]:
        """The busiest partition key (of one table, or of all) and its share of that scope's requests."""
        scope = {k: v for k, v in self.keys.items() if table is None or k[0] == table}
        if not scope:
            return ("", ""), 0.0
        key, count = max(scope.items(), key=lambda kv: kv[1])
        return key, count / sum(scope.values())


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat().replace("+00:00", "Z")


def _batch_event(*, trial_id: str, run: str, job_id: str, status: str, time: str,
                 attempts: list[JsonValue] | None = None) -> JsonObject:
    """A "Batch Job State Change" of ``run``'s job in ``trial_id``, with the variables the job is submitted with."""
    event = copy.deepcopy(_BATCH_EVENT)
    detail = json_object(event["detail"])
    event["time"] = time
    detail.update(jobId=job_id, jobName=f"{trial_id}-{run}", status=status, attempts=attempts or [],
                  jobArn=f"arn:aws:batch:us-east-1:123456789012:job/{job_id}")
    json_object(detail["container"])["environment"] = [
        {"name": "DUALTRACK_TRIAL_ID", "value": trial_id},
        {"name": "DUALTRACK_RUN", "value": run},
        {"name": "DUALTRACK_TRACK", "value": track_of(run)},
    ]
    return event


def _s3_event(bucket: str, key: str, size: int, etag: str, time: str) -> JsonObject:
    """An S3 "Object Created" of an unversioned object."""
    event = copy.deepcopy(_S3_EVENT)
    event["time"] = time
    detail = json_object(event["detail"])
    json_object(detail["bucket"])["name"] = bucket
    json_object(detail["object"]).update(key=key, size=size, etag=etag)
    return event


def _run_summary(run: str, **fields: JsonValue) -> RunSummary:
    """The summary ``run``'s trainer writes for one attempt on the CPU stand-in, with ``fields`` over it."""
    base: JsonObject = {
        "trial_id": "trial-1", "run": run, "track": track_of(run), "attempt": 1,
        "backend": "cpu", "stand_in": True, "precision": "bf16", "status": "succeeded", "exit_code": 0,
        "global_step": 1000, "max_steps": 1000, "start_step": 0,
        "environment": {"python": "3.11.9", "torch": "2.5.1", "hostname": "test-host"},
        "started_at": "2026-11-20T09:00:00Z", "ended_at": "2026-11-20T10:00:00Z",
    }
    return RunSummary.model_validate({**base, **fields})


def _record(trial_id: str, team: str) -> TrialRecord:
    return TrialRecord.from_item({"trial_id": trial_id, "team": team, "owner": team, "status": "SUBMITTED",
            "created_at": "2026-11-20T10:00:00Z", "updated_at": "2026-11-20T10:00:00Z",
            "execution_arn": f"arn:aws:states:us-east-1:123456789012:execution:trial-workflow:{trial_id}",
            "tracks": {run: {"instance_type": INSTANCE[run], "nodes": 1} for run in INSTANCE},
            "queues": {run: f"load-{run}" for run in INSTANCE},
            # Limits every run stays inside: the guard projects and counts, and stops nothing.
            "run_limits": {"max_usd": {"value": "1000000", "source": "trial limits.max_usd"},
                           "write_requests": {"value": "100000", "source": "team quota write_requests_per_trial"}}})


def _run_events(s3: S3Client, trial_id: str, run: str, start_ms: int, rng: random.Random,
                truth: Expected) -> list[Event]:
    """One run: attempt 1 (on a quarter of Trn2 runs it fails with the retryable code), a retry, success; one
    summary per attempt, a checkpoint (manifest + two shards) per attempt."""
    job = f"job-{trial_id}-{run}"
    fails = run == "trn2" and rng.random() < 0.25
    out: list[Event] = []
    finished: list[JsonObject] = []

    def transition(status: str, ms: int) -> None:
        out.append(("batch", _batch_event(trial_id=trial_id, run=run, job_id=job, status=status, time=_iso(ms),
                                          attempts=[dict(a) for a in finished])))

    transition("SUBMITTED", start_ms)
    transition("RUNNABLE", start_ms + 5_000)
    at = start_ms + 30_000
    for number in (1, 2) if fails else (1,):
        transition("STARTING", at)
        transition("RUNNING", at + 30_000)
        stop = at + 30_000 + rng.randint(10, 50) * 60_000
        code = 75 if (fails and number == 1) else 0
        steps = 300 if code else 1000
        step = 200 if code else 1000
        base = f"trials/{trial_id}/{run}"
        summary = _run_summary(run, trial_id=trial_id, attempt=number, global_step=steps,
                              status="failed" if code else "succeeded", exit_code=code,
                              start_step=0 if number == 1 else 200,
                              resumed_from_step=None if number == 1 else 200)
        objects: list[tuple[str, bytes]] = [
            (f"{base}/checkpoints/step-{step}/adapter.safetensors", b"a" * SHARD_BYTES),
            (f"{base}/checkpoints/step-{step}/optimizer.pt", b"o" * SHARD_BYTES),
            (f"{base}/checkpoints/step-{step}/manifest.json", json.dumps({
                "step": step, "save_s": 2.0,
                "shards": [{"name": "adapter.safetensors", "bytes": SHARD_BYTES, "sha256": "0" * 64},
                           {"name": "optimizer.pt", "bytes": SHARD_BYTES, "sha256": "1" * 64}]}).encode()),
            (f"{base}/attempt-{number}/summary.json", summary.model_dump_json().encode()),
        ]
        for key, body in objects:
            s3.put_object(Bucket="artifacts", Key=key, Body=body)
            out.append(("s3", _s3_event("artifacts", key, len(body), f"{key}-{number}", time=_iso(stop))))
        truth.billed_ms += stop - at
        truth.checkpoint_bytes += 2 * SHARD_BYTES
        finished.append({"container": {"exitCode": code}, "startedAt": at + 30_000, "stoppedAt": stop,
                         "statusReason": "Essential container in task exited"})
        if code:
            transition("RUNNABLE", stop + 1_000)
        at = stop + 30_000
    truth.attempts = len(finished)
    transition("SUCCEEDED", integer(finished[-1]["stoppedAt"]) + 1_000)
    return out


def _partition(operation: str, params: JsonMapping) -> tuple[str, str] | None:
    """The (table, partition key) a DynamoDB request reads or writes; ``(scan)`` for one that names no key."""
    table = params.get("TableName")
    if not isinstance(table, str) or table not in PARTITION_KEYS:
        return None
    attribute = PARTITION_KEYS[table]
    record = mapping(params.get("Key") or params.get("Item") or {})
    if record and attribute in record:
        return table, str(next(iter(mapping(record[attribute]).values())))
    values = mapping(params.get("ExpressionAttributeValues") or {})
    if operation == "Query" and values:
        index = params.get("IndexName")
        return (f"{table}/{index}" if index else table), str(mapping(next(iter(values.values()))).get("S"))
    return table, "(scan)"


def _range_key(item: Item) -> DynamoType:
    if item.range_key is None:  # only a table with a sort key is queried by partition here
        raise ValueError(f"item {item.hash_key} has no sort key")
    return item.range_key


@contextmanager
def partitioned_queries() -> Iterator[None]:
    """moto's ``Table.query`` on a base table filters and sorts every item of the table on each call, so a load of N
    queries over a table of M items costs N x M log M in this process. DynamoDB stores items by partition and reads
    only the queried one ("Partitions and data distribution", DynamoDB developer guide); for the duration, a base
    table query here reads only its partition too. Results are the same items in the same order."""
    from moto.dynamodb.models.table import Table

    original = Table.query

    # Table.query's other arguments are passed on as moto gives them.
    def query(self: Table, hash_key: DynamoType | None, *args: Any,
              **kwargs: Any) -> tuple[list[Item], int, dict[str, Any] | None]:
        index_name = kwargs.get("index_name", args[6] if len(args) > 6 else None)
        if index_name or hash_key is None or not self.range_key_attr:
            return original(self, hash_key, *args, **kwargs)
        partition: list[Item] = list(self.items.get(hash_key, {}).values())
        # For this call, the table's items are the partition's (an instance attribute over the method).
        vars(self)["all_items"] = lambda: sorted(partition, key=_range_key)
        try:
            return original(self, hash_key, *args, **kwargs)
        finally:
            del vars(self)["all_items"]

    Table.query = query  # type: ignore[method-assign]
    try:
        yield
    finally:
        Table.query = original  # type: ignore[method-assign]


def simulate(aws: Mapping[str, Any], *, trials: int, teams: int = 50, duplicate_share: float = 0.1,
             seed: int = 7, progress: Callable[[int, int], None] | None = None) -> Figures:
    """Book ``trials`` trials over ``teams`` teams, deliver their events interleaved, and measure. ``aws`` holds
    boto3 clients by service (the events' objects are written through ``aws["s3"]``); ``progress`` is told how
    many events have been delivered of how many."""
    from botocore.client import BaseClient

    from lambdas.adapters.trials_table import DynamoTrials
    from lambdas.handlers.on_artifact_created import handler as on_artifact
    from lambdas.handlers.on_batch_job_state import handler as on_batch

    rng = random.Random(seed)
    table = DynamoTrials("trials")
    truth: dict[tuple[str, str], Expected] = {}
    events: list[Event] = []
    for number in range(trials):
        trial_id = f"load-{number:05d}"
        table.create(_record(trial_id, f"team-{number % teams:02d}"))
        start = T0 + rng.randint(0, 3600) * 1000  # submissions spread over an hour
        for run in INSTANCE:
            truth[(trial_id, run)] = Expected()
            events += _run_events(aws["s3"], trial_id, run, start, rng, truth[(trial_id, run)])
    duplicates = [events[i] for i in rng.sample(range(len(events)), int(len(events) * duplicate_share))]
    stream = events + duplicates
    rng.shuffle(stream)

    figures = Figures(trials=trials, teams=teams, events=len(stream), duplicates=len(duplicates), wall_s=0.0)
    original = BaseClient._make_api_call  # type: ignore[attr-defined]
    minute = [""]

    # botocore's private BaseClient._make_api_call: the request's parameters and the parsed response.
    def counted(client: BaseClient, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        if client.meta.service_model.service_name == "dynamodb":
            key = _partition(operation, params)
            if key is not None:
                figures.requests[key[0]] += 1
                figures.keys[key] += 1
                figures.key_minutes[(*key, minute[0])] += 1
        return original(client, operation, params)

    BaseClient._make_api_call = counted  # type: ignore[attr-defined]
    started = time.perf_counter()
    try:
        with partitioned_queries():
            for index, (kind, event) in enumerate(stream):
                minute[0] = str(event["time"])[:16]
                figures.events_by_minute[minute[0]] += 1
                (on_batch if kind == "batch" else on_artifact)(event, StaticContext())
                if progress is not None and index % 500 == 0:
                    progress(index, len(stream))
    finally:
        BaseClient._make_api_call = original  # type: ignore[attr-defined]
    figures.wall_s = time.perf_counter() - started
    _check(figures, truth)
    return figures


def _check(figures: Figures, truth: dict[tuple[str, str], Expected]) -> None:
    from lambdas.adapters.ledger_table import DynamoLedger
    from lambdas.adapters.trials_table import DynamoTrials

    ledger = DynamoLedger("ledger")
    for (trial_id, run), expected in sorted(truth.items()):
        figures.runs += 1
        stored = ledger.cost(f"{trial_id}#{run}")
        if stored is None:
            figures.mismatches.append(f"{trial_id}#{run}: no cost stored")
            continue
        cost, usage = stored.cost, stored.usage
        found = (cost.billed_instance_seconds, cost.attempts, usage.checkpoint_bytes, stored.complete)
        wanted = (Decimal(expected.billed_ms) / 1000, expected.attempts, expected.checkpoint_bytes, True)
        if found == wanted:
            figures.converged += 1
        else:
            figures.mismatches.append(f"{trial_id}#{run}: stored {found}, events say {wanted}")
    figures.stopped = sum(1 for record in DynamoTrials("trials").iter_all() if record.status == "CANCELLED")
