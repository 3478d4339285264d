"""Alarms that reach someone: the topic's key serves only this account's alarms, prod refuses to synthesize without
a subscriber, and a stage without one says so at synth."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from infra.config import ConfigInvalid, stage_config
from infra.synth import Assembly
from tests.stacks.conftest import props, resources

REPO = Path(__file__).resolve().parents[2]


def _warnings(assembly: Assembly) -> list[str]:
    """Every ``aws:cdk:warning`` the synth recorded (the CLI prints them; ``--strict`` fails on them)."""
    entries: list[dict[str, Any]] = []
    for path in sorted(assembly.path.glob("*.metadata.json")):
        for found in json.loads(path.read_text()).values():
            entries += found
    manifest = json.loads((assembly.path / "manifest.json").read_text())
    for artifact in manifest["artifacts"].values():
        for found in (artifact.get("metadata") or {}).values():
            entries += found
    return [str(e["data"]) for e in entries if e["type"] == "aws:cdk:warning"]


def _topic_key_statements(control: dict[str, Any]) -> list[dict[str, Any]]:
    (topic,) = props(control, "AWS::SNS::Topic")
    key_id = topic["KmsMasterKeyId"]["Fn::GetAtt"][0]
    statements: list[dict[str, Any]] = resources(control, "AWS::KMS::Key")[key_id]["Properties"]["KeyPolicy"][
        "Statement"]
    return statements


def test_the_topic_key_serves_only_this_accounts_alarms(control: dict[str, Any],
                                                        prod_control: dict[str, Any]) -> None:
    """Amazon SNS, "Key management" (https://docs.aws.amazon.com/sns/latest/dg/sns-key-management.html, "Enable
    compatibility between event sources from AWS services and encrypted topics"): CloudWatch publishes alarms to a
    topic encrypted with a customer managed key only if the key policy lets ``cloudwatch.amazonaws.com`` call
    ``kms:Decrypt`` and ``kms:GenerateDataKey*`` ("How do I configure a CloudWatch alarm with an encrypted Amazon SNS
    topic?", https://repost.aws/knowledge-center/cloudwatch-configure-alarm-sns). A service principal in a resource
    policy acts for any account unless ``aws:SourceAccount`` / ``aws:SourceArn`` say whose resources it acts for
    (IAM, "The confused deputy problem", https://docs.aws.amazon.com/IAM/latest/UserGuide/confused-deputy.html): the
    key statement carries the same conditions as the topic policy's, this account's alarms in this region."""
    for template in (control, prod_control):
        (statement,) = [s for s in _topic_key_statements(template)
                        if s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}]
        assert statement["Effect"] == "Allow"
        assert sorted(statement["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey*"]
        condition = statement["Condition"]
        assert condition["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
        source = json.dumps(condition["ArnLike"]["aws:SourceArn"])
        assert ":cloudwatch:" in source and ":alarm:*" in source
        assert '{"Ref": "AWS::Region"}' in source and '{"Ref": "AWS::AccountId"}' in source
        # The topic policy's statement for the same principal carries the very same conditions.
        (policy,) = props(template, "AWS::SNS::TopicPolicy")
        (publish,) = [s for s in policy["PolicyDocument"]["Statement"]
                      if s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}]
        assert publish["Condition"] == condition


def test_prod_refuses_to_synthesize_alarms_that_reach_no_one(prod_control: dict[str, Any]) -> None:
    """A stage with ``require_alarm_subscriber`` (prod) fails its synth without ``alarm_email``, naming the context
    key and the fix. With it, the report topic has an email subscription to that address; SNS delivers nothing to
    it until the recipient confirms the subscription ("Email notifications", Amazon SNS,
    https://docs.aws.amazon.com/sns/latest/dg/sns-email-notifications.html)."""
    context = json.loads((REPO / "cdk.json").read_text())["context"]
    assert stage_config(context, "prod").require_alarm_subscriber
    unsubscribed = copy.deepcopy(context)
    del unsubscribed["dualtrack:stages"]["prod"]["alarm_email"]
    with pytest.raises(ConfigInvalid, match=r"dualtrack:stages\.prod\.alarm_email: .*require_alarm_subscriber.*"
                                            r"Set dualtrack:stages\.prod\.alarm_email in cdk\.json"):
        stage_config(unsubscribed, "prod")
    (topic_id,) = resources(prod_control, "AWS::SNS::Topic")
    (subscription,) = props(prod_control, "AWS::SNS::Subscription")
    assert subscription == {"Protocol": "email", "TopicArn": {"Ref": topic_id},
                            "Endpoint": context["dualtrack:stages"]["prod"]["alarm_email"]}


def test_a_stage_without_a_subscriber_warns_at_synth(assembly: Assembly, prod_assembly: Assembly,
                                                     control: dict[str, Any]) -> None:
    """AWS CDK, Annotations (https://docs.aws.amazon.com/cdk/api/v2/docs/aws-cdk-lib.Annotations.html): a warning
    is displayed when the app is synthesized and fails it only "if run in --strict mode". dev has no subscriber:
    its synth succeeds and warns that its alarms notify no one; prod's shipped address is at example.com, a domain
    reserved for examples (RFC 2606), and its synth says that this address reaches no one either."""
    assert resources(control, "AWS::SNS::Subscription") == {}
    unsubscribed = [w for w in _warnings(assembly) if "[ack: dualtrack:alarms-unsubscribed]" in w]
    assert len(unsubscribed) == 1
    alarms = len(resources(control, "AWS::CloudWatch::Alarm"))
    assert f"the stage's {alarms} alarms" in unsubscribed[0] and "dualtrack:stages.dev.alarm_email" in unsubscribed[0]
    placeholder = [w for w in _warnings(prod_assembly) if "[ack: dualtrack:alarms-placeholder-address]" in w]
    assert len(placeholder) == 1 and "dualtrack:stages.prod.alarm_email" in placeholder[0]
    assert not [w for w in _warnings(prod_assembly) if "alarms-unsubscribed" in w]
