"""The ledger under load, against moto in this process.

1. Events per second through the real run-events handler (Powertools idempotency on, conditional ledger writes,
   settlement on terminal states), side by side with bare conditional PutItem calls on the same moto tables: the
   ratio is how much of the raw write rate the handler keeps. The AWS calls each event makes are counted (every
   botocore API call in the process, the idempotency layer's included), per Batch status.
2. The scheduled cost report (one scan of the ledger) over 1k and 10k ledger entries: time(10k)/time(1k) is
   printed next to 10, the ratio a linear pass would give.

    python bench/bench_ledger.py [--runs 30] [--repeats 3]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

from stage_env import ENV, REGION  # bench/ is the script directory, first on sys.path

from dualtrack.local.aws.tables import create_tables

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "containers")]
EVENTS = ROOT / "tests" / "events"
T0 = 1_795_168_800_000


class Context:
    function_name = "bench"
    memory_limit_in_mb = 512
    invoked_function_arn = f"arn:aws:lambda:{REGION}:123456789012:function:bench"
    aws_request_id = "bench"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def _iso(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _tables() -> Any:
    import boto3

    ddb = boto3.client("dynamodb", region_name=REGION)
    create_tables(ddb)
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="artifacts")
    s3.create_bucket(Bucket="compile-cache")
    role = boto3.client("iam", region_name=REGION).create_role(RoleName="sfn", AssumeRolePolicyDocument="{}")
    machine = boto3.client("stepfunctions", region_name=REGION).create_state_machine(
        name="trial-workflow", roleArn=role["Role"]["Arn"],
        definition=json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}}))
    os.environ["STATE_MACHINE_ARN"] = machine["stateMachineArn"]
    return ddb


def _job_events(trial_id: str, run: str, job_id: str) -> list[dict[str, Any]]:
    template = json.loads((EVENTS / "batch_job_state_change.json").read_text())
    attempt = {"container": {"exitCode": 0}, "startedAt": T0 + 60_000, "stoppedAt": T0 + 3_600_000,
               "statusReason": "Essential container in task exited"}
    out = []
    for status, ms in (("SUBMITTED", T0), ("RUNNABLE", T0 + 5_000), ("STARTING", T0 + 30_000),
                       ("RUNNING", T0 + 60_000), ("SUCCEEDED", T0 + 3_600_000)):
        event = copy.deepcopy(template)
        event["time"] = _iso(ms)
        detail = event["detail"]
        detail.update(jobId=job_id, jobName=f"{trial_id}-{run}", status=status,
                      attempts=[attempt] if status == "SUCCEEDED" else [])
        detail["container"]["environment"] = [{"name": "DUALTRACK_TRIAL_ID", "value": trial_id},
                                              {"name": "DUALTRACK_RUN", "value": run}]
        if status == "SUCCEEDED":
            detail["container"]["exitCode"] = 0
        out.append(event)
    return out


def _submit(name: str) -> str:
    from lambdas.handlers.on_trial_api import handler as api

    spec = json.loads((ROOT / "examples" / "trial-llama31-8b-lora.json").read_text())
    spec["name"] = name
    event = json.loads((EVENTS / "api_gateway_rest.json").read_text())
    event.update(httpMethod="POST", path="/trials", body=json.dumps(spec), queryStringParameters=None)
    event["requestContext"]["httpMethod"] = "POST"
    return str(json.loads(api(event, Context())["body"])["trial_id"])


class CallCounter:
    """Counts botocore API calls by (service, operation) while installed."""

    def __init__(self) -> None:
        self.calls: Counter[tuple[str, str]] = Counter()

    def __enter__(self) -> CallCounter:
        from botocore.client import BaseClient

        self._original = original = BaseClient._make_api_call
        counter = self.calls

        def counted(client: Any, operation: str, params: Any) -> Any:
            counter[(client.meta.service_model.service_name, operation)] += 1
            return original(client, operation, params)

        BaseClient._make_api_call = counted  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        from botocore.client import BaseClient

        BaseClient._make_api_call = self._original  # type: ignore[method-assign]


def count_calls(on_batch: Any, events: list[dict[str, Any]]) -> dict[str, Counter[str]]:
    """AWS calls per event, by the event's Batch status (summed over ``events``, then divided by their number)."""
    by_status: dict[str, Counter[str]] = {}
    seen: Counter[str] = Counter()
    for event in events:
        status = event["detail"]["status"]
        with CallCounter() as counter:
            on_batch(event, Context())
        seen[status] += 1
        total = by_status.setdefault(status, Counter())
        for (service, operation), n in counter.calls.items():
            total[f"{service}.{operation}"] += n
    return {status: Counter({k: v / seen[status] for k, v in calls.items()}) for status, calls in by_status.items()}


def bench_events(runs: int) -> tuple[float, float, int]:
    """(handler events/s, bare conditional PutItem/s, events)."""
    from lambdas.handlers.on_batch_job_state import handler as on_batch

    ddb = _tables()
    events = []
    for i in range(runs):
        trial_id = _submit(f"bench-{i:04d}")
        events += _job_events(trial_id, "gpu", f"job-{i:04d}")
    # The first run's events counted call by call (a fresh trial: what a first delivery costs), then every event
    # timed.
    calls = count_calls(on_batch, events[:5])
    for status, counted in calls.items():
        dynamo = sum(v for k, v in counted.items() if k.startswith("dynamodb."))
        detail = ", ".join(f"{k} {v:g}" for k, v in sorted(counted.items()))
        print(f"  {status:9s} event: {dynamo:g} DynamoDB calls, {sum(counted.values()):g} AWS calls ({detail})")
    started = time.perf_counter()
    for event in events[5:]:
        on_batch(event, Context())
    handler_s = time.perf_counter() - started
    events = events[5:]
    started = time.perf_counter()
    for i in range(len(events)):
        ddb.put_item(TableName="ledger", ConditionExpression="attribute_not_exists(entry_key)",
                     Item={"run_key": {"S": f"raw#{i}"}, "entry_key": {"S": "x"}, "body": {"S": "{}"}})
    raw_s = time.perf_counter() - started
    return len(events) / handler_s, len(events) / raw_s, len(events)


def _fill_ledger(ddb: Any, entries: int) -> None:
    """Grow the ledger to ``entries`` items by cloning the real entries the event phase wrote."""
    items = ddb.scan(TableName="ledger")["Items"]
    real = [i for i in items if not i["run_key"]["S"].startswith("raw#")]
    for item in items:
        if item["run_key"]["S"].startswith("raw#"):
            ddb.delete_item(TableName="ledger", Key={"run_key": item["run_key"], "entry_key": item["entry_key"]})
    count, copy_no, batch = len(real), 0, []
    while count < entries:
        copy_no += 1
        for item in real:
            if count >= entries:
                break
            clone = dict(item)
            clone["run_key"] = {"S": f"{item['run_key']['S'].replace('#', f'-c{copy_no}#')}"}
            batch.append({"PutRequest": {"Item": clone}})
            count += 1
            if len(batch) == 25:
                ddb.batch_write_item(RequestItems={"ledger": batch})
                batch = []
    if batch:
        ddb.batch_write_item(RequestItems={"ledger": batch})


def bench_cost_report(ddb: Any, sizes: tuple[int, ...], repeats: int) -> dict[int, tuple[float, float, float]]:
    """Per size: (whole scheduled report through moto, the DynamoDB scan alone, the report fold alone)."""
    from datetime import UTC, datetime, timedelta

    from lambdas.handlers.scheduled_cost_report import compose
    from lambdas.services.cost_reporting import cost_report, publish_cost_report

    out: dict[int, tuple[float, float, float]] = {}
    # The weekly schedule's run on the Monday after the runs (T0 is Friday 20 November): the week of 16 November.
    at = datetime(2026, 11, 23, 6, tzinfo=UTC)
    start, end = datetime(2026, 11, 16, tzinfo=UTC), datetime(2026, 11, 23, tzinfo=UTC)
    app = compose()
    for size in sizes:
        _fill_ledger(ddb, size)
        whole, scan, fold = [], [], []
        for _ in range(repeats):
            started = time.perf_counter()
            publish_cost_report(ledger=app.ledger, trials=app.trials, registry=app.registry, artifacts=app.artifacts,
                                notifier=app.notifier, at=at, period="week")
            whole.append(time.perf_counter() - started)
            started = time.perf_counter()
            entries = list(app.ledger.iter_kinds(("cost", "summary")))
            scan.append(time.perf_counter() - started)
            trials = list(app.trials.iter_all())
            started = time.perf_counter()
            report = cost_report(entries, trials, start=start, end=end, period="bench",
                                 previous_start=start - timedelta(days=7))
            fold.append(time.perf_counter() - started)
        out[size] = (statistics.median(whole), statistics.median(scan), statistics.median(fold))
        print(f"  {size:6d} ledger entries: scheduled report {out[size][0] * 1000:8.1f} ms, of which the scan "
              f"{out[size][1] * 1000:8.1f} ms; report fold alone {out[size][2] * 1000:7.2f} ms "
              f"({report.runs} runs; median of {repeats})")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30, help="runs whose 5 Batch events are delivered")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ.update(ENV)
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    from moto import mock_aws

    with mock_aws():
        handler_rate, raw_rate, events = bench_events(args.runs)
        print(f"  {events} Batch events through on_batch_job_state: {handler_rate:8.1f} events/s; "
              f"bare conditional PutItem: {raw_rate:8.1f} puts/s")
        print(f"ledger       handler events/s / bare PutItem/s = {handler_rate / raw_rate:.3f}")
        import boto3

        times = bench_cost_report(boto3.client("dynamodb", region_name=REGION), (1_000, 10_000), args.repeats)
        big, small = times[10_000], times[1_000]
        print(f"ledger       cost report time(10k) / time(1k)  = {big[0] / small[0]:.2f}  (linear: 10)")
        print(f"ledger       moto scan   time(10k) / time(1k)  = {big[1] / small[1]:.2f}  (linear: 10)")
        print(f"ledger       report fold time(10k) / time(1k)  = {big[2] / small[2]:.2f}  (linear: 10)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
