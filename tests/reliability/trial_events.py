"""One trial's real-shaped event stream (GPU run + a Trn2 run whose attempt 1 hits a retryable fault), its S3
artifacts, and helpers to deliver events to the handlers and read back the ledger."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tests.integration.conftest import Context, api_event, batch_event, s3_event
from tests.integration.test_run_events import T0, iso, summary
from tests.json_access import obj

Event = tuple[str, dict[str, Any]]
RUNS = ("gpu", "trn2")


@dataclass
class Trial:
    trial_id: str
    events: list[Event]


def _manifest(step: int) -> dict[str, Any]:
    return {"step": step, "save_s": 10.0,
            "shards": [{"name": "adapter_model.safetensors", "bytes": 3000, "sha256": "0" * 64},
                       {"name": "optimizer.pt", "bytes": 1000, "sha256": "1" * 64}]}


def submit_trial(aws: dict[str, Any], example: dict[str, Any]) -> Trial:
    """Submit the example trial through the API handler and stage what both runs' trainers would leave in S3."""
    from lambdas.handlers.on_trial_api import handler as api

    response = obj(api(api_event("POST", "/trials", example), Context()))
    trial_id = json.loads(response["body"])["trial_id"]
    s3 = aws["s3"]

    def put(key: str, body: Any) -> None:
        s3.put_object(Bucket="artifacts", Key=key, Body=json.dumps(body).encode())

    events: list[Event] = []
    # Trn2: attempt 1 fails at step 300 with the reserved code, attempt 2 resumes from the step-200 checkpoint.
    trn2 = f"trials/{trial_id}/trn2"
    put(f"{trn2}/attempt-1/summary.json", summary(trial_id, 1))
    put(f"{trn2}/attempt-2/summary.json", summary(trial_id, 2))
    for step in (200, 400, 600, 800, 1000):
        put(f"{trn2}/checkpoints/step-{step}/manifest.json", _manifest(step))
        events.append(("s3", s3_event("artifacts", f"{trn2}/checkpoints/step-{step}/manifest.json", 200,
                                      f"t{step}")))
    a1 = {"container": {"exitCode": 75}, "startedAt": T0 + 90_000, "stoppedAt": T0 + 1_800_000,
          "statusReason": "Essential container in task exited"}
    a2 = {"container": {"exitCode": 0}, "startedAt": T0 + 1_900_000, "stoppedAt": T0 + 5_000_000,
          "statusReason": "Essential container in task exited"}

    def trn2_event(status: str, ms: int, attempts: list[dict[str, Any]], **kw: Any) -> Event:
        return ("batch", batch_event(trial_id=trial_id, run="trn2", job_id="job-trn2", status=status, time=iso(ms),
                                     attempts=attempts, **kw))

    events += [trn2_event("SUBMITTED", T0, []), trn2_event("PENDING", T0 + 1_000, []),
               trn2_event("RUNNABLE", T0 + 5_000, []), trn2_event("STARTING", T0 + 60_000, []),
               trn2_event("RUNNING", T0 + 90_000, []), trn2_event("RUNNABLE", T0 + 1_800_500, [a1]),
               trn2_event("STARTING", T0 + 1_850_000, [a1]), trn2_event("RUNNING", T0 + 1_900_000, [a1]),
               trn2_event("SUCCEEDED", T0 + 5_000_000, [a1, a2], exit_code=0)]
    events += [("s3", s3_event("artifacts", f"{trn2}/attempt-{a}/summary.json", 100, f"s{a}")) for a in (1, 2)]

    # GPU: one clean attempt.
    gpu = f"trials/{trial_id}/gpu"
    gpu_summary = summary(trial_id, 2, track="gpu", run="gpu", start_step=0, resumed_from_step=None,
                          rerun_steps=0, steps_this_attempt=1000, global_step=1000,
                          compile={"seconds": 0.0, "cache": "none", "cache_key": None, "cache_url": None})
    gpu_summary["attempt"] = 1
    put(f"{gpu}/attempt-1/summary.json", gpu_summary)
    for step in (200, 400, 600, 800, 1000):
        put(f"{gpu}/checkpoints/step-{step}/manifest.json", _manifest(step))
        events.append(("s3", s3_event("artifacts", f"{gpu}/checkpoints/step-{step}/manifest.json", 200,
                                      f"g{step}")))
    g1 = {"container": {"exitCode": 0}, "startedAt": T0 + 70_000, "stoppedAt": T0 + 4_000_000,
          "statusReason": "Essential container in task exited"}
    for status, ms, attempts in (("SUBMITTED", T0, []), ("RUNNABLE", T0 + 2_000, []), ("STARTING", T0 + 40_000, []),
                                 ("RUNNING", T0 + 70_000, []), ("SUCCEEDED", T0 + 4_000_000, [g1])):
        events.append(("batch", batch_event(trial_id=trial_id, run="gpu", job_id="job-gpu", status=status,
                                            time=iso(ms), attempts=attempts,
                                            exit_code=0 if status == "SUCCEEDED" else None,
                                            queue="arn:aws:batch:us-east-1:123456789012:job-queue/dualtrack-gpu")))
    events.append(("s3", s3_event("artifacts", f"{gpu}/attempt-1/summary.json", 100, "gs1")))
    return Trial(trial_id, events)


def deliver(events: list[Event]) -> None:
    for kind, event in events:
        deliver_one(kind, event)


def deliver_one(kind: str, event: dict[str, Any]) -> dict[str, Any]:
    from lambdas.handlers.on_artifact_created import handler as on_artifact
    from lambdas.handlers.on_batch_job_state import handler as on_batch

    return (on_batch if kind == "batch" else on_artifact)(event, Context())  # type: ignore[no-any-return]


def ledger_items(aws: dict[str, Any]) -> list[dict[str, Any]]:
    items = []
    for page in aws["ddb"].get_paginator("scan").paginate(TableName="ledger"):
        items += page["Items"]
    return sorted(items, key=lambda i: (i["run_key"]["S"], i["entry_key"]["S"]))


def facts(aws: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Every non-cost ledger entry as (run_key, entry_key, body)."""
    return [(i["run_key"]["S"], i["entry_key"]["S"], i["body"]["S"]) for i in ledger_items(aws)
            if i["entry_key"]["S"] != "cost"]


def costs(aws: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each run's stored cost entry body."""
    return {i["run_key"]["S"]: json.loads(i["body"]["S"]) for i in ledger_items(aws) if i["entry_key"]["S"] == "cost"}


def total_usd(stored: dict[str, dict[str, Any]]) -> float:
    return sum(float(body["cost"]["total_usd"]) for body in stored.values())


def clear_tables(aws: dict[str, Any]) -> None:
    ddb = aws["ddb"]
    for table, keys in (("ledger", ("run_key", "entry_key")), ("idempotency", ("id",)),
                        ("cache-registry", ("cache_key",))):
        for page in ddb.get_paginator("scan").paginate(TableName=table):
            for item in page["Items"]:
                ddb.delete_item(TableName=table, Key={k: item[k] for k in keys})
