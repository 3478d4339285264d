"""Compile-cache hits, misses and failed compilations, taken from what each attempt reported it did.

A summary is the job's own word, so it speaks only for the entry the plane resolved for its trial (the trial item's
``cache_key``, recorded by the resolve step), and only the run sent to compile that entry (``cache_writer``) marks
it ready or failed: another team's job cannot mark an entry ready (skipping the warm-up stage), fail it with a
message of its choosing, or join its ``hit_trials`` (moving the compile spend to shared). Any other claim is refused,
counted once on the claiming trial, and returned for the caller to log and count. A scaling run (``trn2-n1``) is
sent with no entry: its outcome for its own node count's key is left alone, and a claim on the trial's entry refused.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime

from lambdas.domain.cache.cache_entries import claim_refusal
from lambdas.domain.money.ledger import LedgerEntry, SummaryFact, facts_of, run_key
from lambdas.domain.trial.trial_record import TrialRecord
from lambdas.domain.vocabulary import scaling_nodes
from lambdas.services.ports import CacheRegistry, Ledger, Outcome, Trials

REFUSED_CLAIMS = "cache_claims_refused"  # the trial item's count of its runs' refused claims
COUNTED: dict[str, Outcome] = {"hit": "hit", "miss": "miss", "failed": "failed"}  # what an attempt may report


@dataclass(frozen=True)
class RefusedClaim:
    observation: str  # trial#run#aNNN
    claimed_key: str
    reason: str


@dataclass(frozen=True)
class Observed:
    counted: Counter[str] = field(default_factory=Counter)  # outcomes this call was first to count
    refused: list[RefusedClaim] = field(default_factory=list)  # claims this call was first to refuse


def observe_run(ledger: Ledger, registry: CacheRegistry, trials: Trials, trial_id: str, run: str,
                entries: list[LedgerEntry] | None = None, trial: TrialRecord | None = None) -> Observed:
    """Count each attempt's reported outcome in the registry once, or refuse it (see the module). ``entries`` are
    the run's ledger entries and ``trial`` its trial item when the caller has just read them (else read here)."""
    counted: Counter[str] = Counter()
    refused: list[RefusedClaim] = []
    item, read = trial, False
    for summary in facts_of(entries if entries is not None else ledger.entries(run_key(trial_id, run)), SummaryFact):
        use = summary.compile_use()
        key, outcome = use.cache_key, COUNTED.get(use.outcome or "")
        if key is None or outcome is None:
            continue
        at = summary.ended_at or summary.started_at or "1970-01-01T00:00:00Z"
        observation = f"{trial_id}#{run}#a{summary.attempt:03d}"
        if item is None or not (item.cache_key or read):
            # A copy read before the resolve step wrote the entry would refuse every claim: read it (once) again.
            item, read = trials.get(trial_id), True
        resolved = item.cache_key if item else None
        if scaling_nodes(run) is not None and key != resolved:
            # A scaling run is sent with no entry (its node count's graphs are its own): what it reports of its own
            # key moves no registry entry, and is no claim on one. Claiming the trial's resolved entry is refused.
            continue
        refusal = claim_refusal(resolved, item.cache_writer if item else None, run, key, outcome)
        if refusal is not None:
            # Counted once per attempt, however often the summary is seen (its own event, the run's end).
            if trials.tally_once(trial_id, f"compile-cache-claim#{observation}", {REFUSED_CLAIMS: 1},
                                 now_s=int(datetime.now(UTC).timestamp())) is not None:
                refused.append(RefusedClaim(observation, key, refusal))
            continue
        if registry.observe(key, observation, outcome, use.seconds, at, reason=use.reason):
            counted[outcome] += 1
    return Observed(counted, refused)
