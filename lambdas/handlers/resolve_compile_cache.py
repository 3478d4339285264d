"""Workflow task before the Trn2 track: the trial's compile-cache URL and whether it is warm (or failed before).

The same function collects entries unused for CACHE_RETENTION_DAYS when invoked with
``{"action": "collect_garbage"}`` (from a schedule), never touching an entry an active trial uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from lambdas.adapters.cache_registry import DynamoCacheRegistry
from lambdas.adapters.objects import S3Objects
from lambdas.adapters.trials_table import DynamoTrials
from lambdas.runtime.observability import logger, metrics, tracer
from lambdas.runtime.settings import CacheSettings, per_environment, settings_for, with_settings
from lambdas.services.cache_resolution import collect_garbage, resolve
from lambdas.services.ports import CacheRegistry, Objects, Trials


class ResolveRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    trial_id: str = Field(min_length=1)
    spec_uri: str = Field(pattern=r"^s3://")
    retry_failed: bool = False


class CollectRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: Literal["collect_garbage"]
    retention_days: int | None = Field(default=None, ge=1)
    dry_run: bool = False


@dataclass(frozen=True)
class Composition:
    settings: CacheSettings
    trials: Trials
    registry: CacheRegistry
    artifacts: Objects
    cache_objects: Objects


@per_environment
def compose() -> Composition:
    settings = settings_for(CacheSettings)
    return Composition(settings, DynamoTrials(settings.TRIALS_TABLE),
                       DynamoCacheRegistry(settings.CACHE_REGISTRY_TABLE), S3Objects(settings.ARTIFACTS_BUCKET),
                       S3Objects(settings.CACHE_BUCKET))


@with_settings(CacheSettings)
@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    app = compose()
    if event.get("action") is not None:
        gc = CollectRequest.model_validate(event)
        return collect_garbage(trials=app.trials, registry=app.registry, cache_objects=app.cache_objects,
                               retention_days=gc.retention_days or app.settings.CACHE_RETENTION_DAYS,
                               dry_run=gc.dry_run)
    request = ResolveRequest.model_validate(event)
    return resolve(request.trial_id, request.spec_uri, artifacts=app.artifacts, trials=app.trials,
                   registry=app.registry, cache_bucket=app.settings.CACHE_BUCKET, retry_failed=request.retry_failed)
