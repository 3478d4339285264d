"""EventBridge S3 "Object Created" -> checkpoint manifests and run summaries into the ledger; compile-cache
objects into the registry. A checkpoint is its manifest: shards without one are not recorded."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from aws_lambda_powertools.utilities.parser import parse
from pydantic import BaseModel

from lambdas.adapters.run_metrics import CloudWatchRunMetrics
from lambdas.domain.artifacts import RUN_OBJECT, ArtifactRejected
from lambdas.runtime.composition import Recorder, recorder
from lambdas.runtime.events import S3ObjectCreatedEvent
from lambdas.runtime.function import lambda_handler
from lambdas.runtime.observability import (
    count_cache_outcomes,
    count_limit_stop,
    count_refused_cache_claims,
    count_rejected_event,
    logger,
)
from lambdas.runtime.settings import ArtifactEventSettings, per_environment, settings_for
from lambdas.services.artifact_recording import record_artifact, record_cache_object
from lambdas.services.cache_observation import observe_run
from lambdas.services.run_settlement import ForeignEvent


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
    rejected: str | None = None  # why the object is not a fact (acknowledged, not retried)
    stopped_by: str | None = None  # the limit this object crossed (the trial was stopped)


@per_environment
def compose() -> Recorder[ObjectFact, ObjectResult]:
    return recorder(settings_for(ArtifactEventSettings), record_object, ObjectResult, metrics=CloudWatchRunMetrics())


def record_object(*, fact: ObjectFact) -> ObjectResult:
    app, settings = compose(), settings_for(ArtifactEventSettings)
    if fact.bucket == settings.CACHE_BUCKET:
        try:
            key = record_cache_object(app.registry, fact.object_key, fact.size, fact.time)
        except ArtifactRejected as exc:
            count_rejected_event(str(exc), key=fact.object_key)
            return ObjectResult(kind="rejected", rejected=str(exc))
        return ObjectResult(kind="compile-cache" if key else "ignored", recorded=key is not None, cache_key=key)
    if fact.bucket != settings.ARTIFACTS_BUCKET:
        return ObjectResult(kind="ignored")
    written = RUN_OBJECT.match(fact.object_key)
    at = datetime.fromisoformat(fact.time.replace("Z", "+00:00"))
    stopped = None
    try:
        if written:  # every object a run's job writes counts against the trial's write limits, fact or not
            app.settlement.check_started(written["trial"], written["run"])
            stopped = app.guard.after_write(written["trial"], fact.size, at, fact=fact.key)
        outcome = record_artifact(app.settlement, fact.object_key)
    except (ArtifactRejected, ForeignEvent) as exc:
        count_rejected_event(str(exc), key=fact.object_key)
        return ObjectResult(kind="rejected", rejected=str(exc))
    if outcome is not None and stopped is None:
        stopped = app.guard.after_run_facts(outcome.trial_id, outcome.run, outcome.entries, at)
    if stopped is not None:
        count_limit_stop(stopped.limit, key=fact.object_key, stopped_by=stopped.message)
    if outcome is None:
        return ObjectResult(kind="ignored" if written is None else "written",
                            trial_id=written["trial"] if written else None, run=written["run"] if written else None,
                            stopped_by=stopped.message if stopped else None)
    if outcome.kind == "summary" and outcome.added:
        observed = observe_run(app.settlement.ledger, app.registry, app.settlement.trials, outcome.trial_id,
                               outcome.run, outcome.entries, app.settlement.trial(outcome.trial_id))
        count_cache_outcomes(observed.counted)
        count_refused_cache_claims(observed.refused)
    logger.info("artifact recorded", extra={"kind": outcome.kind, "trial_id": outcome.trial_id, "run": outcome.run,
                                            "new": outcome.added})
    return ObjectResult(kind=outcome.kind, recorded=outcome.added, trial_id=outcome.trial_id, run=outcome.run,
                        stopped_by=stopped.message if stopped else None)


@lambda_handler(ArtifactEventSettings)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    parsed = parse(event=event, model=S3ObjectCreatedEvent)
    obj = parsed.detail.object
    version = obj.version_id or obj.etag or obj.sequencer
    fact = ObjectFact(key=f"{parsed.detail.bucket.name}/{obj.key}#{version}", bucket=parsed.detail.bucket.name,
                      object_key=obj.key, size=obj.size, time=parsed.time.isoformat().replace("+00:00", "Z"))
    return compose().record(fact, context).model_dump(mode="json")
