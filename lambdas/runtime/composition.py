"""The adapters several functions compose their services from, built from a function's settings. Each handler
module composes its own service (``@per_environment``); what two or more of them build the same way is here."""

from __future__ import annotations

from lambdas.adapters.aws import reset_clients
from lambdas.adapters.ledger_table import DynamoLedger
from lambdas.adapters.objects import S3Objects
from lambdas.adapters.trials_table import DynamoTrials
from lambdas.domain.money.prices import load_price_table
from lambdas.runtime.settings import LedgerSettings, reset_settings
from lambdas.services.ports import BatchJobs, RunMetrics
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


def reset_environment() -> None:
    """A fresh execution environment: settings, compositions, clients and cached lookups are built again (tests
    and the local rehearsal switch between accounts and stages in one process)."""
    reset_settings()
    reset_clients()
