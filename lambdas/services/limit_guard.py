"""Holding running trials to their limits as their facts arrive.

After each Batch job event and each object a trial's job writes, the ledger's view of the trial is checked against
the limits frozen on its item at submission (``lambdas.domain.money.run_limits``): the run's spend projected to the
fact's time is kept on the trial item (one attribute per run, so the trial's spend is their sum), writes are
counted on it once per object version (a redelivered event counts nothing), and a run's failed attempts are counted
from its ledger. A trial over a limit is stopped through the cancel path (STOPPING, its execution stopped, which
terminates its Batch jobs), and the limit is recorded on the item as ``stopped_by`` for the status and the report.
A stop that did not finish is finished by the next event of the trial (a redelivery included): nothing here
remembers a trial as stopped.

Each Lambda environment remembers the spend it last wrote per run and writes again only when it changed, so most
events of a run that is not billing (SUBMITTED, RUNNABLE) cost no write. Two environments may project the same run
at different event times; the last write wins, and the next event of the run writes the projection of the whole
ledger again.
"""

from __future__ import annotations

from datetime import UTC, datetime

from lambdas.domain.money import ledger as L
from lambdas.domain.money.cost import compute_run_cost
from lambdas.domain.money.run_limits import (
    SPEND_ATTRIBUTE,
    WRITTEN_BYTES,
    WRITTEN_OBJECTS,
    LimitCrossed,
    RunLimits,
    crossed,
)
from lambdas.domain.trial.trial_record import TrialRecord
from lambdas.domain.vocabulary import BATCH_TERMINAL
from lambdas.services.ports import Workflow
from lambdas.services.run_settlement import RunSettlement
from lambdas.services.trial_status import Stopper, finish_stop, request_stop

RUNNING = ("SUBMITTING", "SUBMITTED", "STOPPING")  # the statuses a limit can stop (or finish stopping) a trial from


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def failed_retries(entries: list[L.LedgerEntry]) -> int:
    """Failed attempts Batch lists for the run's jobs (an attempt is listed once it has ended)."""
    return sum(1 for f in L.facts_of(entries, L.AttemptFact) if f.exit_code != 0)


class LimitGuard:
    def __init__(self, settlement: RunSettlement, workflow: Workflow | None) -> None:
        self.settlement, self.workflow = settlement, workflow
        self._spend: dict[tuple[str, str], str] = {}

    def _limits(self, trial_id: str) -> tuple[TrialRecord, RunLimits] | None:
        """The trial record as this environment read it, and the limits frozen on it at submission."""
        record = self.settlement.trial(trial_id)
        if record is None or record.run_limits is None:
            return None
        return record, record.run_limits

    def after_run_facts(self, trial_id: str, run: str, entries: list[L.LedgerEntry],
                        at: datetime) -> LimitCrossed | None:
        """Project the run's spend to ``at`` from its ledger ``entries`` and check the trial's limits; the limit
        crossed when this call stopped the trial (None otherwise). A job of the run that has just ended may be the
        last thing a pending stop waits for: the stop is then finished."""
        self._finish_pending_stop(trial_id, entries, at)
        found = self._limits(trial_id)
        if found is None:
            return None
        record, limits = found
        fold = self.settlement.fold(trial_id, run, entries, record, open_until=at)
        current = record
        if limits.max_usd is not None:
            usd = compute_run_cost(fold.usage, self.settlement.prices).total_usd
            text = str(usd)
            if usd > 0 and self._spend.get((trial_id, run)) != text:
                updated = self.settlement.trials.tally(trial_id,
                                                       set_fields={SPEND_ATTRIBUTE.format(run=run): text})
                self._spend[(trial_id, run)] = text
                current = updated or record
        retries = failed_retries(entries) if fold.terminal_status is None else None
        hit = crossed(limits, use=current.use, at=_iso(at), run=run, failed_retries=retries)
        return hit if hit is not None and self.stop(current, hit, at) else None

    def after_write(self, trial_id: str, size: int, at: datetime, *, fact: str) -> LimitCrossed | None:
        """Count one object a job of the trial wrote (``fact``: the object's bucket, key and version, counted once
        however often its event is delivered), and check the trial's limits; the limit crossed when this call
        stopped the trial (None otherwise)."""
        found = self._limits(trial_id)
        if found is None or not found[1].counts_writes:
            return None
        record, limits = found
        updated = self.settlement.trials.tally_once(
            trial_id, fact, {WRITTEN_BYTES: max(0, int(size)), WRITTEN_OBJECTS: 1}, now_s=int(at.timestamp()))
        if updated is None:  # counted before: the stop it may have crossed is finished from the trial's state
            updated = self.settlement.trials.get(trial_id)
        current = updated or record
        hit = crossed(limits, use=current.use, at=_iso(at))
        return hit if hit is not None and self.stop(current, hit, at) else None

    def _stopper(self) -> Stopper | None:
        if self.workflow is None:
            return None
        # The event functions finish a stop from the ledger; terminating a job that missed its execution's stop is
        # the reconciler's (it alone may call TerminateJob).
        return Stopper(self.settlement.trials, self.workflow, self.settlement.ledger)

    def _finish_pending_stop(self, trial_id: str, entries: list[L.LedgerEntry], at: datetime) -> None:
        stopper = self._stopper()
        latest = max(L.facts_of(entries, L.TransitionFact), key=lambda t: t.at, default=None)
        if stopper is None or latest is None or latest.status not in BATCH_TERMINAL:
            return
        current = self.settlement.trials.get(trial_id)
        if current is not None and current.status == "STOPPING":
            finish_stop(current, stopper, now=_iso(at))

    def stop(self, record: TrialRecord, hit: LimitCrossed, at: datetime) -> bool:
        """Stop the trial through the cancel path, recording the limit, or finish a stop already recorded; False
        when it was no longer running (a cancel, another limit or the workflow's end came first)."""
        stopper = self._stopper()
        if stopper is None or record.status not in RUNNING:
            return False
        result = request_stop(record, stopper, cause=hit.message, now=_iso(at), stopped_by=hit.model_dump(mode="json"))
        return result.changed
