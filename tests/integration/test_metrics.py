"""Custom metrics: each real-world fact is counted once, by whichever function records it first.

Powertools Metrics writes CloudWatch embedded-metric-format documents to stdout; these tests read them back and
sum each metric over every invocation, so a duplicated or reordered delivery that double-counted would show.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from lambdas.domain import telemetry
from tests.integration.conftest import Context, batch_event
from tests.integration.test_run_events import T0, deliver, iso, scenario
from tests.json_access import obj


def published(text: str) -> Counter[str]:
    """Sum of every custom metric in the EMF documents printed to stdout."""
    totals: Counter[str] = Counter()
    for line in text.splitlines():
        if '"_aws"' not in line:
            continue
        document = json.loads(line)
        for directive in document["_aws"]["CloudWatchMetrics"]:
            assert directive["Namespace"] == telemetry.NAMESPACE
            for metric in directive["Metrics"]:
                value = document[metric["Name"]]
                totals[metric["Name"]] += sum(value) if isinstance(value, list) else value
    return totals


def test_run_outcome_and_cache_use_are_counted_once_however_events_arrive(
    aws: dict[str, Any], example: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    _, events = scenario(aws, example)
    capsys.readouterr()
    deliver(events)
    deliver(list(reversed(events)))  # every event again, in reverse
    deliver(events[-4:] + events[:3])
    totals = published(capsys.readouterr().out)
    # The scenario: one trn2 run, attempt 1 compiled (miss) and faulted, attempt 2 resumed with a warm cache (hit).
    assert totals[telemetry.RUNS_SUCCEEDED] == 1
    assert totals[telemetry.RUNS_FAILED] == 0
    assert totals[telemetry.CACHE_MISSES] == 1
    assert totals[telemetry.CACHE_HITS] == 1
    assert totals[telemetry.CACHE_FAILURES] == 0


def test_a_failed_run_is_counted_by_the_event_that_records_it(
    aws: dict[str, Any], example: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    from lambdas.handlers.on_batch_job_state import handler as on_batch

    trial_id, _ = scenario(aws, example)
    failed = batch_event(trial_id=trial_id, run="gpu", job_id="job-gpu-1", status="FAILED", time=iso(T0 + 60_000),
                         exit_code=1, reason="Essential container in task exited",
                         attempts=[{"container": {"exitCode": 1}, "startedAt": T0, "stoppedAt": T0 + 50_000}])
    capsys.readouterr()
    on_batch(failed, Context())
    on_batch(failed, Context())
    totals = published(capsys.readouterr().out)
    assert totals[telemetry.RUNS_FAILED] == 1
    assert totals[telemetry.RUNS_SUCCEEDED] == 0


def test_cost_step_counts_outcomes_it_reconciles_first_and_publishes_the_trial_cost(
    aws: dict[str, Any], example: dict[str, Any], capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lambdas.adapters import batch_jobs
    from lambdas.domain.events import BatchJobStateChangeDetail
    from lambdas.handlers.close_trial_costs import handler as close
    from lambdas.handlers.on_batch_job_state import handler as on_batch

    _, events = scenario(aws, example)
    succeeded = next(event for kind, event in events if kind == "batch" and event["detail"]["status"] == "SUCCEEDED")
    # DescribeJobs answers before EventBridge delivers the terminal event (the seam the cost step reads through).
    detail = BatchJobStateChangeDetail.model_validate(succeeded["detail"])
    monkeypatch.setattr(batch_jobs.BatchJobsApi, "describe",
                        lambda _, job_id: detail if job_id == "job-trn2-1" else None)
    deliver([e for e in events if e[1] is not succeeded])
    capsys.readouterr()
    out = obj(close({"trial_id": succeeded["detail"]["jobName"].removesuffix("-trn2"),
                     "runs": [{"run": "trn2", "status": "SUCCEEDED", "job_id": "job-trn2-1"}]}, Context()))
    on_batch(succeeded, Context())  # the late event: already recorded, not counted again
    totals = published(capsys.readouterr().out)
    assert totals[telemetry.RUNS_SUCCEEDED] == 1
    assert totals[telemetry.TRIAL_COST_USD] == pytest.approx(float(out["total_usd"]))
    assert float(out["total_usd"]) > 0


def test_a_failed_event_after_the_jobs_success_publishes_no_outcome(
    aws: dict[str, Any], example: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """AWS Batch "Automated job retries" (https://docs.aws.amazon.com/batch/latest/userguide/job_retries.html): a job
    moves to either SUCCEEDED or FAILED, once; "Job state change events"
    (https://docs.aws.amazon.com/batch/latest/userguide/batch_job_events.html) carry each change. A FAILED event for
    a job whose SUCCEEDED is already recorded (late, or forged) leaves the run SUCCEEDED (a success wins), so it
    publishes neither RunsFailed nor a second RunsSucceeded."""
    from lambdas.handlers.on_batch_job_state import handler as on_batch

    trial_id, events = scenario(aws, example)
    capsys.readouterr()
    deliver(events)
    late = batch_event(trial_id=trial_id, run="trn2", job_id="job-trn2-1", status="FAILED", time=iso(T0 + 5_100_000),
                       exit_code=1, reason="Essential container in task exited",
                       attempts=[{"container": {"exitCode": 1}, "startedAt": T0 + 90_000, "stoppedAt": T0 + 5_050_000}])
    on_batch(late, Context())
    on_batch(late, Context())
    totals = published(capsys.readouterr().out)
    assert totals[telemetry.RUNS_SUCCEEDED] == 1
    assert totals[telemetry.RUNS_FAILED] == 0


def test_each_function_tags_its_metrics_with_its_own_service_name(
    aws: dict[str, Any], example: dict[str, Any], capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One process hosting several functions (the local rehearsal) still tags each function's metrics with that
    function's service (the ``service`` dimension Powertools adds, https://docs.powertools.aws.dev/lambda/python/latest/core/metrics/),
    the name the stack gives it as POWERTOOLS_SERVICE_NAME."""
    from lambdas.adapters import batch_jobs
    from lambdas.domain.events import BatchJobStateChangeDetail
    from lambdas.handlers.close_trial_costs import handler as close

    _, events = scenario(aws, example)
    succeeded = next(event for kind, event in events if kind == "batch" and event["detail"]["status"] == "SUCCEEDED")
    detail = BatchJobStateChangeDetail.model_validate(succeeded["detail"])
    monkeypatch.setattr(batch_jobs.BatchJobsApi, "describe",
                        lambda _, job_id: detail if job_id == "job-trn2-1" else None)
    capsys.readouterr()
    deliver([e for e in events if e[1] is not succeeded])
    services = {json.loads(line).get("service") for line in capsys.readouterr().out.splitlines() if '"_aws"' in line}
    assert services <= {"dualtrack-on-batch-job-state", "dualtrack-on-artifact-created"} and services
    close({"trial_id": succeeded["detail"]["jobName"].removesuffix("-trn2"),
           "runs": [{"run": "trn2", "status": "SUCCEEDED", "job_id": "job-trn2-1"}]}, Context())
    services = {json.loads(line).get("service") for line in capsys.readouterr().out.splitlines() if '"_aws"' in line}
    assert services == {"dualtrack-close-trial-costs"}
