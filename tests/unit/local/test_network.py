"""The rehearsal's model of the VPC (dualtrack.local.aws.network) on small templates: the rules AWS applies to a job's
calls and to the nodes of a multi-node job, each with the page it comes from."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from dualtrack.local.aws.network import JobNetwork, VpcModel

REGION = "us-east-1"
SUBNET = {"Ref": "Subnet"}
JOBS_SG = {"Fn::GetAtt": ["JobsSg", "GroupId"]}
ENDPOINT_SG = {"Fn::GetAtt": ["EndpointSg", "GroupId"]}


def _endpoint(name: str) -> dict[str, Any]:
    return {"Type": "AWS::EC2::VPCEndpoint", "Properties": {
        "VpcEndpointType": "Interface", "ServiceName": f"com.amazonaws.{REGION}.{name}", "SubnetIds": [SUBNET],
        "SecurityGroupIds": [ENDPOINT_SG], "PrivateDnsEnabled": True}}


def _template(*, efa: bool = True, endpoints: tuple[str, ...] = ("lambda", "monitoring")) -> dict[str, Any]:
    """A VPC like the compute stack's: one isolated subnet, S3's gateway endpoint, interface endpoints behind a
    group admitting HTTPS from the VPC, a jobs group, and one queue on one compute environment."""
    resources: dict[str, Any] = {
        "Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.40.0.0/16"}},
        "Subnet": {"Type": "AWS::EC2::Subnet", "Properties": {"CidrBlock": "10.40.0.0/20", "VpcId": {"Ref": "Vpc"}}},
        "Table": {"Type": "AWS::EC2::RouteTable", "Properties": {"VpcId": {"Ref": "Vpc"}}},
        "Assoc": {"Type": "AWS::EC2::SubnetRouteTableAssociation",
                  "Properties": {"SubnetId": SUBNET, "RouteTableId": {"Ref": "Table"}}},
        "S3": {"Type": "AWS::EC2::VPCEndpoint", "Properties": {
            "ServiceName": {"Fn::Join": ["", ["com.amazonaws.", {"Ref": "AWS::Region"}, ".s3"]]},
            "RouteTableIds": [{"Ref": "Table"}]}},
        "EndpointSg": {"Type": "AWS::EC2::SecurityGroup", "Properties": {"SecurityGroupIngress": [
            {"CidrIp": {"Fn::GetAtt": ["Vpc", "CidrBlock"]}, "IpProtocol": "tcp", "FromPort": 443, "ToPort": 443}]}},
        "JobsSg": {"Type": "AWS::EC2::SecurityGroup", "Properties": {"SecurityGroupEgress": [
            {"CidrIp": "0.0.0.0/0", "IpProtocol": "tcp", "FromPort": 443, "ToPort": 443}]}},
        "JobsSelf": {"Type": "AWS::EC2::SecurityGroupIngress", "Properties": {
            "GroupId": JOBS_SG, "SourceSecurityGroupId": JOBS_SG, "IpProtocol": "-1"}},
        "Template": {"Type": "AWS::EC2::LaunchTemplate", "Properties": {"LaunchTemplateData": (
            {"NetworkInterfaces": [{"DeviceIndex": 0, "InterfaceType": "efa", "Groups": [JOBS_SG]}]} if efa else {})}},
        "Env": {"Type": "AWS::Batch::ComputeEnvironment", "Properties": {"ComputeResources": {
            "Subnets": [SUBNET], **({} if efa else {"SecurityGroupIds": [JOBS_SG]}),
            "LaunchTemplate": {"LaunchTemplateId": {"Ref": "Template"}}}}},
        "Queue": {"Type": "AWS::Batch::JobQueue", "Properties": {
            "JobQueueName": "q", "ComputeEnvironmentOrder": [
                {"Order": 1, "ComputeEnvironment": {"Fn::GetAtt": ["Env", "ComputeEnvironmentArn"]}}]}},
    }
    for name in endpoints:
        resources[f"Endpoint{name}"] = _endpoint(name)
    return {"Compute": {"Resources": resources}}


def _restricted(templates: dict[str, Any]) -> dict[str, Any]:
    templates = copy.deepcopy(templates)
    templates["Compute"]["Resources"]["Restrict"] = {"Type": "Custom::VpcRestrictDefaultSG", "Properties": {
        "DefaultSecurityGroupId": {"Fn::GetAtt": ["Vpc", "DefaultSecurityGroup"]}}}
    return templates


def test_an_isolated_subnet_reaches_only_the_services_it_has_endpoints_for() -> None:
    """Amazon VPC, "Access AWS services through AWS PrivateLink" and "Gateway endpoints": with no route to the
    internet, a subnet reaches a service through an interface endpoint in it, or a gateway endpoint on its route
    table; nothing else."""
    reach = VpcModel(_template(), region=REGION).reach("q", multi_node=False)
    assert reach["s3"] is None and reach["lambda"] is None and reach["monitoring"] is None
    assert "no route to the internet" in str(reach["*"])
    assert "sts" not in reach  # no endpoint: the job's call goes nowhere


def test_a_route_to_the_internet_reaches_every_service() -> None:
    """Amazon VPC, "Route tables": a 0.0.0.0/0 route to an internet (or NAT) gateway reaches public endpoints."""
    templates = _template(endpoints=())
    templates["Compute"]["Resources"]["Default"] = {"Type": "AWS::EC2::Route", "Properties": {
        "RouteTableId": {"Ref": "Table"}, "DestinationCidrBlock": "0.0.0.0/0", "NatGatewayId": {"Ref": "Nat"}}}
    assert VpcModel(templates, region=REGION).reach("q", multi_node=False)["*"] is None


def test_an_endpoint_whose_group_admits_no_https_from_the_job_is_not_reached() -> None:
    """Amazon VPC, "Access an AWS service using an interface VPC endpoint": the endpoint's security group must
    allow HTTPS from the clients' interfaces."""
    templates = _template()
    templates["Compute"]["Resources"]["EndpointSg"]["Properties"]["SecurityGroupIngress"][0]["CidrIp"] = "10.99.0.0/16"
    reach = VpcModel(templates, region=REGION).reach("q", multi_node=False)
    assert "admit no HTTPS from the job" in str(reach["lambda"])
    assert reach["s3"] is None  # a gateway endpoint has no group


def test_multi_node_containers_use_the_default_group_when_the_environment_names_none() -> None:
    """AWS Batch, "Compute environment considerations for multi-node parallel jobs": MNP interfaces "use the
    security groups specified in your compute environment. If you don't specify a security group, the default
    security group for the VPC is used"; Amazon VPC, "Default security groups for your VPCs": it admits its own
    members and allows all outbound, until CDK's restrictDefaultSecurityGroup revokes both."""
    model = VpcModel(_template(efa=True), region=REGION)
    assert model.rendezvous_problem("q") is None
    assert model.reach("q", multi_node=True)["lambda"] is None
    stripped = VpcModel(_restricted(_template(efa=True)), region=REGION)
    problem = stripped.rendezvous_problem("q")
    assert problem is not None and "default security group" in problem and "no inbound and outbound rule" in problem
    assert "Custom::VpcRestrictDefaultSG" in problem
    reach = stripped.reach("q", multi_node=True)
    assert "no outbound HTTPS rule" in str(reach["lambda"]) and "no outbound HTTPS rule" in str(reach["s3"])
    # Single-node jobs run on the host's interfaces (the EFA template's group): the default group is not theirs.
    assert stripped.reach("q", multi_node=False)["lambda"] is None


def test_a_named_group_is_the_nodes_group_and_must_admit_them_in_and_out() -> None:
    """AWS Batch, "Compute environment considerations for multi-node parallel jobs": with groups named on the
    compute environment, those are the nodes' groups, and they need rules both ways between the nodes."""
    model = VpcModel(_restricted(_template(efa=False)), region=REGION)
    problem = model.rendezvous_problem("q")
    assert problem is not None and "the compute environment's security groups" in problem
    assert "no outbound rule" in problem  # JobsSg admits itself in, but lets only HTTPS out
    templates = _restricted(_template(efa=False))
    templates["Compute"]["Resources"]["JobsSelfOut"] = {"Type": "AWS::EC2::SecurityGroupEgress", "Properties": {
        "GroupId": JOBS_SG, "DestinationSecurityGroupId": JOBS_SG, "IpProtocol": "-1"}}
    assert VpcModel(templates, region=REGION).rendezvous_problem("q") is None


@pytest.mark.timeout(120)
def test_a_job_reaching_no_endpoint_is_dropped_and_named(tmp_path: Any) -> None:
    """What a job's boto3 sees: the services its network reaches are the local AWS (botocore's per-service
    ``AWS_ENDPOINT_URL_<SERVICE>``), any other one a black hole that drops the call after the scaled connect
    timeout, and the refusal names the job, the service and the endpoint to add."""
    network = JobNetwork(VpcModel(_template(endpoints=("monitoring",)), region=REGION),
                         local_endpoint="http://127.0.0.1:9", time_scale=600)
    with network.install():
        env = network.environment("q", multi_node=False, job_name="trial-1-gpu")
        assert env["AWS_ENDPOINT_URL_CLOUDWATCH"] == env["AWS_ENDPOINT_URL_S3"] == "http://127.0.0.1:9"
        assert env["AWS_ENDPOINT_URL"] != "http://127.0.0.1:9" and "AWS_ENDPOINT_URL_LAMBDA" not in env
        script = textwrap.dedent("""
            import boto3, botocore.config, botocore.exceptions
            client = boto3.client("lambda", region_name="us-east-1",
                                  config=botocore.config.Config(retries={"max_attempts": 1}))
            try:
                client.invoke(FunctionName="f", Payload=b"{}")
            except botocore.exceptions.BotoCoreError as exc:
                print(type(exc).__name__)
                raise SystemExit(1)
        """)
        clean = {k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL")}
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                              env={**clean, **env, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"})
    assert done.returncode == 1, done.stderr[-2000:]
    assert [(d.job, d.service) for d in network.denials] == [("trial-1-gpu", "lambda")]
    assert "add an interface VPC endpoint for com.amazonaws.us-east-1.lambda" in network.denials[0].reason


def test_nodes_need_all_tcp_between_them_not_only_the_rendezvous_port() -> None:
    """AWS Batch, "Elastic Fabric Adapter": the group "must allow all inbound and outbound traffic to and from the
    security group itself"; the collectives connect on ephemeral ports and the Neuron root communicator on its own."""
    templates = _template(efa=False)
    resources = templates["Compute"]["Resources"]
    resources["JobsSelf"]["Properties"].update(IpProtocol="tcp", FromPort=29500, ToPort=29500)
    resources["JobsSelfOut"] = {"Type": "AWS::EC2::SecurityGroupEgress", "Properties": {
        "GroupId": JOBS_SG, "DestinationSecurityGroupId": JOBS_SG, "IpProtocol": "tcp", "FromPort": 29500,
        "ToPort": 29500}}
    problem = VpcModel(templates, region=REGION).rendezvous_problem("q")
    assert problem is not None and "TCP 62182" in problem


def test_an_endpoint_in_another_subnet_of_the_vpc_is_reached_and_a_group_without_egress_keeps_the_default() -> None:
    """Amazon VPC: an interface endpoint's private DNS name resolves to its interfaces, reachable from every subnet of
    the VPC; "Security group rules": a new group has an outbound rule allowing all traffic unless it is removed
    (CloudFormation removes it only when the template states SecurityGroupEgress)."""
    templates = _template()
    resources = templates["Compute"]["Resources"]
    resources["Other"] = {"Type": "AWS::EC2::Subnet", "Properties": {"CidrBlock": "10.40.16.0/20",
                                                                    "VpcId": {"Ref": "Vpc"}}}
    resources["Endpointlambda"]["Properties"]["SubnetIds"] = [{"Ref": "Other"}]
    del resources["JobsSg"]["Properties"]["SecurityGroupEgress"]
    assert VpcModel(templates, region=REGION).reach("q", multi_node=False)["lambda"] is None
