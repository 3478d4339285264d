"""moto-backed AWS for the Lambda handlers: tables, buckets, a trivial state machine, a Batch queue."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from dualtrack.local.aws.lambda_context import StaticContext
from dualtrack.local.aws.tables import create_tables
from tests.stage import API_STAGE_ENV

EVENTS = Path(__file__).resolve().parents[1] / "events"

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trial-llama31-8b-lora.json"

REGION = "us-east-1"
ENV = {
    "TRIALS_TABLE": "trials",
    "LEDGER_TABLE": "ledger",
    "CACHE_REGISTRY_TABLE": "cache-registry",
    "IDEMPOTENCY_TABLE": "idempotency",
    "USAGE_TABLE": "usage",
    "ARTIFACTS_BUCKET": "artifacts",
    "CACHE_BUCKET": "compile-cache",
    "PRICE_REGION": REGION,
    "POWERTOOLS_SERVICE_NAME": "dualtrack",
    "POWERTOOLS_METRICS_NAMESPACE": "Dualtrack",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    **API_STAGE_ENV,
}


Context = StaticContext  # the context object handed to each handler call


def load_event(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / name).read_text())


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("POWERTOOLS_IDEMPOTENCY_DISABLED", raising=False)
    with mock_aws():
        from lambdas.runtime.composition import reset_environment

        ddb = boto3.client("dynamodb", region_name=REGION)
        create_tables(ddb)
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket="artifacts")
        s3.create_bucket(Bucket="compile-cache")
        iam = boto3.client("iam", region_name=REGION)
        role = iam.create_role(RoleName="sfn", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
        sfn = boto3.client("stepfunctions", region_name=REGION)
        machine = sfn.create_state_machine(
            name="trial-workflow",
            roleArn=role,
            definition=json.dumps({"StartAt": "Wait", "States": {"Wait": {"Type": "Pass", "End": True}}}),
        )["stateMachineArn"]
        monkeypatch.setenv("STATE_MACHINE_ARN", machine)
        topic = boto3.client("sns", region_name=REGION).create_topic(Name="cost-reports")["TopicArn"]
        monkeypatch.setenv("REPORT_TOPIC_ARN", topic)
        reset_environment()
        yield {"ddb": ddb, "s3": s3, "sfn": sfn, "state_machine": machine, "topic": topic}
        reset_environment()


@pytest.fixture
def example() -> dict[str, Any]:
    return json.loads(EXAMPLE.read_text())


def api_event(method: str, path: str, body: Any = None, query: dict[str, str] | None = None,
              principal: str | None = None) -> dict[str, Any]:
    """A REST proxy event; ``principal`` is the caller's ARN as API Gateway reports it (default: a team-nlp user)."""
    event = load_event("api_gateway_rest.json")
    if principal is not None:
        event["requestContext"]["identity"]["userArn"] = principal
    event["httpMethod"] = method
    event["path"] = path
    event["requestContext"]["httpMethod"] = method
    event["queryStringParameters"] = query
    if body is not None:
        event["body"] = body if isinstance(body, str) else json.dumps(body)
    return event


def batch_event(
    *,
    trial_id: str,
    run: str,
    job_id: str,
    status: str,
    time: str,
    attempts: list[dict[str, Any]] | None = None,
    exit_code: int | None = None,
    reason: str | None = None,
    queue: str | None = None,
) -> dict[str, Any]:
    event = copy.deepcopy(load_event("batch_job_state_change.json"))
    detail = event["detail"]
    event["time"] = time
    detail.update(
        jobId=job_id,
        jobName=f"{trial_id}-{run}",
        status=status,
        attempts=attempts or [],
        jobArn=f"arn:aws:batch:us-east-1:123456789012:job/{job_id}",
    )
    if queue:
        detail["jobQueue"] = queue
    detail["container"]["environment"] = [
        {"name": "DUALTRACK_TRIAL_ID", "value": trial_id},
        {"name": "DUALTRACK_RUN", "value": run},
        {"name": "DUALTRACK_TRACK", "value": "trn2" if run == "trn2" else "gpu"},
    ]
    if exit_code is not None:
        detail["container"]["exitCode"] = exit_code
    if reason:
        detail["statusReason"] = reason
    return event


def s3_event(bucket: str, key: str, size: int, etag: str, time: str = "2026-11-20T10:05:00Z") -> dict[str, Any]:
    event = copy.deepcopy(load_event("s3_object_created.json"))
    event["time"] = time
    event["detail"]["bucket"]["name"] = bucket
    event["detail"]["object"].update(key=key, size=size, etag=etag)
    event["detail"]["object"].pop("version-id")
    return event
