"""The idle cost model on the synthesized dev stage: every billable resource in it is counted, and only once."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

from dualtrack.stage_cost import HOURS_PER_MONTH, idle_cost, load_platform_prices
from lambdas.domain.money.prices import load_price_table
from tests.stacks.conftest import props, resources


def _all(templates: dict[str, dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [p for template in templates.values() for p in props(template, kind)]


def test_dev_stage_idle_cost_counts_each_interface_endpoint_once_per_zone(
        templates: dict[str, dict[str, Any]]) -> None:
    """AWS PrivateLink pricing (https://aws.amazon.com/privatelink/pricing/) bills each interface endpoint for every
    hour it stays provisioned in each Availability Zone, partial hours as full hours: the line is the sum over the
    stage's interface endpoints of the zones (subnets, one per zone) each lists, x the hourly rate x 730 h."""
    table = load_platform_prices()
    cost = idle_cost(templates, table, "us-east-1")
    endpoints = _all(templates, "AWS::EC2::VPCEndpoint")
    interface = [p for p in endpoints if p.get("VpcEndpointType") == "Interface"]
    assert interface, "the dev stage has interface endpoints"
    zones = sum(len(p["SubnetIds"]) for p in interface)
    assert zones == sum(len({str(s) for s in p["SubnetIds"]}) for p in interface)  # no subnet listed twice
    fixed = {line.key: line for line in cost.fixed}
    line = fixed["interface_endpoints"]
    assert line.quantity == zones
    assert line.monthly_usd == zones * table.regions["us-east-1"].interface_endpoint_az_hour.usd * HOURS_PER_MONTH
    assert f"{len(interface)} endpoints" in line.detail
    gateway = [p for p in endpoints if p.get("VpcEndpointType", "Gateway") == "Gateway"]
    assert [(f.service, f.count) for f in cost.free if f.service.startswith("Gateway")] == [
        ("Gateway VPC endpoints", len(gateway))]

    assert fixed["kms_keys"].quantity == len(_all(templates, "AWS::KMS::Key"))
    assert fixed["dashboards"].quantity == len(_all(templates, "AWS::CloudWatch::Dashboard"))
    alarms = _all(templates, "AWS::CloudWatch::Alarm")
    metrics = sum(sum(1 for m in p["Metrics"] if "MetricStat" in m) if "Metrics" in p else 1 for p in alarms)
    assert fixed["alarms"].quantity == metrics >= len(alarms)
    assert "nat_gateways" not in fixed and not _all(templates, "AWS::EC2::NatGateway")

    assert cost.fixed_total_usd == sum((line.monthly_usd for line in cost.fixed), Decimal(0))
    assert cost.total_usd == cost.fixed_total_usd  # no volume stated: the per-GB lines carry rates only
    assert all(u.monthly_usd is None and u.rate.usd > 0 for u in cost.usage)
    assert cost.unpriced == []  # nothing in the stage falls outside the model
    assert any(f.service == "AWS Batch" for f in cost.free)  # min vCPUs 0 everywhere


# ---- what stays on when nothing runs ----------------------------------------------------------------------------

# Each interface endpoint, and what in the training subnets calls it. Nothing there calls STS: a job's role
# credentials come from the ECS agent, the instance role's from the instance metadata service, and a job's own
# write credentials from the job-credentials function (a Lambda Invoke).
ENDPOINT_CALLERS = {
    "ecr.api": "the ECS agent pulling the trainer image (authorization token, manifests)",
    "ecr.dkr": "the ECS agent pulling the trainer image (the registry's Docker API)",
    "ecs": "the ECS agent on every Batch host",
    "ecs-agent": "the ECS agent on every Batch host",
    "ecs-telemetry": "the ECS agent on every Batch host",
    "logs": "the jobs' awslogs log driver",
    "monitoring": "the trainer's cloudwatch:PutMetricData",
    "lambda": "the trainer's lambda:InvokeFunction of the job-credentials function",
}
# The endpoint each AWS service the trainer's code calls is reached through (boto3 client name -> endpoint).
TRAINER_SERVICE_ENDPOINT = {"s3": "s3", "cloudwatch": "monitoring", "lambda": "lambda"}


def _interface_endpoints(template: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in props(template, "AWS::EC2::VPCEndpoint") if p.get("VpcEndpointType") == "Interface"]


def test_every_endpoint_has_a_caller_in_the_vpc_and_every_call_an_endpoint(compute: dict[str, Any]) -> None:
    """AWS PrivateLink pricing (https://aws.amazon.com/privatelink/pricing/): an interface endpoint bills "for each
    hour that your VPC endpoint remains provisioned in each Availability Zone", called or not, so the network keeps
    one only for a service something in the subnets calls. What the hosts need: Amazon ECS interface VPC endpoints
    (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/vpc-endpoints.html: ``ecs-agent``,
    ``ecs-telemetry`` and ``ecs``), Amazon ECR interface VPC endpoints
    (https://docs.aws.amazon.com/AmazonECR/latest/userguide/vpc-endpoints.html: ``ecr.api``, ``ecr.dkr``, layers from
    S3 through the gateway endpoint, and ``logs`` for the awslogs driver); what the trainer calls comes from the
    static inventory in tests/stacks/iam_calls.py. STS is not among them (its endpoint billed $14.60 a month in dev):
    a presigned URL is computed locally by the SDK ("Presigned URLs", Boto3,
    https://boto3.amazonaws.com/v1/documentation/api/latest/guide/s3-presigned-urls.html) and called by whoever
    fetches it."""
    from tests.stacks.iam_calls import trainer_calls
    from tests.stacks.test_deploy_rules import _endpoint_services

    interface = _endpoint_services({"Resources": {
        k: v for k, v in resources(compute, "AWS::EC2::VPCEndpoint").items()
        if v["Properties"].get("VpcEndpointType") == "Interface"}})
    assert interface == set(ENDPOINT_CALLERS), sorted(interface ^ set(ENDPOINT_CALLERS))
    assert "sts" not in _endpoint_services(compute)
    # A presigned request is signed on the spot, with no call; whoever fetches the URL makes the call. The trainer
    # presigns its STS GetCallerIdentity proof for the job-credentials function, which runs outside the VPC and
    # sends it to STS's public endpoint (containers/trainer/credentials.py): no STS call leaves a job.
    calls = trainer_calls()
    assert {call.via for call in calls if call.service == "sts"} <= {"presign"}
    trainer_services = {call.service for call in calls if call.via != "presign"}
    assert trainer_services <= set(TRAINER_SERVICE_ENDPOINT), trainer_services  # a new call needs its endpoint
    assert {TRAINER_SERVICE_ENDPOINT[s] for s in trainer_services} <= _endpoint_services(compute)
    # The jobs log through the awslogs driver, which is what the logs endpoint is for.
    drivers = {d["ContainerProperties"]["LogConfiguration"]["LogDriver"]
               for d in props(compute, "AWS::Batch::JobDefinition") if "ContainerProperties" in d}
    assert drivers == {"awslogs"}


def _subnet_refs(value: list[Any]) -> set[str]:
    return {s["Ref"] for s in value}


def test_interface_endpoints_sit_only_in_the_zones_compute_environments_use(prod_compute: dict[str, Any]) -> None:
    """AWS PrivateLink pricing (https://aws.amazon.com/privatelink/pricing/) bills an interface endpoint per
    Availability Zone it is provisioned in: prod's VPC spans three zones, its GPU hosts run in one and its Trainium2
    hosts in another, so an endpoint interface in the third zone (8 endpoints x $7.30 = $58.40 a month) served no
    host. Each endpoint has one interface per subnet it lists, one subnet per zone
    (https://docs.aws.amazon.com/vpc/latest/privatelink/create-interface-endpoint.html)."""
    environments = props(prod_compute, "AWS::Batch::ComputeEnvironment")
    compute_subnets = set().union(*(_subnet_refs(e["ComputeResources"]["Subnets"]) for e in environments))
    vpc_subnets = set(resources(prod_compute, "AWS::EC2::Subnet"))
    assert len(compute_subnets) == 2 < len(vpc_subnets) == 3
    endpoints = _interface_endpoints(prod_compute)
    assert endpoints
    assert all(_subnet_refs(e["SubnetIds"]) == compute_subnets for e in endpoints)
    cost = idle_cost({"prod-Compute": prod_compute}, load_platform_prices(), "us-east-2")
    line = next(c for c in cost.fixed if c.key == "interface_endpoints")
    assert line.quantity == len(ENDPOINT_CALLERS) * 2 and line.monthly_usd == Decimal("116.80")


def test_the_dev_stage_costs_at_most_75_dollars_a_month_idle(templates: dict[str, dict[str, Any]],
                                                               compute: dict[str, Any]) -> None:
    """What the dev stage bills while no trial runs, at the shipped us-east-2 rates: interface endpoints per zone-hour
    (https://aws.amazon.com/privatelink/pricing/), KMS keys at $1 a key-month
    (https://aws.amazon.com/kms/pricing/), alarms and a dashboard (https://aws.amazon.com/cloudwatch/pricing/). dev
    runs its hosts in one zone, so its eight endpoints bill there only."""
    cost = idle_cost(templates, load_platform_prices(), "us-east-2")
    assert cost.fixed_total_usd <= Decimal("75.00"), [(c.key, c.monthly_usd) for c in cost.fixed]
    assert {len(e["SubnetIds"]) for e in _interface_endpoints(compute)} == {1}


def test_warm_capacity_is_priced_per_instance_hour(templates: dict[str, dict[str, Any]]) -> None:
    """AWS Batch, ComputeResource (https://docs.aws.amazon.com/batch/latest/APIReference/API_ComputeResource.html):
    minvCpus is "the minimum number of vCPUs that a compute environment should maintain (even if the compute
    environment is DISABLED)", so the instances it keeps bill every hour at their on-demand rate
    (https://aws.amazon.com/ec2/pricing/on-demand/): dev's GPU environment with one g6e.48xlarge kept warm costs
    1 x the hourly rate x 730 h more, at the instance price table's rate (here its us-east-1 row)."""
    warm = copy.deepcopy(templates)
    (gpu,) = [r for t in warm.values() for r in t["Resources"].values()
              if r["Type"] == "AWS::Batch::ComputeEnvironment"
              and r["Properties"]["ComputeResources"]["InstanceTypes"] == ["g6e.48xlarge"]]
    gpu["Properties"]["ComputeResources"]["MinvCpus"] = 192
    table, instances = load_platform_prices(), load_price_table()
    idle = idle_cost(templates, table, "us-east-2", instance_prices=instances, instance_region="us-east-1")
    cost = idle_cost(warm, table, "us-east-2", instance_prices=instances, instance_region="us-east-1")
    line = next(c for c in cost.fixed if c.key == "warm_capacity:g6e.48xlarge")
    rate = instances.instance_hourly_usd("g6e.48xlarge", "us-east-1")
    assert line.quantity == 1 and line.rate.usd == rate
    assert line.monthly_usd == rate * HOURS_PER_MONTH == cost.fixed_total_usd - idle.fixed_total_usd
    assert cost.unpriced == []
    # Without the instance rates the line is named as not priced, never dropped.
    unpriced = idle_cost(warm, table, "us-east-2").unpriced
    assert len(unpriced) == 1 and "min vCPUs 192 keeps instances running" in unpriced[0]
