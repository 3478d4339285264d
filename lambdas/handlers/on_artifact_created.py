"""EventBridge S3 "Object Created" -> checkpoint manifests and run summaries into the ledger; compile-cache
objects into the registry. A checkpoint is its manifest: shards without one are not recorded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools.utilities.parser import parse
from pydantic import BaseModel

from lambdas.adapters.cache_registry import DynamoCacheRegistry
from lambdas.adapters.run_metrics import CloudWatchRunMetrics
from lambdas.runtime.composition import settlement
from lambdas.runtime.events import S3ObjectCreatedEvent
from lambdas.runtime.idempotency import OncePerFact, once_per_fact
from lambdas.runtime.observability import count_cache_outcomes, logger, metrics, tracer
from lambdas.runtime.settings import ArtifactEventSettings, per_environment, settings_for, with_settings
from lambdas.services.artifact_recording import record_artifact, record_cache_object
from lambdas.services.cache_observation import observe_run
from lambdas.services.ports import CacheRegistry
from lambdas.services.run_settlement import RunSettlement


class ObjectFact(BaseModel):
    key: str  # bucket + key + version (or etag): the object this event reports
    bucket: str
    object_key: str
    size: int
    time: str


class ObjectResult(BaseModel):
    kind: str
    recorded: bool = False
    trial_id: str | None = None
    run: str | None = None
    cache_key: str | None = None


@dataclass(frozen=True)
class Composition:
    settings: ArtifactEventSettings
    settlement: RunSettlement
    registry: CacheRegistry
    record: OncePerFact[ObjectFact, ObjectResult]


@per_environment
def compose() -> Composition:
    settings = settings_for(ArtifactEventSettings)
    return Composition(
        settings,
        settlement(settings, metrics=CloudWatchRunMetrics()),
        DynamoCacheRegistry(settings.CACHE_REGISTRY_TABLE),
        once_per_fact(record_object, table=settings.IDEMPOTENCY_TABLE, result=ObjectResult),
    )


def record_object(*, fact: ObjectFact) -> ObjectResult:
    app = compose()
    if fact.bucket == app.settings.CACHE_BUCKET:
        key = record_cache_object(app.registry, fact.object_key, fact.size, fact.time)
        return ObjectResult(kind="compile-cache" if key else "ignored", recorded=key is not None, cache_key=key)
    if fact.bucket != app.settings.ARTIFACTS_BUCKET:
        return ObjectResult(kind="ignored")
    outcome = record_artifact(app.settlement, fact.object_key)
    if outcome is None:
        return ObjectResult(kind="ignored")
    if outcome.kind == "summary" and outcome.added:
        count_cache_outcomes(observe_run(app.settlement.ledger, app.registry, outcome.trial_id, outcome.run,
                                         outcome.entries))
    logger.info("artifact recorded", extra={"kind": outcome.kind, "trial_id": outcome.trial_id, "run": outcome.run,
                                            "new": outcome.added})
    return ObjectResult(kind=outcome.kind, recorded=outcome.added, trial_id=outcome.trial_id, run=outcome.run)


@with_settings(ArtifactEventSettings)
@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    parsed = parse(event=event, model=S3ObjectCreatedEvent)
    obj = parsed.detail.object
    version = obj.version_id or obj.etag or obj.sequencer
    fact = ObjectFact(key=f"{parsed.detail.bucket.name}/{obj.key}#{version}", bucket=parsed.detail.bucket.name,
                      object_key=obj.key, size=obj.size, time=parsed.time.isoformat().replace("+00:00", "Z"))
    return compose().record(fact, context).model_dump(mode="json")
