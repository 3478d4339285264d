"""Stage configuration: everything a deployment may change, validated before any construct is built.

``infra/app.py`` is the only reader of CDK context; it turns ``cdk.json``'s ``dualtrack:stages`` entry for the chosen
stage into a :class:`StageConfig` and hands it to the stacks. Instance types are checked against the instance
catalogue the trial validator uses, so the queues can run every type a trial may ask for.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from lambdas.domain.catalogue import InstanceInfo, load_catalogue

STAGE_NAME = r"^[a-z][a-z0-9-]{0,15}$"
# Valid CloudWatch Logs retention periods (days); anything else is rejected at deploy time.
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1827, 3653)


class ConfigInvalid(ValueError):
    pass


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ComputeFamily(_Model):
    """One accelerator family's Batch capacity: one managed EC2 compute environment per instance type."""

    instance_types: Annotated[list[str], Field(min_length=1, max_length=8)]
    max_vcpus: Annotated[int, Field(ge=1, le=100_000)] = 768
    spot: bool = Field(default=False, description="add Spot compute environments after the on-demand ones")
    root_volume_gib: Annotated[int, Field(ge=100, le=16_384)] = 1024
    ami_ssm_parameter: Annotated[str, Field(pattern=r"^/[A-Za-z0-9_./-]+$")]
    image_uri: str | None = Field(
        default=None, description="pinned trainer image (ECR URI with digest); omit to build containers/<track>/"
    )


class StageConfig(_Model):
    name: Annotated[str, Field(pattern=STAGE_NAME)]
    account: Annotated[str, Field(pattern=r"^\d{12}$")] | None = None
    region: Annotated[str, Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")] | None = None
    gpu: ComputeFamily = ComputeFamily(
        instance_types=["p5.48xlarge"],
        ami_ssm_parameter="/aws/service/ecs/optimized-ami/amazon-linux-2023/gpu/recommended/image_id",
    )
    trn2: ComputeFamily = ComputeFamily(
        instance_types=["trn2.48xlarge"],
        ami_ssm_parameter="/aws/service/ecs/optimized-ami/amazon-linux-2023/neuron/recommended/image_id",
    )
    max_attempts: Annotated[int, Field(ge=1, le=10)] = Field(
        default=2, description="Batch attempts per run (attempt 2 resumes from the newest checkpoint)"
    )
    attempt_timeout_hours: Annotated[float, Field(gt=0, le=24 * 14)] = 24
    workflow_timeout_hours: Annotated[float, Field(gt=0, le=24 * 365)] = 24 * 14
    api_principals: list[Annotated[str, Field(pattern=r"^arn:aws[a-z-]*:iam::\d{12}:(root|role/.+|user/.+)$")]] = Field(
        default_factory=list, description="IAM principals allowed to call the API; empty = this account"
    )
    api_rate_limit: Annotated[float, Field(gt=0, le=10_000)] = 10
    api_burst_limit: Annotated[int, Field(ge=1, le=5_000)] = 20
    log_retention_days: int = 90
    noncurrent_version_days: Annotated[int, Field(ge=1, le=3650)] = 30
    cost_report_schedule: Annotated[str, Field(pattern=r"^(cron|rate)\(.+\)$")] = "cron(0 6 ? * MON *)"
    cache_retention_days: Annotated[int, Field(ge=1, le=3650)] = Field(
        default=30, description="days a compile-cache entry may go unused before garbage collection deletes it"
    )
    cache_gc_schedule: Annotated[str, Field(pattern=r"^(cron|rate)\(.+\)$")] = "cron(0 5 * * ? *)"
    price_region: str = "us-east-1"
    price_overrides: dict[str, Any] | None = None
    vpc_cidr: Annotated[str, Field(pattern=r"^\d+\.\d+\.\d+\.\d+/\d+$")] = "10.40.0.0/16"
    alarm_email: Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+$")] | None = None

    @field_validator("log_retention_days")
    @classmethod
    def _retention(cls, value: int) -> int:
        if value not in LOG_RETENTION_DAYS:
            raise ValueError(f"must be one of {list(LOG_RETENTION_DAYS)} (CloudWatch Logs retention periods)")
        return value

    @model_validator(mode="after")
    def _instance_families(self) -> StageConfig:
        catalogue = load_catalogue()
        for family in ("gpu", "trn2"):
            for index, instance_type in enumerate(getattr(self, family).instance_types):
                info = catalogue.instances.get(instance_type)
                if info is None or info.family != family:
                    valid = ", ".join(catalogue.types_for(family))
                    raise ValueError(
                        f"{family}.instance_types[{index}]: {instance_type!r} is not a {family} instance type; "
                        f"use one of: {valid}"
                    )
        if self.attempt_timeout_hours > self.workflow_timeout_hours:
            raise ValueError("attempt_timeout_hours must not exceed workflow_timeout_hours")
        return self

    def instance(self, instance_type: str) -> InstanceInfo:
        return load_catalogue().get(instance_type)

    @property
    def stack_prefix(self) -> str:
        return f"Dualtrack-{self.name}"


def stage_config(context: dict[str, Any], stage: str) -> StageConfig:
    """The named stage from the ``dualtrack:stages`` context map, with errors that name the field to fix."""
    stages = context.get("dualtrack:stages") or {}
    if stage not in stages:
        known = ", ".join(sorted(stages)) or "none"
        raise ConfigInvalid(
            f"stage {stage!r} is not defined in cdk.json context 'dualtrack:stages' (defined: {known}); "
            f"add it or pass -c stage=<one of those>"
        )
    raw = dict(stages[stage] or {})
    raw.setdefault("name", stage)
    try:
        return StageConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"dualtrack:stages.{stage}.{'.'.join(str(p) for p in err['loc']) or '<stage>'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigInvalid(problems) from None


Track = Literal["gpu", "trn2"]
