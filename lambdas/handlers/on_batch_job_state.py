"""EventBridge "Batch Job State Change" -> ledger facts for the attempt; on a terminal state, the run's cost.

Follow one event: this module (parse, once per fact, metrics) -> ``lambdas.services.run_settlement`` (facts, fold,
cost) -> ``lambdas.adapters.ledger_table`` (conditional writes); then the limit guard and the compile-cache
observation (docs/architecture.md lists every file on the way).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.parser import parse
from pydantic import BaseModel

from lambdas.adapters.batch_jobs import BatchJobsApi
from lambdas.adapters.run_metrics import CloudWatchRunMetrics
from lambdas.runtime.composition import Recorder, recorder
from lambdas.runtime.events import BatchJobStateChangeEvent
from lambdas.runtime.function import lambda_handler
from lambdas.runtime.observability import (
    count_cache_outcomes,
    count_limit_stop,
    count_refused_cache_claims,
    count_rejected_event,
    count_run_outcomes,
    logger,
)
from lambdas.runtime.settings import RunEventSettings, per_environment, settings_for
from lambdas.services.cache_observation import observe_run
from lambdas.services.run_settlement import ForeignEvent


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
    stopped_by: str | None = None  # the limit this event's facts crossed (the trial was stopped)


@per_environment
def compose() -> Recorder[JobStateFact, JobStateResult]:
    return recorder(settings_for(RunEventSettings), record_job_state, JobStateResult, metrics=CloudWatchRunMetrics(),
                    jobs=BatchJobsApi())


def record_job_state(*, fact: JobStateFact) -> JobStateResult:
    event = fact.event
    detail = event.detail
    app = compose()
    try:
        recorded = app.settlement.record_job_state(detail, event.time)
    except ForeignEvent as exc:
        count_rejected_event(str(exc), job_id=detail.job_id, status=detail.status)
        return JobStateResult(status=detail.status, attempt=detail.attempt, ignored=str(exc))
    if recorded is None:
        return JobStateResult(status=detail.status, attempt=detail.attempt, ignored="not a dualtrack job")
    trial_id, run = recorded.identity.trial_id, recorded.identity.run
    # The run's outcome is counted from the one read of its ledger, before settling: a settlement that fails still
    # leaves it counted (its retry adds no fact, so counts nothing).
    entries = app.settlement.entries(trial_id, run)
    outcome = app.settlement.outcome(recorded, entries)
    count_run_outcomes([outcome] if outcome else [])
    # Settle on every delivery, not only when facts were new: a retry after a crash between recording and settling
    # must still close the cost. Settling is a fold of the ledger, so repeating it changes nothing.
    settled = app.settlement.settle_run(trial_id, run, collect=detail.terminal, entries=entries)
    stopped = app.guard.after_run_facts(trial_id, run, settled.entries, event.time)
    if stopped is not None:
        count_limit_stop(stopped.limit, trial_id=trial_id, run=run, stopped_by=stopped.message)
    if settled.cost is not None:
        # The run's compile-cache hits and misses, from what its attempts reported.
        observed = observe_run(app.settlement.ledger, app.registry, app.settlement.trials, trial_id, run,
                               settled.entries, app.settlement.trial(trial_id))
        count_cache_outcomes(observed.counted)
        count_refused_cache_claims(observed.refused)
    logger.info("job state recorded", extra={"trial_id": trial_id, "run": run, "status": detail.status,
                                             "attempt": detail.attempt, "new": len(recorded.added)})
    return JobStateResult(trial_id=trial_id, run=run, status=detail.status, attempt=detail.attempt,
                          new_facts=len(recorded.added),
                          cost_total_usd=settled.cost["cost"]["total_usd"] if settled.cost else None,
                          stopped_by=stopped.message if stopped else None)


@lambda_handler(RunEventSettings)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    parsed = parse(event=event, model=BatchJobStateChangeEvent)
    detail = parsed.detail
    fact = JobStateFact(key=f"{detail.job_id}#{detail.status}#{detail.attempt}", event=parsed)
    return compose().record(fact, context).model_dump(mode="json")
