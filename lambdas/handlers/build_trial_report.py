"""Workflow task: build the trial report (JSON, Markdown, HTML) in S3 next to the trial."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from lambdas.adapters.cache_registry import DynamoCacheRegistry
from lambdas.adapters.ledger_table import DynamoLedger
from lambdas.adapters.objects import S3Objects
from lambdas.adapters.sources import UriSources
from lambdas.adapters.trials_table import DynamoTrials
from lambdas.domain.json_types import JsonObject
from lambdas.domain.money.prices import PriceTable, load_price_table
from lambdas.runtime.function import lambda_handler
from lambdas.runtime.observability import logger
from lambdas.runtime.settings import ReportSettings, per_environment, settings_for
from lambdas.services.clock import now_iso
from lambdas.services.frozen_specs import load_spec
from lambdas.services.ports import CacheRegistry, Ledger, Objects, Sources, Trials
from lambdas.services.trial_reporting import write_report

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext


class ReportRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)

    trial_id: str = Field(min_length=1)


@dataclass(frozen=True)
class Composition:
    artifacts: Objects
    ledger: Ledger
    sources: Sources
    registry: CacheRegistry
    prices: PriceTable
    trials: Trials  # whose trial a baseline in the artifacts bucket is


@per_environment
def compose() -> Composition:
    settings = settings_for(ReportSettings)
    return Composition(S3Objects(settings.ARTIFACTS_BUCKET), DynamoLedger(settings.LEDGER_TABLE), UriSources(),
                       DynamoCacheRegistry(settings.CACHE_REGISTRY_TABLE), load_price_table(settings.PRICE_OVERRIDES),
                       DynamoTrials(settings.TRIALS_TABLE, settings.USAGE_TABLE))


@lambda_handler(ReportSettings)
def handler(event: JsonObject, context: LambdaContext) -> JsonObject:
    request = ReportRequest.model_validate(event)
    app = compose()
    spec = load_spec(app.artifacts, app.artifacts.uri(f"trials/{request.trial_id}/spec.json"))
    out = write_report(request.trial_id, spec, app.artifacts, app.ledger, now_iso(), sources=app.sources,
                       registry=app.registry, prices=app.prices, trials=app.trials)
    logger.info("trial report written", extra={"trial_id": request.trial_id, "verdict": out.verdict})
    return out.as_json()
