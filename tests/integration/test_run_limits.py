"""Limits held while a trial runs, as one team meets them in a moto account: the event functions project each
run's spend and count its writes as facts arrive, stop the trial through the cancel path when it crosses a limit
(its execution stopped: "StopExecution ... Stops an execution", and a stopped ``.sync`` Batch task terminates its
job: https://docs.aws.amazon.com/step-functions/latest/dg/connect-batch.html), and the report says which limit.

The worst case a submission is checked against cannot bound everything: Batch's attempt timeout "is measured from
the job attempt's startedAt timestamp" (https://docs.aws.amazon.com/batch/latest/APIReference/API_JobTimeout.html),
so a node that spends twenty minutes pulling an image (STARTING) is billed outside it."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from tests.integration.conftest import Context, batch_event, s3_event
from tests.integration.test_governance import call, governed
from tests.integration.test_run_events import T0, iso

MINUTE = 60_000


def _deliver_batch(**kw: Any) -> dict[str, Any]:
    from lambdas.handlers.on_batch_job_state import handler

    return handler(batch_event(**kw), Context())  # type: ignore[no-any-return]


def _job(trial_id: str, run: str, *, running_at_min: int) -> list[dict[str, Any]]:
    """A job that waits a minute, then STARTING (pulling its image) until ``running_at_min``."""
    return [_deliver_batch(trial_id=trial_id, run=run, job_id=f"job-{run}", status=status, time=iso(T0 + m * MINUTE))
            for status, m in (("SUBMITTED", 0), ("RUNNABLE", 0), ("STARTING", 1), ("RUNNING", running_at_min))]


def test_a_trial_over_its_dollar_limit_is_stopped_and_its_report_says_which_limit(
        aws: dict[str, Any], example: dict[str, Any]) -> None:
    from lambdas.domain.money.prices import load_price_table, worst_case_usd
    from lambdas.domain.trial.rules import parse_trial

    # Six-minute attempts: the worst case (every run, both attempts at the timeout) fits under max_usd.
    example["limits"] = {"max_hours": 0.1}
    worst = worst_case_usd(parse_trial(example), load_price_table(), "us-east-1", attempts=2)["total"]
    example["limits"]["max_usd"] = math.ceil(worst)
    status, submitted, _ = call("POST", "/trials", example)
    assert status == 201, submitted
    trial_id, execution = submitted["trial_id"], submitted["execution_arn"]

    gpu = _job(trial_id, "gpu", running_at_min=21)  # 20 minutes of image pull on a p5
    assert all(r["stopped_by"] is None for r in gpu)
    trn2 = _job(trial_id, "trn2", running_at_min=35)  # 34 on a trn2: the trial's projection passes max_usd
    stopped = trn2[-1]["stopped_by"]
    assert stopped and stopped.startswith(f"stopped at limit max_usd (trial limits.max_usd): limit "
                                          f"{math.ceil(worst)} USD"), trn2
    assert aws["sfn"].describe_execution(executionArn=execution)["status"] == "ABORTED"

    status, view, _ = call("GET", f"/trials/{trial_id}")
    # A stop is a state: the execution is stopped, but both jobs still run until Batch has terminated them.
    assert view["status"] == "STOPPING" and view["status_cause"] == stopped
    assert view["stopped_by"]["limit"] == "max_usd" and view["stopped_by"]["run"] == "trn2"
    assert call("GET", f"/trials/{trial_id}/report")[0] == 404  # the runs are still stopping

    for run, minutes in (("gpu", 37), ("trn2", 37)):  # Batch terminates both jobs
        out = _deliver_batch(trial_id=trial_id, run=run, job_id=f"job-{run}", status="FAILED",
                             time=iso(T0 + minutes * MINUTE), exit_code=143,
                             reason="Step Functions execution stopped",
                             attempts=[{"container": {"exitCode": 143}, "startedAt": T0 + MINUTE,
                                        "stoppedAt": T0 + minutes * MINUTE,
                                        "statusReason": "Step Functions execution stopped"}])
        assert out["cost_total_usd"] is not None and out["stopped_by"] is None  # stopped once
    assert call("GET", f"/trials/{trial_id}")[1]["status"] == "CANCELLED"  # the last job's end finished the stop
    status, report, _ = call("GET", f"/trials/{trial_id}/report", query={"format": "json"})
    assert status == 200 and report["stopped_by"] == view["stopped_by"]
    assert report["comparison"]["reasons"][0] == f"The plane stopped this trial: {stopped}."
    markdown = aws["s3"].get_object(Bucket="artifacts", Key=f"trials/{trial_id}/report/report.md")["Body"].read()
    assert b"Stopped at limit `max_usd`" in markdown
    assert float(report["cost"]["trial"]["total_usd"]) > math.ceil(worst)  # what it really cost, over the limit


def test_a_trial_writing_past_its_write_quota_is_stopped_and_foreign_writes_are_not_counted(
        aws: dict[str, Any], example: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from lambdas.handlers.on_artifact_created import handler

    governed(monkeypatch, quotas={"write_requests_per_trial": 3, "write_bytes_per_trial": 10**9})
    status, submitted, _ = call("POST", "/trials", example)
    assert status == 201, submitted
    trial_id = submitted["trial_id"]

    def write(key: str, size: int, n: int) -> dict[str, Any]:
        aws["s3"].put_object(Bucket="artifacts", Key=key, Body=b"x" * size)
        return handler(s3_event("artifacts", key, size, f"etag-{n}"), Context())  # type: ignore[no-any-return]

    base = f"trials/{trial_id}/gpu/checkpoints/step-100"
    outcomes = [write(f"{base}/shard-{n}.pt", 1000, n) for n in range(3)]
    assert [o["kind"] for o in outcomes] == ["written"] * 3 and all(o["stopped_by"] is None for o in outcomes)
    assert write(f"{base}/shard-0.pt", 1000, 0)["stopped_by"] is None  # a repeated delivery counts once
    foreign = write("trials/someone-elses-trial/gpu/x.pt", 10, 9)
    assert foreign["kind"] == "rejected" and "no trial" in foreign["rejected"]
    fourth = write(f"{base}/shard-3.pt", 1000, 3)
    assert fourth["stopped_by"].startswith("stopped at limit write_requests (team team-nlp quota "
                                           "write_requests_per_trial): limit 3 objects, observed 4 objects written")
    item = call("GET", f"/trials/{trial_id}")[1]
    assert item["status"] == "CANCELLED" and item["stopped_by"]["limit"] == "write_requests"
    stored = aws["ddb"].get_item(TableName="trials", Key={"trial_id": {"S": trial_id}})["Item"]
    assert (stored["written_objects"], stored["written_bytes"]) == ({"N": "4"}, {"N": "4000"})
    assert json.loads(json.dumps(item["stopped_by"]))["source"] == "team team-nlp quota write_requests_per_trial"
