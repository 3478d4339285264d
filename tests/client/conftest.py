"""The client against the real trial API handler, served on 127.0.0.1 by a SigV4-checking shim, moto behind it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.credentials import Credentials
from moto import mock_aws

from dualtrack.local.aws.tables import create_tables
from tests.client.dualtrack_api_shim import ApiShim
from tests.stage import API_STAGE_ENV

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trial-llama31-8b-lora.json"
REGION = "us-east-1"
ENV = {"TRIALS_TABLE": "trials", "USAGE_TABLE": "usage", "LEDGER_TABLE": "ledger",
       "CACHE_REGISTRY_TABLE": "cache-registry", "IDEMPOTENCY_TABLE": "idempotency", "ARTIFACTS_BUCKET": "artifacts",
       "CACHE_BUCKET": "compile-cache",
       "PRICE_REGION": REGION, "POWERTOOLS_SERVICE_NAME": "dualtrack", "POWERTOOLS_METRICS_NAMESPACE": "Dualtrack",
       "POWERTOOLS_TRACE_DISABLED": "true", "POWERTOOLS_LOG_LEVEL": "WARNING", **API_STAGE_ENV}


@pytest.fixture(autouse=True)
def _isolated_client_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Never read the user's own endpoint or config file.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    for name in ("DUALTRACK_ENDPOINT", "DUALTRACK_CONFIG"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    with mock_aws():
        from lambdas.runtime.composition import reset_environment

        ddb = boto3.client("dynamodb", region_name=REGION)
        create_tables(ddb)
        s3 = boto3.client("s3", region_name=REGION)
        for bucket in ("artifacts", "compile-cache"):
            s3.create_bucket(Bucket=bucket)
        role = boto3.client("iam", region_name=REGION).create_role(
            RoleName="sfn", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
        sfn = boto3.client("stepfunctions", region_name=REGION)
        machine = sfn.create_state_machine(
            name="trial-workflow", roleArn=role,
            definition=json.dumps({"StartAt": "Wait", "States": {"Wait": {"Type": "Pass", "End": True}}}),
        )["stateMachineArn"]
        monkeypatch.setenv("STATE_MACHINE_ARN", machine)
        reset_environment()
        yield {"ddb": ddb, "s3": s3, "sfn": sfn, "state_machine": machine}
        reset_environment()


def real_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    from lambdas.handlers.on_trial_api import handler

    return handler(event, context)  # type: ignore[no-any-return]


@pytest.fixture
def served(aws: dict[str, Any]) -> Iterator[ApiShim]:
    """The real API handler behind the local API Gateway stand-in, verifying the credentials the CLI will sign
    with (boto3's chain; under moto these are its fake keys)."""
    credentials = boto3.Session().get_credentials()
    assert credentials is not None
    frozen = credentials.get_frozen_credentials()
    assert frozen.access_key is not None and frozen.secret_key is not None
    shim = ApiShim(real_handler, Credentials(frozen.access_key, frozen.secret_key, frozen.token)).start()
    yield shim
    shim.stop()


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[dict[str, Any], Any], dict[str, Any]]], ApiShim]]:
    """Serve any handler(event, context): for failure modes the real API never produces on demand."""
    started: list[ApiShim] = []

    def start(handler: Callable[[dict[str, Any], Any], dict[str, Any]]) -> ApiShim:
        started.append(ApiShim(handler).start())
        return started[-1]

    yield start
    for shim in started:
        shim.stop()


@pytest.fixture
def example_text() -> str:
    return EXAMPLE.read_text()


@pytest.fixture
def trial_file(tmp_path: Path, example_text: str) -> Callable[..., str]:
    def write(**changes: Any) -> str:
        data = json.loads(example_text)
        data.update(changes)
        path = tmp_path / f"trial-{len(list(tmp_path.glob('trial-*.json')))}.json"
        path.write_text(json.dumps(data))
        return str(path)

    return write


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    def run(*argv: str) -> tuple[int, str, str]:
        from dualtrack.cli import main

        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return run


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> dict[str, Any]:
    return {"statusCode": status, "headers": {"Content-Type": "application/json", **(headers or {})},
            "body": json.dumps(body), "isBase64Encoded": False}
