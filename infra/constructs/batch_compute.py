"""Managed EC2 Batch capacity for one accelerator family: per instance type a launch template, compute environments
and one job queue.

Each instance type gets its own queue because a job definition is sized for one type (vCPUs, memory, devices): a
queue that also held a smaller type could be sent jobs that never fit there. Launch templates differ per type too:
EFA interface counts do (p5.48xlarge carries 32 network cards, trn2.48xlarge 16), and Batch refuses a compute
environment that sends security groups while its launch template declares network interfaces, so the group goes on
the interfaces. Queues and their names are fixed per stage, track and type (:func:`infra.config.batch_name`); the
control plane refers to them by name, never by a cross-stack export.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import aws_cdk as cdk
import jsii
from aws_cdk import aws_batch as batch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from constructs import Construct

from infra.config import ComputeFamily, ConfigInvalid, Track, batch_name
from infra.constructs.nag import acknowledge
from lambdas.domain.neuron_stack import HOST_SHUTDOWN, host_driver_check, neuron_release
from lambdas.domain.trial.catalogue import InstanceInfo, load_catalogue
from lambdas.domain.vocabulary import COMPILE_QUEUE_SUFFIX

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES: dict[Track, str] = {"gpu": "containers/gpu/Dockerfile", "trn2": "containers/neuron/Dockerfile"}
SDK_IN_TAG = re.compile(r"-sdk(?P<sdk>\d+\.\d+(?:\.\d+)?)-")


def image_versions(track: Track, family: ComputeFamily) -> dict[str, str]:
    """The versions the track's trainer image pins: the stage's image_versions, and for the image built from
    containers/neuron the Neuron SDK its base image tag names (``...-sdk2.26.0-...``)."""
    versions: dict[str, str] = {str(name): value for name, value in family.image_versions.items()}
    if track == "trn2" and not family.image_uri and "neuron_sdk" not in versions:
        dockerfile = REPO_ROOT / DOCKERFILES[track]
        text = dockerfile.read_text() if dockerfile.exists() else ""
        base = re.search(r"^ARG BASE_IMAGE=(\S+)$", text, re.MULTILINE)
        found = SDK_IN_TAG.search(base.group(1)) if base else None
        if found:
            versions["neuron_sdk"] = found.group("sdk")
            try:  # a release not on record would deploy hosts checked against a guess
                neuron_release(versions["neuron_sdk"])
            except ValueError as exc:
                raise ConfigInvalid(f"{DOCKERFILES[track]}: BASE_IMAGE names Neuron SDK {versions['neuron_sdk']} "
                                    f"(-sdk{versions['neuron_sdk']}-): {exc}") from None
    return versions


_IMAGE_TYPE = {"gpu": batch.EcsMachineImageType.ECS_AL2023_NVIDIA, "trn2": batch.EcsMachineImageType.ECS_AL2023}
# Batch's ceiling for UpdatePolicy.jobExecutionTimeoutMinutes (API_UpdatePolicy).
MAX_UPDATE_TIMEOUT_MINUTES = 7200
# What a job waiting RUNNABLE is cancelled for (the three reasons Batch supports for job state time limits).
RUNNABLE_LIMIT_REASONS = (
    batch.JobStateTimeLimitActionsReason.INSUFFICIENT_INSTANCE_CAPACITY,
    batch.JobStateTimeLimitActionsReason.COMPUTE_ENVIRONMENT_MAX_RESOURCE,
    batch.JobStateTimeLimitActionsReason.JOB_RESOURCE_REQUIREMENT,
)


@jsii.implements(ec2.IMachineImage)
class PinnedImage:
    """An AMI given by id: unlike an SSM parameter, CloudFormation never re-resolves it on a later deploy."""

    def __init__(self, ami_id: str) -> None:
        self.ami_id = ami_id

    def get_image(self, scope: Construct) -> ec2.MachineImageConfig:
        return ec2.MachineImageConfig(image_id=self.ami_id, os_type=ec2.OperatingSystemType.LINUX,
                                      user_data=ec2.UserData.for_linux())


@dataclass(frozen=True)
class QueueTarget:
    """Where jobs for one instance type go: the queue's fixed name and whether multi-node jobs can run there."""

    instance_type: str
    queue_name: str
    multi_node: bool
    compile_queue_name: str | None = None  # the warm-up compile stage's queue (trn2), on the same hosts


class AcceleratorCapacity(Construct):
    """Per instance type of ``family``: on-demand (then optional Spot) compute environments behind one job queue."""

    def __init__(self, scope: Construct, construct_id: str, *, stage: str, track: Track, family: ComputeFamily,
                 vpc: ec2.IVpc, subnet_type: ec2.SubnetType, security_group: ec2.SecurityGroup,
                 attempt_timeout: cdk.Duration, compile_queue: bool = False) -> None:
        super().__init__(scope, construct_id)
        self.track = track
        self.family = family
        # A Trainium2 host checks its Neuron driver against the one its image's SDK release needs (an ECS Neuron AMI
        # carries whatever driver was current at its build: lambdas.domain.neuron_stack).
        sdk = image_versions(track, family).get("neuron_sdk") if track == "trn2" else None
        self.driver_check = host_driver_check(sdk) if sdk else ""
        image = (PinnedImage(family.ami_id) if family.ami_id
                 else ec2.MachineImage.from_ssm_parameter(str(family.ami_ssm_parameter)))
        if family.ami_id is None:
            cdk.Annotations.of(self).add_warning_v2(
                f"dualtrack:{track}-ami-unpinned",
                f"{track}.ami_ssm_parameter is read again at every deploy; when it moves, Batch replaces the hosts "
                f"(running jobs get the update timeout to finish). Set {track}.ami_id to pin the AMI.")
        zone = family.availability_zone
        # The zones the compute environments launch hosts into (None: every zone of the VPC); the network puts its
        # interface endpoints there and nowhere else.
        self.zones: list[str] | None = [zone] if zone else None
        subnets = ec2.SubnetSelection(subnet_type=subnet_type, availability_zones=self.zones)
        self.instance_role = iam.Role(
            self, "InstanceRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(
                "service-role/AmazonEC2ContainerServiceforEC2Role")],
        )
        acknowledge(self.instance_role,
                    "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                    "AmazonEC2ContainerServiceforEC2Role]",
                    "the AWS-maintained ECS container-instance policy is what the ECS agent on Batch hosts needs")
        # Let running jobs finish when a deploy changes the hosts (Batch's default gives them 30 minutes).
        update_timeout = cdk.Duration.minutes(min(MAX_UPDATE_TIMEOUT_MINUTES,
                                                  max(1, -(-int(attempt_timeout.to_seconds()) // 60))))

        self.queues: dict[str, batch.JobQueue] = {}
        self.targets: dict[str, QueueTarget] = {}
        catalogue = load_catalogue()
        for instance_type in family.instance_types:
            info = catalogue.get(instance_type)
            name = _camel(instance_type)
            template = self._launch_template(f"Template{name}", info, family, security_group)
            ordered: list[batch.OrderedComputeEnvironment] = []
            for spot in (False, True) if family.spot else (False,):
                env_id = f"Env{name}{'Spot' if spot else 'OnDemand'}"
                # A cluster placement group lives in one zone (without a zone, hosts spread and multi-node jobs are
                # off), and one per compute environment: EC2 advises one instance type per cluster placement group,
                # and a group that an on-demand and a Spot environment (or two instance types) launch into raises
                # the chance of an insufficient-capacity error for both.
                placement_group = (ec2.PlacementGroup(self, f"PlacementGroup{env_id.removeprefix('Env')}",
                                                      strategy=ec2.PlacementGroupStrategy.CLUSTER)
                                   if zone else None)
                environment = batch.ManagedEc2EcsComputeEnvironment(
                    self, env_id,
                    vpc=vpc, vpc_subnets=subnets,
                    security_groups=[security_group],
                    instance_types=[ec2.InstanceType(instance_type)],
                    use_optimal_instance_classes=False,
                    images=[batch.EcsMachineImage(image=image, image_type=_IMAGE_TYPE[track])],
                    launch_template=template,
                    placement_group=placement_group,
                    instance_role=self.instance_role,
                    # Warm capacity (off by default) keeps on-demand hosts running for the next job, the GPU
                    # fallback's first of all; they bill every hour (`dualtrack stage cost` prices them).
                    minv_cpus=0 if spot else family.warm_vcpus.get(instance_type, 0),
                    maxv_cpus=family.max_vcpus,
                    spot=spot,
                    allocation_strategy=(batch.AllocationStrategy.SPOT_PRICE_CAPACITY_OPTIMIZED if spot
                                         else batch.AllocationStrategy.BEST_FIT_PROGRESSIVE),
                    update_to_latest_image_version=False,
                    replace_compute_environment=False,
                    terminate_on_update=False,
                    update_timeout=update_timeout,
                )
                # Batch re-reads a template named by $Default/$Latest (or by no version) only during an
                # infrastructure update: pin the template's latest version number, so a change to the template
                # (reservation, Capacity Block, volume size) is itself a change of the environment that Batch
                # rolls onto its hosts (API LaunchTemplateSpecification; "Perform infrastructure updates").
                cfn_environment = environment.node.default_child
                assert isinstance(cfn_environment, batch.CfnComputeEnvironment)
                cfn_environment.add_property_override("ComputeResources.LaunchTemplate.Version",
                                                      template.latest_version_number)
                if info.efa_interfaces:
                    # Batch: "Either compute environment Security Groups or Network Interfaces in Launch template
                    # are exclusively allowed" — the group is on every EFA interface instead (aws-cdk #21577).
                    # The nodes of a multi-node job then run in the VPC's default group (network.py).
                    cfn_environment.add_property_deletion_override("ComputeResources.SecurityGroupIds")
                ordered.append(batch.OrderedComputeEnvironment(compute_environment=environment,
                                                               order=len(ordered) + 1))
            queue_name = batch_name(stage, track, instance_type)
            # On-demand first; Spot only takes jobs once on-demand capacity is exhausted. A job that waits RUNNABLE
            # for capacity (or can never be placed) is cancelled after the stage's wait, so the workflow's Catch
            # (the GPU fallback) takes over instead of waiting for the workflow timeout.
            self.queues[instance_type] = self._queue(f"Queue{name}", queue_name, ordered, priority=10)
            compile_name = None
            if compile_queue:
                # The warm-up compile stage's own queue on the same hosts: its jobs are told apart from training
                # (queue, run and tags), count against the compile quota, and wait behind training for a host. Not a
                # CPU environment: TorchNeuron documents torch.compile on Trn2/Trn3 hardware only (its FAQ: "No" to
                # compiling on an instance without Trainium hardware); docs/performance.md prices the difference.
                compile_name = batch_name(stage, track, instance_type, COMPILE_QUEUE_SUFFIX.lstrip("-"))
                self.queues[f"{instance_type}/compile"] = self._queue(f"CompileQueue{name}", compile_name, ordered,
                                                                      priority=5)
            # Multi-node jobs need on-demand hosts in one zone's cluster placement group, with EFA between them.
            multi_node = bool(zone) and not family.spot and info.efa_interfaces > 0
            self.targets[instance_type] = QueueTarget(instance_type, queue_name, multi_node, compile_name)

    def _queue(self, construct_id: str, name: str, environments: list[batch.OrderedComputeEnvironment], *,
               priority: int) -> batch.JobQueue:
        return batch.JobQueue(
            self, construct_id, job_queue_name=name, compute_environments=environments, priority=priority,
            job_state_time_limit_actions=[
                batch.JobStateTimeLimitAction(
                    max_time=cdk.Duration.minutes(self.family.runnable_timeout_minutes), reason=reason,
                    action=batch.JobStateTimeLimitActionsAction.CANCEL,
                    state=batch.JobStateTimeLimitActionsState.RUNNABLE)
                for reason in RUNNABLE_LIMIT_REASONS
            ],
        )

    def _launch_template(self, construct_id: str, info: InstanceInfo, family: ComputeFamily,
                         security_group: ec2.SecurityGroup) -> ec2.LaunchTemplate:
        template = ec2.LaunchTemplate(
            self, construct_id,
            require_imdsv2=True,
            user_data=host_user_data(info.efa_interfaces, self.driver_check),
            # A host whose boot checks fail shuts itself down (host_user_data): terminated, not stopped, so that the
            # compute environment launches a replacement (lambdas.domain.neuron_stack.HOST_SHUTDOWN).
            instance_initiated_shutdown_behavior=ec2.InstanceInitiatedShutdownBehavior.TERMINATE,
            block_devices=[ec2.BlockDevice(
                device_name="/dev/xvda",
                volume=ec2.BlockDeviceVolume.ebs(family.root_volume_gib, encrypted=True,
                                                 volume_type=ec2.EbsDeviceVolumeType.GP3,
                                                 delete_on_termination=True),
            )],
        )
        cfn = template.node.default_child
        assert isinstance(cfn, ec2.CfnLaunchTemplate)
        if info.efa_interfaces:
            # One EFA interface per network card; only the first carries the primary (device index 0) address.
            cfn.add_property_override("LaunchTemplateData.NetworkInterfaces", [
                {"NetworkCardIndex": card, "DeviceIndex": 0 if card == 0 else 1, "InterfaceType": "efa",
                 "Groups": [security_group.security_group_id], "DeleteOnTermination": True}
                for card in range(info.efa_interfaces)
            ])
        if family.capacity_reservation_id:
            # Hosts launch into the reservation (an On-Demand Capacity Reservation, or a Capacity Block for ML
            # with its own market type); Batch reads both from the launch template.
            cfn.add_property_override("LaunchTemplateData.CapacityReservationSpecification", {
                "CapacityReservationTarget": {"CapacityReservationId": family.capacity_reservation_id}})
            if family.capacity_block:
                cfn.add_property_override("LaunchTemplateData.InstanceMarketOptions",
                                          {"MarketType": "capacity-block"})
        return template


# Batch runs EFA jobs only where "The AMI has the EFA driver loaded" (AWS Batch, "Elastic Fabric Adapter"). The
# ECS-optimized AL2023 AMIs (standard, GPU, Neuron) do not run the EFA installer; the AL2023 kernel carries the efa
# and ib_uverbs modules, which create the /dev/infiniband/uverbs<N> devices the job definitions map. The hosts
# load them at boot and check one device per EFA interface; a host where a device is missing says so on its
# console and in /var/log/dualtrack-efa.log, and shuts itself down (HOST_SHUTDOWN, with the launch template's
# InstanceInitiatedShutdownBehavior terminate) so that its compute environment replaces it instead of placing jobs
# that cannot start there. Batch takes launch template user data only as a MIME multi-part archive (AWS Batch,
# "Launch template support").
def efa_setup(interfaces: int, *, device_dir: str = "/dev/infiniband", log_file: str = "/var/log/dualtrack-efa.log",
              console: str = "/dev/console") -> str:
    """The EFA part of the host set-up for an instance type with ``interfaces`` EFA interfaces (bash)."""
    q = shlex.quote
    return f"""\
set -u
log() {{ echo "dualtrack-efa: $*" | tee -a {q(log_file)} > {q(console)}; }}
modprobe efa || log "modprobe efa failed: this AMI's kernel has no EFA driver"
modprobe ib_uverbs || log "modprobe ib_uverbs failed"
udevadm settle --timeout=30 || true  # the device nodes appear once udev has handled the modules
missing=0
for index in $(seq 0 {interfaces - 1}); do
  [ -e {q(device_dir)}/uverbs$index ] || {{ log "{device_dir}/uverbs$index is missing"; missing=1; }}
done
if [ "$missing" != 0 ]; then
  log "EFA set-up failed; shutting this host down for its compute environment to replace it"
  {HOST_SHUTDOWN}
  exit 1
fi
log "EFA driver loaded: {interfaces} uverbs device(s)"
"""


def host_user_data(efa_interfaces: int, driver_check: str = "") -> ec2.MultipartUserData | None:
    """The host set-up: for an EFA instance type, load the EFA driver and check every interface's device; on a
    Trainium2 host, check the Neuron driver (``driver_check``). Each is its own part, so one failing does not skip
    the other; a failed check shuts the host down. None when there is nothing to set up."""
    scripts = ([efa_setup(efa_interfaces)] if efa_interfaces else []) + ([driver_check] if driver_check else [])
    if not scripts:
        return None
    archive = ec2.MultipartUserData()
    for text in scripts:
        script = ec2.UserData.for_linux()
        script.add_commands(text)
        archive.add_user_data_part(script, ec2.MultipartBody.SHELL_SCRIPT, True)
    return archive


def _camel(instance_type: str) -> str:
    return "".join(part.capitalize() for part in instance_type.replace(".", "-").split("-"))
