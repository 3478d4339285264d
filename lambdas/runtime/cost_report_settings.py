"""The scheduled cost report's settings: the period it covers, where its summary goes, and the teams' budgets."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from lambdas.domain.money.periods import Period
from lambdas.domain.trial.governance import Governance
from lambdas.runtime.settings import LedgerSettings, json_text, name_field


class CostReportSettings(LedgerSettings):
    CACHE_REGISTRY_TABLE: str = name_field("name of the DynamoDB compile-cache registry table (pk cache_key)")
    REPORT_TOPIC_ARN: str | None = Field(default=None, description="SNS topic ARN that receives the summary")
    COST_REPORT_PERIOD: Period = Field(
        default="week", description="day, week or month: what the schedule repeats at, and so what a report covers")
    GOVERNANCE: Governance = Field(
        default_factory=Governance, description="JSON: the stage's teams and quotas (each team's usd_per_month is "
        "its budget)")

    @field_validator("GOVERNANCE", mode="before")
    @classmethod
    def _json_governance(cls, value: Any) -> Any:
        return json_text(value)
