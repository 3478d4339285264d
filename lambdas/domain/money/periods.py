"""Reporting periods: the scheduled cost report covers exactly the period its schedule repeats at.

A stage picks ``day``, ``week`` or ``month``; the schedule is derived from it (06:00 UTC after the period ends:
EventBridge cron fields minute, hour, day-of-month, month, day-of-week, year, with ``?`` in one of the two day
fields: "Schedule expressions for rules", EventBridge user guide), and each run reports the last whole period
before its time, in UTC. The previous period is the one a trend compares against.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal, get_args

Period = Literal["day", "week", "month"]
PERIODS: tuple[str, ...] = get_args(Period)
SCHEDULES: dict[str, str] = {
    "day": "cron(0 6 * * ? *)",
    "week": "cron(0 6 ? * MON *)",
    "month": "cron(0 6 1 * ? *)",
}
# The newest scheduled report, as written (what GET /reports/costs serves); each period's report is kept beside it.
LATEST = "reports/cost/latest.json"


def _start_of(period: str, at: datetime) -> datetime:
    """The start of the period ``at`` falls in."""
    day = at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return day
    if period == "week":
        return day - timedelta(days=day.weekday())  # ISO weeks start on Monday
    return day.replace(day=1)


def _step_back(period: str, start: datetime) -> datetime:
    if period == "day":
        return start - timedelta(days=1)
    if period == "week":
        return start - timedelta(days=7)
    return (start - timedelta(days=1)).replace(day=1)


def last_whole(period: str, at: datetime) -> tuple[datetime, datetime]:
    """The last whole period that ended at or before ``at``: [start, end)."""
    end = _start_of(period, at)
    return _step_back(period, end), end


def previous(period: str, start: datetime) -> tuple[datetime, datetime]:
    """The period just before the one starting at ``start``."""
    return _step_back(period, start), start


def label(period: str, start: datetime) -> str:
    """2026-11-20 (a day), 2026-W47 (an ISO week), 2026-11 (a month)."""
    if period == "day":
        return start.strftime("%Y-%m-%d")
    if period == "week":
        year, week, _ = start.isocalendar()
        return f"{year}-W{week:02d}"
    return start.strftime("%Y-%m")
