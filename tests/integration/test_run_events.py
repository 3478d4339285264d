"""Batch and S3 events drive the ledger: duplicates and reordering leave ledger and costs unchanged."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import run_summary
from tests.integration.conftest import Context, api_event, batch_event, s3_event
from tests.json_access import obj

T0 = 1_795_168_800_000  # 2026-11-20T10:00:00Z in ms


def iso(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat().replace("+00:00", "Z")


def summary(trial_id: str, attempt: int, **over: Any) -> dict[str, Any]:
    base = {
        "trial_id": trial_id,
        "track": "trn2",
        "run": "trn2",
        "attempt": attempt,
        "backend": "cpu",
        "stand_in": True,
        "status": "failed" if attempt == 1 else "succeeded",
        "exit_code": 75 if attempt == 1 else 0,
        "global_step": 300 if attempt == 1 else 1000,
        "start_step": 0 if attempt == 1 else 200,
        "resumed_from_step": None if attempt == 1 else 200,
        "rerun_steps": 0 if attempt == 1 else 100,
        "steps_this_attempt": 300 if attempt == 1 else 800,
        "tokens_this_attempt": 300 * 64 * 4096 if attempt == 1 else 800 * 64 * 4096,
        "phases": {
            "environment_s": 30.0,
            "data_load_s": 10.0,
            "compile_s": 600.0 if attempt == 1 else 20.0,
            "train_s": 900.0 if attempt == 1 else 2400.0,
            "checkpoint_save_s": 20.0,
            "checkpoint_restore_s": 0.0 if attempt == 1 else 15.0,
            "eval_s": 30.0,
        },
        "throughput": {"tokens_per_s": 87000.0, "step_time_s": 3.0, "samples_per_s": 21.0},
        "loss": {
            "initial": 2.5,
            "final": 1.9 if attempt == 1 else 1.2,
            "per_step": [[i + 1, 2.5 - 0.05 * i] for i in range(10)],  # falls by more than the default 1%
            "eval": [{"step": 100, "loss": 2.2}] if attempt == 1 else [{"step": 1000, "loss": 1.25}],
        },
        "checkpoints": [{"step": 200, "bytes": 4000, "files": 3, "save_s": 10.0, "uri": "s3://x"}],
        "compile": {
            "seconds": 600.0 if attempt == 1 else 20.0,
            "cache": "miss" if attempt == 1 else "hit",
            "cache_key": "a" * 64,
            "cache_url": "s3://compile-cache/neuron/x",
        },
        "continuity": {
            "global_step_continuous": True,
            "loss_continuous": True,
            "tolerance": 0.05,
            "max_rel_delta": 0.01,
        },
        "fault": {"injected_at_step": 300 if attempt == 1 else None, "mode": "retryable"},
        "validation_loss": 1.25,
        "memory_peak_mib": 900.0,
        "final_samples": [],
        "started_at": iso(T0),
        "ended_at": iso(T0 + 3_600_000 * attempt),
    }
    base.update(over)
    return run_summary(str(base.pop("run")), **base).model_dump(mode="json")


def scenario(aws: dict[str, Any], example: dict[str, Any]) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    from lambdas.handlers.on_trial_api import handler as api

    trial_id = json.loads(obj(api(api_event("POST", "/trials", example), Context()))["body"])["trial_id"]
    # What the resolve step records before the Trainium2 run starts: the entry its summaries speak for, and that the
    # training run compiles it itself.
    aws["ddb"].update_item(TableName="trials", Key={"trial_id": {"S": trial_id}},
                           UpdateExpression="SET cache_key = :k, cache_writer = :w",
                           ExpressionAttributeValues={":k": {"S": "a" * 64}, ":w": {"S": "trn2"}})
    s3 = aws["s3"]
    put = lambda key, body: s3.put_object(Bucket="artifacts", Key=key, Body=json.dumps(body).encode())  # noqa: E731
    base = f"trials/{trial_id}/trn2"
    put(f"{base}/attempt-1/summary.json", summary(trial_id, 1))
    put(f"{base}/attempt-2/summary.json", summary(trial_id, 2))
    manifest = {
        "step": 200,
        "shards": [
            {"name": "model.pt", "bytes": 3000, "sha256": "0" * 64},
            {"name": "optim.pt", "bytes": 1000, "sha256": "1" * 64},
        ],
        "save_s": 10.0,
    }
    put(f"{base}/checkpoints/step-200/manifest.json", manifest)
    s3.put_object(Bucket="artifacts", Key=f"{base}/checkpoints/step-200/model.pt", Body=b"x" * 3000)
    s3.put_object(Bucket="artifacts", Key=f"{base}/checkpoints/step-200/optim.pt", Body=b"x" * 1000)
    job = "job-trn2-1"
    a1 = {
        "container": {"exitCode": 75},
        "startedAt": T0 + 90_000,
        "stoppedAt": T0 + 1_800_000,
        "statusReason": "Essential container in task exited",
    }
    a2 = {
        "container": {"exitCode": 0},
        "startedAt": T0 + 1_900_000,
        "stoppedAt": T0 + 5_000_000,
        "statusReason": "Essential container in task exited",
    }
    ev = lambda status, ms, attempts, **kw: (  # noqa: E731
        "batch",
        batch_event(
            trial_id=trial_id, run="trn2", job_id=job, status=status, time=iso(ms), attempts=attempts, **kw
        ),
    )
    events = [
        ev("SUBMITTED", T0, []),
        ev("RUNNABLE", T0 + 5_000, []),
        ev("STARTING", T0 + 60_000, []),
        ev("RUNNING", T0 + 90_000, []),
        ev("RUNNABLE", T0 + 1_800_500, [a1]),
        ev("STARTING", T0 + 1_850_000, [a1]),
        ev("RUNNING", T0 + 1_900_000, [a1]),
        ev("SUCCEEDED", T0 + 5_000_000, [a1, a2], exit_code=0),
        ("s3", s3_event("artifacts", f"{base}/checkpoints/step-200/model.pt", 3000, "e1")),
        ("s3", s3_event("artifacts", f"{base}/checkpoints/step-200/manifest.json", 200, "e2")),
        ("s3", s3_event("artifacts", f"{base}/attempt-1/summary.json", 100, "e3")),
        ("s3", s3_event("artifacts", f"{base}/attempt-2/summary.json", 100, "e4")),
    ]
    return trial_id, events


def deliver(events: list[tuple[str, dict[str, Any]]]) -> None:
    from lambdas.handlers.on_artifact_created import handler as on_artifact
    from lambdas.handlers.on_batch_job_state import handler as on_batch

    for kind, event in events:
        (on_batch if kind == "batch" else on_artifact)(event, Context())


def dump(aws: dict[str, Any], table: str) -> list[dict[str, Any]]:
    items = aws["ddb"].scan(TableName=table)["Items"]
    for item in items:  # DynamoDB sets have no order
        for value in item.values():
            if "SS" in value:
                value["SS"] = sorted(value["SS"])
    return sorted(items, key=lambda i: json.dumps(i, sort_keys=True))


def clear(aws: dict[str, Any]) -> None:
    ddb = aws["ddb"]
    for table, keys in (
        ("ledger", ("run_key", "entry_key")),
        ("idempotency", ("id",)),
        ("cache-registry", ("cache_key",)),
    ):
        for item in ddb.scan(TableName=table)["Items"]:
            ddb.delete_item(TableName=table, Key={k: item[k] for k in keys})


def test_lifecycle_closes_cost_from_ledger(aws: dict[str, Any], example: dict[str, Any]) -> None:
    trial_id, events = scenario(aws, example)
    deliver(events)
    from lambdas.adapters.ledger_table import DynamoLedger

    stored = DynamoLedger("ledger").cost(f"{trial_id}#trn2")
    assert stored is not None and stored.complete is True and stored.terminal_status == "SUCCEEDED"
    body = stored.model_dump(mode="json")  # the entry as stored
    cost = body["cost"]
    # attempt 1: STARTING (T0+60s) -> stoppedAt (T0+1800s); attempt 2: STARTING (T0+1850s) -> T0+5000s
    assert cost["billed_instance_seconds"] == "4890"
    parts = sum(
        float(cost[k])
        for k in (
            "effective_training_usd",
            "compile_usd",
            "failed_reruns_usd",
            "checkpoint_storage_usd",
            "queue_environment_usd",
        )
    )
    assert abs(parts - float(cost["total_usd"])) < 1e-9
    assert float(cost["failed_reruns_usd"]) > 0 and float(cost["compile_usd"]) > 0
    usage = body["usage"]
    assert [a["rerun_steps"] for a in usage["attempts"]] == [0, 100]
    assert usage["instance_type"] == "trn2.48xlarge" and usage["checkpoint_bytes"] == 4000
    assert usage["checkpoint_get_requests"] == 3  # two shards + manifest restored by attempt 2
    registry = aws["ddb"].get_item(TableName="cache-registry", Key={"cache_key": {"S": "a" * 64}})["Item"]
    assert registry["hits"]["N"] == "1" and registry["misses"]["N"] == "1"
    assert float(registry["first_compile_s"]["N"]) == 600.0

    from lambdas.handlers.close_trial_costs import handler as close

    closed = obj(close({"trial_id": trial_id, "runs": [{"run": "trn2", "status": "SUCCEEDED", "job_id": "j"}]},
                       Context()))
    assert closed["runs"]["trn2"]["total_usd"] == cost["total_usd"] and closed["total_usd"] == cost["total_usd"]
    before = dump(aws, "ledger")
    deliver(events[::-1] + events)  # every event again, both orders
    assert dump(aws, "ledger") == before


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_shuffled_duplicated_events_converge(aws: dict[str, Any], example: dict[str, Any], data: Any) -> None:
    # The moto account lives as long as the test, across examples: build the scenario and its in-order
    # baseline once.
    if "baseline" not in aws:
        _, events = scenario(aws, example)
        deliver(events)
        aws["baseline"] = (events, dump(aws, "ledger"), dump(aws, "cache-registry"))
    events, baseline, registry = aws["baseline"]
    clear(aws)
    order = data.draw(st.permutations(events))
    extra = data.draw(st.lists(st.sampled_from(events), max_size=8))
    positions = data.draw(st.lists(st.integers(0, len(order)), min_size=len(extra), max_size=len(extra)))
    stream = list(order)
    for position, event in zip(positions, extra, strict=True):
        stream.insert(position, event)
    deliver(stream)
    assert dump(aws, "ledger") == baseline
    assert dump(aws, "cache-registry") == registry


def test_each_batch_event_reads_the_ledger_once(aws: dict[str, Any], example: dict[str, Any],
                                                 monkeypatch: Any) -> None:
    """DynamoDB calls per Batch event (first delivery): the idempotency record (PutItem, then UpdateItem when done),
    the new fact (PutItem), one Query of the run's ledger; the first event of a run in an execution environment
    adds one GetItem of the trial (that the plane started it, and its declared instance types, kept for the fold);
    an event that moves the run's projected spend (RUNNING: the instance is billed from STARTING) writes it to the
    trial item (UpdateItem) so the trial's limits see every run; a terminal event adds its writes, and returns the
    cost as written. Each call is a round trip the function waits for, so a new read is a deliberate choice
    (DynamoDB developer guide, "Query", "GetItem")."""
    from collections import Counter

    from botocore.client import BaseClient

    _, events = scenario(aws, example)
    original = BaseClient._make_api_call  # type: ignore[attr-defined]  # botocore-stubs omit this private method
    calls: Counter[str] = Counter()

    def counted(client: Any, operation: str, params: Any) -> Any:
        if client.meta.service_model.service_name == "dynamodb":
            calls[operation if operation != "GetItem" else f"GetItem:{params['TableName']}"] += 1
        return original(client, operation, params)

    monkeypatch.setattr(BaseClient, "_make_api_call", counted)
    per_event = []
    for kind, event in events:
        if kind != "batch":
            continue
        calls.clear()
        deliver([(kind, event)])
        per_event.append((event["detail"]["status"], dict(calls)))
    running = {"PutItem": 2, "UpdateItem": 1, "Query": 1}
    assert per_event[0] == ("SUBMITTED", {**running, "GetItem:trials": 1})
    assert per_event[1:3] == [(status, running) for status in ("RUNNABLE", "STARTING")]
    assert per_event[3] == ("RUNNING", {**running, "UpdateItem": 2})
    # The terminal event writes what it found (the attempts, the summaries and manifests already in S3, the cost,
    # the compile-cache registry's counts) but still reads the ledger once, and the trial once more: a job that has
    # ended may be the last thing a pending stop of its trial waits for.
    status, terminal = per_event[-1]
    assert status == "SUCCEEDED" and terminal["Query"] == 1 and terminal["GetItem:trials"] == 1
    assert set(terminal) <= {"PutItem", "UpdateItem", "Query", "GetItem:ledger", "GetItem:trials"}, terminal


def test_forged_artifacts_and_foreign_jobs_never_enter_the_ledger_and_costs_stay_exact(
        aws: dict[str, Any], example: dict[str, Any], capsys: Any) -> None:
    """A job role can write anything under its trial's prefix, and anyone with SubmitJob can name a trial in a
    job: a manifest whose shards are not in S3 or whose sizes disagree with S3's listing
    (https://docs.aws.amazon.com/AmazonS3/latest/API/API_ListObjectsV2.html: Size), a summary of another attempt,
    absurd values, and Batch events for an unknown trial or a run the trial does not have are acknowledged
    (no retry), logged and counted as EventsRejected, never ledger facts; the run's cost is what it was."""
    from lambdas.adapters.ledger_table import DynamoLedger
    from lambdas.handlers.on_artifact_created import handler as on_artifact
    from lambdas.handlers.on_batch_job_state import handler as on_batch
    from tests.integration.conftest import batch_event, s3_event
    from tests.integration.test_metrics import published

    trial_id, events = scenario(aws, example)
    deliver(events)
    ledger = DynamoLedger("ledger")
    clean_cost, clean_entries = ledger.cost(f"{trial_id}#trn2"), ledger.entries(f"{trial_id}#trn2")
    capsys.readouterr()
    base = f"trials/{trial_id}/trn2"
    put = lambda key, body: aws["s3"].put_object(Bucket="artifacts", Key=key,  # noqa: E731
                                                 Body=body if isinstance(body, bytes) else json.dumps(body).encode())
    put(f"{base}/checkpoints/step-400/big.pt", b"x" * 10)
    forged = {
        f"{base}/checkpoints/step-400/manifest.json": {"step": 400, "shards": [{"name": "big.pt", "bytes": 10**14}]},
        f"{base}/checkpoints/step-600/manifest.json": {"step": 600, "shards": [{"name": "absent.pt", "bytes": 5}]},
        f"{base}/checkpoints/step-800/manifest.json": {"step": 800, "shards": [{"name": "w", "bytes": -1}]},
        f"{base}/attempt-3/summary.json": summary(trial_id, 2),  # attempt 2's summary posing as attempt 3
        f"{base}/attempt-4/summary.json": b"{not json",
    }
    for n, (key, body) in enumerate(forged.items()):
        put(key, body)
        assert on_artifact(s3_event("artifacts", key, 10, f"f{n}"), Context())["kind"] == "rejected"
    for n, (trial, run) in enumerate([("no-such-trial", "gpu"), (f"{trial_id}0", "trn2")]):
        out = on_batch(batch_event(trial_id=trial, run=run, job_id=f"foreign-{n}", status="RUNNING",
                                   time="2026-11-20T11:00:00Z"), Context())
        assert out["ignored"] and "trial_id" not in {k for k, v in out.items() if v}, out
    assert published(capsys.readouterr().out).get("EventsRejected") == len(forged) + 2
    assert ledger.entries(f"{trial_id}#trn2") == clean_entries
    assert ledger.cost(f"{trial_id}#trn2") == clean_cost
    assert ledger.entries(f"{trial_id}0#trn2") == [] and ledger.entries("no-such-trial#gpu") == []
