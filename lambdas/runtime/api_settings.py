"""The trial API's settings: beyond the run-event settings, the stage's job targets, governance, limits and data
buckets. Only the API loads them (and the domain models they carry)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator

from lambdas.domain.trial.governance import Governance
from lambdas.domain.trial.job_targets import JobTargets
from lambdas.runtime.settings import ArtifactEventSettings, image_versions, json_text

_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


class ApiSettings(ArtifactEventSettings):
    MAX_BODY_BYTES: int = Field(default=256 * 1024, ge=1024, description="largest accepted request body")
    REPORT_URL_EXPIRES_S: int = Field(default=900, ge=60, le=43200, description="presigned report URL lifetime")
    ATTEMPT_TIMEOUT_S: int = Field(
        default=86400, ge=60,
        description="the stage's Batch attempt timeout in seconds (at least 60, the Batch minimum); a trial's "
        "limits.max_hours can only shorten it",
    )
    COMPILE_TIMEOUT_S: int = Field(
        default=7200, ge=60,
        description="the warm-up compile stage's attempt timeout in seconds (the stage's compile_timeout_hours, "
        "within its attempt timeout)",
    )
    JOB_TARGETS: JobTargets = Field(
        description="JSON: per track and instance type the stage offers, its Batch queue and job definition names "
        '({"gpu": {"p5.48xlarge": {"queue": ..., "single_node": ..., "multi_node": {"2": ..., "4": ...}}}}); '
        'a trn2 type also names its "compile_queue" when the stage runs the warm-up compile stage',
    )
    DATA_BUCKETS: tuple[str, ...] = Field(
        default=(),
        description="comma-separated names of the buckets the job role can read trial inputs from (the stage "
        "setting data_buckets); may be empty, the artifacts bucket's trials/ prefix is always readable",
    )

    MAX_ATTEMPTS: int = Field(default=1, ge=1, le=10, description="the stage's Batch attempts per run (max_attempts); "
                              "a trial's worst case counts every one")
    GOVERNANCE: Governance = Field(
        default_factory=Governance, description="JSON: the stage's teams, their members, approvers and quotas, and "
        "its platform admins (the stage setting governance, lambdas.domain.trial.governance.Governance)")
    IMAGE_VERSIONS: dict[str, dict[str, str]] = image_versions()

    @field_validator("JOB_TARGETS", "GOVERNANCE", "IMAGE_VERSIONS", mode="before")
    @classmethod
    def _json_settings(cls, value: Any) -> Any:
        return json_text(value)

    @field_validator("DATA_BUCKETS", mode="before")
    @classmethod
    def _data_buckets(cls, value: Any) -> Any:
        if value is None:
            return ()
        if isinstance(value, str):
            value = [name.strip() for name in value.split(",") if name.strip()]
        if isinstance(value, list | tuple):
            for name in value:
                if not isinstance(name, str) or not _BUCKET_NAME.match(name):
                    raise ValueError(f"{name!r} is not an S3 bucket name; give bucket names separated by commas, "
                                     "without s3://")
            return tuple(dict.fromkeys(value))
        return value
