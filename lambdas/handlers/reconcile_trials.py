"""EventBridge schedule -> finish every stop left pending and every start cut short (``services.reconciliation``);
publish how many stops are still pending past their deadline (the StopsPending alarm)."""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from lambdas.adapters.batch_jobs import BatchJobTerminator
from lambdas.adapters.ledger_table import DynamoLedger
from lambdas.adapters.trials_table import DynamoTrials
from lambdas.adapters.workflow import StepFunctionsWorkflow
from lambdas.domain.json_types import JsonObject
from lambdas.runtime.function import lambda_handler
from lambdas.runtime.observability import logger, record_reconciled
from lambdas.runtime.settings import ReconcileSettings, per_environment, settings_for
from lambdas.services.reconciliation import reconcile
from lambdas.services.trial_status import Stopper

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext


class ScheduledEvent(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)

    time: datetime | None = None


@per_environment
def compose() -> Stopper:
    settings = settings_for(ReconcileSettings)
    return Stopper(DynamoTrials(settings.TRIALS_TABLE, settings.USAGE_TABLE),
                   StepFunctionsWorkflow(settings.STATE_MACHINE_ARN), DynamoLedger(settings.LEDGER_TABLE),
                   BatchJobTerminator())


@lambda_handler(ReconcileSettings)
def handler(event: JsonObject | None, context: LambdaContext) -> JsonObject:
    request = ScheduledEvent.model_validate(event or {})
    done = reconcile(compose(), (request.time or datetime.now(UTC)).astimezone(UTC),
                     overdue_after_s=settings_for(ReconcileSettings).STOP_OVERDUE_AFTER_S)
    record_reconciled(pending=len(done.stops_pending), overdue=len(done.stops_overdue))
    logger.info("trials reconciled", extra=asdict(done))
    return asdict(done)
