"""Managed EC2 Batch capacity for one accelerator family: launch templates, compute environments, one job queue.

Each instance type gets its own launch template and compute environment because EFA interface counts differ per
type (p5.48xlarge carries 32 network cards, trn2.48xlarge 16) and a launch template fixes them. Multi-node jobs
land in one cluster placement group. AMIs come from SSM public parameters as deploy-time tokens, never lookups.
"""

from __future__ import annotations

from aws_cdk import aws_batch as batch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from constructs import Construct

from infra.config import ComputeFamily, Track
from infra.constructs.nag import acknowledge
from lambdas.domain.catalogue import load_catalogue

_IMAGE_TYPE = {"gpu": batch.EcsMachineImageType.ECS_AL2023_NVIDIA, "trn2": batch.EcsMachineImageType.ECS_AL2023}


class AcceleratorCapacity(Construct):
    """Compute environments (on-demand, then optional Spot) behind one job queue for ``track``."""

    def __init__(self, scope: Construct, construct_id: str, *, track: Track, family: ComputeFamily,
                 vpc: ec2.IVpc, subnets: ec2.SubnetSelection, security_group: ec2.SecurityGroup) -> None:
        super().__init__(scope, construct_id)
        self.track = track
        image = ec2.MachineImage.from_ssm_parameter(family.ami_ssm_parameter)
        self.placement_group = ec2.PlacementGroup(self, "PlacementGroup", strategy=ec2.PlacementGroupStrategy.CLUSTER)
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

        ordered: list[batch.OrderedComputeEnvironment] = []
        catalogue = load_catalogue()
        for spot in (False, True) if family.spot else (False,):
            for instance_type in family.instance_types:
                info = catalogue.get(instance_type)
                suffix = f"{_camel(instance_type)}{'Spot' if spot else 'OnDemand'}"
                template = self._launch_template(f"Template{suffix}", info.efa_interfaces, family.root_volume_gib,
                                                 security_group)
                environment = batch.ManagedEc2EcsComputeEnvironment(
                    self, f"Env{suffix}",
                    vpc=vpc, vpc_subnets=subnets, security_groups=[security_group],
                    instance_types=[ec2.InstanceType(instance_type)],
                    use_optimal_instance_classes=False,
                    images=[batch.EcsMachineImage(image=image, image_type=_IMAGE_TYPE[track])],
                    launch_template=template,
                    placement_group=self.placement_group,
                    instance_role=self.instance_role,
                    minv_cpus=0, maxv_cpus=family.max_vcpus,
                    spot=spot,
                    allocation_strategy=(batch.AllocationStrategy.SPOT_PRICE_CAPACITY_OPTIMIZED if spot
                                         else batch.AllocationStrategy.BEST_FIT_PROGRESSIVE),
                    update_to_latest_image_version=False,
                    replace_compute_environment=False,
                )
                ordered.append(batch.OrderedComputeEnvironment(compute_environment=environment,
                                                               order=len(ordered) + 1))
        # On-demand environments come first; Spot only takes jobs once on-demand capacity is exhausted.
        self.queue = batch.JobQueue(self, "Queue", compute_environments=ordered, priority=10)

    def _launch_template(self, construct_id: str, efa_interfaces: int, root_volume_gib: int,
                         security_group: ec2.SecurityGroup) -> ec2.LaunchTemplate:
        template = ec2.LaunchTemplate(
            self, construct_id,
            require_imdsv2=True,
            block_devices=[ec2.BlockDevice(
                device_name="/dev/xvda",
                volume=ec2.BlockDeviceVolume.ebs(root_volume_gib, encrypted=True,
                                                 volume_type=ec2.EbsDeviceVolumeType.GP3,
                                                 delete_on_termination=True),
            )],
        )
        if efa_interfaces:
            cfn = template.node.default_child
            assert isinstance(cfn, ec2.CfnLaunchTemplate)
            # One EFA interface per network card; only the first carries the primary (device index 0) address.
            cfn.add_property_override("LaunchTemplateData.NetworkInterfaces", [
                {"NetworkCardIndex": card, "DeviceIndex": 0 if card == 0 else 1, "InterfaceType": "efa",
                 "Groups": [security_group.security_group_id], "DeleteOnTermination": True}
                for card in range(efa_interfaces)
            ])
        return template


def _camel(instance_type: str) -> str:
    return "".join(part.capitalize() for part in instance_type.replace(".", "-").split("-"))

