"""What an object written to S3 means to the control plane."""

from __future__ import annotations

import re
from typing import Any

from lambdas.adapters.run_settlement import ATTEMPT_SUMMARY, CHECKPOINT_MANIFEST, RunSettlement, checkpoint_fact
from lambdas.domain.ledger import summary_entry

CACHE_OBJECT = re.compile(r"^neuron/(?P<model>[^/]+)/(?P<compiler>[^/]+)/(?P<key>[0-9a-f]{64})/(?P<name>.+)$")


def record_artifact(settlement: RunSettlement, key: str) -> tuple[str, str, str, bool] | None:
    """Record a checkpoint manifest or an attempt summary; re-close the run's cost if it has already ended."""
    if (match := CHECKPOINT_MANIFEST.match(key)) is not None:
        manifest = settlement.artifacts.get_json(key)
        fact = checkpoint_fact(key, manifest, settlement.artifacts.uri(key)) if isinstance(manifest, dict) else None
        kind = "checkpoint"
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
    settlement.settle(match["trial"], match["run"])
    return kind, match["trial"], match["run"], added


def record_cache_object(registry: Any, key: str, size: int, at: str) -> str | None:
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
