"""cdk-nag acknowledgements: one finding per call, always with the reason a reviewer needs.

cdk-nag 3.x reports through CDK's validation plugins; an acknowledgement is attached to the construct that
carries the finding and names exactly one rule id (optionally with its finding suffix, e.g. an IAM action).
"""

from __future__ import annotations

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks, ServerlessChecks
from constructs import IConstruct


def apply_checks(app: cdk.App) -> None:
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app), ServerlessChecks(app))


def acknowledge(construct: IConstruct, rule: str, reason: str) -> None:
    if len(reason) < 20:
        raise ValueError(f"acknowledgement of {rule} needs a real reason, got {reason!r}")
    cdk.Validations.of(construct).acknowledge(cdk.Acknowledgment(id=rule, reason=reason))
