"""EventBridge "Batch Job State Change" -> ledger facts for the attempt; on a terminal state, the run's cost.

Follow one event: this module (parse, once per fact, metrics) -> ``lambdas.services.run_settlement`` (facts, fold,
cost) -> ``lambdas.adapters.ledger_table`` (conditional writes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools.utilities.parser import parse
from pydantic import BaseModel

from lambdas.adapters.batch_jobs import BatchJobsApi
from lambdas.adapters.cache_registry import DynamoCacheRegistry
from lambdas.adapters.run_metrics import CloudWatchRunMetrics
from lambdas.runtime.composition import settlement
from lambdas.runtime.events import BatchJobStateChangeEvent
from lambdas.runtime.idempotency import OncePerFact, once_per_fact
from lambdas.runtime.observability import count_cache_outcomes, count_run_outcomes, logger, metrics, tracer
from lambdas.runtime.settings import RunEventSettings, per_environment, settings_for, with_settings
from lambdas.services.cache_observation import observe_run
from lambdas.services.ports import CacheRegistry
from lambdas.services.run_settlement import RunSettlement


class JobStateFact(BaseModel):
    key: str  # job id + status + attempt: the real-world fact this event reports
    event: BatchJobStateChangeEvent


class JobStateResult(BaseModel):
    trial_id: str | None = None
    run: str | None = None
    status: str
    attempt: int
    new_facts: int = 0
    cost_total_usd: str | None = None
    ignored: str | None = None


@dataclass(frozen=True)
class Composition:
    settlement: RunSettlement
    registry: CacheRegistry
    record: OncePerFact[JobStateFact, JobStateResult]


@per_environment
def compose() -> Composition:
    settings = settings_for(RunEventSettings)
    return Composition(
        settlement(settings, metrics=CloudWatchRunMetrics(), jobs=BatchJobsApi()),
        DynamoCacheRegistry(settings.CACHE_REGISTRY_TABLE),
        once_per_fact(record_job_state, table=settings.IDEMPOTENCY_TABLE, result=JobStateResult),
    )


def record_job_state(*, fact: JobStateFact) -> JobStateResult:
    event = fact.event
    detail = event.detail
    app = compose()
    recorded = app.settlement.record_job_state(detail, event.time)
    if recorded is None:
        return JobStateResult(status=detail.status, attempt=detail.attempt, ignored="not a dualtrack job")
    trial_id, run = recorded.identity.trial_id, recorded.identity.run
    if detail.terminal:
        count_run_outcomes(new.body["status"] for new in recorded.added if new.kind == "transition")
    # Settle on every delivery, not only when facts were new: a retry after a crash between recording and settling
    # must still close the cost. Settling is a fold of the ledger, so repeating it changes nothing.
    settled = app.settlement.settle_run(trial_id, run, collect=detail.terminal)
    if settled.cost is not None:
        # The run's compile-cache hits and misses, from what its attempts reported.
        count_cache_outcomes(observe_run(app.settlement.ledger, app.registry, trial_id, run, settled.entries))
    logger.info("job state recorded", extra={"trial_id": trial_id, "run": run, "status": detail.status,
                                             "attempt": detail.attempt, "new": len(recorded.added)})
    return JobStateResult(trial_id=trial_id, run=run, status=detail.status, attempt=detail.attempt,
                          new_facts=len(recorded.added),
                          cost_total_usd=settled.cost["cost"]["total_usd"] if settled.cost else None)


@with_settings(RunEventSettings)
@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    parsed = parse(event=event, model=BatchJobStateChangeEvent)
    detail = parsed.detail
    fact = JobStateFact(key=f"{detail.job_id}#{detail.status}#{detail.attempt}", event=parsed)
    return compose().record(fact, context).model_dump(mode="json")
