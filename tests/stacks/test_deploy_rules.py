"""What AWS needs before a deployed job can work: endpoints for what the jobs call, a group for multi-node nodes,
launch templates Batch re-reads, alarms that can publish, job definitions a redeploy keeps, Trainium2 zones, and
the EFA driver on the hosts. Each rule names the AWS page it comes from."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from infra.config import ConfigInvalid, stage_config
from infra.constructs.batch_compute import efa_setup
from lambdas.domain.json_types import JsonObject
from lambdas.domain.trial.catalogue import load_catalogue
from tests.stacks.conftest import props, resources

REPO = Path(__file__).resolve().parents[2]


def _endpoint_services(template: dict[str, Any]) -> set[str]:
    """The service part of each endpoint's ``com.amazonaws.<region>.<service>`` name (a Join of the region)."""
    names = set()
    for endpoint in props(template, "AWS::EC2::VPCEndpoint"):
        name = endpoint["ServiceName"]
        text = name if isinstance(name, str) else "".join(p if isinstance(p, str) else "<region>"
                                                          for p in name["Fn::Join"][1])
        names.add(re.sub(r"^com\.amazonaws\.(<region>\.|[a-z]{2}(-[a-z]+)+-\d\.)?", "", text))
    return names


def test_the_trainer_reaches_the_credentials_function_through_a_lambda_endpoint(compute: dict[str, Any]) -> None:
    """AWS Lambda, "Connecting inbound interface VPC endpoints for Lambda": from subnets with no route to the
    internet, Lambda's API is reached only through an interface endpoint of ``com.amazonaws.<region>.lambda``.
    The trainer invokes the job-credentials function before its first write (containers/trainer/storage.py)."""
    services = _endpoint_services(compute)
    assert "lambda" in services, services
    # The job subnets have no route out of the VPC: no NAT gateway, no internet gateway.
    assert resources(compute, "AWS::EC2::NatGateway") == {}
    assert resources(compute, "AWS::EC2::InternetGateway") == {}
    # Private DNS: boto3's default host name for the service resolves to the endpoint.
    assert all(e["PrivateDnsEnabled"] is True for e in props(compute, "AWS::EC2::VPCEndpoint")
               if e.get("VpcEndpointType") == "Interface")


def test_multi_node_nodes_get_a_group_that_lets_them_reach_each_other_and_the_endpoints(
        prod_compute: dict[str, Any]) -> None:
    """AWS Batch, "Compute environment considerations for multi-node parallel jobs": the interfaces of an MNP job
    "will use the security groups specified in your compute environment; if you don't specify a security group, the
    default security group for the VPC is used". An EFA compute environment names none (aws-cdk #21577: Batch
    refuses groups beside launch-template interfaces), so the VPC's default group must keep AWS's default rules
    (Amazon VPC, "Default security groups for your VPCs": inbound from members of the group, all outbound), which
    CDK's ``restrictDefaultSecurityGroup`` custom resource would revoke."""
    catalogue = load_catalogue()
    efa_environments = [e for e in props(prod_compute, "AWS::Batch::ComputeEnvironment")
                        if catalogue.get(e["ComputeResources"]["InstanceTypes"][0]).efa_interfaces]
    assert efa_environments
    assert all("SecurityGroupIds" not in e["ComputeResources"] for e in efa_environments)
    assert resources(prod_compute, "Custom::VpcRestrictDefaultSG") == {}


def test_compute_environments_pin_their_launch_template_version(templates: dict[str, dict[str, Any]],
                                                                prod_compute: dict[str, Any]) -> None:
    """AWS Batch API, LaunchTemplateSpecification: "During an infrastructure update, if either $Latest or $Default
    is specified, AWS Batch re-evaluates the launch template version" — only then. A template referenced without
    a version (``$Default``) never reaches the hosts when it changes; the latest version number does, because a
    new number is a change of the compute environment ("Perform infrastructure updates")."""
    for template in (*templates.values(), prod_compute):
        for logical_id, environment in resources(template, "AWS::Batch::ComputeEnvironment").items():
            spec = environment["Properties"]["ComputeResources"]["LaunchTemplate"]
            template_id = spec["LaunchTemplateId"]["Ref"]
            assert spec.get("Version") == {"Fn::GetAtt": [template_id, "LatestVersionNumber"]}, logical_id


def test_redeploying_a_multi_node_definition_keeps_the_revision_queued_jobs_use(
        prod_compute: dict[str, Any], compute: dict[str, Any]) -> None:
    """CloudFormation, AWS::Batch::JobDefinition ``ResourceRetentionPolicy``/``SkipDeregisterOnUpdate``: "The
    default value is false. When the property is set to false, the previous revision of the job definition is
    de-registered after a new revision is created." A queued or retrying job still names that revision."""
    definitions = props(prod_compute, "AWS::Batch::JobDefinition") + props(compute, "AWS::Batch::JobDefinition")
    multi = [d for d in definitions if d["Type"] == "multinode"]
    assert multi, "prod has multi-node job definitions"
    for definition in definitions:
        retention = definition.get("ResourceRetentionPolicy") or {}
        assert definition.get("SkipDeregisterOnUpdate") is True or retention.get("SkipDeregisterOnUpdate") is True, \
            definition.get("JobDefinitionName")


def test_the_report_topic_lets_cloudwatch_alarms_publish(control: dict[str, Any]) -> None:
    """Amazon SNS, AWS::SNS::TopicPolicy: a topic policy is the topic's whole policy, so it replaces the default
    one; CloudWatch ("Using Amazon CloudWatch alarms", SNS topic access) publishes an alarm's notification only if
    the policy allows ``cloudwatch.amazonaws.com`` ``sns:Publish`` (scoped here to this account's alarms)."""
    alarms = props(control, "AWS::CloudWatch::Alarm")
    assert alarms
    topics = resources(control, "AWS::SNS::Topic")
    assert len(topics) == 1
    (topic_id,) = topics
    assert all(a["AlarmActions"] == [{"Ref": topic_id}] for a in alarms)
    (policy,) = [p for p in props(control, "AWS::SNS::TopicPolicy") if {"Ref": topic_id} in p["Topics"]]
    allows = [s for s in policy["PolicyDocument"]["Statement"]
              if s["Effect"] == "Allow" and s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}]
    assert len(allows) == 1
    statement = allows[0]
    assert statement["Action"] == "sns:Publish" and statement["Resource"] == {"Ref": topic_id}
    assert statement["Condition"]["StringEquals"]["aws:SourceAccount"] == {"Ref": "AWS::AccountId"}
    assert ":alarm:*" in json.dumps(statement["Condition"]["ArnLike"]["aws:SourceArn"])
    # The TLS Deny is still there, and denies only requests without TLS.
    denies = [s for s in policy["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]
    assert denies and all(s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in denies)


def test_a_stage_with_trainium2_names_an_offering_zone() -> None:
    """Amazon EC2, DescribeInstanceTypeOfferings: an instance type is offered in some zones of a region only, and
    a zone name maps to a different physical zone in each account, so a stage names the zone its account's
    offerings list; a Trainium2 queue in a zone without trn2.48xlarge waits RUNNABLE until cancelled."""
    context = json.loads((REPO / "cdk.json").read_text())["context"]
    for name in context["dualtrack:stages"]:
        config = stage_config(context, name)
        if config.trn2 is not None:
            assert config.region and config.availability_zones and config.trn2.availability_zone, name
    stage = {"dualtrack:stages": {"x": {
        "trn2": {"instance_types": ["trn2.48xlarge"], "ami_ssm_parameter": "/a/b", "multi_node_counts": []}}}}
    with pytest.raises(ConfigInvalid, match=r"trn2.availability_zone is not set.*describe-instance-type-offerings"):
        stage_config(stage, "x")


def test_efa_hosts_load_the_efa_driver_and_check_every_device(prod_compute: dict[str, Any],
                                                              compute: dict[str, Any]) -> None:
    """AWS Batch, "Elastic Fabric Adapter": Batch runs EFA jobs only where "The AMI has the EFA driver loaded",
    and the job maps ``/dev/infiniband/uverbs<N>``. The ECS-optimized AL2023 AMIs do not run the EFA installer, so
    the launch template of every EFA instance type loads the driver (``efa``, ``ib_uverbs``) and checks one device
    per EFA interface. AWS Batch, "Launch template support": user data must be a MIME multi-part archive."""
    catalogue = load_catalogue()
    seen = 0
    for template in (prod_compute, compute):
        environments = props(template, "AWS::Batch::ComputeEnvironment")
        for logical_id, launch_template in resources(template, "AWS::EC2::LaunchTemplate").items():
            instance_type = next(e["ComputeResources"]["InstanceTypes"][0] for e in environments
                                 if e["ComputeResources"]["LaunchTemplate"]["LaunchTemplateId"] == {"Ref": logical_id})
            interfaces = catalogue.get(instance_type).efa_interfaces
            user_data = launch_template["Properties"]["LaunchTemplateData"].get("UserData")
            if not interfaces:
                assert user_data is None, logical_id
                continue
            seen += 1
            text = json.dumps(user_data)
            assert "multipart/mixed" in text and "text/x-shellscript" in text
            for line in ("modprobe efa", "modprobe ib_uverbs", f"seq 0 {interfaces - 1}",
                         "/dev/infiniband/uverbs$index"):
                assert line in text, (logical_id, line)
    assert seen >= 3
    assert "exit 1" in efa_setup(2)  # a host without the devices reports a failed set-up (and shuts down)


def test_a_trainium2_image_of_your_own_states_its_neuron_sdk() -> None:
    """The Neuron SDK an image carries decides its training stack ("Neuron no longer supports PyTorch/XLA for
    training starting with Neuron 2.30"): without it the job definition could not tell TorchNeuron from XLA."""
    trn2: dict[str, Any] = {"instance_types": ["trn2.48xlarge"], "ami_ssm_parameter": "/a/b", "multi_node_counts": [],
            "availability_zone": "us-east-2b", "image_uri": "123456789012.dkr.ecr.us-east-2.amazonaws.com/t:1"}
    stage: JsonObject = {"region": "us-east-2", "availability_zones": ["us-east-2b"], "trn2": trn2}
    with pytest.raises(ConfigInvalid, match=r"image_versions\.neuron_sdk is needed"):
        stage_config({"dualtrack:stages": {"x": stage}}, "x")
    trn2["image_versions"] = {"neuron_sdk": "2.34.0"}
    assert stage_config({"dualtrack:stages": {"x": stage}}, "x").trn2 is not None
