"""EventBridge "Batch Job State Change" -> ledger facts for the attempt; on a terminal state, the run's cost.

Follow one event: this module parses it and makes one call, once per fact -> ``lambdas.services.run_events``
(record, settle, limits, cache observation, metrics) -> ``lambdas.services.run_settlement`` (facts, fold, cost) ->
``lambdas.adapters.ledger_table`` (conditional writes). docs/architecture.md traces the path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_lambda_powertools.utilities.parser import parse
from pydantic import BaseModel, ConfigDict

from lambdas.adapters.batch_jobs import BatchJobsApi, BatchJobTerminator
from lambdas.adapters.run_metrics import CloudWatchRunMetrics
from lambdas.domain.json_types import JsonObject
from lambdas.runtime.events import BatchJobStateChangeEvent
from lambdas.runtime.function import lambda_handler
from lambdas.runtime.recording import Recorder, recorder
from lambdas.runtime.settings import RunEventSettings, per_environment, settings_for
from lambdas.services.run_events import JobStateResult

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext


class JobStateFact(BaseModel):
    model_config = ConfigDict(defer_build=True)

    key: str  # job id + status + attempt: the real-world fact this event reports
    event: BatchJobStateChangeEvent


@per_environment
def compose() -> Recorder[JobStateFact, JobStateResult]:
    return recorder(settings_for(RunEventSettings), record_job_state, JobStateResult, metrics=CloudWatchRunMetrics(),
                    jobs=BatchJobsApi(), terminator=BatchJobTerminator())


def record_job_state(*, fact: JobStateFact) -> JobStateResult:
    return compose().events.on_job_state(fact.event.detail, fact.event.time)


@lambda_handler(RunEventSettings)
def handler(event: JsonObject, context: LambdaContext) -> JsonObject:
    parsed = parse(event=event, model=BatchJobStateChangeEvent)
    detail = parsed.detail
    fact = JobStateFact(key=f"{detail.job_id}#{detail.status}#{detail.attempt}", event=parsed)
    return compose().record(fact, context).model_dump(mode="json")
