"""CloudWatch Logs retention from the stage's day count, the log groups of the functions CDK adds on its own, and
the key that encrypts a stack's logs and queues."""

from __future__ import annotations

import aws_cdk as cdk
import jsii
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct, IConstruct

_BY_DAYS = {
    1: logs.RetentionDays.ONE_DAY, 3: logs.RetentionDays.THREE_DAYS, 5: logs.RetentionDays.FIVE_DAYS,
    7: logs.RetentionDays.ONE_WEEK, 14: logs.RetentionDays.TWO_WEEKS, 30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS, 90: logs.RetentionDays.THREE_MONTHS, 120: logs.RetentionDays.FOUR_MONTHS,
    150: logs.RetentionDays.FIVE_MONTHS, 180: logs.RetentionDays.SIX_MONTHS, 365: logs.RetentionDays.ONE_YEAR,
    400: logs.RetentionDays.THIRTEEN_MONTHS, 545: logs.RetentionDays.EIGHTEEN_MONTHS,
    731: logs.RetentionDays.TWO_YEARS, 1827: logs.RetentionDays.FIVE_YEARS, 3653: logs.RetentionDays.TEN_YEARS,
}


def retention_days(days: int) -> logs.RetentionDays:
    try:
        return _BY_DAYS[days]
    except KeyError:
        raise ValueError(f"log retention of {days} days is not a CloudWatch Logs period; use one of "
                         f"{sorted(_BY_DAYS)}") from None


@jsii.implements(cdk.IAspect)
class ExpiringFunctionLogs:
    """Gives every Lambda function of a stack that names no log group one that expires after ``retention``,
    encrypted with the stack's log key (``log_key``).

    The functions CDK adds by itself (the bucket-notifications handler, custom-resource providers such as the one
    that restricts a VPC's default security group) name none, so Lambda writes to ``/aws/lambda/<name>``, a group
    it creates on the first invocation without retention: kept forever. The dualtrack functions name their own
    (``infra.constructs.functions``) and are left as they are.
    """

    def __init__(self, retention: logs.RetentionDays, key: kms.IKey) -> None:
        self._retention, self._key = retention, key

    def visit(self, node: IConstruct) -> None:
        if not isinstance(node, cdk.CfnResource) or node.cfn_resource_type != "AWS::Lambda::Function":
            return
        if isinstance(node, lambda_.CfnFunction):
            config = node.logging_config
            if config is not None and getattr(config, "log_group", None) is not None:
                return
        scope = node.node.scope
        assert isinstance(scope, Construct)
        group = logs.LogGroup(scope, f"{node.node.id}Logs", retention=self._retention, encryption_key=self._key)
        # The function refers to the group, so CloudFormation creates it first: no invocation makes the default one.
        node.add_property_override("LoggingConfig.LogGroup", group.log_group_name)


def log_key(scope: Construct, construct_id: str, description: str) -> kms.Key:
    """A customer managed key for the stack's log groups and queues.

    CloudWatch Logs encrypts with it only if the key policy lets the regional Logs service use it for log groups
    of this account and region (the ``aws:logs:arn`` encryption context); EventBridge sends to a KMS-encrypted
    dead-letter queue only if it may generate data keys with it.
    """
    key = kms.Key(scope, construct_id, enable_key_rotation=True, description=description)
    stack = cdk.Stack.of(scope)
    key.add_to_resource_policy(iam.PolicyStatement(
        sid="CloudWatchLogsEncryptsThisAccountsLogGroups",
        principals=[iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],
        actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
        resources=["*"],
        conditions={"ArnLike": {"kms:EncryptionContext:aws:logs:arn": stack.format_arn(
            service="logs", resource="log-group", resource_name="*",
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME)}},
    ))
    key.add_to_resource_policy(iam.PolicyStatement(
        sid="EventBridgeSendsToEncryptedDeadLetterQueues",
        principals=[iam.ServicePrincipal("events.amazonaws.com")],
        actions=["kms:Decrypt", "kms:GenerateDataKey"],
        resources=["*"],
        conditions={"StringEquals": {"aws:SourceAccount": stack.account}},
    ))
    return key
