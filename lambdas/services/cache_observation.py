"""Compile-cache hits, misses and failed compilations, taken from what each attempt reported it did."""

from __future__ import annotations

from collections import Counter

from lambdas.domain.ledger import LedgerEntry, SummaryFact, facts_of, run_key
from lambdas.services.ports import CacheRegistry, Ledger


def observe_run(ledger: Ledger, registry: CacheRegistry, trial_id: str, run: str,
                entries: list[LedgerEntry] | None = None) -> Counter[str]:
    """Count each attempt's reported outcome in the registry once; returns the outcomes newly counted by this call.
    ``entries`` are the run's ledger entries when the caller has just read them (else they are read here)."""
    counted: Counter[str] = Counter()
    for summary in facts_of(entries if entries is not None else ledger.entries(run_key(trial_id, run)), SummaryFact):
        compile_info = summary.compile or {}
        key = compile_info.get("cache_key")
        outcome = compile_info.get("cache")
        if compile_info.get("status") == "failed" or compile_info.get("failed"):
            outcome = "failed"
        if not key or outcome not in ("hit", "miss", "failed"):
            continue
        at = summary.ended_at or summary.started_at or "1970-01-01T00:00:00Z"
        reason = compile_info.get("error") or compile_info.get("reason")
        observation = f"{trial_id}#{run}#a{summary.attempt:03d}"
        if registry.observe(key, observation, outcome, float(compile_info.get("seconds") or 0.0), at, reason=reason):
            counted[outcome] += 1
    return counted
