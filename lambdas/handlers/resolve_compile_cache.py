"""Workflow task before the Trn2 track: the trial's compile-cache URL and whether it is warm (or failed before).

The same function collects entries unused for CACHE_RETENTION_DAYS when invoked with
``{"action": "collect_garbage"}`` (from a schedule), never touching an entry an active trial uses.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from lambdas.adapters.cache_registry import DynamoCacheRegistry
from lambdas.adapters.objects import S3Objects
from lambdas.adapters.trials_table import DynamoTrials
from lambdas.domain.json_types import JsonObject
from lambdas.runtime.function import lambda_handler
from lambdas.runtime.observability import count_rejected_cache_entry
from lambdas.runtime.settings import CacheSettings, per_environment, settings_for
from lambdas.services.cache_resolution import CompileCaches

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext


class ResolveRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)

    trial_id: str = Field(min_length=1)
    spec_uri: str = Field(pattern=r"^s3://")
    retry_failed: bool = False


class CollectRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    action: Literal["collect_garbage"]
    retention_days: int | None = Field(default=None, ge=1)
    dry_run: bool = False


@per_environment
def compose() -> CompileCaches:
    settings = settings_for(CacheSettings)
    return CompileCaches(trials=DynamoTrials(settings.TRIALS_TABLE),
                         registry=DynamoCacheRegistry(settings.CACHE_REGISTRY_TABLE),
                         artifacts=S3Objects(settings.ARTIFACTS_BUCKET), cache_objects=S3Objects(settings.CACHE_BUCKET),
                         cache_bucket=settings.CACHE_BUCKET, image_versions=settings.IMAGE_VERSIONS.get("trn2"))


@lambda_handler(CacheSettings)
def handler(event: JsonObject, context: LambdaContext) -> JsonObject:
    caches = compose()
    if event.get("action") is not None:
        gc = CollectRequest.model_validate(event)
        days = gc.retention_days or settings_for(CacheSettings).CACHE_RETENTION_DAYS
        return asdict(caches.collect_garbage(retention_days=days, dry_run=gc.dry_run))
    request = ResolveRequest.model_validate(event)
    resolved = caches.resolve(request.trial_id, request.spec_uri, retry_failed=request.retry_failed)
    if resolved.rejected:
        count_rejected_cache_entry(resolved.rejected, cache_key=resolved.cache_key, trial_id=request.trial_id)
    return asdict(resolved)
