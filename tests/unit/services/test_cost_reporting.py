"""The scheduled cost report per team (``lambdas.services.cost_reporting.cost_report``): spend by track and
component, the trend against the previous period, the month to date against the team's budget, the failed-rerun
share, and compile spend booked to the job that compiled or, once another trial hits its cache entry, to shared
infrastructure (the source document's accounting rule)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from lambdas.domain.money.ledger import LedgerRow, SummaryFact
from lambdas.domain.trial.trial_record import TrialRecord
from lambdas.services.cost_reporting import cost_report, render_cost_markdown
from tests.builders import run_cost, stored_cost

START, END, BEFORE = (datetime(2026, 11, 16, tzinfo=UTC), datetime(2026, 11, 23, tzinfo=UTC),
                      datetime(2026, 11, 9, tzinfo=UTC))


def cost(run_key: str, ended: str, total: str, *, compile_usd: str = "0", reruns: str = "0") -> LedgerRow:
    trial_id, run = run_key.rsplit("#", 1)
    priced = run_cost(total, run, trial_id=trial_id, compile_usd=compile_usd, failed_reruns_usd=reruns,
                      effective_training_usd=str(Decimal(total) - Decimal(compile_usd) - Decimal(reruns)))
    return LedgerRow(run_key, "cost", stored_cost(priced, ended_at=ended))


def summary(run_key: str, outcome: str, key: str) -> LedgerRow:
    return LedgerRow(run_key, "summary", SummaryFact(attempt=1, ended_at="2026-11-18T10:00:00Z",
                                                     compile={"cache": outcome, "cache_key": key}))


TRIALS = [TrialRecord(trial_id=trial_id, team=team, status="SUCCEEDED") for trial_id, team in (
    ("nlp-1", "team-nlp"), ("nlp-2", "team-nlp"), ("vision-1", "team-vision"), ("nlp-0", "team-nlp"))]


def test_each_team_sees_its_spend_trend_budget_burn_and_compile_booking() -> None:
    entries = [
        cost("nlp-1#trn2", "2026-11-18T10:00:00Z", "100", compile_usd="30", reruns="10"),
        summary("nlp-1#trn2", "miss", "k1"),
        cost("nlp-1#gpu", "2026-11-18T11:00:00Z", "50"),
        cost("nlp-2#trn2", "2026-11-19T10:00:00Z", "40", compile_usd="5"),
        summary("nlp-2#trn2", "miss", "k2"),  # compiled, and nobody else has used it: booked to the job
        cost("vision-1#trn2", "2026-11-20T10:00:00Z", "60"),
        summary("vision-1#trn2", "hit", "k1"),  # team-vision reused nlp-1's compile: that compile is shared
        cost("nlp-0#gpu", "2026-11-10T10:00:00Z", "200"),  # the previous week
        cost("nlp-0#trn2", "2026-11-02T10:00:00Z", "300"),  # earlier this month, before the previous week
        cost("nlp-0#gpu-fallback", "2026-10-30T10:00:00Z", "999"),  # last month: in nothing
    ]
    typed = cost_report(entries, TRIALS, start=START, end=END, period="2026-W47", previous_start=BEFORE,
                        budgets={"team-nlp": Decimal(1000), "team-vision": None})
    report = typed.model_dump(mode="json")  # the report as written and served
    nlp, vision = report["teams"]["team-nlp"], report["teams"]["team-vision"]
    assert report["runs"] == 4 and report["total"]["total_usd"] == "250"
    assert nlp["total"]["total_usd"] == "190" and nlp["by_track"]["trn2"]["total_usd"] == "140"
    assert nlp["previous_total_usd"] == "200" and nlp["trend"] == -0.05  # 190 against 200
    assert nlp["month_to_date_usd"] == "690" and nlp["budget_burn"] == 0.69  # 300 + 200 + 190 of 1,000
    assert nlp["rerun_share"] == 10 / 190
    assert (nlp["compile_booked_usd"], nlp["compile_shared_usd"]) == ("5", "30")
    assert report["compile"]["shared_usd"] == "30" and report["compile"]["booked_usd"] == "5"
    assert vision["usd_per_month"] is None and vision["budget_burn"] is None and vision["trend"] is None
    text = render_cost_markdown(typed)
    assert "| team-nlp | 190 | gpu 50, trn2 140 | -5% | 690 / 1000 (69%) | 5% | 5 / 30 |" in text
    assert "| team-vision | 60 | trn2 60 | n/a (nothing before) | 60 (no budget) | 0% | 0 / 0 |" in text


def test_a_warm_up_compile_stage_is_booked_like_any_compile() -> None:
    """The stage's whole cost is compile; once another trial's training job hits the entry it published, the team
    report moves it to shared infrastructure, and it shows as its own line of the team's spend."""
    entries = [
        cost("nlp-1#trn2-compile", "2026-11-18T09:00:00Z", "12", compile_usd="12"),
        summary("nlp-1#trn2-compile", "miss", "k9"),
        cost("nlp-1#trn2", "2026-11-18T10:00:00Z", "40", compile_usd="1"),
        summary("nlp-1#trn2", "hit", "k9"),  # its own training job: still the trial's own compile
    ]
    own = cost_report(entries, TRIALS, start=START, end=END, period="2026-W47", previous_start=BEFORE,
                      budgets={})
    nlp = own.teams["team-nlp"]
    assert nlp.by_track["trn2-compile"]["compile_usd"] == "12"
    assert (nlp.compile_booked_usd, nlp.compile_shared_usd) == ("13", "0")
    reused = cost_report([*entries, cost("vision-1#trn2", "2026-11-20T10:00:00Z", "30"),
                          summary("vision-1#trn2", "hit", "k9")],
                         TRIALS, start=START, end=END, period="2026-W47", previous_start=BEFORE, budgets={})
    assert reused.teams["team-nlp"].compile_shared_usd == "12"
