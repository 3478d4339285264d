"""Workflow task: record the trial's status (and why) in the trials table."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from lambdas.adapters.trials_table import DynamoTrials
from lambdas.domain.json_types import JsonObject
from lambdas.domain.vocabulary import TrialStatus
from lambdas.runtime.function import lambda_handler
from lambdas.runtime.observability import logger
from lambdas.runtime.settings import LedgerSettings, per_environment, settings_for
from lambdas.services.clock import now_iso
from lambdas.services.ports import Trials
from lambdas.services.trial_status import set_status

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext


class StatusRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)

    trial_id: str = Field(min_length=1)
    status: TrialStatus
    cause: str | None = Field(default=None, max_length=4000)
    settled_usd: Decimal | None = Field(default=None, ge=0, description="the trial's closed cost: its booking is "
                                        "corrected to it")


@per_environment
def compose() -> Trials:
    settings = settings_for(LedgerSettings)
    return DynamoTrials(settings.TRIALS_TABLE, settings.USAGE_TABLE)


@lambda_handler(LedgerSettings)
def handler(event: JsonObject, context: LambdaContext) -> JsonObject:
    request = StatusRequest.model_validate(event)
    done = set_status(compose(), request.trial_id, request.status, request.cause, now_iso(),
                      settled_usd=request.settled_usd)
    logger.info("trial status", extra={"trial_id": done.trial_id, "status": done.status, "changed": done.changed})
    return {"trial_id": done.trial_id, "status": done.status, "changed": done.changed}
