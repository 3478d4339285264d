"""EventBridge S3 "Object Created" -> checkpoint manifests and run summaries into the ledger; compile-cache
objects into the registry. A checkpoint is its manifest: shards without one are not recorded."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from lambdas.runtime.idempotency import once_per_fact, register_context
from lambdas.runtime.observability import count_cache_outcomes, logger
from lambdas.runtime.settings import ArtifactEventSettings, settings_for


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


@once_per_fact(lambda: settings_for(ArtifactEventSettings).IDEMPOTENCY_TABLE)
def record_object(*, fact: ObjectFact) -> ObjectResult:
    from lambdas.adapters import wiring
    from lambdas.services.artifact_recording import record_artifact, record_cache_object

    settings = settings_for(ArtifactEventSettings)
    if fact.bucket == settings.CACHE_BUCKET:
        key = record_cache_object(wiring.registry(ArtifactEventSettings), fact.object_key, fact.size, fact.time)
        return ObjectResult(kind="compile-cache" if key else "ignored", recorded=key is not None, cache_key=key)
    if fact.bucket != settings.ARTIFACTS_BUCKET:
        return ObjectResult(kind="ignored")
    outcome = record_artifact(wiring.settlement(ArtifactEventSettings), fact.object_key)
    if outcome is None:
        return ObjectResult(kind="ignored")
    kind, trial_id, run, added = outcome.kind, outcome.trial_id, outcome.run, outcome.added
    if kind == "summary" and added:
        from lambdas.services.cache_observation import observe_run

        ledger, registry = wiring.ledger(ArtifactEventSettings), wiring.registry(ArtifactEventSettings)
        count_cache_outcomes(observe_run(ledger, registry, trial_id, run, outcome.entries))
    logger.info("artifact recorded", extra={"kind": kind, "trial_id": trial_id, "run": run, "new": added})
    return ObjectResult(kind=kind, recorded=added, trial_id=trial_id, run=run)


def _fact(event: dict[str, Any]) -> ObjectFact:
    from aws_lambda_powertools.utilities.parser import parse

    from lambdas.runtime.events import S3ObjectCreatedEvent

    parsed = parse(event=event, model=S3ObjectCreatedEvent)
    obj = parsed.detail.object
    version = obj.version_id or obj.etag or obj.sequencer
    return ObjectFact(
        key=f"{parsed.detail.bucket.name}/{obj.key}#{version}",
        bucket=parsed.detail.bucket.name,
        object_key=obj.key,
        size=obj.size,
        time=parsed.time.isoformat().replace("+00:00", "Z"),
    )


def record_event(event: dict[str, Any], context: Any) -> dict[str, Any]:
    register_context(context)
    return record_object(fact=_fact(event)).model_dump(mode="json")
