"""Everything that outlives a deployment: trial data buckets, the ledger and registries. RETAIN, protected."""

from __future__ import annotations

from typing import Unpack

import aws_cdk as cdk
from constructs import Construct

from infra.config import StageConfig
from infra.constructs.nag import acknowledge
from infra.constructs.retention import log_key
from infra.constructs.storage import TrialStorage
from infra.stacks import StackOptions


class StatefulStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str, *, config: StageConfig,
                 **kwargs: Unpack[StackOptions]) -> None:
        super().__init__(scope, construct_id, termination_protection=True, **kwargs)
        self.storage = TrialStorage(self, "Storage", noncurrent_version_days=config.noncurrent_version_days)
        # For the log group of CDK's bucket-notifications function (infra.constructs.retention.ExpiringFunctionLogs).
        self.log_key = log_key(self, "LogsKey", f"dualtrack {config.name}: logs of CDK's helper functions")
        # event_bridge_enabled is applied by a CDK-provided custom resource with its own function and role.
        for child in self.node.children:
            if child.node.id.startswith("BucketNotificationsHandler"):
                acknowledge(child.node.find_child("Role"),
                            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                            "AWSLambdaBasicExecutionRole]",
                            "CDK's bucket-notifications custom resource: it only writes its own logs with this")
