"""A private network for training jobs: no internet route, only the VPC endpoints the jobs and ECS agent use.

Two groups carry the jobs' traffic, and both must work:
- ``JobsSg`` is on the hosts' own interfaces (the compute environment's group, or each EFA interface's in the launch
  template): single-node jobs, the EFA traffic between hosts, and the ECS agent's calls.
- A multi-node parallel job's containers run in ``awsvpc`` mode on an interface of their own. Batch gives it "the
  security groups specified in your compute environment; if you don't specify a security group, the default security
  group for the VPC is used" (AWS Batch, "Compute environment considerations for multi-node parallel jobs"). An EFA
  compute environment cannot name groups (they go on the launch template's interfaces, aws-cdk #21577), so its
  nodes' rendezvous and their calls to the endpoints run in the VPC's default group. That group keeps AWS's own
  rules (all traffic between its members, all outbound): CDK's ``restrictDefaultSecurityGroup`` would strip them and
  leave the nodes unable to reach each other, the endpoints or S3. The subnets have no route out of the VPC, so
  "all outbound" reaches only the VPC's endpoints and hosts.

An interface endpoint bills for every hour it is provisioned in each zone (AWS PrivateLink pricing), whether or not
anything calls it, so the network has one only for a service something in these subnets calls, and only in the
zones the compute environments launch hosts into (:meth:`TrainingNetwork.add_interface_endpoints`). What calls what:
``tests/stacks/iam_calls.py`` lists the trainer's AWS calls (S3, CloudWatch ``PutMetricData``, Lambda ``Invoke``);
the hosts' ECS agent calls ECS, ECR and CloudWatch Logs (the ``awslogs`` driver). Nothing in the VPC calls STS: a
job's role credentials come from the ECS agent's credential endpoint, the instance role's from the instance
metadata service, and a job's own write credentials from the job-credentials function (a Lambda ``Invoke``). The
identity proof a job sends that function is an STS request the job only presigns (no network call); the function
runs outside the VPC and sends it to STS's public endpoint, as the control plane's functions reach every service.
"""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.constructs.nag import acknowledge

# Interface endpoints, each with what calls it from the training subnets. S3 (checkpoints, data, compile cache and
# the image layers ECR serves from S3) goes through the free gateway endpoint instead.
INTERFACE_ENDPOINTS: dict[str, ec2.InterfaceVpcEndpointAwsService] = {
    # Image pulls: the ECS agent's ECR API calls (authorization token, manifests) and the registry's Docker API.
    "EcrApi": ec2.InterfaceVpcEndpointAwsService.ECR,
    "EcrDocker": ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER,
    # The jobs' awslogs log driver (the job definitions' log groups).
    "Logs": ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,
    # The trainer's metrics (cloudwatch:PutMetricData from rank 0).
    "Monitoring": ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_MONITORING,
    # The trainer asks the plane's job-credentials function for its run's write credentials (lambda:InvokeFunction).
    "Lambda": ec2.InterfaceVpcEndpointAwsService.LAMBDA_,
    # The ECS agent on every Batch host: Amazon ECS needs all three ("Amazon ECS interface VPC endpoints").
    "Ecs": ec2.InterfaceVpcEndpointAwsService.ECS,
    "EcsAgent": ec2.InterfaceVpcEndpointAwsService.ECS_AGENT,
    "EcsTelemetry": ec2.InterfaceVpcEndpointAwsService.ECS_TELEMETRY,
}


class TrainingNetwork(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, cidr: str, log_retention: logs.RetentionDays,
                 log_key: kms.IKey, availability_zones: list[str] | None = None) -> None:
        super().__init__(scope, construct_id)
        # Trainium2 is offered in few zones: a stage names its zones, and each track may pin one of them.
        zones = {"availability_zones": availability_zones} if availability_zones else {"max_azs": 2}
        self.vpc = ec2.Vpc(
            self, "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(cidr),
            **zones,  # type: ignore[arg-type]
            nat_gateways=0,
            # The default group is the multi-node jobs' group on EFA capacity (see the module docstring).
            restrict_default_security_group=False,
            subnet_configuration=[
                ec2.SubnetConfiguration(name="jobs", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED, cidr_mask=20),
            ],
        )
        flow_logs = logs.LogGroup(self, "FlowLogs", retention=log_retention, encryption_key=log_key)
        self.vpc.add_flow_log("FlowLog", destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_logs))
        self.subnet_type = ec2.SubnetType.PRIVATE_ISOLATED
        self.subnets = ec2.SubnetSelection(subnet_type=self.subnet_type)
        self.vpc.add_gateway_endpoint("S3", service=ec2.GatewayVpcEndpointAwsService.S3, subnets=[self.subnets])

        endpoint_sg = ec2.SecurityGroup(self, "EndpointSg", vpc=self.vpc, allow_all_outbound=False,
                                        description="VPC interface endpoints: HTTPS from inside the VPC")
        endpoint_sg.add_ingress_rule(ec2.Peer.ipv4(self.vpc.vpc_cidr_block), ec2.Port.tcp(443),
                                     "HTTPS from training hosts")
        acknowledge(endpoint_sg, "AwsSolutions-EC23",
                    "ingress is HTTPS from the VPC's own CIDR only (a token cdk-nag cannot read), not 0.0.0.0/0")
        self._endpoint_sg = endpoint_sg

        # EFA needs all traffic between the nodes of a job, in and out, on the same security group.
        self.jobs_sg = ec2.SecurityGroup(self, "JobsSg", vpc=self.vpc, allow_all_outbound=False,
                                         description="training hosts: EFA between nodes, HTTPS to endpoints")
        self.jobs_sg.add_ingress_rule(self.jobs_sg, ec2.Port.all_traffic(), "EFA and NCCL between job nodes")
        self.jobs_sg.add_egress_rule(self.jobs_sg, ec2.Port.all_traffic(), "EFA and NCCL between job nodes")
        # The subnets have no internet route, so HTTPS anywhere reaches only the interface endpoints and S3's
        # gateway endpoint (whose regional prefix list has no CloudFormation attribute to reference).
        self.jobs_sg.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "HTTPS to VPC endpoints and S3")

    def add_interface_endpoints(self, zones: list[str] | None) -> None:
        """The interface endpoints, with a network interface in each of ``zones`` (None: every zone of the VPC).

        ``zones`` are the zones the compute environments launch hosts into: a zone no host runs in would bill its
        endpoint-hours for nothing. A host reaches an endpoint through its own zone's interface; private DNS
        resolves the service's name to the endpoint's interfaces."""
        subnets = ec2.SubnetSelection(subnet_type=self.subnet_type, availability_zones=zones)
        for name, service in INTERFACE_ENDPOINTS.items():
            self.vpc.add_interface_endpoint(name, service=service, subnets=subnets,
                                            security_groups=[self._endpoint_sg], private_dns_enabled=True)
