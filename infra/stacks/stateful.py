"""Everything that outlives a deployment: trial data buckets, the ledger and registries. RETAIN, protected."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from constructs import Construct

from infra.config import StageConfig
from infra.constructs.storage import TrialStorage


class StatefulStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str, *, config: StageConfig, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, termination_protection=True, **kwargs)
        self.storage = TrialStorage(self, "Storage", noncurrent_version_days=config.noncurrent_version_days)
