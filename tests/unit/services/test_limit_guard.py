"""Holding a running trial to its limits (``lambdas.services.limit_guard``) over in-memory ports: the projected
spend kept per run on the trial item, writes counted, failed retries counted, and a trial over a limit stopped
once through the cancel path with the limit recorded."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from lambdas.domain.money import ledger as L
from lambdas.domain.money.prices import load_price_table
from lambdas.domain.trial.trial_record import TrialRecord
from lambdas.services.limit_guard import LimitGuard
from lambdas.services.run_settlement import RunSettlement
from tests import fakes

T0 = datetime(2026, 12, 4, 10, tzinfo=UTC)
TRIAL = "pilot-1"
PRICES = load_price_table()
P5 = PRICES.instance_hourly_usd("p5.48xlarge", "us-east-1")


class CountingTrials(fakes.InMemoryTrials):
    tallies = 0

    def tally(self, trial_id: str, **kw: Any) -> TrialRecord | None:
        self.tallies += 1
        return super().tally(trial_id, **kw)


def _plane(run_limits: dict[str, Any] | None, status: str = "SUBMITTED"
           ) -> tuple[LimitGuard, CountingTrials, fakes.InMemoryWorkflow]:
    trials, workflow = CountingTrials(), fakes.InMemoryWorkflow()
    started = workflow.start(TRIAL, fakes.execution_input(TRIAL))
    item: dict[str, Any] = {"trial_id": TRIAL, "status": status, "execution_arn": started.execution_arn,
                            "tracks": {"gpu": {"instance_type": "p5.48xlarge", "nodes": 1},
                                       "trn2": {"instance_type": "trn2.48xlarge", "nodes": 1}}}
    if run_limits is not None:
        item["run_limits"] = run_limits
    trials.create(TrialRecord.from_item(item))
    settlement = RunSettlement(fakes.InMemoryLedger(), trials, fakes.InMemoryObjects(), PRICES, "us-east-1")
    return LimitGuard(settlement, workflow), trials, workflow


def _running(run: str, started_min: int = 0) -> list[L.LedgerEntry]:
    def t(status: str, minutes: int) -> L.LedgerEntry:
        return L.transition_entry(TRIAL, run, job_id=f"job-{run}", attempt=1, status=status,
                                  at=T0 + timedelta(minutes=minutes))
    return [t("SUBMITTED", started_min), t("STARTING", started_min + 1), t("RUNNING", started_min + 21)]


def _at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def test_the_trial_is_stopped_once_when_its_runs_projected_spend_crosses_max_usd() -> None:
    limit = (P5 * 2).quantize(1)  # two p5 hours
    guard, trials, workflow = _plane({"max_usd": {"value": str(limit), "source": "trial limits.max_usd"}})
    assert guard.after_run_facts(TRIAL, "gpu", _running("gpu"), _at(61)) is None  # one hour billed
    spend = trials.items[TRIAL]["spend_usd#gpu"]
    assert isinstance(spend, str) and Decimal(spend) == P5
    assert guard.after_run_facts(TRIAL, "gpu", _running("gpu"), _at(61)) is None
    assert trials.tallies == 1  # an unchanged projection is not written again
    hit = guard.after_run_facts(TRIAL, "trn2", _running("trn2"), _at(121))  # trn2 for 2 h: over two p5 hours
    assert hit is not None and (hit.limit, hit.run, hit.source) == ("max_usd", "trn2", "trial limits.max_usd")
    item = trials.items[TRIAL]
    assert item["status"] == "CANCELLED" and item["status_cause"] == hit.message
    assert item["stopped_by"] == hit.model_dump(mode="json")
    assert isinstance(item["execution_arn"], str)
    assert workflow.executions[item["execution_arn"]]["status"] == "ABORTED"
    assert guard.after_run_facts(TRIAL, "trn2", _running("trn2"), _at(122)) is None  # stopped once


def test_a_trial_a_person_cancelled_keeps_its_cause() -> None:
    guard, trials, _ = _plane({"max_usd": {"value": "1", "source": "trial limits.max_usd"}}, status="CANCELLED")
    trials.update(TRIAL, status_cause="capacity needed")
    assert guard.after_run_facts(TRIAL, "gpu", _running("gpu"), _at(600)) is None
    assert trials.items[TRIAL]["status_cause"] == "capacity needed"


def test_a_run_whose_job_fails_past_its_retry_quota_is_stopped_but_an_ended_run_is_not() -> None:
    limits = {"failed_retries_per_run": {"value": "0", "source": "team team-nlp quota failed_retries_per_run"}}
    failed = L.attempt_entry(TRIAL, "trn2", job_id="job-trn2", attempt=1, started_at_ms=None, stopped_at_ms=None,
                             exit_code=75, status_reason="Essential container in task exited")
    guard, trials, _ = _plane(limits)
    ended = [*_running("trn2"), failed,
             L.transition_entry(TRIAL, "trn2", job_id="job-trn2", attempt=1, status="FAILED", at=_at(40))]
    assert guard.after_run_facts(TRIAL, "trn2", ended, _at(40)) is None  # Batch will not retry: nothing to stop
    hit = guard.after_run_facts(TRIAL, "trn2", [*_running("trn2"), failed], _at(40))  # Batch is retrying
    assert hit is not None and hit.limit == "failed_retries_per_run" and hit.observed == "1 failed attempts"
    assert trials.items[TRIAL]["status"] == "CANCELLED" and trials.tallies == 0


def test_writes_are_counted_per_object_and_the_trial_stopped_past_its_quota() -> None:
    limits = {"write_requests": {"value": "3", "source": "team team-nlp quota write_requests_per_trial"},
              "write_bytes": {"value": "1000000", "source": "team team-nlp quota write_bytes_per_trial"}}
    guard, trials, _ = _plane(limits)
    assert [guard.after_write(TRIAL, 100, _at(i), fact=f"o{i}") for i in range(3)] == [None, None, None]
    hit = guard.after_write(TRIAL, 100, _at(3), fact="o3")
    assert hit is not None and hit.limit == "write_requests" and hit.observed == "4 objects written"
    item = trials.items[TRIAL]
    assert (item["written_objects"], item["written_bytes"], item["status"]) == (4, 400, "CANCELLED")


@pytest.mark.parametrize("limits", [None, {"max_usd": {"value": "100", "source": "trial limits.max_usd"}}])
def test_a_trial_without_the_limit_costs_no_writes(limits: dict[str, Any] | None) -> None:
    guard, trials, _ = _plane(limits)
    assert guard.after_write(TRIAL, 10**12, _at(1), fact="o1") is None
    if limits is None:
        assert guard.after_run_facts(TRIAL, "gpu", _running("gpu"), _at(600)) is None
    assert trials.tallies == 0 and trials.items[TRIAL]["status"] == "SUBMITTED"
