"""The idle monthly cost of a stage, computed from CloudFormation templates and the platform price table."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from dualtrack.cli import main
from dualtrack.stage_cost import (
    ENDPOINT_GB,
    HOURS_PER_MONTH,
    LOG_GB,
    PlatformPriceTable,
    StageCostError,
    idle_cost,
    load_platform_prices,
)
from lambdas.domain.money.prices import load_price_table

RATE_KEYS = ("interface_endpoint_az_hour", "interface_endpoint_gb", "nat_gateway_hour", "nat_gateway_gb",
             "public_ipv4_hour", "kms_key_month", "alarm_metric_month", "alarm_high_resolution_metric_month",
             "dashboard_month", "logs_ingestion_gb", "vended_logs_ingestion_gb", "logs_storage_gb_month")
# Round, distinct test prices, so every line's arithmetic can be checked by hand.
TEST_RATES = {"interface_endpoint_az_hour": "0.01", "interface_endpoint_gb": "0.01", "nat_gateway_hour": "0.05",
              "nat_gateway_gb": "0.04", "public_ipv4_hour": "0.005", "kms_key_month": "1", "alarm_metric_month": "0.1",
              "alarm_high_resolution_metric_month": "0.3", "dashboard_month": "3", "logs_ingestion_gb": "0.5",
              "vended_logs_ingestion_gb": "0.25", "logs_storage_gb_month": "0.03"}


def table() -> PlatformPriceTable:
    rows = {k: {"usd": v, "unit": k, "confidence": "estimate", "source": "test"} for k, v in TEST_RATES.items()}
    return PlatformPriceTable.model_validate({"version": "test-1", "source": "test", "regions": {"xx-test-1": rows}})


def subnet(zone: str) -> dict[str, Any]:
    return {"Type": "AWS::EC2::Subnet", "Properties": {"AvailabilityZone": zone}}


def endpoint(service: str, subnets: list[str] | None, kind: str | None = "Interface") -> dict[str, Any]:
    props: dict[str, Any] = {"ServiceName": {"Fn::Join": ["", ["com.amazonaws.", {"Ref": "AWS::Region"}, service]]}}
    if kind is not None:
        props["VpcEndpointType"] = kind
    if subnets is not None:
        props["SubnetIds"] = [{"Ref": s} for s in subnets]
    return {"Type": "AWS::EC2::VPCEndpoint", "Properties": props}


def templates() -> dict[str, dict[str, Any]]:
    network = {
        "SubnetA": subnet("xx-test-1a"), "SubnetB": subnet("xx-test-1b"), "SubnetC": subnet("xx-test-1c"),
        "Ecr": endpoint(".ecr.api", ["SubnetA", "SubnetB", "SubnetC"]),
        "Sts": endpoint(".sts", ["SubnetA"]),
        "S3": endpoint(".s3", None, kind="Gateway"),
        "Dynamo": endpoint(".dynamodb", None, kind=None),  # CloudFormation's default type: Gateway
        "Nat": {"Type": "AWS::EC2::NatGateway", "Properties": {}},
        "NatAddress": {"Type": "AWS::EC2::EIP", "Properties": {}},
        "FlowLogs": {"Type": "AWS::Logs::LogGroup", "Properties": {"RetentionInDays": 30}},
        "FlowLog": {"Type": "AWS::EC2::FlowLog", "Properties": {"LogGroupName": {"Ref": "FlowLogs"}}},
        "Key": {"Type": "AWS::KMS::Key", "Properties": {"EnableKeyRotation": True}},
        "Env": {"Type": "AWS::Batch::ComputeEnvironment", "Properties": {"ComputeResources": {"MinvCpus": 0}}},
    }
    control = {
        "TopicKey": {"Type": "AWS::KMS::Key", "Properties": {}},
        "Errors": {"Type": "AWS::CloudWatch::Alarm", "Properties": {"Period": 300, "MetricName": "Errors"}},
        "Failed": {"Type": "AWS::CloudWatch::Alarm", "Properties": {"Metrics": [
            {"Id": "expr", "Expression": "a + b"},
            {"Id": "a", "MetricStat": {"Period": 300}, "ReturnData": False},
            {"Id": "b", "MetricStat": {"Period": 300}, "ReturnData": False}]}},
        "Fast": {"Type": "AWS::CloudWatch::Alarm", "Properties": {"Period": 10}},
        "Dashboard": {"Type": "AWS::CloudWatch::Dashboard", "Properties": {}},
        "FnLogs": {"Type": "AWS::Logs::LogGroup", "Properties": {"RetentionInDays": 30}},
        "Fn": {"Type": "AWS::Lambda::Function", "Properties": {}},
        "Table": {"Type": "AWS::DynamoDB::Table", "Properties": {"BillingMode": "PAY_PER_REQUEST"}},
    }
    return {"S-Compute": {"Resources": network}, "S-Control": {"Resources": control}}


def line(cost: Any, key: str) -> Any:
    found = [x for x in [*cost.fixed, *cost.usage] if x.key == key]
    assert len(found) == 1, f"expected one {key} line, got {found}"
    return found[0]


def test_interface_endpoints_bill_per_zone_hour() -> None:
    """AWS PrivateLink pricing (https://aws.amazon.com/privatelink/pricing/): an interface endpoint is billed "for
    each hour that your VPC endpoint remains provisioned in each Availability Zone", each partial hour as a full
    hour, so a month is endpoint-zones x hourly rate x 730 h whether or not traffic flows. Gateway endpoints (the
    type CloudFormation assumes when none is given) are free."""
    cost = idle_cost(templates(), table(), "xx-test-1")
    endpoints = line(cost, "interface_endpoints")
    assert endpoints.quantity == 3 + 1 and endpoints.quantity_unit == "endpoint-AZs"
    assert endpoints.periods == HOURS_PER_MONTH == 730
    assert endpoints.monthly_usd == Decimal("4") * Decimal("0.01") * 730 == Decimal("29.20")
    assert "ecr.api (3)" in endpoints.detail and "sts (1)" in endpoints.detail
    assert [(f.service, f.count) for f in cost.free if f.service == "Gateway VPC endpoints"] == [
        ("Gateway VPC endpoints", 2)]


def test_subnets_sharing_a_zone_count_once() -> None:
    """PrivateLink bills per Availability Zone (https://aws.amazon.com/privatelink/pricing/), not per subnet."""
    docs = templates()
    docs["S-Compute"]["Resources"]["SubnetD"] = subnet("xx-test-1a")
    docs["S-Compute"]["Resources"]["Ecr"] = endpoint(".ecr.api", ["SubnetA", "SubnetD"])
    assert line(idle_cost(docs, table(), "xx-test-1"), "interface_endpoints").quantity == 1 + 1


def test_every_fixed_line_is_quantity_times_price_times_periods_and_the_total_is_their_sum() -> None:
    cost = idle_cost(templates(), table(), "xx-test-1")
    expected = {
        "interface_endpoints": Decimal("29.20"),  # 4 endpoint-AZs x 0.01 x 730
        "nat_gateways": Decimal("36.50"),  # 1 x 0.05 x 730
        "public_ipv4": Decimal("3.65"),  # 1 x 0.005 x 730
        "kms_keys": Decimal("2"),  # 2 keys x 1
        "alarms": Decimal("0.3"),  # 1 + 2 (metric math: each metric) alarm metrics x 0.1
        "alarms_high_resolution": Decimal("0.3"),  # 1 x 0.3
        "dashboards": Decimal("3"),
    }
    assert {c.key: c.monthly_usd for c in cost.fixed} == expected
    for c in cost.fixed:
        assert c.monthly_usd == c.quantity * c.rate.usd * c.periods
    assert cost.fixed_total_usd == sum(expected.values()) == Decimal("74.95")
    assert cost.total_usd == cost.fixed_total_usd  # no volume stated, so no usage figure
    assert "1 rotate yearly" in line(cost, "kms_keys").detail


def test_usage_is_a_rate_per_gb_until_a_volume_is_stated() -> None:
    cost = idle_cost(templates(), table(), "xx-test-1")
    usage = {u.key: u for u in cost.usage}
    assert set(usage) == {"log_gb", "flow_log_gb", "log_storage_gb_month", "endpoint_gb", "nat_gb"}
    assert all(u.monthly_usd is None for u in cost.usage)
    assert usage["flow_log_gb"].rate.usd == Decimal("0.25")  # the vended-log rate, not the standard one
    assert usage["log_gb"].detail.startswith("1 log group in the templates")  # the flow log's group is apart
    stated = idle_cost(templates(), table(), "xx-test-1", assumptions={LOG_GB: 10, ENDPOINT_GB: "100"})
    assert line(stated, "log_gb").monthly_usd == Decimal("5.0")
    assert line(stated, "endpoint_gb").monthly_usd == Decimal("1.00")
    assert stated.total_usd == stated.fixed_total_usd + Decimal("6.00")


def test_what_the_model_cannot_price_is_named_not_dropped() -> None:
    docs = templates()
    resources = docs["S-Control"]["Resources"]
    resources["Table"]["Properties"] = {}  # PROVISIONED is CloudFormation's default billing mode
    resources["Composite"] = {"Type": "AWS::CloudWatch::CompositeAlarm", "Properties": {}}
    docs["S-Compute"]["Resources"]["Env"]["Properties"]["ComputeResources"]["MinvCpus"] = 8
    unpriced = "\n".join(idle_cost(docs, table(), "xx-test-1").unpriced)
    assert "S-Control/Table: provisioned-capacity table" in unpriced
    assert "S-Control/Composite: a composite alarm" in unpriced
    assert "S-Compute/Env: min vCPUs 8" in unpriced


def test_warm_capacity_bills_every_hour_at_the_instance_rate() -> None:
    """AWS Batch, ComputeResource (https://docs.aws.amazon.com/batch/latest/APIReference/API_ComputeResource.html):
    minvCpus is the minimum "a compute environment should maintain (even if the compute environment is DISABLED)",
    so its instances run, and bill per hour at their on-demand rate (https://aws.amazon.com/ec2/pricing/on-demand/),
    whether or not a job runs: whole instances x the instance table's hourly rate x 730 h. A Spot environment's
    minimum is named as not priced (the table has no Spot rates)."""
    docs = templates()
    compute = docs["S-Compute"]["Resources"]
    compute["Env"]["Properties"]["ComputeResources"] = {"Type": "EC2", "MinvCpus": 384,
                                                       "InstanceTypes": ["g6e.48xlarge"]}
    compute["SpotEnv"] = {"Type": "AWS::Batch::ComputeEnvironment", "Properties": {"ComputeResources": {
        "Type": "SPOT", "MinvCpus": 192, "InstanceTypes": ["g6e.48xlarge"]}}}
    prices = load_price_table({"instances": {"xx-test-1": {"g6e.48xlarge": {"hourly_usd": "10"}}}})
    cost = idle_cost(docs, table(), "xx-test-1", instance_prices=prices)
    warm = line(cost, "warm_capacity:g6e.48xlarge")
    assert (warm.quantity, warm.quantity_unit, warm.periods) == (2, "g6e.48xlarge instances", HOURS_PER_MONTH)
    assert warm.rate.usd == Decimal("10") and warm.rate.confidence == "override"
    assert warm.monthly_usd == 2 * Decimal("10") * 730 == Decimal("14600")
    assert cost.fixed_total_usd == Decimal("74.95") + Decimal("14600")  # on top of the other fixed lines
    assert [u for u in cost.unpriced if "SpotEnv" in u] == [
        "S-Compute/SpotEnv: min vCPUs 192 keeps instances running (SPOT capacity: only on-demand instance rates "
        "are in the price table)"]
    assert not [f for f in cost.free if f.service == "AWS Batch"]  # neither environment is free when idle


def test_errors_name_what_to_fix() -> None:
    docs = templates()
    docs["S-Compute"]["Resources"]["Sts"] = endpoint(".sts", None)
    with pytest.raises(StageCostError, match=r"S-Compute/Sts: interface endpoint without a literal SubnetIds"):
        idle_cost(docs, table(), "xx-test-1")
    with pytest.raises(StageCostError, match=r"no platform prices for eu-west-9 .* \(it has: xx-test-1\)"):
        idle_cost(templates(), table(), "eu-west-9")
    with pytest.raises(StageCostError, match="cannot be negative"):
        idle_cost(templates(), table(), "xx-test-1", assumptions={LOG_GB: -1})
    with pytest.raises(StageCostError, match="unknown usage assumption"):
        idle_cost(templates(), table(), "xx-test-1", assumptions={"egress_gb": 1})


def test_the_shipped_table_prices_both_us_east_regions_with_sources() -> None:
    shipped = load_platform_prices()
    assert {"us-east-1", "us-east-2"} <= set(shipped.regions)
    for region, rates in shipped.regions.items():
        for key in RATE_KEYS:
            rate = getattr(rates, key)
            assert rate.confidence in ("list", "estimate"), (region, key)
            assert rate.source.startswith("https://aws.amazon.com/"), (region, key)
    assert shipped.regions["us-east-1"].kms_key_month.confidence == "list"


def test_stage_cost_command(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import infra.synth as synth

    class FakeAssembly:
        def templates(self) -> dict[str, dict[str, Any]]:
            return templates()

    monkeypatch.setattr(synth, "synthesize", lambda stage: FakeAssembly())
    assert main(["stage", "cost", "--stage", "prod", "--region", "us-east-1", "--json",
                 "--log-gb-per-month", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["stage"] == "prod" and out["region"] == "us-east-1" and out["region_from"] == "--region"
    fixed = sum(Decimal(x["monthly_usd"]) for x in out["fixed"])
    assert Decimal(out["fixed_monthly_usd"]) == fixed
    assert Decimal(out["total_monthly_usd"]) == fixed + Decimal("2") * Decimal("0.50")
    assert main(["stage", "cost", "--stage", "prod", "--region", "us-east-1", "--markdown"]) == 0
    text = capsys.readouterr().out
    assert "| Interface VPC endpoints" in text and "**Total fixed**" in text and "price table" in text


def test_stage_cost_unknown_stage_names_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stage", "cost", "--stage", "nosuchstage"]) == 2
    err = capsys.readouterr().err
    assert "unknown stage 'nosuchstage'" in err and "dev" in err and "prod" in err
    with pytest.raises(SystemExit) as exc:
        main(["stage", "cost", "--log-gb-per-month", "lots"])
    assert exc.value.code == 2
