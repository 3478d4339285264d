"""What an object written to S3 means to the control plane."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from lambdas.domain.ledger import LedgerEntry, summary_entry
from lambdas.services.ports import CacheRegistry
from lambdas.services.run_settlement import ATTEMPT_SUMMARY, CHECKPOINT_MANIFEST, RunSettlement, checkpoint_fact

CACHE_OBJECT = re.compile(r"^neuron/(?P<model>[^/]+)/(?P<compiler>[^/]+)/(?P<key>[0-9a-f]{64})/(?P<name>.+)$")


@dataclass(frozen=True)
class Recorded:
    kind: Literal["checkpoint", "summary"]
    trial_id: str
    run: str
    added: bool  # the fact was new to the ledger
    entries: list[LedgerEntry]  # the run's ledger entries as settling read them


def record_artifact(settlement: RunSettlement, key: str) -> Recorded | None:
    """Record a checkpoint manifest or an attempt summary; re-close the run's cost if it has already ended."""
    if (match := CHECKPOINT_MANIFEST.match(key)) is not None:
        manifest = settlement.artifacts.get_json(key)
        fact = checkpoint_fact(key, manifest, settlement.artifacts.uri(key)) if isinstance(manifest, dict) else None
        kind: Literal["checkpoint", "summary"] = "checkpoint"
    elif (match := ATTEMPT_SUMMARY.match(key)) is not None:
        summary = settlement.artifacts.get_json(key)
        fact = (
            summary_entry(match["trial"], match["run"], int(match["attempt"]), summary)
            if isinstance(summary, dict)
            else None
        )
        kind = "summary"
    else:
        return None
    if fact is None:
        return None
    added = settlement.ledger.append(fact)
    # Settle even when the fact was already there: a delivery retried after a crash between appending and
    # settling must still leave the run's cost current. Settling is a fold, so repeating it changes nothing.
    settled = settlement.settle_run(match["trial"], match["run"])
    return Recorded(kind, match["trial"], match["run"], added, settled.entries)


def record_cache_object(registry: CacheRegistry, key: str, size: int, at: str) -> str | None:
    match = CACHE_OBJECT.match(key)
    if match is None:
        return None
    cache_key = match["key"]
    registry.ensure(
        cache_key,
        prefix=f"neuron/{match['model']}/{match['compiler']}/{cache_key}/",
        model_slug=match["model"],
        compiler_version=match["compiler"],
        components=None,
        at=at,
    )
    registry.record_object(cache_key, match["name"], size, at)
    return cache_key
