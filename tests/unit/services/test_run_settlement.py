"""Settling a run (``lambdas.services.run_settlement``) over in-memory ports: what it reads, what it stores, and
that a lost race returns the cost that won. No moto; the ports' behaviour is pinned against AWS by
``tests/integration/test_port_contracts.py``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lambdas.domain import ledger as L
from lambdas.domain.prices import load_price_table
from lambdas.services.run_settlement import RunSettlement
from tests import fakes

T0 = datetime(2026, 12, 4, 10, 0, tzinfo=UTC)


class CountingTrials(fakes.InMemoryTrials):
    reads = 0

    def get(self, trial_id: str) -> dict[str, Any] | None:
        self.reads += 1
        return super().get(trial_id)


class CountingLedger(fakes.InMemoryLedger):
    queries = 0

    def entries(self, run_key: str) -> list[L.LedgerEntry]:
        self.queries += 1
        return super().entries(run_key)


@pytest.fixture
def settlement() -> RunSettlement:
    trials = CountingTrials()
    trials.create({"trial_id": "t-1", "status": "SUBMITTED",
                   "tracks": {"gpu": {"instance_type": "p5.48xlarge", "nodes": 1}}})
    return RunSettlement(CountingLedger(), trials, fakes.InMemoryObjects(), load_price_table(), "us-east-1")


def _transition(status: str, minutes: int, **kw: Any) -> L.LedgerEntry:
    return L.transition_entry("t-1", "gpu", job_id="job-1", attempt=1, status=status,
                              at=T0 + timedelta(minutes=minutes), **kw)


def test_an_open_run_reads_the_ledger_once_and_never_the_trial(settlement: RunSettlement) -> None:
    settlement.record([_transition("SUBMITTED", 0), _transition("RUNNING", 5)])
    settled = settlement.settle_run("t-1", "gpu", collect=True)
    assert settled.cost is None and [e.body["status"] for e in settled.entries] == ["RUNNING", "SUBMITTED"]
    assert settlement.ledger.queries == 1 and settlement.trials.reads == 0  # type: ignore[attr-defined]
    assert settlement.ledger.cost("t-1#gpu") is None


def test_a_terminal_run_is_costed_at_its_declared_instance_and_returned_as_stored(settlement: RunSettlement) -> None:
    settlement.record([_transition("SUBMITTED", 0), _transition("STARTING", 1), _transition("RUNNING", 2),
                       _transition("SUCCEEDED", 62, exit_code=0),
                       L.attempt_entry("t-1", "gpu", job_id="job-1", attempt=1,
                                       started_at_ms=int((T0 + timedelta(minutes=2)).timestamp() * 1000),
                                       stopped_at_ms=int((T0 + timedelta(minutes=62)).timestamp() * 1000),
                                       exit_code=0, status_reason=None)])
    settled = settlement.settle_run("t-1", "gpu", collect=True)
    assert settled.cost is not None and settled.cost == settlement.ledger.cost("t-1#gpu")
    assert settled.cost["terminal_status"] == "SUCCEEDED" and settled.cost["usage"]["instance_type"] == "p5.48xlarge"
    assert float(settled.cost["cost"]["total_usd"]) > 0
    assert settlement.ledger.queries == 1 and settlement.trials.reads == 1  # type: ignore[attr-defined]


def test_a_settlement_that_lost_the_race_returns_the_cost_that_won(settlement: RunSettlement) -> None:
    settlement.record([_transition("SUBMITTED", 0), _transition("FAILED", 3, exit_code=1)])
    winner = {"cost": {"total_usd": "9.99"}, "facts": 99}
    settlement.ledger.put_cost("t-1#gpu", winner, facts=99)  # a fold over more facts, stored by another delivery
    assert settlement.settle_run("t-1", "gpu").cost == winner


def test_only_runs_of_trials_the_plane_started_are_recorded(settlement: RunSettlement) -> None:
    from lambdas.services.run_settlement import ForeignEvent

    settlement.trials.create({"trial_id": "t-2", "status": "PENDING_APPROVAL", "tracks": {"gpu": {}, "trn2": {}}})
    with pytest.raises(ForeignEvent, match="no trial 'nope'"):
        settlement.check_started("nope", "gpu")
    with pytest.raises(ForeignEvent, match=r"trial t-1 has no run 'trn2' \(its runs: gpu\)"):
        settlement.check_started("t-1", "trn2")
    with pytest.raises(ForeignEvent, match="never started"):
        settlement.check_started("t-2", "gpu-fallback")
    reads = settlement.trials.reads  # type: ignore[attr-defined]
    settlement.check_started("t-1", "gpu")
    settlement.check_started("t-1", "gpu")  # known now: no second read
    assert settlement.trials.reads == reads + 1  # type: ignore[attr-defined]
