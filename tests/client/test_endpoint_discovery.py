"""Endpoint discovery: flag, environment, config file, then the control stack's outputs (moto CloudFormation)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from dualtrack.client.endpoint import ClientOptions, control_stack_name, resolve_endpoint
from dualtrack.client.errors import EXIT_CONFIG, ConfigFailure

API = "https://abc123.execute-api.eu-west-1.amazonaws.com/prod/"


def deploy_control_stack(name: str, outputs: dict[str, str]) -> None:
    template = {"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
                "Outputs": {k: {"Value": v} for k, v in outputs.items()}}
    boto3.client("cloudformation", region_name="us-east-1").create_stack(StackName=name,
                                                                         TemplateBody=json.dumps(template))


def test_the_flag_wins_and_the_region_comes_from_the_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DUALTRACK_ENDPOINT", "https://other.example.com/prod")
    found = resolve_endpoint(ClientOptions(endpoint=API))
    assert (found.url, found.region, found.source) == (API.rstrip("/"), "eu-west-1", "--endpoint")
    found = resolve_endpoint(ClientOptions())
    assert found.url == "https://other.example.com/prod" and found.region == "us-east-1"  # the profile's region


def test_aws_region_is_honoured_before_aws_default_region(monkeypatch: pytest.MonkeyPatch) -> None:
    """The AWS CLI and the SDKs read ``AWS_REGION`` before ``AWS_DEFAULT_REGION`` and the profile (AWS SDKs and Tools
    Reference Guide, "AWS Region", https://docs.aws.amazon.com/sdkref/latest/guide/feature-region.html); boto3 on
    its own reads only ``AWS_DEFAULT_REGION``, so a user who set ``AWS_REGION`` would sign for the wrong region."""
    monkeypatch.setenv("DUALTRACK_ENDPOINT", "https://other.example.com/prod")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_REGION", "eu-central-1")
    assert boto3.Session().region_name == "us-east-1"  # what boto3 alone would use
    assert resolve_endpoint(ClientOptions()).region == "eu-central-1"
    assert resolve_endpoint(ClientOptions(region="ap-south-1")).region == "ap-south-1"  # the flag still wins


def test_the_config_file_supplies_endpoint_region_and_tuning(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "xdg" / "dualtrack" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"endpoint": "https://api.internal.example.com/v1", "region": "us-west-2",
                                  "timeout_s": 5, "max_attempts": 2}))
    found = resolve_endpoint(ClientOptions())
    assert (found.url, found.region, found.timeout_s, found.max_attempts) == (
        "https://api.internal.example.com/v1", "us-west-2", 5, 2)
    assert found.source == str(config)
    other = tmp_path / "team.json"
    other.write_text(json.dumps({"endpoint": API}))
    monkeypatch.setenv("DUALTRACK_CONFIG", str(other))
    assert resolve_endpoint(ClientOptions()).url == API.rstrip("/")


@pytest.mark.parametrize(("content", "message"), [
    ("{not json", "malformed JSON at line 1 column 2"),
    (json.dumps({"endpiont": API}), "endpiont: extra inputs are not permitted (allowed keys: endpoint, region"),
    (json.dumps({"endpoint": "abc123.execute-api.amazonaws.com"}), "is not an http(s) URL"),
    (json.dumps({"max_attempts": 0}), "max_attempts: input should be greater than or equal to 1"),
])
def test_a_bad_config_file_names_the_file_and_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       content: str, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(content)
    with pytest.raises(ConfigFailure) as raised:
        resolve_endpoint(ClientOptions(config_path=str(path)))
    assert raised.value.exit_code == EXIT_CONFIG
    assert str(path) in raised.value.message and message in raised.value.message


def test_an_explicit_config_path_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigFailure, match="no such config file"):
        resolve_endpoint(ClientOptions(config_path=str(tmp_path / "missing.json")))


@mock_aws
def test_stack_outputs_are_read_with_describe_stacks() -> None:
    deploy_control_stack(control_stack_name("dev"), {"ApiUrl": API, "StateMachineArn": "arn:x"})
    found = resolve_endpoint(ClientOptions())
    assert found.url == API.rstrip("/") and found.source == "stack Dualtrack-dev-Control output ApiUrl"
    assert found.region == "eu-west-1"  # signing follows the API's own region
    # CDK suffixes output ids defined inside constructs with a hash: a unique prefix match is accepted.
    deploy_control_stack("Dualtrack-prod-Control", {"TrialApiEndpoint4F160690": API})
    assert resolve_endpoint(ClientOptions(stage="prod", output_key="TrialApiEndpoint")).url == API.rstrip("/")


@mock_aws
def test_stack_discovery_failures_say_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(ConfigFailure) as raised:
        resolve_endpoint(ClientOptions(stage="qa"))
    assert "cannot read stack Dualtrack-qa-Control in us-east-1" in raised.value.message
    assert "pass --stack NAME, or pass --endpoint URL" in raised.value.message
    deploy_control_stack("custom", {"Other": "x", "StateMachineArn": "y"})
    with pytest.raises(ConfigFailure) as raised:
        resolve_endpoint(ClientOptions(stack_name="custom"))
    assert raised.value.message == ("stack custom in us-east-1 has no output 'ApiUrl' (outputs: Other, "
                                    "StateMachineArn); pass --output-key KEY")


def test_an_unknown_profile_is_named(cli: Any) -> None:
    code, _, err = cli("status", "x", "--profile", "no-such-profile")
    assert code == EXIT_CONFIG
    assert err.strip() == ("error: AWS profile 'no-such-profile' not found in ~/.aws/config or ~/.aws/credentials "
                           "(use --profile NAME or set AWS_PROFILE)")
