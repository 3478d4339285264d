"""The stage settings the API function gets from the control stack, for tests that run the handler directly."""

from __future__ import annotations

import json

from infra.config import batch_name

STAGE = "test"
INSTANCE_TYPES = {"gpu": ("p5.48xlarge", "g6e.48xlarge"), "trn2": ("trn2.48xlarge",)}


def job_targets(stage: str = STAGE) -> dict[str, dict[str, dict[str, str | None]]]:
    return {track: {t: {"queue": batch_name(stage, track, t), "single_node": batch_name(stage, track, t, "single"),  # type: ignore[arg-type]
                        "multi_node": None} for t in types}
            for track, types in INSTANCE_TYPES.items()}


API_STAGE_ENV = {
    "JOB_TARGETS": json.dumps(job_targets()),
    "DATA_BUCKETS": "example-datasets",
    "ATTEMPT_TIMEOUT_S": "86400",
}
