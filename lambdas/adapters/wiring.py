"""Concrete adapters built from a function's settings, once per container and only when first needed. Each is
returned as the port it implements (``lambdas.services.ports``), so mypy checks every use against the port."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from lambdas.runtime.settings import (
    ApiSettings,
    ArtifactEventSettings,
    CostReportSettings,
    LedgerSettings,
    RunEventSettings,
    settings_for,
)

if TYPE_CHECKING:
    from lambdas.domain.prices import PriceTable
    from lambdas.services.ports import CacheRegistry, Ledger, Objects, RunMetrics, Trials, Workflow
    from lambdas.services.run_settlement import RunSettlement


def _base(model: type[LedgerSettings]) -> LedgerSettings:
    return settings_for(model)


@cache
def ledger(model: type[LedgerSettings] = LedgerSettings) -> Ledger:
    from lambdas.adapters.ledger_table import DynamoLedger

    return DynamoLedger(_base(model).LEDGER_TABLE)


@cache
def trials(model: type[LedgerSettings] = LedgerSettings) -> Trials:
    from lambdas.adapters.trials_table import DynamoTrials

    return DynamoTrials(_base(model).TRIALS_TABLE)


@cache
def artifacts(model: type[LedgerSettings] = LedgerSettings) -> Objects:
    from lambdas.adapters.objects import S3Objects

    return S3Objects(_base(model).ARTIFACTS_BUCKET)


@cache
def cache_objects(model: type[ArtifactEventSettings] = ArtifactEventSettings) -> Objects:
    from lambdas.adapters.objects import S3Objects

    return S3Objects(settings_for(model).CACHE_BUCKET)


@cache
def registry(model: type[RunEventSettings | CostReportSettings] = RunEventSettings) -> CacheRegistry:
    from lambdas.adapters.cache_registry import DynamoCacheRegistry

    return DynamoCacheRegistry(settings_for(model).CACHE_REGISTRY_TABLE)


@cache
def workflow() -> Workflow:
    from lambdas.adapters.workflow import StepFunctionsWorkflow

    return StepFunctionsWorkflow(settings_for(ApiSettings).STATE_MACHINE_ARN)


@cache
def prices(model: type[LedgerSettings] = LedgerSettings) -> PriceTable:
    from lambdas.domain.prices import load_price_table

    return load_price_table(_base(model).PRICE_OVERRIDES)


@cache
def run_metrics() -> RunMetrics:
    from lambdas.adapters.run_metrics import CloudWatchRunMetrics

    return CloudWatchRunMetrics()


@cache
def settlement(model: type[LedgerSettings] = LedgerSettings, with_metrics: bool = True) -> RunSettlement:
    from lambdas.services.run_settlement import RunSettlement

    return RunSettlement(
        ledger(model),
        trials(model),
        artifacts(model),
        prices(model),
        _base(model).PRICE_REGION,
        run_metrics() if with_metrics else None,
    )


def reset() -> None:
    """Forget built adapters (tests switch environments)."""
    for fn in (ledger, trials, artifacts, cache_objects, registry, workflow, prices, run_metrics, settlement):
        fn.cache_clear()
    from lambdas.adapters.aws import reset_clients
    from lambdas.adapters.batch_jobs import queue_instance_type
    from lambdas.runtime.idempotency import reset_idempotency
    from lambdas.runtime.settings import reset_settings

    reset_clients()
    queue_instance_type.cache_clear()
    reset_idempotency()
    reset_settings()
