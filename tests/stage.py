"""The stage settings the API function gets from the control stack, for tests that run the handler directly."""

from __future__ import annotations

import json
from typing import Any

from infra.config import batch_name

STAGE = "test"
INSTANCE_TYPES = {"gpu": ("p5.48xlarge", "g6e.48xlarge"), "trn2": ("trn2.48xlarge",)}


def job_targets(stage: str = STAGE) -> dict[str, dict[str, dict[str, Any]]]:
    """Like prod: Trainium2 pinned to one zone (multi-node definitions for 2 and 4 nodes), the GPU track on Spot."""
    return {track: {t: {"queue": batch_name(stage, track, t), "single_node": batch_name(stage, track, t, "single"),  # type: ignore[arg-type]
                        "multi_node": ({str(n): batch_name(stage, track, t, f"multi-{n}") for n in (2, 4)}  # type: ignore[arg-type]
                                       if track == "trn2" else {})} for t in types}
            for track, types in INSTANCE_TYPES.items()}


API_STAGE_ENV = {
    "JOB_TARGETS": json.dumps(job_targets()),
    "DATA_BUCKETS": "example-datasets",
    "ATTEMPT_TIMEOUT_S": "86400",
}
