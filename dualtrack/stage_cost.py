"""What a deployed stage costs per month while no trial runs, read from its synthesized CloudFormation templates.

Batch queues at min vCPUs 0, Step Functions, Lambda, API Gateway, EventBridge, SNS, SQS and on-demand DynamoDB bill
only when used. What bills by the hour or the month regardless is counted here, one line per kind of resource:
interface VPC endpoints (per endpoint per Availability Zone per hour), NAT gateways and public IPv4 addresses (per
hour), warm Batch capacity (a compute environment's min vCPUs keep instances running: per instance-hour, from the
instance price table the plane bills runs with), KMS customer managed keys, CloudWatch alarms (per alarm metric) and
dashboards (per month). What bills per GB
(log ingestion, log storage, data through the endpoints or a NAT gateway) is listed with its rate and a volume only
when the caller states one: no volume is invented.

Prices come from a versioned table (``dualtrack/data/platform_prices.json``), never from this module. The module
is pure: templates and a table in, a :class:`StageCost` out.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Literal, TypedDict

from pydantic import BaseModel, ConfigDict, Field

from lambdas.domain.json_types import JsonIn, JsonMapping
from lambdas.domain.money.prices import PriceMissing, PriceTable
from lambdas.domain.trial.catalogue import load_catalogue

HOURS_PER_MONTH = 730
CENT = Decimal("0.01")

# Usage keys a caller may give a monthly volume (GB) for.
LOG_GB, FLOW_LOG_GB, ENDPOINT_GB, NAT_GB = "log_gb", "flow_log_gb", "endpoint_gb", "nat_gb"

# Resources of one type found in the templates: (stack name, logical id, properties).
Found = list[tuple[str, str, JsonMapping]]
Confidence = Literal["list", "estimate", "override"]


class StageCostError(ValueError):
    """A template or table this module cannot price faithfully; the message names the resource or the row."""


class PlatformRate(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    usd: Decimal = Field(ge=0)
    unit: str
    confidence: Confidence
    source: str
    note: str = ""


class RegionRates(BaseModel):
    """Every rate the idle-cost model needs in one region; a table lacking one fails to load."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    interface_endpoint_az_hour: PlatformRate
    interface_endpoint_gb: PlatformRate
    nat_gateway_hour: PlatformRate
    nat_gateway_gb: PlatformRate
    public_ipv4_hour: PlatformRate
    kms_key_month: PlatformRate
    alarm_metric_month: PlatformRate
    alarm_high_resolution_metric_month: PlatformRate
    dashboard_month: PlatformRate
    logs_ingestion_gb: PlatformRate
    vended_logs_ingestion_gb: PlatformRate
    logs_storage_gb_month: PlatformRate


class PlatformPriceTable(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str
    currency: Literal["USD"] = "USD"
    source: str
    regions: dict[str, RegionRates]

    def rates(self, region: str) -> RegionRates:
        found = self.regions.get(region)
        if found is None:
            known = ", ".join(sorted(self.regions)) or "none"
            raise StageCostError(f"no platform prices for {region} in price table {self.version} (it has: {known}); "
                                 f"add a {region} row set to a copy of the table and pass it with --prices")
        return found


SHIPPED_TABLE = "platform_prices.json"


def load_platform_prices(path: str | Path | None = None) -> PlatformPriceTable:
    """The shipped table, or the one at ``path``."""
    if path is None:
        text = resources.files("dualtrack").joinpath("data", SHIPPED_TABLE).read_text(encoding="utf-8")
    else:
        text = Path(path).read_text(encoding="utf-8")
    return PlatformPriceTable.model_validate(json.loads(text))


@dataclass(frozen=True)
class CostLine:
    """A fixed monthly cost: quantity x unit price x periods (hours or months) = USD per month."""

    key: str
    item: str
    quantity: int
    quantity_unit: str
    rate: PlatformRate
    periods: int
    period_unit: Literal["hours", "month"]
    detail: str

    @property
    def monthly_usd(self) -> Decimal:
        return self.quantity * self.rate.usd * self.periods


@dataclass(frozen=True)
class UsageLine:
    """A cost that scales with volume: its rate per GB, and a monthly figure only for a volume the caller gave."""

    key: str
    item: str
    rate: PlatformRate
    detail: str
    assumed_gb: Decimal | None = None

    @property
    def monthly_usd(self) -> Decimal | None:
        return None if self.assumed_gb is None else self.assumed_gb * self.rate.usd


@dataclass(frozen=True)
class FreeItem:
    service: str
    count: int
    why: str


class RateJson(TypedDict):
    usd: str
    unit: str
    confidence: Confidence
    source: str


class FixedLineJson(TypedDict):
    key: str
    item: str
    quantity: int
    quantity_unit: str
    unit_price: RateJson
    periods: int
    period_unit: Literal["hours", "month"]
    monthly_usd: str
    detail: str


class UsageLineJson(TypedDict):
    key: str
    item: str
    unit_price: RateJson
    detail: str
    assumed_gb_per_month: str | None
    monthly_usd: str | None


class FreeItemJson(TypedDict):
    service: str
    resources: int
    why: str


class StageCostJson(TypedDict):
    """:meth:`StageCost.to_dict`: what ``dualtrack stage cost --json`` prints, amounts as decimal strings."""

    region: str
    price_table: str
    hours_per_month: int
    fixed: list[FixedLineJson]
    fixed_monthly_usd: str
    usage: list[UsageLineJson]
    assumed_usage_monthly_usd: str
    total_monthly_usd: str
    free_when_idle: list[FreeItemJson]
    not_priced: list[str]


@dataclass
class StageCost:
    region: str
    table_version: str
    hours_per_month: int
    fixed: list[CostLine] = field(default_factory=list)
    usage: list[UsageLine] = field(default_factory=list)
    free: list[FreeItem] = field(default_factory=list)
    unpriced: list[str] = field(default_factory=list)

    @property
    def fixed_total_usd(self) -> Decimal:
        return sum((line.monthly_usd for line in self.fixed), Decimal(0))

    @property
    def assumed_usage_usd(self) -> Decimal:
        return sum((line.monthly_usd or Decimal(0) for line in self.usage), Decimal(0))

    @property
    def total_usd(self) -> Decimal:
        """Fixed costs plus the usage lines the caller gave a volume for."""
        return self.fixed_total_usd + self.assumed_usage_usd

    def to_dict(self) -> StageCostJson:
        def rate(r: PlatformRate) -> RateJson:
            return {"usd": str(r.usd), "unit": r.unit, "confidence": r.confidence, "source": r.source}

        return {
            "region": self.region, "price_table": self.table_version, "hours_per_month": self.hours_per_month,
            "fixed": [{"key": c.key, "item": c.item, "quantity": c.quantity, "quantity_unit": c.quantity_unit,
                       "unit_price": rate(c.rate), "periods": c.periods, "period_unit": c.period_unit,
                       "monthly_usd": str(c.monthly_usd), "detail": c.detail} for c in self.fixed],
            "fixed_monthly_usd": str(self.fixed_total_usd),
            "usage": [{"key": u.key, "item": u.item, "unit_price": rate(u.rate), "detail": u.detail,
                       "assumed_gb_per_month": None if u.assumed_gb is None else str(u.assumed_gb),
                       "monthly_usd": None if u.monthly_usd is None else str(u.monthly_usd)} for u in self.usage],
            "assumed_usage_monthly_usd": str(self.assumed_usage_usd),
            "total_monthly_usd": str(self.total_usd),
            "free_when_idle": [{"service": f.service, "resources": f.count, "why": f.why} for f in self.free],
            "not_priced": list(self.unpriced),
        }


# Resource types that bill nothing while no trial runs, grouped by the service a reader knows them by.
FREE_WHEN_IDLE: dict[str, tuple[str, str]] = {
    "AWS::Batch::ComputeEnvironment": ("AWS Batch", "no instance runs at min vCPUs 0; instances bill while jobs run"),
    "AWS::Batch::JobQueue": ("AWS Batch", "no instance runs at min vCPUs 0; instances bill while jobs run"),
    "AWS::Batch::JobDefinition": ("AWS Batch", "no instance runs at min vCPUs 0; instances bill while jobs run"),
    "AWS::StepFunctions::StateMachine": ("Step Functions", "per state transition (Standard) or request (Express)"),
    "AWS::Lambda::Function": ("Lambda", "billed per request and duration"),
    "AWS::ApiGateway::RestApi": ("API Gateway", "billed per request"),
    "AWS::Events::Rule": ("EventBridge", "billed per custom event published; AWS service events are free"),
    "AWS::SNS::Topic": ("SNS", "billed per request and delivery"),
    "AWS::SQS::Queue": ("SQS", "billed per request"),
    "AWS::DynamoDB::Table": ("DynamoDB (on-demand)", "billed per request; storage by what is stored"),
    "AWS::S3::Bucket": ("S3", "billed per request; storage by what is stored"),
    "AWS::EC2::VPC": ("VPC, subnets, route tables, security groups", "no charge"),
    "AWS::EC2::Subnet": ("VPC, subnets, route tables, security groups", "no charge"),
    "AWS::EC2::RouteTable": ("VPC, subnets, route tables, security groups", "no charge"),
    "AWS::EC2::SecurityGroup": ("VPC, subnets, route tables, security groups", "no charge"),
}


def idle_cost(templates: Mapping[str, JsonMapping], table: PlatformPriceTable, region: str, *,
              assumptions: Mapping[str, Decimal | int | float | str] | None = None,
              instance_prices: PriceTable | None = None, instance_region: str | None = None) -> StageCost:
    """The idle monthly cost of the stage whose stack templates are ``templates`` (stack name -> template).

    Warm Batch capacity (min vCPUs above 0) is priced from ``instance_prices`` in ``instance_region`` (default
    ``region``): the instance price table the stage bills its runs with. Without one it is listed as not priced."""
    rates = table.rates(region)
    gb = {k: Decimal(str(v)) for k, v in (assumptions or {}).items() if v is not None}
    unknown = set(gb) - {LOG_GB, FLOW_LOG_GB, ENDPOINT_GB, NAT_GB}
    if unknown:
        raise StageCostError(f"unknown usage assumption(s): {', '.join(sorted(unknown))}")
    if any(v < 0 for v in gb.values()):
        raise StageCostError("a usage assumption (GB per month) cannot be negative")
    result = StageCost(region=region, table_version=table.version, hours_per_month=HOURS_PER_MONTH)
    resources_by_type: dict[str, Found] = {}
    for stack, template in templates.items():
        for logical_id, entry in _object(template.get("Resources")).items():
            resource = _object(entry)
            kind = resource.get("Type", "")
            resources_by_type.setdefault(kind if isinstance(kind, str) else "", []).append(
                (stack, logical_id, _object(resource.get("Properties"))))
    all_resources = {(stack, lid): props for found in resources_by_type.values() for stack, lid, props in found}

    def of(kind: str) -> Found:
        return resources_by_type.get(kind, [])

    _endpoints(result, rates, of("AWS::EC2::VPCEndpoint"), all_resources)
    _nat(result, rates, of("AWS::EC2::NatGateway"), of("AWS::EC2::EIP"))
    _warm_capacity(result, of("AWS::Batch::ComputeEnvironment"), instance_prices, instance_region or region)
    _kms(result, rates, of("AWS::KMS::Key") + of("AWS::KMS::ReplicaKey"))
    _alarms(result, rates, of("AWS::CloudWatch::Alarm"), of("AWS::CloudWatch::CompositeAlarm"))
    dashboards = of("AWS::CloudWatch::Dashboard")
    if dashboards:
        result.fixed.append(CostLine(
            "dashboards", "CloudWatch dashboards", len(dashboards), _units(len(dashboards), "dashboard"),
            rates.dashboard_month, 1, "month", "the first 3 per account are free"))
    _logs(result, rates, gb, of("AWS::Logs::LogGroup"), of("AWS::EC2::FlowLog"), of("AWS::Lambda::Function"),
          of("AWS::ApiGateway::Stage"))
    if any(line.key == "interface_endpoints" for line in result.fixed):
        result.usage.append(UsageLine(
            ENDPOINT_GB, "Data through the interface endpoints", rates.interface_endpoint_gb,
            "API calls, logs and image manifests from the jobs; image layers come from S3 through the free gateway "
            "endpoint", gb.get(ENDPOINT_GB)))
    if of("AWS::EC2::NatGateway"):
        result.usage.append(UsageLine(NAT_GB, "Data through the NAT gateways", rates.nat_gateway_gb,
                                      "every GB in or out, on top of data transfer", gb.get(NAT_GB)))
    _free(result, resources_by_type)
    return result


def _endpoints(result: StageCost, rates: RegionRates, endpoints: Found,
               all_resources: Mapping[tuple[str, str], JsonMapping]) -> None:
    interface: list[tuple[str, int]] = []
    gateway = 0
    for stack, logical_id, props in endpoints:
        kind = props.get("VpcEndpointType", "Gateway")  # CloudFormation's default
        if kind == "Gateway":
            gateway += 1
            continue
        if kind != "Interface":
            result.unpriced.append(f"{stack}/{logical_id}: a {kind} VPC endpoint (not priced here)")
            continue
        interface.append((_service_name(props.get("ServiceName")), _zones(stack, logical_id, props, all_resources)))
    if interface:
        endpoint_zones = sum(z for _, z in interface)
        spans = {z for _, z in interface}
        if len(spans) == 1:
            zones = spans.pop()
            detail = (f"{len(interface)} endpoints x {zones} zone{'s' if zones != 1 else ''} each: "
                      + ", ".join(sorted(name for name, _ in interface)))
        else:
            detail = f"{len(interface)} endpoints (zones each): " + ", ".join(
                f"{name} ({zones})" for name, zones in sorted(interface))
        result.fixed.append(CostLine(
            "interface_endpoints", "Interface VPC endpoints", endpoint_zones, _units(endpoint_zones, "endpoint-AZ"),
            rates.interface_endpoint_az_hour, HOURS_PER_MONTH, "hours", detail))
    if gateway:
        result.free.append(FreeItem("Gateway VPC endpoints", gateway, "no hourly or per-GB charge"))


def _zones(stack: str, logical_id: str, props: JsonMapping,
           all_resources: Mapping[tuple[str, str], JsonMapping]) -> int:
    """The Availability Zones an interface endpoint has a network interface in: one per subnet (an endpoint takes at
    most one subnet per zone), fewer where two listed subnets of this template share a zone."""
    subnets = props.get("SubnetIds")
    if not isinstance(subnets, list) or not subnets:
        raise StageCostError(f"{stack}/{logical_id}: interface endpoint without a literal SubnetIds list; cannot "
                             "tell how many Availability Zones it is billed in")
    zones: set[str] = set()
    for index, subnet in enumerate(subnets):
        ref = subnet.get("Ref") if isinstance(subnet, dict) else None
        target = all_resources.get((stack, ref)) if isinstance(ref, str) else None
        zone = (target or {}).get("AvailabilityZone")
        zones.add(json.dumps(zone, sort_keys=True) if zone is not None else f"subnet#{index}:{json.dumps(subnet)}")
    return len(zones)


def _service_name(value: JsonIn) -> str:
    """``ecr.api`` from ``com.amazonaws.<region>.ecr.api``, literal or joined around ``{"Ref": "AWS::Region"}``."""
    if isinstance(value, dict) and "Fn::Join" in value:
        match value["Fn::Join"]:
            case [str(separator), list(parts)]:
                value = separator.join(p if isinstance(p, str) else "{region}" for p in parts)
    if not isinstance(value, str):
        return "?"
    pieces = value.split(".")
    return ".".join(pieces[3:]) if value.startswith("com.amazonaws.") and len(pieces) > 3 else value


def _nat(result: StageCost, rates: RegionRates, gateways: Found,
         addresses: Found) -> None:
    if gateways:
        private = sum(1 for _, _, p in gateways if p.get("ConnectivityType") == "private")
        result.fixed.append(CostLine(
            "nat_gateways", "NAT gateways", len(gateways), _units(len(gateways), "gateway"), rates.nat_gateway_hour,
            HOURS_PER_MONTH,
            "hours", f"{len(gateways)} gateway(s){f', {private} private' if private else ''}"))
    if addresses:
        result.fixed.append(CostLine(
            "public_ipv4", "Public IPv4 addresses (Elastic IPs)", len(addresses),
            _units(len(addresses), "address", "addresses"), rates.public_ipv4_hour,
            HOURS_PER_MONTH, "hours", "billed whether attached or not"))


# The instance price table's confidence, as a platform rate states it.
_CONFIDENCE: dict[str, Confidence] = {"list": "list", "pricing-api": "list", "estimate": "estimate",
                                      "override": "override"}


def _warm_capacity(result: StageCost, environments: Found, prices: PriceTable | None, region: str) -> None:
    """Compute environments whose min vCPUs keep instances running while no job runs ("The minimum number of vCPUs
    that a compute environment should maintain (even if the compute environment is DISABLED)", Batch
    ComputeResource): whole on-demand instances, each billed every hour at its instance rate. One line per
    instance type; what cannot be priced from the templates and the table is named instead."""
    hosts_by_type: dict[str, int] = {}
    catalogue = load_catalogue()
    for stack, logical_id, props in environments:
        resources_ = _object(props.get("ComputeResources"))
        minimum = resources_.get("MinvCpus", 0)
        if minimum == 0:
            continue
        types = resources_.get("InstanceTypes")
        kind = resources_.get("Type", "EC2")
        instance_type = types[0] if isinstance(types, list) and len(types) == 1 else None
        problem = None
        if prices is None:
            problem = "no instance price table given; `dualtrack estimate` has the rates"
        elif kind != "EC2":
            problem = f"{kind} capacity: only on-demand instance rates are in the price table"
        elif not isinstance(minimum, int) or not isinstance(instance_type, str):
            problem = "needs a literal min vCPUs and exactly one instance type"
        elif instance_type not in catalogue.instances:
            problem = f"{instance_type} is not in the instance catalogue"
        else:
            try:
                prices.instance_price(instance_type, region)
            except PriceMissing as exc:
                problem = str(exc)
        if problem is not None:
            result.unpriced.append(f"{stack}/{logical_id}: min vCPUs {minimum} keeps instances running ({problem})")
            continue
        assert isinstance(instance_type, str) and isinstance(minimum, int)
        hosts = -(-minimum // catalogue.get(instance_type).vcpus)  # Batch keeps whole instances
        hosts_by_type[instance_type] = hosts_by_type.get(instance_type, 0) + hosts
    for instance_type, hosts in sorted(hosts_by_type.items()):
        assert prices is not None
        price = prices.instance_price(instance_type, region)
        rate = PlatformRate(usd=price.hourly_usd, unit="instance-hour", confidence=_CONFIDENCE[price.confidence],
                            source=f"instance price table {prices.version}, {region}", note=price.note)
        result.fixed.append(CostLine(
            f"warm_capacity:{instance_type}", f"Warm Batch capacity: {instance_type}", hosts,
            f"{instance_type} {_units(hosts, 'instance')}", rate, HOURS_PER_MONTH, "hours",
            f"min vCPUs keep {hosts} on-demand {instance_type} running whether or not a job runs (the stage's "
            f"warm_vcpus), at the {region} rate the plane bills its runs at"))


def _kms(result: StageCost, rates: RegionRates, keys: Found) -> None:
    if not keys:
        return
    rotated = sum(1 for _, _, p in keys if p.get("EnableKeyRotation") is True)
    per_stack = Counter(stack.rsplit("-", 1)[-1] for stack, _, _ in keys)
    detail = ", ".join(f"{stack} {n}" for stack, n in sorted(per_stack.items())) + (
        f"; {rotated} rotate yearly, each rotation adding a key-month (first year shown)" if rotated else "")
    result.fixed.append(CostLine("kms_keys", "KMS customer managed keys", len(keys), _units(len(keys), "key"),
                                 rates.kms_key_month, 1, "month", detail))


def _alarms(result: StageCost, rates: RegionRates, alarms: Found,
            composites: Found) -> None:
    standard = high = math_alarms = 0
    for stack, logical_id, props in alarms:
        if "Metrics" in props:
            metrics = _objects(props["Metrics"])
            stats = [_object(m["MetricStat"]) for m in metrics if "MetricStat" in m]
            if any("SELECT" in str(m.get("Expression", "")).upper() for m in metrics):
                result.unpriced.append(f"{stack}/{logical_id}: a Metrics Insights query alarm (not priced here)")
                continue
            if props.get("ThresholdMetricId"):
                result.unpriced.append(f"{stack}/{logical_id}: an anomaly detection alarm (not priced here)")
                continue
            math_alarms += 1
            count, periods = len(stats), [s.get("Period", 60) for s in stats]
        else:
            count, periods = 1, [props.get("Period", 60)]
        if any(isinstance(p, int) and p < 60 for p in periods):
            high += count
        else:
            standard += count
    if standard:
        extra = f", {math_alarms} of them metric math (each metric counted)" if math_alarms else ""
        result.fixed.append(CostLine(
            "alarms", "CloudWatch alarms (standard resolution)", standard, _units(standard, "alarm metric"),
            rates.alarm_metric_month, 1, "month",
            f"{len(alarms)} alarms{extra}; the first 10 alarm metrics per account are free"))
    if high:
        result.fixed.append(CostLine(
            "alarms_high_resolution", "CloudWatch alarms (high resolution)", high, _units(high, "alarm metric"),
            rates.alarm_high_resolution_metric_month, 1, "month", "periods under 60 seconds"))
    for stack, logical_id, _ in composites:
        result.unpriced.append(f"{stack}/{logical_id}: a composite alarm (not priced here)")


def _logs(result: StageCost, rates: RegionRates, gb: Mapping[str, Decimal], groups: Found,
          flow_logs: Found, functions: Found,
          api_stages: Found) -> None:
    flow_groups: set[tuple[str, str]] = set()
    to_logs = 0
    for stack, logical_id, props in flow_logs:
        destination = props.get("LogDestinationType", "cloud-watch-logs")
        if destination != "cloud-watch-logs":
            result.unpriced.append(f"{stack}/{logical_id}: VPC flow log to {destination} (vended-log delivery to "
                                   f"{destination} not priced here)")
            continue
        to_logs += 1
        target = _object(props.get("LogGroupName")).get("Ref")
        if isinstance(target, str):
            flow_groups.add((stack, target))
    other = [(s, lid, p) for s, lid, p in groups if (s, lid) not in flow_groups]
    retention = sorted({_retention_days(s, lid, p) for s, lid, p in groups}, key=lambda d: (d is None, d or 0))
    kept = ", ".join("never expires" if d is None else f"{d} days" for d in retention) or "-"
    implicit = []
    if functions:
        implicit.append(f"{len(functions)} Lambda functions")
    if any(s.get("LoggingLevel") in ("ERROR", "INFO") for _, _, p in api_stages
           for s in _objects(p.get("MethodSettings"))):
        implicit.append("API execution logs (level ERROR or INFO)")
    sources = f"; written by {', '.join(implicit)} among others" if implicit else ""
    result.usage.append(UsageLine(
        LOG_GB, "CloudWatch Logs ingestion (Standard)", rates.logs_ingestion_gb,
        f"{len(other)} {_units(len(other), 'log group')} in the templates{sources}", gb.get(LOG_GB)))
    if to_logs:
        result.usage.append(UsageLine(
            FLOW_LOG_GB, "VPC flow logs to CloudWatch Logs (vended)", rates.vended_logs_ingestion_gb,
            f"{to_logs} {_units(to_logs, 'flow log')}; records only for traffic, so next to nothing while no job runs",
            gb.get(FLOW_LOG_GB)))
    result.usage.append(UsageLine(
        "log_storage_gb_month", "CloudWatch Logs storage", rates.logs_storage_gb_month,
        f"per GB-month stored (compressed), kept for the retention ({kept})"))


def _free(result: StageCost, resources_by_type: Mapping[str, Found]) -> None:
    counts: dict[tuple[str, str], int] = {}
    for kind, (service, why) in FREE_WHEN_IDLE.items():
        for stack, logical_id, props in resources_by_type.get(kind, []):
            if kind == "AWS::Batch::ComputeEnvironment" and _object(props.get("ComputeResources")).get(
                    "MinvCpus", 0) != 0:
                continue  # warm capacity: priced (or named as not priced) by _warm_capacity
            if kind == "AWS::DynamoDB::Table" and props.get("BillingMode", "PROVISIONED") != "PAY_PER_REQUEST":
                result.unpriced.append(f"{stack}/{logical_id}: provisioned-capacity table (capacity bills hourly; "
                                       "not priced here)")
                continue
            counts[(service, why)] = counts.get((service, why), 0) + 1
    result.free.extend(FreeItem(service, n, why) for (service, why), n in counts.items())


def _retention_days(stack: str, logical_id: str, props: JsonMapping) -> int | None:
    """A log group's ``RetentionInDays`` (None: it never expires)."""
    days = props.get("RetentionInDays")
    if days is None or isinstance(days, int):
        return days
    if isinstance(days, str) and days.isdigit():
        return int(days)
    raise StageCostError(f"{stack}/{logical_id}: RetentionInDays {json.dumps(days)} is not a literal number of days")


def _object(value: JsonIn) -> JsonMapping:
    """``value`` when it is a JSON object, else an empty one (a property the template leaves out)."""
    return value if isinstance(value, Mapping) else {}


def _objects(value: JsonIn) -> list[JsonMapping]:
    """The JSON objects in the array ``value``; none when it is not an array."""
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def _units(count: int, singular: str, plural: str | None = None) -> str:
    return singular if count == 1 else plural or f"{singular}s"


def money(value: Decimal) -> str:
    return f"${value.quantize(CENT):,}"
