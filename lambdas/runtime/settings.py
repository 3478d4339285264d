"""Environment settings, one model per function, validated once per execution environment; and the functions'
compositions, built once per execution environment from them.

``@with_settings(Model)`` is the outermost decorator of every handler: a missing or malformed variable fails the
invocation with a message naming the variable and what it must hold, before anything else runs, instead of a
``KeyError`` deep inside an adapter. ``@per_environment`` marks a function's composition (its service and the
adapters it takes), built on the first call and kept for the life of the execution environment.

The settings that carry the stage's governance are in their functions' own modules (``lambdas.runtime.api_settings``,
``lambdas.runtime.cost_report_settings``), so the other functions never load the models behind them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from functools import cache, wraps
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator

from lambdas.domain.job_access import MAX_SESSION_S, MIN_SESSION_S
from lambdas.domain.json_types import JsonObject
from lambdas.domain.money.prices import load_price_table

if TYPE_CHECKING:
    from functools import _lru_cache_wrapper


class SettingsInvalid(RuntimeError):
    pass


class _Settings(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True, defer_build=True)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> _Settings:
        source = dict(os.environ if env is None else env)
        try:
            return cls.model_validate(source)
        except ValidationError as exc:
            problems = []
            for err in exc.errors():
                name = str(err["loc"][0]) if err["loc"] else "<environment>"
                field = cls.model_fields.get(name)
                what = field.description if field is not None and field.description else err["msg"]
                problems.append(f"{name}: {err['msg'].lower()} ({what})")
            raise SettingsInvalid(f"{cls.__name__}: " + "; ".join(problems)) from None


def name_field(description: str) -> Any:
    return Field(min_length=1, description=description)


class LedgerSettings(_Settings):
    LEDGER_TABLE: str = name_field("name of the DynamoDB ledger table (pk run_key, sk entry_key)")
    TRIALS_TABLE: str = name_field("name of the DynamoDB trials table (pk trial_id)")
    USAGE_TABLE: str = name_field("name of the DynamoDB usage table (pk usage_key): the teams' quota bookings")
    ARTIFACTS_BUCKET: str = name_field("name of the artifacts bucket holding trials/<id>/...")
    PRICE_REGION: str = Field(
        min_length=1, validation_alias=AliasChoices("PRICE_REGION", "AWS_REGION"),
        description="region whose prices the cost model applies: the stage's own (default: the function's region, "
        "AWS_REGION); the price table must have it, no other region's rates stand in")
    PRICE_OVERRIDES: JsonObject | None = Field(
        default=None, description="JSON object of price-table overrides (negotiated rates, Savings Plans)"
    )

    @field_validator("PRICE_OVERRIDES", mode="before")
    @classmethod
    def _overrides(cls, value: Any) -> Any:
        return None if value in (None, "") else json_text(value)

    @field_validator("PRICE_OVERRIDES")
    @classmethod
    def _overrides_apply(cls, value: JsonObject | None) -> JsonObject | None:
        # Applied here, at the first invocation, so a malformed override names its field before anything runs,
        # rather than failing every request from inside the function's composition.
        load_price_table(value)
        return value


def json_text(value: Any) -> Any:
    """An environment variable holding JSON, decoded (anything else is left to the field's own validation)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"must be a JSON object: {exc.msg} at char {exc.pos}") from None
    return value


class ReportSettings(LedgerSettings):
    CACHE_REGISTRY_TABLE: str = name_field("name of the DynamoDB compile-cache registry table (pk cache_key)")


class IdempotentSettings(LedgerSettings):
    IDEMPOTENCY_TABLE: str = name_field("name of the DynamoDB idempotency table (pk id, TTL attribute expiration)")


class RunEventSettings(IdempotentSettings):
    CACHE_REGISTRY_TABLE: str = name_field("name of the DynamoDB compile-cache registry table (pk cache_key)")
    STATE_MACHINE_ARN: str = name_field("ARN of the trial workflow state machine (a trial over a limit is stopped)")


class ArtifactEventSettings(RunEventSettings):
    CACHE_BUCKET: str = name_field("name of the compile-cache bucket (neuron/<model>/<compiler>/<key>/)")


def image_versions() -> Any:
    return Field(default_factory=dict, description="JSON: per track, the versions its trainer image pins "
                 '({"trn2": {"neuron_sdk": "2.26.0", "neuronx_cc": ...}}); the compile-cache key takes them and a '
                 "trial declaring another Neuron SDK is refused")


class CacheSettings(ArtifactEventSettings):
    CACHE_RETENTION_DAYS: int = Field(default=30, ge=1, description="days an unused cache entry is kept")
    IMAGE_VERSIONS: dict[str, dict[str, str]] = image_versions()

    @field_validator("IMAGE_VERSIONS", mode="before")
    @classmethod
    def _json_versions(cls, value: Any) -> Any:
        return json_text(value)


class ReconcileSettings(LedgerSettings):
    STATE_MACHINE_ARN: str = name_field("ARN of the trial workflow state machine (pending stops are finished)")
    STOP_OVERDUE_AFTER_S: int = Field(
        default=900, ge=60, description="seconds a stop may stay pending before the StopsPending alarm counts it")


class CredentialSettings(_Settings):
    AWS_REGION: str = Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d$", description="the function's region, which Lambda "
                            "sets: a job's identity proof is accepted only for this region's STS endpoint")
    TRIALS_TABLE: str = name_field("name of the DynamoDB trials table (pk trial_id)")
    ARTIFACTS_BUCKET: str = name_field("name of the artifacts bucket holding trials/<id>/...")
    WRITER_ROLE_ARN: str = Field(pattern=r"^arn:aws[a-z-]*:iam::\d{12}:role/.+$",
                                 description="ARN of the trial writer role a job's credentials are issued for")
    CREDENTIALS_DURATION_S: int = Field(default=MAX_SESSION_S, ge=MIN_SESSION_S, le=MAX_SESSION_S,
                                        description="lifetime of a job's credentials in seconds (STS allows 900 "
                                        "to 3600 for a chained role session); the trainer refreshes them")


S = TypeVar("S", bound=_Settings)
F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
_loaded: dict[type[_Settings], _Settings] = {}
_compositions: list[Any] = []  # every @per_environment function, so reset_settings() can forget what they built


def settings_for(model: type[S]) -> S:
    """The validated settings for this function (read once per execution environment)."""
    found = _loaded.get(model)
    if found is None:
        found = _loaded[model] = model.from_env()
    return found  # type: ignore[return-value]


def with_settings(model: type[_Settings]) -> Callable[[F], F]:
    """The outermost handler decorator: validate the function's settings before anything else runs."""

    def decorate(fn: F) -> F:
        @wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            settings_for(model)
            return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def per_environment(build: Callable[[], T]) -> _lru_cache_wrapper[T]:
    """A composition: built by its first call, then the same object for the life of the execution environment."""
    built = cache(build)
    _compositions.append(built)
    return built


def reset_settings() -> None:
    """Forget validated settings and what compositions built from them (tests change the environment)."""
    _loaded.clear()
    for built in _compositions:
        built.cache_clear()
