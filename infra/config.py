"""Stage configuration: everything a deployment may change, validated before any construct is built.

``infra/app.py`` is the only reader of CDK context; it turns ``cdk.json``'s ``dualtrack:stages`` entry for the chosen
stage into a :class:`StageConfig` and hands it to the stacks. Instance types are checked against the instance
catalogue the trial validator uses, so the queues can run every type a trial may ask for.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from lambdas.domain.json_types import JsonMapping, JsonObject
from lambdas.domain.money.periods import SCHEDULES, Period
from lambdas.domain.neuron_stack import neuron_release
from lambdas.domain.trial.catalogue import InstanceInfo, load_catalogue
from lambdas.domain.trial.governance import Governance
from lambdas.domain.vocabulary import DEFAULT_MAX_ATTEMPTS, trn2_backend

STAGE_NAME = r"^[a-z][a-z0-9-]{0,15}$"
# Valid CloudWatch Logs retention periods (days); anything else is rejected at deploy time.
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1827, 3653)


Track = Literal["gpu", "trn2"]


def batch_name(stage: str, track: Track, instance_type: str, kind: str = "") -> str:
    """The fixed physical name of a Batch queue or job definition: ``dualtrack-<stage>-<track>-<type>[-<kind>]``.

    Names, not revisioned ARNs, are what the control plane sends to SubmitJob (a job definition's name means its
    latest ACTIVE revision), so a new image revision never changes a value another stack imports.
    """
    parts = ["dualtrack", stage, track, instance_type.replace(".", "-"), kind]
    return "-".join(part for part in parts if part)


class ConfigInvalid(ValueError):
    pass


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ComputeFamily(_Model):
    """One accelerator family's Batch capacity: per instance type a compute environment, a queue and job
    definitions sized for that type, so every environment a queue holds can run every job sent to it."""

    instance_types: Annotated[list[str], Field(min_length=1, max_length=8)]
    max_vcpus: Annotated[int, Field(ge=1, le=100_000)] = 768
    spot: bool = Field(default=False, description="add a Spot compute environment after the on-demand one")
    root_volume_gib: Annotated[int, Field(ge=100, le=16_384)] = 1024
    ami_id: Annotated[str, Field(pattern=r"^ami-[0-9a-f]{8,17}$")] | None = Field(
        default=None, description="the AMI the hosts run, pinned: a deploy never replaces hosts on its own"
    )
    ami_ssm_parameter: Annotated[str, Field(pattern=r"^/[A-Za-z0-9_./-]+$")] | None = Field(
        default=None, description="SSM parameter holding the AMI id; CloudFormation reads it again at every "
        "deploy, so prefer a release-named parameter or ami_id"
    )
    image_uri: str | None = Field(
        default=None, description="pinned trainer image (ECR URI with digest); omit to build containers/<track>/"
    )
    image_versions: dict[Literal["neuron_sdk", "torch", "neuronx_cc", "torch_neuronx", "neuron_runtime"], str] = Field(
        default_factory=dict, description="the versions the trainer image pins (with image_uri: yours to state; "
        "for the image built from containers/neuron, neuron_sdk is read from its base image tag). The "
        "compile-cache key takes them, and a trial declaring another neuron_sdk is refused at submission")
    availability_zone: Annotated[str, Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d[a-z]$")] | None = Field(
        default=None, description="the one zone this track's hosts run in (one of the stage's "
        "availability_zones); a cluster placement group and multi-node jobs need it"
    )
    capacity_reservation_id: Annotated[str, Field(pattern=r"^cr-[0-9a-f]{8,17}$")] | None = Field(
        default=None, description="an On-Demand Capacity Reservation or Capacity Block the hosts launch into "
        "(through the launch template)"
    )
    capacity_block: bool = Field(
        default=False, description="capacity_reservation_id is a Capacity Block for ML (market type capacity-block)"
    )
    multi_node_counts: Annotated[list[Annotated[int, Field(ge=2, le=64)]], Field(max_length=8)] = Field(
        default_factory=lambda: [2, 4], description="node counts a multi-node trial may ask for: one multi-node job "
        "definition each (Step Functions cannot override a job's node count), where the track can run multi-node"
    )
    runnable_timeout_minutes: Annotated[int, Field(ge=10, le=1440)] = Field(
        default=30, description="how long a job may wait RUNNABLE for capacity (or on a misconfiguration) before "
        "the queue cancels it and the workflow moves on (Batch job state time limit: 10 min to 24 h)"
    )
    warm_vcpus: dict[str, Annotated[int, Field(ge=0)]] = Field(
        default_factory=dict, description="per instance type, the vCPUs its on-demand compute environment keeps "
        "running while no job runs (Batch minvCpus), e.g. {\"g6e.48xlarge\": 192}: the next job on that type (a GPU "
        "fallback first of all) starts without waiting for an instance launch, and the hosts bill every hour "
        "(`dualtrack stage cost` prices them). Whole hosts: a multiple of the type's vCPUs, within max_vcpus. "
        "Default: none kept warm")

    @field_validator("image_versions")
    @classmethod
    def _known_neuron_sdk(cls, value: dict[str, str]) -> dict[str, str]:
        """A Neuron SDK release this deployment knows (its driver and training stack are on record), whose images
        carry a training stack: anything else would deploy hosts checked against a guess."""
        sdk = value.get("neuron_sdk")
        if sdk is not None:
            try:
                neuron_release(sdk)
                trn2_backend(sdk)
            except ValueError as exc:
                raise ValueError(f"neuron_sdk {sdk}: {exc}") from None
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ComputeFamily:
        if (self.ami_id is None) == (self.ami_ssm_parameter is None):
            raise ValueError("set exactly one of ami_id (pinned) or ami_ssm_parameter")
        if self.image_uri and "neuron_sdk" not in self.image_versions \
                and any(t.startswith("trn") for t in self.instance_types):
            raise ValueError("image_versions.neuron_sdk is needed with a Trainium2 image_uri: it decides the trainer "
                             "stack (TorchNeuron, or PyTorch/XLA up to SDK 2.31) and the compile-cache key")
        if self.capacity_block and self.capacity_reservation_id is None:
            raise ValueError("capacity_block needs capacity_reservation_id (the block's cr-... id)")
        if self.capacity_reservation_id is not None:
            if self.spot:
                raise ValueError("spot cannot be combined with capacity_reservation_id: reserved capacity is "
                                 "on-demand; remove spot or the reservation")
            if len(self.instance_types) != 1:
                raise ValueError("capacity_reservation_id reserves one instance type: list exactly that type in "
                                 "instance_types")
            if self.availability_zone is None:
                raise ValueError("capacity_reservation_id needs availability_zone: a reservation lives in one zone")
        if self.availability_zone is not None and not self.spot:
            catalogue = load_catalogue()
            for instance_type in self.instance_types:
                info = catalogue.instances.get(instance_type)
                fits = self.max_vcpus // info.vcpus if info else 0
                too_many = [n for n in self.multi_node_counts if n > fits]
                if info is not None and info.efa_interfaces and too_many:
                    raise ValueError(f"multi_node_counts {too_many}: max_vcpus {self.max_vcpus} holds {fits} "
                                     f"{instance_type} at once; raise max_vcpus or drop those counts")
        return self

    @model_validator(mode="after")
    def _warm_hosts(self) -> ComputeFamily:
        """Warm capacity is whole hosts of a listed type (so its hourly price is exact), within the environment's
        maximum (Batch refuses a minvCpus above maxvCpus)."""
        catalogue = load_catalogue()
        for instance_type, vcpus in self.warm_vcpus.items():
            if instance_type not in self.instance_types:
                raise ValueError(f"warm_vcpus.{instance_type}: not one of this track's instance_types "
                                 f"{self.instance_types}; keep hosts warm only for a type the track runs")
            info = catalogue.instances.get(instance_type)
            if info is not None and vcpus % info.vcpus:
                raise ValueError(f"warm_vcpus.{instance_type}: {vcpus} is not a multiple of {info.vcpus}, the vCPUs "
                                 f"of one {instance_type}: hosts run whole, so state {info.vcpus} per host to keep "
                                 f"warm (e.g. {info.vcpus} for one, {2 * info.vcpus} for two)")
            if vcpus > self.max_vcpus:
                raise ValueError(f"warm_vcpus.{instance_type}: {vcpus} is above max_vcpus {self.max_vcpus}; keep "
                                 "fewer hosts warm or raise max_vcpus")
        return self


class StageConfig(_Model):
    name: Annotated[str, Field(pattern=STAGE_NAME)]
    account: Annotated[str, Field(pattern=r"^\d{12}$")] | None = None
    region: Annotated[str, Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")] | None = None
    gpu: ComputeFamily | None = Field(default=None, description="GPU capacity; omit where the stage offers none")
    trn2: ComputeFamily | None = Field(
        default=None, description="Trainium2 capacity; omit where the region does not offer trn2"
    )
    availability_zones: Annotated[list[Annotated[str, Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d[a-z]$")]],
                                  Field(min_length=1, max_length=6)] | None = Field(
        default=None, description="the zones the training subnets are in (needs region); default: two zones"
    )
    data_buckets: list[Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")]] = Field(
        default_factory=list, description="buckets holding datasets and model weights the jobs read (read-only)"
    )
    data_kms_key_arns: list[Annotated[str, Field(pattern=r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/.+$")]] = Field(
        default_factory=list, description="KMS keys encrypting data_buckets (the jobs get kms:Decrypt on them)"
    )
    api_gateway_cloudwatch_role: bool = Field(
        default=True, description="set API Gateway's region-wide logging role (kept when the stage is deleted); "
        "false where the account already has one"
    )
    max_attempts: Annotated[int, Field(ge=1, le=10)] = Field(
        default=DEFAULT_MAX_ATTEMPTS,
        description="Batch attempts per run (attempt 2 resumes from the newest checkpoint)"
    )
    attempt_timeout_hours: Annotated[float, Field(gt=0, le=24 * 14)] = 24
    workflow_timeout_hours: Annotated[float, Field(gt=0, le=24 * 365)] = 24 * 14
    compile_stage: bool = Field(
        default=True, description="before a Trainium2 training job whose compile-cache key is cold, run a "
        "compile-only job (the warm-up compile stage) on the instance type's compile queue, so compile time, "
        "failures and cost are kept apart from training and the training job starts warm")
    compile_timeout_hours: Annotated[float, Field(gt=0, le=24 * 14)] = Field(
        default=2, description="the warm-up compile stage's attempt timeout (never above attempt_timeout_hours); "
        "first compiles of 8B-class graphs take 30-60 minutes")
    api_principals: list[Annotated[str, Field(pattern=r"^arn:aws[a-z-]*:iam::\d{12}:(root|role/.+|user/.+)$")]] = Field(
        default_factory=list, description="IAM principals allowed to call the API; empty = this account"
    )
    api_rate_limit: Annotated[float, Field(gt=0, le=10_000)] = 10
    api_burst_limit: Annotated[int, Field(ge=1, le=5_000)] = 20
    log_retention_days: int = 90
    noncurrent_version_days: Annotated[int, Field(ge=1, le=3650)] = 30
    cost_report_period: Period = Field(
        default="week", description="day, week or month: the scheduled cost report runs after each one ends (06:00 "
        "UTC) and covers exactly it, per team against the team's usd_per_month")
    cache_retention_days: Annotated[int, Field(ge=1, le=3650)] = Field(
        default=30, description="days a compile-cache entry may go unused before garbage collection deletes it"
    )
    cache_gc_schedule: Annotated[str, Field(pattern=r"^(cron|rate)\(.+\)$")] = "cron(0 5 * * ? *)"
    # How often pending stops and cut-short starts are finished (lambdas/services/reconciliation.py).
    reconcile_schedule: Annotated[str, Field(pattern=r"^(cron|rate)\(.+\)$")] = "rate(5 minutes)"
    price_region: Annotated[str, Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")] | None = Field(
        default=None, description="for a stage that sets no region: the region it deploys to, whose rows of the "
        "price table price it (a stage is priced at its own region's rates, never another's; with region set, "
        "price_region may only repeat it)")
    price_overrides: JsonObject | None = Field(
        default=None, description="price-table overrides (negotiated rates), applied to the shipped table at synth "
        "time so a malformed one fails the synth, not the functions after deploy")
    governance: Governance = Field(
        default_factory=Governance, description="teams, their members and approvers, platform admins and quotas "
        "(lambdas.domain.trial.governance.Governance); a caller in no team can submit nothing")
    vpc_cidr: Annotated[str, Field(pattern=r"^\d+\.\d+\.\d+\.\d+/\d+$")] = "10.40.0.0/16"
    require_alarm_subscriber: bool = Field(
        default=False, description="refuse to synthesize without a subscriber to the alarms' topic (alarm_email); "
        "without it a stage with none only warns (dualtrack:alarms-unsubscribed)")
    alarm_email: Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+$")] | None = Field(
        default=None, validate_default=True, description="the address the alarms' topic emails (SNS sends it a "
        "confirmation link first: nothing is delivered until it is confirmed)")

    @field_validator("price_overrides")
    @classmethod
    def _overrides_apply(cls, value: JsonObject | None) -> JsonObject | None:
        if value:
            from lambdas.domain.money.prices import load_price_table

            try:
                load_price_table(value)
            except (ValidationError, ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"does not apply to the price table: {str(exc).splitlines()[0]}") from None
        return value

    @field_validator("alarm_email")
    @classmethod
    def _alarms_reach_someone(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None and info.data.get("require_alarm_subscriber"):
            stage = info.data.get("name", "<stage>")
            raise ValueError(
                f"not set, and stage {stage} sets require_alarm_subscriber: its alarms (failed runs and trials, "
                f"overdue stops, function errors, dead letters) would reach no one. Set dualtrack:stages.{stage}."
                "alarm_email in cdk.json to the address that answers them (SNS emails it a confirmation link), or "
                "set require_alarm_subscriber to false")
        return value

    @field_validator("log_retention_days")
    @classmethod
    def _retention(cls, value: int) -> int:
        if value not in LOG_RETENTION_DAYS:
            raise ValueError(f"must be one of {list(LOG_RETENTION_DAYS)} (CloudWatch Logs retention periods)")
        return value

    @model_validator(mode="after")
    def _instance_families(self) -> StageConfig:
        catalogue = load_catalogue()
        if self.gpu is None and self.trn2 is None:
            raise ValueError("a stage needs at least one track: set gpu, trn2 or both")
        for family in self.tracks():
            for index, instance_type in enumerate(self.family(family).instance_types):
                info = catalogue.instances.get(instance_type)
                if info is None or info.family != family:
                    valid = ", ".join(catalogue.types_for(family))
                    raise ValueError(
                        f"{family}.instance_types[{index}]: {instance_type!r} is not a {family} instance type; "
                        f"use one of: {valid}"
                    )
        if self.attempt_timeout_hours > self.workflow_timeout_hours:
            raise ValueError("attempt_timeout_hours must not exceed workflow_timeout_hours")
        if self.attempt_timeout_hours * 3600 < 60:
            raise ValueError("attempt_timeout_hours must be at least 60 seconds (0.0167 h): Batch's minimum attempt "
                             "timeout")
        if self.availability_zones is not None and self.region is None:
            raise ValueError("availability_zones needs region: zone names belong to one region")
        if self.trn2 is not None and self.trn2.availability_zone is None:
            types = ",".join(self.trn2.instance_types)
            raise ValueError(
                f"trn2.availability_zone is not set: {types} is offered in few zones of a region, and a zone "
                "without it leaves every Trainium2 job RUNNABLE until the queue cancels it. Set region, "
                "availability_zones and trn2.availability_zone to a zone that `aws ec2 describe-instance-type-"
                f"offerings --region {self.region or '<region>'} --location-type availability-zone --filters "
                f"Name=instance-type,Values={types} --query 'InstanceTypeOfferings[].Location'` lists for "
                "your account (zone names differ between accounts)")
        for name in self.tracks():
            zone = self.family(name).availability_zone
            if zone is None:
                continue
            if self.availability_zones is None or zone not in self.availability_zones:
                raise ValueError(f"{name}.availability_zone {zone!r} must be one of the stage's availability_zones "
                                 f"({self.availability_zones or 'not set'})")
        self._overrides_agree_with_capacity()
        self._priced_in_its_region()
        return self

    @property
    def pricing_region(self) -> str | None:
        """The region whose prices cost this stage's runs: its own (``region``, else ``price_region``). None: the
        stage sets neither, and its functions price the region they are deployed to (``AWS_REGION``)."""
        return self.region or self.price_region

    def _priced_in_its_region(self) -> None:
        """A stage is priced at its own region's rates: refuse one whose region the price table (with the stage's
        price_overrides) lacks, rather than let the API refuse every trial or price it at another region's rates."""
        region = self.pricing_region
        if self.price_region and self.region and self.price_region != self.region:
            raise ValueError(f"price_region {self.price_region!r} differs from region {self.region!r}: a stage is "
                             f"priced at its own region's rates; remove price_region (and give {self.region} rates "
                             f"in price_overrides.instances.{self.region} if the price table has none)")
        if region is None:
            held = [track for track in self.tracks() if self.capacity(track) != "on_demand"]
            if held:
                raise ValueError(f"{held[0]} runs on {self.capacity(held[0])} capacity, whose price rows name a "
                                 "region: set region (or price_region to the region the stage deploys to)")
            return
        from lambdas.domain.money.prices import PriceMissing, load_price_table

        table = load_price_table(self.priced_overrides())
        missing = []
        for track in self.tracks():
            for instance_type in self.family(track).instance_types:
                try:
                    table.instance_price(instance_type, region)
                except PriceMissing:
                    missing.append(instance_type)
        try:
            table.s3_rates(region)
        except PriceMissing:
            missing.append("S3 storage and requests")
        if missing:
            raise ValueError(
                f"the price table ({table.version}) has no {region} price for {', '.join(missing)}: the API would "
                f"refuse every trial and no run could be costed. Give the stage's rates in price_overrides "
                f'(instances.{region}.<type>: {{"hourly_usd": "..."}}, s3.{region}: {{"storage_gb_month_usd": ..., '
                f'"put_per_1000_usd": ..., "get_per_1000_usd": ...}}); `dualtrack prices refresh --region {region} '
                "--out FILE` reads the on-demand rates from the AWS Pricing API")

    def _overrides_agree_with_capacity(self) -> None:
        """A price override that states a capacity other than the one the track runs on would bill queue time
        wrongly: refuse it, naming both."""
        rows = ((self.price_overrides or {}).get("instances") or {})
        if not isinstance(rows, dict):
            return
        region = self.pricing_region
        for row_region, region_rows in rows.items():
            if not isinstance(region_rows, dict) or region not in (None, row_region):
                continue
            for track in self.tracks():
                for instance_type in self.family(track).instance_types:
                    row = region_rows.get(instance_type)
                    stated = row.get("capacity") if isinstance(row, dict) else None
                    if stated is not None and stated != self.capacity(track):
                        raise ValueError(
                            f"price_overrides.instances.{row_region}.{instance_type}.capacity is {stated!r}, but "
                            f"the {track} track runs {instance_type} on {self.capacity(track)}: remove the row's "
                            "capacity (the stage sets it from the track)")

    def capacity(self, track: Track) -> str:
        """What the track's hosts run on, as the price table names it (``lambdas.domain.money.prices.Capacity``): a
        Capacity Block and a reservation are paid while held, so a job's queue time is billed there."""
        family = self.family(track)
        if family.capacity_block:
            return "capacity_block"
        if family.capacity_reservation_id is not None:
            return "reserved"
        return "spot" if family.spot else "on_demand"

    def priced_overrides(self) -> JsonObject | None:
        """``price_overrides`` with each instance type's ``capacity`` row set from the track it runs on, so the
        functions bill queue time where the stage pays for it without the operator stating it twice."""
        overrides: JsonObject = json.loads(json.dumps(self.price_overrides or {}))
        for track in self.tracks():
            capacity = self.capacity(track)
            if capacity == "on_demand":
                continue
            instances = overrides.setdefault("instances", {})
            assert isinstance(instances, dict)
            region = self.pricing_region
            assert region is not None, "a stage on held or Spot capacity names its region (_priced_in_its_region)"
            rows = instances.setdefault(region, {})
            assert isinstance(rows, dict)
            for instance_type in self.family(track).instance_types:
                row = rows.get(instance_type)
                priced: JsonObject = ({"hourly_usd": row} if isinstance(row, str | int | float) else
                                      dict(row) if isinstance(row, dict) else {})
                priced["capacity"] = capacity
                rows[instance_type] = priced
        return overrides or None

    def tracks(self) -> list[Track]:
        """The tracks this stage offers, in a fixed order."""
        return [name for name in ("gpu", "trn2") if getattr(self, name) is not None]  # type: ignore[misc]

    def family(self, track: Track) -> ComputeFamily:
        family = getattr(self, track)
        if family is None:
            raise KeyError(f"stage {self.name} offers no {track} track")
        return family  # type: ignore[no-any-return]

    @property
    def cost_report_schedule(self) -> str:
        """The EventBridge schedule of the cost report: 06:00 UTC after each period ends."""
        return SCHEDULES[self.cost_report_period]

    @property
    def attempt_timeout_s(self) -> int:
        return int(self.attempt_timeout_hours * 3600)

    @property
    def compile_timeout_s(self) -> int:
        """The warm-up compile stage's attempt timeout: its own, within the stage's attempt timeout and never below
        Batch's 60 s minimum."""
        return max(60, min(int(self.compile_timeout_hours * 3600), self.attempt_timeout_s))

    def instance(self, instance_type: str) -> InstanceInfo:
        return load_catalogue().get(instance_type)

    @property
    def stack_prefix(self) -> str:
        return f"Dualtrack-{self.name}"


def stage_config(context: JsonMapping, stage: str) -> StageConfig:
    """The named stage from the ``dualtrack:stages`` context map, with errors that name the field to fix."""
    defined = context.get("dualtrack:stages")
    stages = defined if isinstance(defined, Mapping) else {}
    if stage not in stages:
        known = ", ".join(sorted(stages)) or "none"
        raise ConfigInvalid(
            f"stage {stage!r} is not defined in cdk.json context 'dualtrack:stages' (defined: {known}); "
            f"add it or pass -c stage=<one of those>"
        )
    entry = stages[stage] or {}
    # A stage that is not an object goes to the model as it is, for the error to say what was expected.
    raw = {"name": stage, **entry} if isinstance(entry, Mapping) else entry
    try:
        return StageConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"dualtrack:stages.{stage}.{'.'.join(str(p) for p in err['loc']) or '<stage>'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigInvalid(problems) from None

