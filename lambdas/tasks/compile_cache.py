"""Before the Trn2 track: the trial's compile-cache URL and whether it is warm (or failed before).

The same function collects entries unused for CACHE_RETENTION_DAYS when invoked with
``{"action": "collect_garbage"}`` (from a schedule), never touching an entry an active trial uses.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from lambdas.runtime.settings import CacheSettings, settings_for


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


def process(event: dict[str, Any]) -> dict[str, Any]:
    from lambdas.adapters import wiring
    from lambdas.services import cache_resolution

    settings = settings_for(CacheSettings)
    registry = wiring.registry(CacheSettings)
    if event.get("action") is not None:
        gc = CollectRequest.model_validate(event)
        return cache_resolution.collect_garbage(
            trials=wiring.trials(CacheSettings),
            registry=registry,
            cache_objects=wiring.cache_objects(CacheSettings),
            retention_days=gc.retention_days or settings.CACHE_RETENTION_DAYS,
            dry_run=gc.dry_run,
        )
    request = ResolveRequest.model_validate(event)
    return cache_resolution.resolve(
        request.trial_id,
        request.spec_uri,
        artifacts=wiring.artifacts(CacheSettings),
        trials=wiring.trials(CacheSettings),
        registry=registry,
        cache_bucket=settings.CACHE_BUCKET,
        retry_failed=request.retry_failed,
    )
