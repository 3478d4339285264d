"""EventBridge S3 "Object Created" -> checkpoint manifests and run summaries into the ledger; compile-cache
objects into the registry. A checkpoint is its manifest: shards without one are not recorded.

This module parses the event and makes one call, once per object version: ``lambdas.services.run_events``."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from aws_lambda_powertools.utilities.parser import parse
from pydantic import BaseModel, ConfigDict

from lambdas.adapters.run_metrics import CloudWatchRunMetrics
from lambdas.domain.json_types import JsonObject
from lambdas.runtime.events import S3ObjectCreatedEvent
from lambdas.runtime.function import lambda_handler
from lambdas.runtime.recording import Recorder, recorder
from lambdas.runtime.settings import ArtifactEventSettings, per_environment, settings_for
from lambdas.services.run_events import ObjectResult, ObjectWritten

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext


class ObjectFact(BaseModel):
    model_config = ConfigDict(defer_build=True)

    key: str  # bucket + key + version (or etag): the object this event reports
    bucket: str
    object_key: str
    size: int
    time: str


@per_environment
def compose() -> Recorder[ObjectFact, ObjectResult]:
    settings = settings_for(ArtifactEventSettings)
    return recorder(settings, record_object, ObjectResult, metrics=CloudWatchRunMetrics(),
                    artifacts_bucket=settings.ARTIFACTS_BUCKET, cache_bucket=settings.CACHE_BUCKET)


def record_object(*, fact: ObjectFact) -> ObjectResult:
    return compose().events.on_object(ObjectWritten(
        bucket=fact.bucket, key=fact.object_key, size=fact.size, fact_key=fact.key,
        at=datetime.fromisoformat(fact.time.replace("Z", "+00:00"))))


@lambda_handler(ArtifactEventSettings)
def handler(event: JsonObject, context: LambdaContext) -> JsonObject:
    parsed = parse(event=event, model=S3ObjectCreatedEvent)
    obj = parsed.detail.object
    version = obj.version_id or obj.etag or obj.sequencer
    fact = ObjectFact(key=f"{parsed.detail.bucket.name}/{obj.key}#{version}", bucket=parsed.detail.bucket.name,
                      object_key=obj.key, size=obj.size, time=parsed.time.isoformat().replace("+00:00", "Z"))
    return compose().record(fact, context).model_dump(mode="json")
