"""Reporting periods (``lambdas.domain.money.periods``): a report covers the last whole period its schedule repeats at.

EventBridge cron expressions have six fields (minutes, hours, day-of-month, month, day-of-week, year) and one of
the two day fields must be ``?`` ("Schedule expressions for rules", EventBridge user guide:
https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-scheduled-rule-pattern.html)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from lambdas.domain.money.periods import PERIODS, SCHEDULES, label, last_whole, previous


def at(year: int, month: int, day: int, hour: int = 0) -> datetime:
    return datetime(year, month, day, hour, tzinfo=UTC)


@pytest.mark.parametrize(("period", "now", "start", "end", "name"), [
    ("day", at(2026, 11, 21, 6), at(2026, 11, 20), at(2026, 11, 21), "2026-11-20"),
    ("week", at(2026, 11, 23, 6), at(2026, 11, 16), at(2026, 11, 23), "2026-W47"),
    ("week", at(2026, 11, 25, 13), at(2026, 11, 16), at(2026, 11, 23), "2026-W47"),  # run late: the same week
    ("month", at(2026, 12, 1, 6), at(2026, 11, 1), at(2026, 12, 1), "2026-11"),
    ("month", at(2027, 1, 1, 6), at(2026, 12, 1), at(2027, 1, 1), "2026-12"),
    ("week", at(2027, 1, 4, 6), at(2026, 12, 28), at(2027, 1, 4), "2026-W53"),
])
def test_a_report_covers_the_last_whole_period(period: str, now: datetime, start: datetime, end: datetime,
                                               name: str) -> None:
    assert last_whole(period, now) == (start, end)
    assert label(period, start) == name


def test_the_previous_period_ends_where_the_reported_one_starts() -> None:
    assert previous("month", at(2026, 3, 1)) == (at(2026, 2, 1), at(2026, 3, 1))
    assert previous("week", at(2026, 11, 16)) == (at(2026, 11, 9), at(2026, 11, 16))
    assert previous("day", at(2026, 1, 1)) == (at(2025, 12, 31), at(2026, 1, 1))


def test_each_schedule_is_an_eventbridge_cron_that_fires_after_its_period() -> None:
    for period in PERIODS:
        fields = SCHEDULES[period].removeprefix("cron(").removesuffix(")").split()
        assert len(fields) == 6 and (fields[2] == "?") != (fields[4] == "?")
    assert SCHEDULES["week"] == "cron(0 6 ? * MON *)" and SCHEDULES["month"] == "cron(0 6 1 * ? *)"
