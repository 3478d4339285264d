"""The stage settings the API function gets from the control stack, for tests that run the handler directly."""

from __future__ import annotations

import json
from typing import Any

from infra.config import batch_name

STAGE = "test"
INSTANCE_TYPES = {"gpu": ("p5.48xlarge", "g6e.48xlarge"), "trn2": ("trn2.48xlarge",)}


def job_targets(stage: str = STAGE) -> dict[str, dict[str, dict[str, Any]]]:  # the JOB_TARGETS setting's JSON
    """Like prod: Trainium2 pinned to one zone (multi-node definitions for 2 and 4 nodes), the GPU track on Spot."""
    return {track: {t: {"queue": batch_name(stage, track, t), "single_node": batch_name(stage, track, t, "single"),  # type: ignore[arg-type]
                        "multi_node": ({str(n): batch_name(stage, track, t, f"multi-{n}") for n in (2, 4)}  # type: ignore[arg-type]
                                       if track == "trn2" else {})} for t in types}
            for track, types in INSTANCE_TYPES.items()}


ACCOUNT = "123456789012"  # moto's default account, the API's own
# Two teams in one account: team-nlp's members are the test users (tests/events/api_gateway_rest.json, the client
# tests' API Gateway stand-in) and any role
# named dualtrack-team-nlp-submitter; approvers by the dualtrack-<team>-approver convention.
GOVERNANCE: dict[str, Any] = {
    "platform_admins": [f"arn:aws:iam::{ACCOUNT}:role/platform-admin"],
    "member_roles": ["dualtrack-{team}-submitter"],
    "approver_roles": ["dualtrack-{team}-approver"],
    "teams": {
        "team-nlp": {"members": [f"arn:aws:iam::{ACCOUNT}:user/model-team", f"arn:aws:iam::{ACCOUNT}:user/tester"]},
        "team-vision": {},
        "platform": {},
    },
}


def principal(role: str) -> str:
    """The userArn API Gateway reports for a session of ``role`` in the API's account."""
    return f"arn:aws:sts::{ACCOUNT}:assumed-role/{role}/session-1"


API_STAGE_ENV = {
    "GOVERNANCE": json.dumps(GOVERNANCE),
    "MAX_ATTEMPTS": "2",
    "JOB_TARGETS": json.dumps(job_targets()),
    "DATA_BUCKETS": "example-datasets",
    "ATTEMPT_TIMEOUT_S": "86400",
}
