"""A run's cost as it stands: its ledger entries folded over the trial's declared layout, priced.

What the API reads for a trial's status. Recording facts and closing costs (``lambdas.services.run_settlement``)
builds on it; reading needs none of that, nor the models of what the trainer writes.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from lambdas.domain.money import ledger as L
from lambdas.domain.money.prices import PriceTable
from lambdas.domain.trial.trial_record import TrialRecord
from lambdas.services.ports import Ledger, Objects, Trials


class RunFolds:
    def __init__(self, ledger: Ledger, trials: Trials, artifacts: Objects, prices: PriceTable, region: str) -> None:
        self.ledger, self.trials, self.artifacts = ledger, trials, artifacts
        self.prices, self.region = prices, region
        # Trials whose runs are known to be the plane's, as read then: what the fold uses of an item (its tracks'
        # declared instance types and nodes) is frozen at submission, so the copy stays right.
        self._trials: dict[str, TrialRecord] = {}

    def entries(self, trial_id: str, run: str) -> list[L.LedgerEntry]:
        """The run's ledger entries (one read), for a caller that passes them on to ``outcome`` and ``settle_run``."""
        return self.ledger.entries(L.run_key(trial_id, run))

    def trial(self, trial_id: str) -> TrialRecord | None:
        """The trial record as this environment first read it (None when there is none)."""
        return self._trials.get(trial_id) or self.trials.get(trial_id)

    def fold(self, trial_id: str, run: str, entries: list[L.LedgerEntry] | None = None,
             trial: TrialRecord | None = None, open_until: datetime | None = None) -> L.RunFold:
        """The run's usage from its ledger entries (read here unless given) and the trial's declared layout; with
        ``open_until``, an open attempt is billed up to that time."""
        if trial is None:
            trial = self.trial(trial_id)
        if entries is None:
            entries = self.ledger.entries(L.run_key(trial_id, run))
        return L.fold_run(
            entries,
            trial_id=trial_id,
            run=run,
            instance_type=(trial.instance_type(run) if trial else None) or "unknown",
            nodes=trial.nodes(run) if trial else 1,
            region=self.region,
            storage_days=Decimal(30),
            open_until=open_until,
        )
