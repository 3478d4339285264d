"""Versioned price table: instance hourly rates per region and S3 rates, with per-deployment overrides.

No price lives in logic: the shipped table is data (data/prices.json, with its source and date), a deployment
overrides rows (negotiated rates, Savings Plans) through ``load_price_table(overrides)``, and
``dualtrack prices refresh`` rewrites the table from the AWS Pricing API.
"""

from __future__ import annotations

import json
from decimal import Decimal
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lambdas.domain.json_types import JsonObject
from lambdas.domain.vocabulary import COMPILE_RUN

if TYPE_CHECKING:
    from lambdas.domain.trial.spec import TrialSpec


HOURS = Decimal(3600)


class PriceMissing(LookupError):
    pass


class PricesInvalid(ValueError):
    """A price table or price overrides that do not validate: the message names each field path and what it must
    hold."""


_INSTANCES_SHAPE = '{"<region>": {"<instance type>": {"hourly_usd": "55.04"}}}'
_S3_SHAPE = '{"<region>": {"storage_gb_month_usd": ..., "put_per_1000_usd": ..., "get_per_1000_usd": ...}}'
# What each field of the table holds, for the message naming a malformed one.
_FIXES = {
    "hourly_usd": 'USD per hour, a number at least 0 (e.g. "55.04")',
    "confidence": "one of list, estimate, override, pricing-api",
    "note": "free text",
    "capacity_block_hourly_usd": "USD per instance-hour in a Capacity Block, a number at least 0",
    "savings_plan_hourly_usd": "USD per instance-hour under a Savings Plan, a number at least 0",
    "capacity": "one of on_demand, spot, reserved, capacity_block (the capacity the stage runs this type on)",
    "storage_gb_month_usd": "USD per GB-month, a number at least 0",
    "put_per_1000_usd": "USD per 1,000 PUT requests, a number at least 0",
    "get_per_1000_usd": "USD per 1,000 GET requests, a number at least 0",
    "version": "a string",
    "source": "a string",
}


def _problems(exc: ValidationError) -> list[str]:
    """Each validation error as ``path: what is wrong; what it must hold``."""
    out = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        field = loc[-1] if loc else ""
        if err["type"] == "extra_forbidden":
            parent = ("an instance row takes hourly_usd, confidence, note, capacity_block_hourly_usd, "
                      "savings_plan_hourly_usd, capacity") if loc[:1] == ["instances"] else (
                "S3 rates take storage_gb_month_usd, put_per_1000_usd, get_per_1000_usd, confidence, note")
            fix = f"unknown field; remove it ({parent})"
        elif err["type"] == "missing":
            fix = f"required for a region the table does not have; add it ({_FIXES.get(field, field)})"
        else:
            fix = f"{err['msg'].lower()} (got {err.get('input')!r:.40}); give {_FIXES.get(field, field)}"
        out.append(f"{'.'.join(loc)}: {fix}")
    return out


def _mapping(value: object, path: str, shape: str) -> JsonObject:
    if not isinstance(value, dict):
        raise PricesInvalid(f"price overrides: {path}: must be a JSON object {shape} (got {type(value).__name__})")
    return value


# The capacity a stage runs an instance type on, which decides when its instances are paid for. On-demand and Spot
# instances are billed from launch: a job waiting RUNNABLE has no instance yet and costs nothing. Reserved capacity
# (an On-Demand Capacity Reservation, charged whether instances run in it or not) and a Capacity Block for ML (its
# whole price charged up front for the block's duration) are paid while they are held, so a job's wait for them is
# paid at the instance rate too.
Capacity = Literal["on_demand", "spot", "reserved", "capacity_block"]
PAID_WHILE_QUEUED: frozenset[Capacity] = frozenset({"reserved", "capacity_block"})
CAPACITY_BASIS: dict[Capacity, str] = {
    "on_demand": "on-demand capacity: billed from STARTING, environment start included; queue time (SUBMITTED to "
                 "STARTING) costs nothing, no instance runs yet",
    "spot": "Spot capacity: billed from STARTING, environment start included; queue time (SUBMITTED to STARTING) "
            "costs nothing, no instance runs yet",
    "reserved": "reserved capacity (On-Demand Capacity Reservation): paid while held, so queue time (SUBMITTED to "
                "STARTING, RUNNABLE included) is billed at the instance rate with environment start",
    "capacity_block": "Capacity Block for ML: paid up front for the whole block, so queue time (SUBMITTED to "
                      "STARTING, RUNNABLE included) is billed at the instance rate with environment start",
}


class InstancePrice(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    hourly_usd: Decimal = Field(ge=0)
    confidence: Literal["list", "estimate", "override", "pricing-api"] = "list"
    note: str = ""
    # Other bases a decision is priced at, where the deployment knows them (a price override): a Capacity Block's
    # effective hourly rate (set by AWS per purchase, with supply and demand:
    # https://aws.amazon.com/ec2/capacityblocks/pricing/) and a Savings Plan's committed rate.
    capacity_block_hourly_usd: Decimal | None = Field(default=None, ge=0)
    savings_plan_hourly_usd: Decimal | None = Field(default=None, ge=0)
    capacity: Capacity = Field(
        default="on_demand", description="the capacity the stage runs this type on (a price override states it "
        "with the rate the stage pays; a Capacity Block's rate is its upfront price over the block's hours): "
        "reserved and capacity_block bill a job's queue time too")

    @property
    def paid_while_queued(self) -> bool:
        """Whether a job waiting for this capacity (SUBMITTED to STARTING) is paid at the instance rate."""
        return self.capacity in PAID_WHILE_QUEUED

    def rate(self, basis: str) -> Decimal | None:
        """The hourly rate at ``basis`` (``capacity_block``, ``savings_plan``; anything else: ``hourly_usd``)."""
        if basis == "capacity_block":
            return self.capacity_block_hourly_usd
        if basis == "savings_plan":
            return self.savings_plan_hourly_usd
        return self.hourly_usd


class S3Rates(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    storage_gb_month_usd: Decimal = Field(ge=0)
    put_per_1000_usd: Decimal = Field(ge=0)
    get_per_1000_usd: Decimal = Field(ge=0)
    confidence: Literal["list", "estimate", "override", "pricing-api"] = "list"
    note: str = ""


class PriceTable(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    version: str
    currency: Literal["USD"] = "USD"
    source: str
    default_region: str = "us-east-1"
    instances: dict[str, dict[str, InstancePrice]]
    s3: dict[str, S3Rates]

    def instance_price(self, instance_type: str, region: str | None = None) -> InstancePrice:
        region = region or self.default_region
        row = self.instances.get(region, {}).get(instance_type)
        if row is None:
            raise PriceMissing(
                f"no price for {instance_type} in {region} (price table {self.version}); run "
                f"`dualtrack prices refresh --region {region}` or add an override "
                f'{{"instances": {{"{region}": {{"{instance_type}": {{"hourly_usd": "..."}}}}}}}}'
            )
        return row

    def instance_hourly_usd(self, instance_type: str, region: str | None = None) -> Decimal:
        return self.instance_price(instance_type, region).hourly_usd

    def s3_rates(self, region: str | None = None) -> S3Rates:
        """The S3 rates of ``region`` (none named: the table's default region). A region the table lacks is
        refused, never priced at another region's rates."""
        region = region or self.default_region
        rates = self.s3.get(region)
        if rates is None:
            raise PriceMissing(
                f"no S3 rates for {region} in price table {self.version} (it has: {', '.join(sorted(self.s3))}); "
                f'add an override {{"s3": {{"{region}": {{"storage_gb_month_usd": "...", "put_per_1000_usd": "...", '
                f'"get_per_1000_usd": "..."}}}}}}')
        return rates

    def with_overrides(self, overrides: JsonObject | None) -> PriceTable:
        """This table with ``overrides`` applied. Raises ``PricesInvalid`` naming the field of a malformed one."""
        if not overrides:
            return self
        _mapping(overrides, "", '{"instances": ..., "s3": ..., "version": ..., "source": ...}')
        unknown = sorted(set(overrides) - {"instances", "s3", "version", "source"})
        if unknown:
            raise PricesInvalid(f"price overrides: {unknown[0]}: unknown key; use instances, s3, version, source")
        data = self.model_dump(mode="json")
        instances = _mapping(overrides.get("instances") or {}, "instances", _INSTANCES_SHAPE)
        for region, rows in instances.items():
            for itype, row in _mapping(rows, f"instances.{region}", '{"<instance type>": ...}').items():
                if isinstance(row, str | int | float) and not isinstance(row, bool):
                    row = {"hourly_usd": row}
                row = dict(_mapping(row, f"instances.{region}.{itype}", '{"hourly_usd": "55.04"} or a number'))
                shipped = data["instances"].get(region, {}).get(itype) or {}
                if "hourly_usd" in row:  # a negotiated rate replaces the row; other bases' rates stay
                    row.setdefault("confidence", "override")
                    row = {**{k: v for k, v in shipped.items() if k.endswith("_hourly_usd")}, **row}
                else:  # only another basis's rate: the row's own rate, confidence and note stay
                    row = {**shipped, **row}
                data["instances"].setdefault(region, {})[itype] = row
        for region, rates in _mapping(overrides.get("s3") or {}, "s3", _S3_SHAPE).items():
            row = dict(_mapping(rates, f"s3.{region}", _S3_SHAPE))
            if any(key.endswith("_usd") for key in row):  # a stated rate is the deployment's own
                row.setdefault("confidence", "override")
                row.setdefault("note", "")
            data["s3"][region] = {**data["s3"].get(region, {}), **row}
        data["version"] = overrides.get("version", f"{self.version}+overrides")
        if "source" in overrides:
            data["source"] = overrides["source"]
        try:
            return PriceTable.model_validate(data)
        except ValidationError as exc:  # the overrides mirror the table, so its paths are theirs
            raise PricesInvalid("price overrides: " + "; ".join(_problems(exc))) from None


@lru_cache(maxsize=1)
def _shipped_table() -> PriceTable:
    text = resources.files("lambdas.domain").joinpath("data/prices.json").read_text()
    return PriceTable.model_validate(json.loads(text))


def load_price_table(overrides: JsonObject | None = None, base: JsonObject | None = None) -> PriceTable:
    """The shipped table (or `base`, e.g. a refreshed table) with per-deployment overrides applied."""
    try:
        table = PriceTable.model_validate(base) if base is not None else _shipped_table()
    except ValidationError as exc:
        raise PricesInvalid("price table: " + "; ".join(_problems(exc))) from None
    return table.with_overrides(overrides)


def worst_case_usd(spec: TrialSpec, table: PriceTable, region: str | None = None,
                   attempts: int = 1, compile_hours: float | None = None) -> dict[str, Decimal]:
    """Pre-flight ceiling: hourly price x nodes x limits.max_hours x ``attempts`` per run. Every attempt Batch makes
    may run for max_hours (it is each attempt's timeout), so the stage's max_attempts multiplies the ceiling. A GPU
    fallback can double trn2's GPU share, so the fallback run is priced too when the trial has a trn2 track and a
    gpu track and does not declare failure_recovery none (no fallback then runs). With ``compile_hours`` (a stage
    that runs the warm-up compile stage, its timeout), the compile job is priced too, on the trn2 track's instances,
    for the shorter of that and max_hours. Each scaling run (``gpu-n1``) is priced at its own node count."""
    max_hours = Decimal(str(spec.limits.max_hours)) if spec.limits and spec.limits.max_hours else None
    out: dict[str, Decimal] = {}
    if max_hours is None:
        return out
    hours = max_hours * attempts
    for name in spec.track_names():
        track = spec.track(name)
        out[name] = table.instance_hourly_usd(track.instance_type, region) * track.nodes * hours
    if "trn2" in out and compile_hours:
        trn2 = spec.tracks.trn2
        assert trn2 is not None
        out[COMPILE_RUN] = (table.instance_hourly_usd(trn2.instance_type, region) * trn2.nodes
                            * min(Decimal(str(compile_hours)), max_hours) * attempts)
    if "trn2" in out and spec.tracks.gpu is not None and spec.failure_recovery != "none":
        gpu = spec.tracks.gpu
        out["gpu-fallback"] = table.instance_hourly_usd(gpu.instance_type, region) * gpu.nodes * hours
    for run, (name, nodes) in spec.scaling_runs().items():  # each scaling run is a whole run at its node count
        out[run] = table.instance_hourly_usd(spec.track(name).instance_type, region) * nodes * hours
    out["total"] = sum(out.values(), Decimal(0))
    return out
