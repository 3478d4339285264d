"""What the two event functions compose: the run-events service over the shared settlement, and its side effect run
once per fact (Powertools idempotency). Only the functions that record run events import this module."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic

from lambdas.adapters.cache_registry import DynamoCacheRegistry
from lambdas.adapters.workflow import StepFunctionsWorkflow
from lambdas.runtime.composition import settlement
from lambdas.runtime.idempotency import Fact, OncePerFact, Result, once_per_fact
from lambdas.runtime.observability import PowertoolsTelemetry
from lambdas.runtime.settings import RunEventSettings
from lambdas.services.limit_guard import LimitGuard
from lambdas.services.ports import BatchJobs, JobTerminator, RunMetrics
from lambdas.services.run_events import RunEvents


@dataclass(frozen=True)
class Recorder(Generic[Fact, Result]):
    """What an event function composes: the run-events service (runs recorded and settled over the ledger, the
    trials' limits held as facts arrive, the compile-cache registry) and its side effect, run once per fact."""

    events: RunEvents
    record: OncePerFact[Fact, Result]


def recorder(settings: RunEventSettings, side_effect: Callable[..., Result], result: type[Result], *,
             metrics: RunMetrics, jobs: BatchJobs | None = None, artifacts_bucket: str = "",
             cache_bucket: str = "", terminator: JobTerminator | None = None) -> Recorder[Fact, Result]:
    runs = settlement(settings, metrics=metrics, jobs=jobs)
    events = RunEvents(runs, LimitGuard(runs, StepFunctionsWorkflow(settings.STATE_MACHINE_ARN)),
                       DynamoCacheRegistry(settings.CACHE_REGISTRY_TABLE), PowertoolsTelemetry(),
                       artifacts_bucket=artifacts_bucket, cache_bucket=cache_bucket, jobs=terminator)
    return Recorder(events, once_per_fact(side_effect, table=settings.IDEMPOTENCY_TABLE, result=result))
