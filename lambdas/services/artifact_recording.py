"""What an object written to S3 means to the control plane."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from lambdas.domain.cache.cache_entries import ENTRY_MARKER, QUARANTINE, EntryRejected, entry_name
from lambdas.domain.evidence.artifacts import ATTEMPT_SUMMARY, CHECKPOINT_MANIFEST, ArtifactRejected
from lambdas.domain.money.ledger import LedgerEntry
from lambdas.services.ports import CacheRegistry
from lambdas.services.run_settlement import RunSettlement

CACHE_OBJECT = re.compile(r"^neuron/(?P<model>[^/]+)/(?P<compiler>[^/]+)/(?P<key>[0-9a-f]{64})/(?P<name>.+)$")


@dataclass(frozen=True)
class Recorded:
    kind: Literal["checkpoint", "summary"]
    trial_id: str
    run: str
    added: bool  # the fact was new to the ledger
    entries: list[LedgerEntry]  # the run's ledger entries as settling read them


def record_artifact(settlement: RunSettlement, key: str) -> Recorded | None:
    """Record a checkpoint manifest or an attempt summary; re-close the run's cost if it has already ended. Raises
    ArtifactRejected for a malformed or forged object, ForeignEvent for one under a trial or run the plane did not
    start: neither becomes a ledger fact."""
    match = CHECKPOINT_MANIFEST.match(key) or ATTEMPT_SUMMARY.match(key)
    if match is None:
        return None
    kind: Literal["checkpoint", "summary"] = "checkpoint" if CHECKPOINT_MANIFEST.match(key) else "summary"
    settlement.check_started(match["trial"], match["run"])
    sizes = settlement.artifacts.sizes(key.rsplit("/", 1)[0] + "/") if kind == "checkpoint" else None
    fact = settlement.artifact_fact(key, sizes)
    if fact is None:
        return None
    added = settlement.ledger.append(fact)
    # Settle even when the fact was already there: a delivery retried after a crash between appending and
    # settling must still leave the run's cost current. Settling is a fold, so repeating it changes nothing.
    settled = settlement.settle_run(match["trial"], match["run"])
    return Recorded(kind, match["trial"], match["run"], added, settled.entries)


def record_cache_object(registry: CacheRegistry, key: str, size: int, at: str) -> str | None:
    """Record a compile-cache object in its entry's registry item; ArtifactRejected for a name that would leave the
    entry where a reader maps it to a file (S3 keys are flat: ``..`` is just characters to S3)."""
    match = CACHE_OBJECT.match(key)
    if match is None:
        return None
    try:
        entry_name(match["name"])
    except EntryRejected as exc:
        raise ArtifactRejected(key, str(exc)) from None
    cache_key = match["key"]
    registry.ensure(
        cache_key,
        prefix=f"neuron/{match['model']}/{match['compiler']}/{cache_key}/",
        model_slug=match["model"],
        compiler_version=match["compiler"],
        components=None,
        at=at,
    )
    if match["name"] != ENTRY_MARKER and not match["name"].startswith(f"{QUARANTINE}/"):
        registry.record_object(cache_key, match["name"], size, at)  # artefacts only: not the marker or failures
    return cache_key
