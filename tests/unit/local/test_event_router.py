"""The in-process EventBridge-to-Lambda router: pattern rules get matching events; scheduled rules never do."""

from __future__ import annotations

import json
from typing import Any

import boto3
from moto import mock_aws

from dualtrack.local.aws.event_router import EventRouter

REGION = "us-east-1"
FN = f"arn:aws:lambda:{REGION}:123456789012:function:"


def test_bus_events_reach_pattern_rules_only_and_failures_are_dead_lettered() -> None:
    with mock_aws():
        events = boto3.client("events", region_name=REGION)
        sqs = boto3.client("sqs", region_name=REGION)
        dlq_url = sqs.create_queue(QueueName="delivery-failures")["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        events.put_rule(Name="jobs", EventPattern=json.dumps({"source": ["aws.batch"]}))
        events.put_targets(Rule="jobs", Targets=[
            {"Id": "a", "Arn": FN + "on-job", "RetryPolicy": {"MaximumRetryAttempts": 1},
             "DeadLetterConfig": {"Arn": dlq_arn}}])
        events.put_rule(Name="nightly-gc", ScheduleExpression="cron(0 5 * * ? *)")
        events.put_targets(Rule="nightly-gc", Targets=[
            {"Id": "b", "Arn": FN + "gc", "Input": json.dumps({"action": "collect_garbage"})}])
        calls: list[tuple[str, dict[str, Any]]] = []

        def invoke(arn: str, event: dict[str, Any]) -> None:
            calls.append((arn.rsplit(":", 1)[-1], event))
            if event["detail"].get("fail"):
                raise RuntimeError("handler failed")

        with EventRouter(invoke=invoke).install() as router:
            for detail in ({"jobId": "j1"}, {"jobId": "j2", "fail": True}):
                events.put_events(Entries=[{"Source": "aws.batch", "DetailType": "Batch Job State Change",
                                            "Detail": json.dumps(detail)}])
            assert router.join(timeout=30)
        assert {name for name, _ in calls} == {"on-job"}  # the schedule's target is never sent a bus event
        assert [e["detail"]["jobId"] for _, e in calls].count("j2") == 2  # first try + one retry
        assert len(router.failed) == 1
        message = sqs.receive_message(QueueUrl=dlq_url, MessageAttributeNames=["All"])["Messages"][0]
        assert json.loads(message["Body"])["detail"]["jobId"] == "j2"
        assert "handler failed" in message["MessageAttributes"]["ERROR"]["StringValue"]
