"""Scheduled: a cost report over a period for all trials, to S3 (reports/cost/<period>/) and SNS."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict

from lambdas.runtime.observability import logger
from lambdas.runtime.settings import CostReportSettings, settings_for


class ScheduledEvent(BaseModel):
    model_config = ConfigDict(extra="ignore")

    time: datetime | None = None
    period_days: int | None = None


def publish_report(event: dict[str, Any] | None) -> dict[str, Any]:
    from lambdas.adapters import wiring
    from lambdas.adapters.notifier import SnsNotifier
    from lambdas.services.cost_reporting import cache_trend, cost_report, render_cost_markdown

    request = ScheduledEvent.model_validate(event or {})
    settings = settings_for(CostReportSettings)
    end = (request.time or datetime.now(UTC)).astimezone(UTC)
    start = end - timedelta(days=request.period_days or settings.COST_REPORT_PERIOD_DAYS)
    period = f"{start:%Y-%m-%d}_{end:%Y-%m-%d}"
    ledger = wiring.ledger(CostReportSettings)
    report = cost_report(
        ledger.iter_kinds(("cost", "summary")),
        wiring.trials(CostReportSettings).iter_all(),
        start=start,
        end=end,
        period=period,
    )
    report["compile_cache"] = cache_trend(wiring.registry(CostReportSettings).iter_all())
    artifacts = wiring.artifacts(CostReportSettings)
    artifacts.put_json(f"reports/cost/{period}/report.json", report)
    artifacts.put_text(f"reports/cost/{period}/report.md", render_cost_markdown(report), "text/markdown")
    uri = artifacts.uri(f"reports/cost/{period}/report.json")
    message_id = None
    if settings.REPORT_TOPIC_ARN:
        summary = (
            f"dualtrack cost {period}: {report['runs']} runs, {report['total']['total_usd']} USD; "
            f"rerun share {report['rerun_share']}, compile share {report['compile_share']}. {uri}"
        )
        message_id = SnsNotifier(settings.REPORT_TOPIC_ARN).publish(f"dualtrack cost report {period}", summary)
    logger.info("cost report written", extra={"period": period, "runs": report["runs"]})
    return {
        "report_uri": uri,
        "period": period,
        "runs": report["runs"],
        "total_usd": report["total"]["total_usd"],
        "message_id": message_id,
    }
