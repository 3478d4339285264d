"""The compute stack: private network, accelerator queues, launch templates and the trainer job definitions."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk.assertions import Match, Template
from pydantic import ValidationError

from infra.config import ComputeFamily
from infra.constructs.network import INTERFACE_ENDPOINTS
from lambdas.domain.trial.catalogue import load_catalogue
from tests.stacks.conftest import props, resources


def _by_prefix(template: dict[str, Any], kind: str, prefix: str) -> list[dict[str, Any]]:
    return [v["Properties"] for k, v in resources(template, kind).items() if k.startswith(prefix)]


def test_network_is_private_with_the_job_endpoints(compute: dict[str, Any]) -> None:
    template = Template.from_json(compute)
    template.resource_count_is("AWS::EC2::NatGateway", 0)
    template.resource_count_is("AWS::EC2::InternetGateway", 0)
    template.resource_count_is("AWS::EC2::FlowLog", 1)
    endpoints = props(compute, "AWS::EC2::VPCEndpoint")
    gateway = [e for e in endpoints if e.get("VpcEndpointType") == "Gateway"]
    interface = [e for e in endpoints if e.get("VpcEndpointType") == "Interface"]
    assert len(gateway) == 1 and "s3" in str(gateway[0]["ServiceName"])
    assert len(interface) == len(INTERFACE_ENDPOINTS)
    names = " ".join(str(e["ServiceName"]) for e in interface)
    for service in ("ecr.api", "ecr.dkr", "logs", "monitoring", "lambda", "ecs-agent", "ecs-telemetry"):
        assert f".{service}" in names, service
    assert ".sts" not in names  # nothing in the VPC calls STS (tests/stacks/test_idle_cost.py)
    assert all(e["PrivateDnsEnabled"] is True for e in interface)


def test_compute_environments_use_configured_instances_and_ssm_amis(compute: dict[str, Any]) -> None:
    gpu = _by_prefix(compute, "AWS::Batch::ComputeEnvironment", "GpuCapacity")
    trn2 = _by_prefix(compute, "AWS::Batch::ComputeEnvironment", "Trn2Capacity")
    # cdk.json's dev stage runs GPU trials on g6e.48xlarge and Trainium2 trials on trn2.48xlarge.
    assert [e["ComputeResources"]["InstanceTypes"] for e in gpu] == [["g6e.48xlarge"]]
    assert [e["ComputeResources"]["InstanceTypes"] for e in trn2] == [["trn2.48xlarge"]]
    parameters = compute["Parameters"]
    for env, image_type, path in ((gpu[0], "ECS_AL2023_NVIDIA", "gpu"), (trn2[0], "ECS_AL2023", "neuron")):
        resources_ = env["ComputeResources"]
        assert resources_["Type"] == "EC2" and resources_["MinvCpus"] == 0
        ec2 = resources_["Ec2Configuration"][0]
        assert ec2["ImageType"] == image_type
        parameter = parameters[ec2["ImageIdOverride"]["Ref"]]
        assert parameter["Type"] == "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>"
        assert parameter["Default"] == f"/aws/service/ecs/optimized-ami/amazon-linux-2023/{path}/recommended/image_id"
        assert "LaunchTemplate" in resources_
    # dev pins no GPU zone: those hosts may spread, so they have no cluster placement group (it lives in one zone).
    # Trainium2 is offered in few zones, so every stage pins its trn2 hosts to one, in a placement group.
    assert "PlacementGroup" not in gpu[0]["ComputeResources"]
    assert "PlacementGroup" in trn2[0]["ComputeResources"]
    assert len(props(compute, "AWS::EC2::PlacementGroup")) == 1


def test_launch_templates_have_efa_per_network_card_and_encrypted_roots(compute: dict[str, Any]) -> None:
    catalogue = load_catalogue()
    templates = resources(compute, "AWS::EC2::LaunchTemplate")
    assert templates
    for logical_id, template in templates.items():
        data = template["Properties"]["LaunchTemplateData"]
        root = data["BlockDeviceMappings"][0]["Ebs"]
        assert root == {"DeleteOnTermination": True, "Encrypted": True, "VolumeSize": 1024, "VolumeType": "gp3"}
        assert data["MetadataOptions"]["HttpTokens"] == "required"
        instance = "g6e.48xlarge" if logical_id.startswith("Gpu") else "trn2.48xlarge"
        interfaces = data["NetworkInterfaces"]
        assert len(interfaces) == catalogue.get(instance).efa_interfaces
        assert {i["InterfaceType"] for i in interfaces} == {"efa"}
        assert [i["NetworkCardIndex"] for i in interfaces] == list(range(len(interfaces)))
        assert [i["DeviceIndex"] for i in interfaces] == [0] + [1] * (len(interfaces) - 1)


def test_one_named_queue_per_instance_type_on_demand_first(compute: dict[str, Any]) -> None:
    queues = props(compute, "AWS::Batch::JobQueue")
    assert sorted(q["JobQueueName"] for q in queues) == ["dualtrack-dev-gpu-g6e-48xlarge",
                                                         "dualtrack-dev-trn2-trn2-48xlarge",
                                                         "dualtrack-dev-trn2-trn2-48xlarge-compile"]
    for queue in queues:
        assert [o["Order"] for o in queue["ComputeEnvironmentOrder"]] == [1]


def test_the_compile_queue_shares_the_training_hosts_behind_training(compute: dict[str, Any]) -> None:
    """The warm-up compile stage's queue holds the same compute environment as the trn2 training queue, so a
    compile job runs on the instance type its graphs are for, and a lower priority: "job queues with a higher
    priority are evaluated first when associated with the same compute environment"
    (https://docs.aws.amazon.com/batch/latest/userguide/job_queue_parameters.html). Not a CPU environment: "Native
    PyTorch for AWS Trainium" (AWS Neuron docs, FAQ) answers "No" to compiling with torch.compile on an instance
    without Trainium hardware ("requires compilation on Trainium2 or Trainium3 (Trn2 or Trn3) instances")."""
    queues = {q["JobQueueName"]: q for q in props(compute, "AWS::Batch::JobQueue")}
    training, compile_ = queues["dualtrack-dev-trn2-trn2-48xlarge"], queues["dualtrack-dev-trn2-trn2-48xlarge-compile"]
    assert compile_["ComputeEnvironmentOrder"] == training["ComputeEnvironmentOrder"]
    assert compile_["Priority"] < training["Priority"]
    assert compile_["JobStateTimeLimitActions"] == training["JobStateTimeLimitActions"]


def test_retry_strategy_encodes_the_exit_code_contract(compute: dict[str, Any]) -> None:
    definitions = props(compute, "AWS::Batch::JobDefinition")
    assert len(definitions) == 2  # single-node per track and type; dev pins no zone, so no multi-node
    for definition in definitions:
        assert definition["RetryStrategy"] == {"Attempts": 2, "EvaluateOnExit": [
            {"Action": "RETRY", "OnExitCode": "75"},
            {"Action": "RETRY", "OnStatusReason": "Host EC2*"},
            {"Action": "EXIT", "OnExitCode": "*"},
        ]}
        assert definition["Timeout"] == {"AttemptDurationSeconds": 24 * 3600}
        assert definition["PropagateTags"] is True
        assert definition["ContainerProperties"]["Command"] == ["launch"]  # one rank per device


def test_gpus_are_resource_requirements_and_neuron_devices_are_mapped(compute: dict[str, Any]) -> None:
    Template.from_json(compute).has_resource_properties("AWS::Batch::JobDefinition", {
        "Type": "container",
        "ContainerProperties": Match.object_like({
            "ResourceRequirements": Match.array_with([{"Type": "GPU", "Value": "8"}]),
            "Environment": Match.array_with([{"Name": "DUALTRACK_TRACK", "Value": "gpu"}]),
        }),
    })
    trn2 = _by_prefix(compute, "AWS::Batch::JobDefinition", "Trn2JobsSingleNode")[0]["ContainerProperties"]
    devices = trn2["LinuxParameters"]["Devices"]
    assert [d["HostPath"] for d in devices] == [f"/dev/neuron{i}" for i in range(16)]
    assert all(d["ContainerPath"] == d["HostPath"] and d["Permissions"] == ["read", "write"] for d in devices)
    assert all(r["Type"] != "GPU" for r in trn2["ResourceRequirements"])
    assert {"HardLimit": -1, "Name": "memlock", "SoftLimit": -1} in trn2["Ulimits"]


def test_multi_node_definitions_target_one_instance_type(prod_compute: dict[str, Any]) -> None:
    """prod pins each track to one zone: Trainium2 gets a multi-node definition (on-demand, EFA); the GPU track is
    Spot-backed, and multi-node jobs do not run on Spot (https://docs.aws.amazon.com/batch/latest/userguide/mnp-ce.html)."""
    multi = {p["JobDefinitionName"]: p for p in props(prod_compute, "AWS::Batch::JobDefinition")
             if p["Type"] == "multinode"}
    assert sorted(multi) == ["dualtrack-prod-trn2-trn2-48xlarge-multi-2", "dualtrack-prod-trn2-trn2-48xlarge-multi-4"]
    for definition in multi.values():
        nodes = definition["NodeProperties"]
        assert nodes["MainNode"] == 0
        assert nodes["NodeRangeProperties"][0]["Container"]["InstanceType"] == "trn2.48xlarge"
        assert definition["Parameters"] == {"resume_from": "none", "compile_cache_url": "none"}


def test_job_role_reads_and_writes_but_never_deletes(compute: dict[str, Any]) -> None:
    for policy in props(compute, "AWS::IAM::Policy"):
        for statement in policy["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            assert not any(a.startswith("s3:Delete") for a in actions), policy["PolicyName"]
    metrics = [s for p in props(compute, "AWS::IAM::Policy") for s in p["PolicyDocument"]["Statement"]
               if s["Action"] == "cloudwatch:PutMetricData"]
    assert metrics and all(s["Condition"] == {"StringEquals": {"cloudwatch:namespace": "Dualtrack"}}
                           for s in metrics)


def test_warm_capacity_is_whole_on_demand_hosts_and_off_by_default(compute: dict[str, Any],
                                                                   prod_compute: dict[str, Any]) -> None:
    """AWS Batch, ComputeResource (https://docs.aws.amazon.com/batch/latest/APIReference/API_ComputeResource.html):
    minvCpus is the minimum an environment "should maintain (even if the compute environment is DISABLED)", within
    its maxvCpus. Warm hosts bill every hour, so none are kept unless a stage asks (``<track>.warm_vcpus``), only
    on-demand (a Spot host can be taken back) and only whole hosts of a type the track runs, so the idle price is
    exact."""
    for template in (compute, prod_compute):
        for environment in props(template, "AWS::Batch::ComputeEnvironment"):
            assert environment["ComputeResources"]["MinvCpus"] == 0  # the shipped stages keep none warm
    base = {"instance_types": ["g6e.48xlarge"], "max_vcpus": 384, "ami_id": "ami-0123456789abcdef0"}
    assert ComputeFamily.model_validate(base).warm_vcpus == {}
    assert ComputeFamily.model_validate({**base, "warm_vcpus": {"g6e.48xlarge": 384}}).warm_vcpus == {
        "g6e.48xlarge": 384}
    refused = {
        "not a multiple of 192, the vCPUs of one g6e.48xlarge": {"g6e.48xlarge": 100},
        "above max_vcpus 384": {"g6e.48xlarge": 576},
        "not one of this track's instance_types": {"p5.48xlarge": 192},
    }
    for message, warm in refused.items():
        with pytest.raises(ValidationError, match=message):
            ComputeFamily.model_validate({**base, "warm_vcpus": warm})
