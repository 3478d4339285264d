"""Holding running trials to their limits as their facts arrive.

After each Batch job event and each object a trial's job writes, the ledger's view of the trial is checked against
the limits frozen on its item at submission (``lambdas.domain.run_limits``): the run's spend projected to the
fact's time is kept on the trial item (one attribute per run, so the trial's spend is their sum), writes are
counted on it, and a run's failed attempts are counted from its ledger. A trial over a limit is stopped through
the cancel path (its execution stopped, which terminates its Batch jobs), and the limit is recorded on the item as
``stopped_by`` for the status and the report.

Each Lambda environment remembers the spend it last wrote per run and writes again only when it changed, so most
events of a run that is not billing (SUBMITTED, RUNNABLE) cost no write. Two environments may project the same run
at different event times; the last write wins, and the next event of the run writes the projection of the whole
ledger again.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from lambdas.domain import ledger as L
from lambdas.domain.cost import compute_run_cost
from lambdas.domain.run_limits import (
    SPEND_ATTRIBUTE,
    WRITTEN_BYTES,
    WRITTEN_OBJECTS,
    LimitCrossed,
    RunLimits,
    crossed,
)
from lambdas.services.ports import Workflow
from lambdas.services.run_settlement import RunSettlement
from lambdas.services.trial_status import stop_trial

RUNNING = ("SUBMITTING", "SUBMITTED")  # the statuses a limit can stop a trial from


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def failed_retries(entries: list[L.LedgerEntry]) -> int:
    """Failed attempts Batch lists for the run's jobs (an attempt is listed once it has ended)."""
    return sum(1 for f in L.facts_of(entries, L.AttemptFact) if f.exit_code != 0)


class LimitGuard:
    def __init__(self, settlement: RunSettlement, workflow: Workflow | None) -> None:
        self.settlement, self.workflow = settlement, workflow
        self._spend: dict[tuple[str, str], str] = {}
        self._stopped: set[str] = set()  # trials this environment has stopped (or found stopped)
        self._parsed: dict[str, RunLimits] = {}  # limits are frozen at submission: parse them once

    def _limits(self, trial_id: str) -> tuple[dict[str, Any], RunLimits] | None:
        """The trial item as this environment read it, and its frozen limits (parsed once per trial)."""
        item = self.settlement.trial(trial_id)
        raw = item.get("run_limits")
        if not raw:
            return None
        if trial_id not in self._parsed:
            self._parsed[trial_id] = RunLimits.model_validate(raw)
        return item, self._parsed[trial_id]

    def after_run_facts(self, trial_id: str, run: str, entries: list[L.LedgerEntry],
                        at: datetime) -> LimitCrossed | None:
        """Project the run's spend to ``at`` from its ledger ``entries`` and check the trial's limits; the limit
        crossed when this call stopped the trial (None otherwise)."""
        found = self._limits(trial_id)
        if found is None:
            return None
        item, limits = found
        fold = self.settlement.fold(trial_id, run, entries, item, open_until=at)
        current = item
        if limits.max_usd is not None:
            usd = compute_run_cost(fold.usage, self.settlement.prices).total_usd
            text = str(usd)
            if usd > 0 and self._spend.get((trial_id, run)) != text:
                updated = self.settlement.trials.tally(trial_id,
                                                       set_fields={SPEND_ATTRIBUTE.format(run=run): text})
                self._spend[(trial_id, run)] = text
                current = updated or item
        retries = failed_retries(entries) if fold.terminal_status is None else None
        hit = crossed(limits, item=current, at=_iso(at), run=run, failed_retries=retries)
        return hit if hit is not None and self.stop(current, hit, at) else None

    def after_write(self, trial_id: str, size: int, at: datetime) -> LimitCrossed | None:
        """Count one object a job of the trial wrote, and check the trial's limits; the limit crossed when this call
        stopped the trial (None otherwise)."""
        found = self._limits(trial_id)
        if found is None or not found[1].counts_writes:
            return None
        item, limits = found
        updated = self.settlement.trials.tally(trial_id, add={WRITTEN_BYTES: max(0, int(size)), WRITTEN_OBJECTS: 1})
        hit = crossed(limits, item=updated or item, at=_iso(at))
        return hit if hit is not None and self.stop(updated or item, hit, at) else None

    def stop(self, item: dict[str, Any], hit: LimitCrossed, at: datetime) -> bool:
        """Stop the trial through the cancel path, recording the limit; False when it was no longer running (a
        cancel, another limit or the workflow's end came first)."""
        trial_id = item["trial_id"]
        if self.workflow is None or trial_id in self._stopped or item.get("status") not in RUNNING:
            return False
        self._stopped.add(trial_id)
        result = stop_trial(item, trials=self.settlement.trials, workflow=self.workflow, statuses=RUNNING,
                            cause=hit.message, now=_iso(at), stopped_by=hit.model_dump(mode="json"))
        return bool(result["changed"])
