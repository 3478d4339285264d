"""Trainer job definitions per track and instance type: single-node and multi-node parallel, one retry policy.

Each definition is sized for one instance type (the whole host: every GPU or Neuron device, its vCPUs and memory
less the agent's share) and has a fixed name (:func:`infra.config.batch_name`), so the control plane submits by name
(the latest ACTIVE revision) and a new image never changes anything another stack imports. The container runs the
image's ENTRYPOINT (``python -m trainer``) with the definition's command replacing only the image's CMD.

The retry policy encodes the trainer's exit-code contract: 75 is a planned, resumable fault and a Spot reclaim
(`Host EC2*`) is the platform's fault, so both RETRY (the next attempt resumes from the newest checkpoint); every
other exit, including the permanent-fault code 76, EXITs so the workflow's GPU fallback takes over at once.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_batch as batch
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.config import ComputeFamily, Track, batch_name
from infra.constructs.batch_compute import DOCKERFILES, REPO_ROOT, QueueTarget, image_versions
from infra.constructs.nag import GrantFindings, acknowledge
from lambdas.domain import job_access, telemetry
from lambdas.domain.trial.catalogue import InstanceInfo, load_catalogue
from lambdas.domain.trial.job_targets import JobTarget
from lambdas.domain.vocabulary import FAULT_EXIT_CODE, trn2_backend


def trainer_backend(track: Track, versions: dict[str, str]) -> str:
    """The backend the track's image runs: CUDA, or on Trainium2 the stack its Neuron SDK carries (TorchNeuron; the
    retired PyTorch/XLA up to SDK 2.31)."""
    return "cuda" if track == "gpu" else trn2_backend(versions.get("neuron_sdk"))
# The image build context is the repository root, but the images copy only lambdas/ and containers/: send just
# those (an allow-list), so unrelated files never change the image hash or slow the upload.
CONTEXT_EXCLUDES = ["*", "!lambdas", "!containers", "**/__pycache__", "**/*.pyc", "**/.mypy_cache",
                    "**/.pytest_cache"]
# The job's command replaces the image's CMD; the ENTRYPOINT (python -m trainer) stays. See containers/*/Dockerfile.
# `launch` starts one training rank per device of the instance (every GPU; every logical NeuronCore), across the
# nodes of a multi-node job, so a job trains on everything it is billed for.
TRAINER_COMMAND = ["launch"]
# A multi-node job gets its run's settings as job parameters (Step Functions' Batch integration passes SubmitJob's
# Parameters, never node overrides); Batch substitutes each Ref::name in the command. Optional ones default to
# "none", which the trainer reads as not given.
MULTI_NODE_PARAMETERS = {"spec_uri": "--spec", "run_dir": "--run-dir", "run": "--run", "trial_id": "--trial-id",
                         "resume_from": "--resume-from"}
MULTI_NODE_DEFAULTS: dict[Track, dict[str, str]] = {"gpu": {"resume_from": "none"},
                                                     "trn2": {"resume_from": "none", "compile_cache_url": "none"}}


def multi_node_command(track: Track) -> list[str]:
    names = {**MULTI_NODE_PARAMETERS, **({"compile_cache_url": "--compile-cache-url"} if track == "trn2" else {})}
    return [*TRAINER_COMMAND, *(part for name, flag in names.items() for part in (flag, f"Ref::{name}"))]


# Batch's EFA device for multi-node jobs (one uverbs device per EFA interface) and the permissions it requires.
EFA_DEVICE = "/dev/infiniband/uverbs{index}"


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
    # The hosts are x86_64; building on an arm64 laptop must still produce an amd64 image.
    return ecs.ContainerImage.from_asset(str(REPO_ROOT), file=dockerfile, exclude=CONTEXT_EXCLUDES,
                                         platform=ecr_assets.Platform.LINUX_AMD64)


class TrainerJobDefinitions(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, stage: str, track: Track, family: ComputeFamily,
                 queues: dict[str, QueueTarget], compile_cache: s3.IBucket,
                 data_buckets: list[str], data_keys: list[str], retry_attempts: int,
                 attempt_timeout: cdk.Duration, log_retention: logs.RetentionDays, log_key: kms.IKey) -> None:
        super().__init__(scope, construct_id)
        catalogue = load_catalogue()
        self.image_versions = image_versions(track, family)
        self.job_role = iam.Role(self, "JobRole", assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"),
                                 description=f"dualtrack {track} trainer")
        # No access to trials/ of its own: a job writes its own run's prefix only, with credentials the plane's
        # credentials function issues to it (lambdas/domain/job_access.py). Compile-cache entries are shared by
        # design for reading; the one entry a run was sent to build is written with those credentials too, never
        # with this role (any job could otherwise rewrite any team's entry).
        credentials_function = job_access.function_name(stage)
        self.job_role.add_to_principal_policy(iam.PolicyStatement(
            actions=["lambda:InvokeFunction"],
            resources=[cdk.Stack.of(self).format_arn(service="lambda", resource="function",
                                                     resource_name=credentials_function,
                                                     arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME)]))
        compile_cache.grant_read(self.job_role, "neuron/*")
        self.job_role.add_to_principal_policy(iam.PolicyStatement(
            actions=["cloudwatch:PutMetricData"], resources=["*"],
            conditions={"StringEquals": {"cloudwatch:namespace": telemetry.NAMESPACE}},
        ))
        findings = GrantFindings(self.job_role).kms().s3_read(compile_cache, "neuron/*")
        if data_buckets:
            # Teams' datasets and weights: read-only, whole bucket (the API refuses URIs outside these buckets).
            self.job_role.add_to_principal_policy(iam.PolicyStatement(
                actions=["s3:GetObject", "s3:GetObjectVersion"],
                resources=[f"arn:{cdk.Aws.PARTITION}:s3:::{bucket}/*" for bucket in data_buckets]))
            self.job_role.add_to_principal_policy(iam.PolicyStatement(
                actions=["s3:ListBucket", "s3:GetBucketLocation"],
                resources=[f"arn:{cdk.Aws.PARTITION}:s3:::{bucket}" for bucket in data_buckets]))
            for bucket in data_buckets:
                findings.wildcard(f"Resource::arn:<AWS::Partition>:s3:::{bucket}/*",
                                              "read-only access to a data bucket the stage lists in data_buckets")
        if data_keys:
            self.job_role.add_to_principal_policy(iam.PolicyStatement(
                actions=["kms:Decrypt", "kms:DescribeKey"], resources=list(data_keys)))
        acknowledge(self.job_role.node.find_child("DefaultPolicy"), "AwsSolutions-IAM5[Resource::*]",
                    "cloudwatch:PutMetricData has no resource-level permissions; it is limited to the "
                    "Dualtrack namespace by condition")
        # One execution role (image pull, log delivery) for every container of this track.
        self.execution_role = iam.Role(self, "ExecutionRole",
                                       assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"),
                                       description=f"dualtrack {track} trainer: image pull and logs")
        self.log_group = logs.LogGroup(self, "Logs", retention=log_retention, encryption_key=log_key)
        image = trainer_image(self, track, family)
        # Each node fetches its credentials once and shares them with its processes (64 per trn2 node): a whole
        # job's ranks calling the credentials function at once would meet a new account's Lambda concurrency.
        environment = {"DUALTRACK_TRACK": track, "DUALTRACK_BACKEND": trainer_backend(track, self.image_versions),
                       job_access.FUNCTION_ENV: credentials_function, job_access.PER_NODE_ENV: "1",
                       "PYTHONUNBUFFERED": "1"}

        def container(construct_id: str, instance_type: str, *, efa: bool,
                      command: list[str] | None = None) -> batch.EcsEc2ContainerDefinition:
            info = catalogue.get(instance_type)
            linux = batch.LinuxParameters(self, f"{construct_id}Linux",
                                          shared_memory_size=cdk.Size.gibibytes(64))
            if track == "trn2":
                for index in range(info.accelerators):
                    linux.add_devices(batch.Device(
                        host_path=f"/dev/neuron{index}", container_path=f"/dev/neuron{index}",
                        permissions=[batch.DevicePermission.READ, batch.DevicePermission.WRITE],
                    ))
            if efa:
                for index in range(info.efa_interfaces):
                    path = EFA_DEVICE.format(index=index)
                    linux.add_devices(batch.Device(
                        host_path=path, container_path=path,
                        permissions=[batch.DevicePermission.READ, batch.DevicePermission.WRITE,
                                     batch.DevicePermission.MKNOD],
                    ))
            return batch.EcsEc2ContainerDefinition(
                self, construct_id,
                image=image,
                command=command or TRAINER_COMMAND,
                cpu=job_vcpus(info),
                memory=cdk.Size.mebibytes(job_memory_mib(info)),
                gpu=info.accelerators if track == "gpu" else None,
                linux_parameters=linux,
                ulimits=[batch.Ulimit(name=batch.UlimitName.MEMLOCK, soft_limit=-1, hard_limit=-1)],
                environment={**environment, "DUALTRACK_INSTANCE_TYPE": instance_type},
                job_role=self.job_role,
                execution_role=self.execution_role,
                logging=ecs.LogDriver.aws_logs(stream_prefix=f"trainer-{track}", log_group=self.log_group),
            )

        self.targets: dict[str, JobTarget] = {}
        self.single_node: dict[str, batch.EcsJobDefinition] = {}
        self.multi_node: dict[tuple[str, int], batch.MultiNodeJobDefinition] = {}
        for instance_type, queue in queues.items():
            name = _camel(instance_type)
            single_name = batch_name(stage, track, instance_type, "single")
            self.single_node[instance_type] = batch.EcsJobDefinition(
                self, f"SingleNode{name}",
                job_definition_name=single_name,
                container=container(f"SingleNode{name}Container", instance_type, efa=False),
                propagate_tags=True,
                retry_attempts=retry_attempts,
                retry_strategies=retry_strategies(),
                timeout=attempt_timeout,
                # Jobs queued or retrying on the previous revision keep it; a deploy only adds a revision.
                skip_deregister_on_update=True,
            )
            multi_names: dict[int, str] = {}
            for nodes in sorted(set(family.multi_node_counts)) if queue.multi_node else ():
                multi_names[nodes] = batch_name(stage, track, instance_type, f"multi-{nodes}")
                self.multi_node[(instance_type, nodes)] = batch.MultiNodeJobDefinition(
                    self, f"MultiNode{name}N{nodes}",
                    job_definition_name=multi_names[nodes],
                    instance_type=cdk.aws_ec2.InstanceType(instance_type),
                    containers=[batch.MultiNodeContainer(
                        start_node=0, end_node=nodes - 1,
                        container=container(f"MultiNode{name}N{nodes}Container", instance_type, efa=True,
                                            command=multi_node_command(track)))],
                    main_node=0,
                    # Step Functions passes no container or node overrides to a multi-node job: the run's
                    # settings are job parameters, substituted into the command (Ref::name); these are defaults.
                    parameters=dict(MULTI_NODE_DEFAULTS[track]),
                    propagate_tags=True,
                    retry_attempts=retry_attempts,
                    retry_strategies=retry_strategies(),
                    timeout=attempt_timeout,
                    skip_deregister_on_update=True,  # as the single-node definitions: queued jobs keep theirs
                )
            self.targets[instance_type] = JobTarget(queue=queue.queue_name, single_node=single_name,
                                                    multi_node=multi_names, compile_queue=queue.compile_queue_name)
        policy = self.execution_role.node.try_find_child("DefaultPolicy")
        if policy is not None:  # only an image built from containers/ needs ECR pull rights
            acknowledge(policy, "AwsSolutions-IAM5[Resource::*]",
                        "ecr:GetAuthorizationToken has no resource-level permissions; image pulls themselves are "
                        "limited to the asset repository")


def job_vcpus(info: InstanceInfo) -> int:
    """All of the host's vCPUs but four, left to the ECS agent, Docker and the OS."""
    return max(1, info.vcpus - 4)


def job_memory_mib(info: InstanceInfo) -> int:
    """90 % of the nominal memory: a host registers less than it is sold with (the agent and OS keep some), and
    Batch never places a job asking for more than a host registers."""
    return int(info.memory_gib * 1024 * 0.9)


def _camel(instance_type: str) -> str:
    return "".join(part.capitalize() for part in instance_type.replace(".", "-").split("-"))
