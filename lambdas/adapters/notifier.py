"""SNS notifications (scheduled cost-report summaries)."""

from __future__ import annotations

from lambdas.adapters.aws import client


class SnsNotifier:
    def __init__(self, topic_arn: str) -> None:
        self.topic_arn = topic_arn

    def publish(self, subject: str, message: str) -> str:
        got = client("sns").publish(TopicArn=self.topic_arn, Subject=subject[:100], Message=message)
        return str(got["MessageId"])
