"""Trainer job definitions per track: single-node and multi-node parallel, one retry policy for all of them.

The retry policy encodes the trainer's exit-code contract: 75 is a planned, resumable fault and a Spot reclaim
(`Host EC2*`) is the platform's fault, so both RETRY (the next attempt resumes from the newest checkpoint); every
other exit, including the permanent-fault code 76, EXITs so the workflow's GPU fallback takes over at once.
"""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_batch as batch
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.config import ComputeFamily, Track
from infra.constructs.nag import GrantFindings, acknowledge
from lambdas.domain import telemetry
from lambdas.domain.catalogue import load_catalogue

REPO_ROOT = Path(__file__).resolve().parents[2]
FAULT_EXIT_CODE = 75
PERMANENT_FAULT_EXIT_CODE = 76
DOCKERFILES: dict[Track, str] = {"gpu": "containers/gpu/Dockerfile", "trn2": "containers/neuron/Dockerfile"}
BACKENDS: dict[Track, str] = {"gpu": "cuda", "trn2": "neuron"}
# The image build context is the repository root, but the images copy only lambdas/ and containers/: send just
# those (an allow-list), so unrelated files never change the image hash or slow the upload.
CONTEXT_EXCLUDES = ["*", "!lambdas", "!containers", "**/__pycache__", "**/*.pyc", "**/.mypy_cache",
                    "**/.pytest_cache"]
TRAINER_COMMAND = ["python", "-m", "trainer", "run"]


def retry_strategies() -> list[batch.RetryStrategy]:
    return [
        batch.RetryStrategy.of(batch.Action.RETRY, batch.Reason.custom(on_exit_code=str(FAULT_EXIT_CODE))),
        batch.RetryStrategy.of(batch.Action.RETRY, batch.Reason.SPOT_INSTANCE_RECLAIMED),
        batch.RetryStrategy.of(batch.Action.EXIT, batch.Reason.custom(on_exit_code="*")),
    ]


def trainer_image(scope: Construct, track: Track, family: ComputeFamily) -> ecs.ContainerImage:
    """The pinned image if the stage names one, else the image built from ``containers/`` at deploy time."""
    if family.image_uri:
        return ecs.ContainerImage.from_registry(family.image_uri)
    dockerfile = DOCKERFILES[track]
    if not (REPO_ROOT / dockerfile).exists():
        cdk.Annotations.of(scope).add_warning_v2(
            f"dualtrack:missing-{track}-dockerfile",
            f"{dockerfile} does not exist: set {track}.image_uri in the stage config or add the Dockerfile "
            "before deploying; the job definition points at a placeholder image until then",
        )
        return ecs.ContainerImage.from_registry(f"dualtrack-trainer-{track}:dockerfile-missing")
    return ecs.ContainerImage.from_asset(str(REPO_ROOT), file=dockerfile, exclude=CONTEXT_EXCLUDES)


class TrainerJobDefinitions(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, track: Track, family: ComputeFamily,
                 artifacts: s3.IBucket, compile_cache: s3.IBucket, retry_attempts: int,
                 attempt_timeout: cdk.Duration, log_retention: logs.RetentionDays) -> None:
        super().__init__(scope, construct_id)
        info = load_catalogue().get(family.instance_types[0])
        self.job_role = iam.Role(self, "JobRole", assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"),
                                 description=f"dualtrack {track} trainer")
        # Read and write, never delete: checkpoints and cache entries are append-only (manifest written last).
        artifacts.grant_read(self.job_role, "trials/*")
        artifacts.grant_put(self.job_role, "trials/*")
        compile_cache.grant_read(self.job_role, "neuron/*")
        compile_cache.grant_put(self.job_role, "neuron/*")
        self.job_role.add_to_principal_policy(iam.PolicyStatement(
            actions=["cloudwatch:PutMetricData"], resources=["*"],
            conditions={"StringEquals": {"cloudwatch:namespace": telemetry.NAMESPACE}},
        ))
        (GrantFindings(self.job_role).kms().s3_read(artifacts, "trials/*").s3_put(artifacts, "trials/*")
         .s3_read(compile_cache, "neuron/*").s3_put(compile_cache, "neuron/*"))
        acknowledge(self.job_role.node.find_child("DefaultPolicy"), "AwsSolutions-IAM5[Resource::*]",
                    "cloudwatch:PutMetricData has no resource-level permissions; it is limited to the "
                    "Dualtrack namespace by condition")
        # One execution role (image pull, log delivery) for every container of this track.
        self.execution_role = iam.Role(self, "ExecutionRole",
                                       assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"),
                                       description=f"dualtrack {track} trainer: image pull and logs")
        self.log_group = logs.LogGroup(self, "Logs", retention=log_retention)
        image = trainer_image(self, track, family)
        environment = {"DUALTRACK_TRACK": track, "DUALTRACK_BACKEND": BACKENDS[track],
                       "PYTHONUNBUFFERED": "1"}

        def container(construct_id: str) -> batch.EcsEc2ContainerDefinition:
            linux = batch.LinuxParameters(self, f"{construct_id}Linux",
                                          shared_memory_size=cdk.Size.gibibytes(64))
            if track == "trn2":
                for index in range(info.accelerators):
                    linux.add_devices(batch.Device(
                        host_path=f"/dev/neuron{index}", container_path=f"/dev/neuron{index}",
                        permissions=[batch.DevicePermission.READ, batch.DevicePermission.WRITE],
                    ))
            return batch.EcsEc2ContainerDefinition(
                self, construct_id,
                image=image,
                command=TRAINER_COMMAND,
                cpu=max(1, info.vcpus - 4),
                # Leave room for the ECS agent and the OS: Batch refuses jobs asking for all host memory.
                memory=cdk.Size.mebibytes(int(info.memory_gib * 1024 * 0.9)),
                gpu=info.accelerators if track == "gpu" else None,
                linux_parameters=linux,
                ulimits=[batch.Ulimit(name=batch.UlimitName.MEMLOCK, soft_limit=-1, hard_limit=-1)],
                environment=environment,
                job_role=self.job_role,
                execution_role=self.execution_role,
                logging=ecs.LogDriver.aws_logs(stream_prefix=f"trainer-{track}", log_group=self.log_group),
            )

        self.single_node = batch.EcsJobDefinition(
            self, "SingleNode",
            container=container("SingleNodeContainer"),
            propagate_tags=True,
            retry_attempts=retry_attempts,
            retry_strategies=retry_strategies(),
            timeout=attempt_timeout,
        )
        self.multi_node = self._multi_node(container("NodeContainer"), family, retry_attempts, attempt_timeout)
        policy = self.execution_role.node.try_find_child("DefaultPolicy")
        if policy is not None:  # only an image built from containers/ needs ECR pull rights
            acknowledge(policy, "AwsSolutions-IAM5[Resource::*]",
                        "ecr:GetAuthorizationToken has no resource-level permissions; image pulls themselves are "
                        "limited to the asset repository")

    def _multi_node(self, node: batch.EcsEc2ContainerDefinition, family: ComputeFamily, retry_attempts: int,
                    attempt_timeout: cdk.Duration) -> batch.MultiNodeJobDefinition:
        return batch.MultiNodeJobDefinition(
            self, "MultiNode",
            instance_type=cdk.aws_ec2.InstanceType(family.instance_types[0]),
            containers=[batch.MultiNodeContainer(start_node=0, end_node=1, container=node)],
            main_node=0,
            propagate_tags=True,
            retry_attempts=retry_attempts,
            retry_strategies=retry_strategies(),
            timeout=attempt_timeout,
        )
