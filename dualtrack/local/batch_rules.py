"""What AWS Batch refuses, as the local stage checks it: when it creates resources from the templates
(``aws/template.py``) and on requests made to moto (``aws/moto_shims.py``)."""

from __future__ import annotations

from collections.abc import Sequence

from dualtrack.local.json_shapes import integer
from lambdas.domain.json_types import JsonMapping

MIN_ATTEMPT_DURATION_S = 60


class BatchClientError(ValueError):
    """A request AWS Batch refuses with ``ClientException`` (raised where the local runtime makes the request)."""


def timeout_problem(timeout: JsonMapping | None) -> str | None:
    """Why Batch refuses this ``timeout`` (SubmitJob or RegisterJobDefinition), or None.

    https://docs.aws.amazon.com/batch/latest/APIReference/API_JobTimeout.html: "The minimum value for the timeout is
    60 seconds." The message is ours: the service's exact wording is not documented.
    """
    if not timeout or timeout.get("attemptDurationSeconds") is None:
        return None
    seconds = integer(timeout["attemptDurationSeconds"])
    if seconds < MIN_ATTEMPT_DURATION_S:
        return (f"timeout.attemptDurationSeconds is {seconds}; the minimum value for the timeout is "
                f"{MIN_ATTEMPT_DURATION_S} seconds")
    return None


def time_limit_actions_problem(actions: Sequence[JsonMapping] | None) -> str | None:
    """Why CreateJobQueue refuses these ``jobStateTimeLimitActions``, or None.

    https://docs.aws.amazon.com/batch/latest/APIReference/API_JobStateTimeLimitAction.html: state RUNNABLE,
    action CANCEL (ECS compute environments), maxTimeSeconds 600..86400, reason required.
    """
    for index, action in enumerate(actions or []):
        where = f"jobStateTimeLimitActions[{index}]"
        missing = [k for k in ("reason", "state", "action", "maxTimeSeconds") if action.get(k) in (None, "")]
        if missing:
            return f"{where}: {', '.join(missing)} must be provided"
        if action["state"] != "RUNNABLE":
            return f"{where}.state {action['state']!r} must be RUNNABLE"
        if action["action"] != "CANCEL":
            return f"{where}.action {action['action']!r} must be CANCEL for an ECS compute environment"
        if not 600 <= integer(action["maxTimeSeconds"]) <= 86400:
            return f"{where}.maxTimeSeconds {action['maxTimeSeconds']} must be between 600 and 86400"
    return None


