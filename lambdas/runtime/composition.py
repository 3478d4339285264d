"""The adapters several functions compose their services from, built from a function's settings. Each handler
module composes its own service (``@per_environment``); what two or more of them build the same way is here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic

from lambdas.adapters.aws import reset_clients
from lambdas.adapters.cache_registry import DynamoCacheRegistry
from lambdas.adapters.ledger_table import DynamoLedger
from lambdas.adapters.objects import S3Objects
from lambdas.adapters.trials_table import DynamoTrials
from lambdas.adapters.workflow import StepFunctionsWorkflow
from lambdas.domain.prices import load_price_table
from lambdas.runtime.idempotency import Fact, OncePerFact, Result, once_per_fact
from lambdas.runtime.settings import LedgerSettings, RunEventSettings, reset_settings
from lambdas.services.limit_guard import LimitGuard
from lambdas.services.ports import BatchJobs, CacheRegistry, RunMetrics
from lambdas.services.run_settlement import RunSettlement


def settlement(settings: LedgerSettings, *, metrics: RunMetrics | None = None,
               jobs: BatchJobs | None = None) -> RunSettlement:
    """Recording and settling runs over the function's ledger, trials table and artifacts bucket; ``metrics``
    backfills attempts without a summary (from CloudWatch), ``jobs`` reads jobs and queues (from Batch). Each
    function passes the ones it uses, so its role is granted only those."""
    return RunSettlement(
        DynamoLedger(settings.LEDGER_TABLE),
        DynamoTrials(settings.TRIALS_TABLE, settings.USAGE_TABLE),
        S3Objects(settings.ARTIFACTS_BUCKET),
        load_price_table(settings.PRICE_OVERRIDES),
        settings.PRICE_REGION,
        metrics,
        jobs,
    )


@dataclass(frozen=True)
class Recorder(Generic[Fact, Result]):
    """What an event function composes: runs recorded and settled over the ledger, the trials' limits held as facts
    arrive, the compile-cache registry, and its side effect, run once per fact."""

    settlement: RunSettlement
    guard: LimitGuard
    registry: CacheRegistry
    record: OncePerFact[Fact, Result]


def recorder(settings: RunEventSettings, side_effect: Callable[..., Result], result: type[Result], *,
             metrics: RunMetrics, jobs: BatchJobs | None = None) -> Recorder[Any, Result]:
    runs = settlement(settings, metrics=metrics, jobs=jobs)
    return Recorder(runs, LimitGuard(runs, StepFunctionsWorkflow(settings.STATE_MACHINE_ARN)),
                    DynamoCacheRegistry(settings.CACHE_REGISTRY_TABLE),
                    once_per_fact(side_effect, table=settings.IDEMPOTENCY_TABLE, result=result))


def reset_environment() -> None:
    """A fresh execution environment: settings, compositions, clients and cached lookups are built again (tests
    and the local rehearsal switch between accounts and stages in one process)."""
    reset_settings()
    reset_clients()
