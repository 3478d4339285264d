"""The idle cost model on the synthesized dev stage: every billable resource in it is counted, and only once."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from dualtrack.stage_cost import HOURS_PER_MONTH, idle_cost, load_platform_prices
from tests.infra.conftest import props


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
