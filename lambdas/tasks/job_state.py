"""EventBridge "Batch Job State Change" -> ledger facts for the attempt; on a terminal state, the run's cost."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from lambdas.runtime.idempotency import once_per_fact, register_context
from lambdas.runtime.observability import count_cache_outcomes, count_run_outcomes, logger
from lambdas.runtime.settings import RunEventSettings, settings_for


class JobStateFact(BaseModel):
    key: str  # job id + status + attempt: the real-world fact this event reports
    event: dict[str, Any]


class JobStateResult(BaseModel):
    trial_id: str | None = None
    run: str | None = None
    status: str
    attempt: int
    new_facts: int = 0
    cost_total_usd: str | None = None
    ignored: str | None = None


@once_per_fact(lambda: settings_for(RunEventSettings).IDEMPOTENCY_TABLE)
def record_job_state(*, fact: JobStateFact) -> JobStateResult:
    from aws_lambda_powertools.utilities.parser import parse

    from lambdas.adapters import wiring
    from lambdas.adapters.batch_jobs import queue_instance_type
    from lambdas.runtime.events import BatchJobStateChangeEvent
    from lambdas.services.run_settlement import identify_job, job_facts

    event = parse(event=fact.event, model=BatchJobStateChangeEvent)
    detail = event.detail
    identity = identify_job(detail.environment(), detail.tags, detail.job_name)
    if identity is None:
        return JobStateResult(status=detail.status, attempt=detail.attempt, ignored="not a dualtrack job")
    settlement = wiring.settlement(RunEventSettings)
    instance_type = queue_instance_type(detail.job_queue) if detail.job_queue else None
    added = settlement.record(job_facts(identity, detail, event.time, instance_type))
    if detail.terminal:
        count_run_outcomes(fact.body["status"] for fact in added if fact.kind == "transition")
    # Settle on every delivery, not only when facts were new: a retry after a crash between recording and settling
    # must still close the cost. Settling is a fold of the ledger, so repeating it changes nothing.
    settled = settlement.settle_run(identity.trial_id, identity.run, collect=detail.terminal)
    cost = settled.cost
    if cost is not None:
        _observe_compile(identity.trial_id, identity.run, settled.entries)
    total = cost["cost"]["total_usd"] if cost else None
    logger.info(
        "job state recorded",
        extra={
            "trial_id": identity.trial_id,
            "run": identity.run,
            "status": detail.status,
            "attempt": detail.attempt,
            "new": len(added),
        },
    )
    return JobStateResult(
        trial_id=identity.trial_id,
        run=identity.run,
        status=detail.status,
        attempt=detail.attempt,
        new_facts=len(added),
        cost_total_usd=total,
    )


def _observe_compile(trial_id: str, run: str, entries: list[Any]) -> None:
    """Count the run's compile-cache hits and misses from what its attempts actually reported."""
    from lambdas.adapters import wiring
    from lambdas.services.cache_observation import observe_run

    count_cache_outcomes(observe_run(wiring.ledger(RunEventSettings), wiring.registry(RunEventSettings), trial_id,
                                     run, entries))


def _fact(event: dict[str, Any]) -> JobStateFact:
    from aws_lambda_powertools.utilities.parser import parse

    from lambdas.runtime.events import BatchJobStateChangeEvent

    detail = parse(event=event, model=BatchJobStateChangeEvent).detail
    return JobStateFact(key=f"{detail.job_id}#{detail.status}#{detail.attempt}", event=event)


def record_event(event: dict[str, Any], context: Any) -> dict[str, Any]:
    register_context(context)
    return record_job_state(fact=_fact(event)).model_dump(mode="json")
