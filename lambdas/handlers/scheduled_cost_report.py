"""EventBridge schedule -> cost report over the period the schedule repeats at (the last whole day, week or month),
per team against the team's budget, to S3 (reports/cost/<label>/ and reports/cost/latest.json) and SNS."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from lambdas.adapters.cache_registry import DynamoCacheRegistry
from lambdas.adapters.ledger_table import DynamoLedger
from lambdas.adapters.notifier import SnsNotifier
from lambdas.adapters.objects import S3Objects
from lambdas.adapters.trials_table import DynamoTrials
from lambdas.domain.json_types import JsonObject
from lambdas.runtime.cost_report_settings import CostReportSettings
from lambdas.runtime.function import lambda_handler
from lambdas.runtime.observability import logger
from lambdas.runtime.settings import per_environment, settings_for
from lambdas.services.cost_reporting import publish_cost_report
from lambdas.services.ports import CacheRegistry, Ledger, Notifier, Objects, Trials

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext


class ScheduledEvent(BaseModel):
    """An EventBridge scheduled event (its ``time`` is when the schedule fired); any other field is ignored."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    time: datetime | None = None


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
def handler(event: JsonObject | None, context: LambdaContext) -> JsonObject:
    request = ScheduledEvent.model_validate(event or {})
    app = compose()
    governance = app.settings.GOVERNANCE
    published = publish_cost_report(
        ledger=app.ledger, trials=app.trials, registry=app.registry, artifacts=app.artifacts, notifier=app.notifier,
        at=(request.time or datetime.now(UTC)).astimezone(UTC), period=app.settings.COST_REPORT_PERIOD,
        budgets={team: governance.quotas(team).usd_per_month for team in governance.teams},
    )
    logger.info("cost report written", extra={"period": published.period, "runs": published.runs})
    return asdict(published)
