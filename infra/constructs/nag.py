"""cdk-nag acknowledgements: one finding per call, always with the reason a reviewer needs.

cdk-nag 3.x reports through CDK's validation plugins; an acknowledgement is attached to the construct that
carries the finding and names exactly one rule id (optionally with its finding suffix, e.g. an IAM action).
"""

from __future__ import annotations

import hashlib
import json
import re

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from cdk_nag import AwsSolutionsChecks, ServerlessChecks
from constructs import IConstruct


def apply_checks(app: cdk.App) -> None:
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app), ServerlessChecks(app))


def acknowledge(construct: IConstruct, rule: str, reason: str) -> None:
    if len(reason) < 20:
        raise ValueError(f"acknowledgement of {rule} needs a real reason, got {reason!r}")
    cdk.Validations.of(construct).acknowledge(cdk.Acknowledgment(id=rule, reason=reason))


def arn_prefix(scope: IConstruct, service: str) -> str:
    """``arn:<partition>:<service>:<region>:<account>`` as cdk-nag prints it for ``scope``'s stack: pseudo
    parameters as ``<AWS::Name>`` where the stack is environment-agnostic, literals where it is not."""
    stack = cdk.Stack.of(scope)

    def shown(value: str, name: str) -> str:
        return f"<AWS::{name}>" if cdk.Token.is_unresolved(value) else value

    return (f"arn:{shown(stack.partition, 'Partition')}:{service}:{shown(stack.region, 'Region')}:"
            f"{shown(stack.account, 'AccountId')}")


def _export_ref(producer: cdk.Stack, logical_id: str, attribute: str) -> str:
    """How cdk-nag prints a cross-stack reference: the export name CDK generates for it (``Fn::ImportValue``)."""
    ident = "Output" + json.dumps({"Fn::GetAtt": [logical_id, attribute]}, separators=(",", ":"))
    digest = hashlib.md5(f"Exports/{ident}".encode()).hexdigest()[:8].upper()
    human = re.sub(r"[^A-Za-z0-9]", "", f"Exports{ident}")
    return f"{producer.stack_name}:{human}{digest}"


def arn_ref(consumer: IConstruct, resource: IConstruct) -> str:
    """cdk-nag's rendering of ``resource``'s ARN as seen from ``consumer``'s stack."""
    producer = cdk.Stack.of(resource)
    cfn = resource.node.default_child
    assert isinstance(cfn, cdk.CfnElement)
    logical_id = producer.resolve(cfn.logical_id)
    if producer is cdk.Stack.of(consumer):
        return f"<{logical_id}.Arn>"
    return _export_ref(producer, logical_id, "Arn")


class GrantFindings:
    """Acknowledges, one finding at a time, the wildcards that CDK's ``grant_*`` methods write into a role."""

    def __init__(self, role: iam.IRole):
        policy = role.node.try_find_child("DefaultPolicy")
        if policy is None:
            raise ValueError(f"{role.node.path} has no default policy to acknowledge findings on")
        self._policy = policy

    def _ack(self, finding: str, reason: str) -> GrantFindings:
        acknowledge(self._policy, f"AwsSolutions-IAM5[{finding}]", reason)
        return self

    def wildcard(self, finding: str, reason: str) -> GrantFindings:
        """One more wildcard finding (``Resource::...`` or ``Action::...``) with its reason."""
        return self._ack(finding, reason)

    def s3_read(self, bucket: IConstruct, prefix: str) -> GrantFindings:
        self._ack("Action::s3:GetObject*", "CDK grant_read: object reads only, under one key prefix")
        self._ack("Action::s3:GetBucket*", "CDK grant_read: bucket metadata needed to read objects")
        self._ack("Action::s3:List*", "CDK grant_read: listing is how the newest checkpoint/summary is found")
        return self.s3_prefix(bucket, prefix)

    def s3_put(self, bucket: IConstruct, prefix: str) -> GrantFindings:
        self._ack("Action::s3:Abort*", "CDK grant_put: aborting its own multipart uploads of large objects")
        return self.s3_prefix(bucket, prefix)

    def s3_delete(self, bucket: IConstruct, prefix: str) -> GrantFindings:
        self._ack("Action::s3:DeleteObject*", "CDK grant_delete: deleting expired objects (and their versions) "
                  "under one key prefix")
        return self.s3_prefix(bucket, prefix)

    def s3_prefix(self, bucket: IConstruct, prefix: str) -> GrantFindings:
        return self._ack(f"Resource::{arn_ref(self._policy, bucket)}/{prefix}",
                         f"objects are addressed by id under {prefix}; the grant stops at that prefix")

    def table_indexes(self, table: IConstruct) -> GrantFindings:
        return self._ack(f"Resource::{arn_ref(self._policy, table)}/index/*",
                         "CDK table grant: the table's own indexes (the trials table's team index), nothing else")

    def kms(self) -> GrantFindings:
        self._ack("Action::kms:GenerateDataKey*", "CDK key grant on the one data key that encrypts this data")
        return self._ack("Action::kms:ReEncrypt*", "CDK key grant on the one data key that encrypts this data")

    def xray(self) -> GrantFindings:
        return self._ack("Resource::*", "X-Ray PutTraceSegments/PutTelemetryRecords have no resource-level "
                                        "permissions (active tracing)")
