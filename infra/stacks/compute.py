"""Training capacity: the private network, a Batch queue per accelerator family, the trainer job definitions."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from constructs import Construct

from infra.config import StageConfig
from infra.constructs.batch_compute import AcceleratorCapacity
from infra.constructs.job_definitions import TrainerJobDefinitions
from infra.constructs.network import TrainingNetwork
from infra.constructs.retention import retention_days
from infra.constructs.storage import TrialStorage


class ComputeStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str, *, config: StageConfig, storage: TrialStorage,
                 **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        retention = retention_days(config.log_retention_days)
        self.network = TrainingNetwork(self, "Network", cidr=config.vpc_cidr, log_retention=retention)
        self.capacity: dict[str, AcceleratorCapacity] = {}
        self.jobs: dict[str, TrainerJobDefinitions] = {}
        for track in ("gpu", "trn2"):
            family = getattr(config, track)
            self.capacity[track] = AcceleratorCapacity(
                self, f"{track.capitalize()}Capacity", track=track, family=family, vpc=self.network.vpc,
                subnets=self.network.subnets, security_group=self.network.jobs_sg,
            )
            self.jobs[track] = TrainerJobDefinitions(
                self, f"{track.capitalize()}Jobs", track=track, family=family,
                artifacts=storage.artifacts, compile_cache=storage.compile_cache,
                retry_attempts=config.max_attempts,
                attempt_timeout=cdk.Duration.seconds(int(config.attempt_timeout_hours * 3600)),
                log_retention=retention,
            )

