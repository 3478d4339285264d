"""Training capacity: the private network, per instance type a Batch queue and job definitions, per track.

Only the tracks the stage offers exist (a region without Trainium2 has no trn2 capacity). The control stack refers
to queues and job definitions by their fixed names (:attr:`ComputeStack.targets`), so nothing here is exported.
"""

from __future__ import annotations

from typing import Unpack

import aws_cdk as cdk
from constructs import Construct

from infra.config import StageConfig, Track
from infra.constructs.batch_compute import AcceleratorCapacity
from infra.constructs.job_definitions import TrainerJobDefinitions
from infra.constructs.network import TrainingNetwork
from infra.constructs.retention import log_key, retention_days
from infra.constructs.storage import TrialStorage
from infra.stacks import StackOptions
from lambdas.domain.trial.job_targets import JobTarget


class ComputeStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str, *, config: StageConfig, storage: TrialStorage,
                 **kwargs: Unpack[StackOptions]) -> None:
        super().__init__(scope, construct_id, **kwargs)
        retention = retention_days(config.log_retention_days)
        self.log_key = log_key(self, "LogsKey", f"dualtrack {config.name}: training job and flow logs")
        self.network = TrainingNetwork(self, "Network", cidr=config.vpc_cidr, log_retention=retention,
                                       log_key=self.log_key, availability_zones=config.availability_zones)
        attempt_timeout = cdk.Duration.seconds(config.attempt_timeout_s)
        self.capacity: dict[Track, AcceleratorCapacity] = {}
        self.jobs: dict[Track, TrainerJobDefinitions] = {}
        for track in config.tracks():
            family = config.family(track)
            self.capacity[track] = AcceleratorCapacity(
                self, f"{track.capitalize()}Capacity", stage=config.name, track=track, family=family,
                vpc=self.network.vpc, subnet_type=self.network.subnet_type, security_group=self.network.jobs_sg,
                attempt_timeout=attempt_timeout, compile_queue=track == "trn2" and config.compile_stage,
            )
            self.jobs[track] = TrainerJobDefinitions(
                self, f"{track.capitalize()}Jobs", stage=config.name, track=track, family=family,
                queues=self.capacity[track].targets,
                compile_cache=storage.compile_cache,
                data_buckets=config.data_buckets, data_keys=config.data_kms_key_arns,
                retry_attempts=config.max_attempts, attempt_timeout=attempt_timeout,
                log_retention=retention, log_key=self.log_key,
            )

        # Interface endpoints only where hosts run: a zone no compute environment uses would bill endpoint-hours
        # for nothing (the zones of a track without a pinned zone are all the stage's).
        zones = [capacity.zones for capacity in self.capacity.values()]
        self.network.add_interface_endpoints(
            None if any(z is None for z in zones) else sorted({zone for z in zones if z for zone in z}))

    @property
    def image_versions(self) -> dict[Track, dict[str, str]]:
        """Per track, the versions its trainer image pins (the control plane checks trials against them)."""
        return {track: jobs.image_versions for track, jobs in self.jobs.items() if jobs.image_versions}

    @property
    def targets(self) -> dict[Track, dict[str, JobTarget]]:
        """Per track and instance type, the queue and job definition names the workflow submits to."""
        return {track: jobs.targets for track, jobs in self.jobs.items()}
