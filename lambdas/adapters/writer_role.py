"""STS: the trial writer role, assumed with a job's trial and run as session tags."""

from __future__ import annotations

from datetime import datetime

from lambdas.adapters.aws import client


class StsWriterRole:
    """The ``WriterRole`` port over STS AssumeRole (session tags need sts:TagSession on both sides: the caller's
    policy and the role's trust policy)."""

    def __init__(self, role_arn: str) -> None:
        self._role_arn = role_arn

    def assume(self, *, session_name: str, tags: dict[str, str], duration_s: int) -> dict[str, str]:
        response = client("sts").assume_role(
            RoleArn=self._role_arn, RoleSessionName=session_name, DurationSeconds=duration_s,
            Tags=[{"Key": key, "Value": value} for key, value in sorted(tags.items())])
        credentials = response["Credentials"]
        expiration = credentials["Expiration"]
        return {"AccessKeyId": credentials["AccessKeyId"], "SecretAccessKey": credentials["SecretAccessKey"],
                "SessionToken": credentials["SessionToken"],
                "Expiration": expiration.isoformat() if isinstance(expiration, datetime) else str(expiration)}
