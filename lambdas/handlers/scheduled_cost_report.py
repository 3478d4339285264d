"""EventBridge schedule -> cost report over a period for all trials, to S3 (reports/cost/<period>/) and SNS."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from lambdas.adapters.cache_registry import DynamoCacheRegistry
from lambdas.adapters.ledger_table import DynamoLedger
from lambdas.adapters.notifier import SnsNotifier
from lambdas.adapters.objects import S3Objects
from lambdas.adapters.trials_table import DynamoTrials
from lambdas.runtime.function import lambda_handler
from lambdas.runtime.observability import logger
from lambdas.runtime.settings import CostReportSettings, per_environment, settings_for
from lambdas.services.cost_reporting import publish_cost_report
from lambdas.services.ports import CacheRegistry, Ledger, Notifier, Objects, Trials


class ScheduledEvent(BaseModel):
    model_config = ConfigDict(extra="ignore")

    time: datetime | None = None
    period_days: int | None = None


@dataclass(frozen=True)
class Composition:
    settings: CostReportSettings
    ledger: Ledger
    trials: Trials
    registry: CacheRegistry
    artifacts: Objects
    notifier: Notifier | None


@per_environment
def compose() -> Composition:
    settings = settings_for(CostReportSettings)
    return Composition(settings, DynamoLedger(settings.LEDGER_TABLE), DynamoTrials(settings.TRIALS_TABLE),
                       DynamoCacheRegistry(settings.CACHE_REGISTRY_TABLE), S3Objects(settings.ARTIFACTS_BUCKET),
                       SnsNotifier(settings.REPORT_TOPIC_ARN) if settings.REPORT_TOPIC_ARN else None)


@lambda_handler(CostReportSettings)
def handler(event: dict[str, Any] | None, context: Any) -> dict[str, Any]:
    request = ScheduledEvent.model_validate(event or {})
    app = compose()
    published = publish_cost_report(
        ledger=app.ledger, trials=app.trials, registry=app.registry, artifacts=app.artifacts, notifier=app.notifier,
        end=(request.time or datetime.now(UTC)).astimezone(UTC),
        days=request.period_days or app.settings.COST_REPORT_PERIOD_DAYS,
    )
    logger.info("cost report written", extra={"period": published.period, "runs": published.runs})
    return asdict(published)
