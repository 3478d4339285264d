"""Where the workflow sends each run: per track and instance type, the job queue and job definitions (by name).

The CDK app builds these from the stage's Batch resources and serializes them into the API function's
``JOB_TARGETS`` setting; the function parses the same type back. One model on both sides, so a renamed field is a
type error in both, not a key that silently goes missing.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from lambdas.domain.vocabulary import COMPILE_QUEUE_SUFFIX


class JobTarget(BaseModel):
    """What the workflow submits for one instance type: queue and job definition names (not ARNs)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    queue: str = Field(min_length=1, description="the job queue's name")
    single_node: str = Field(min_length=1, description="the single-node job definition's name")
    multi_node: dict[int, str] = Field(
        default_factory=dict, description="node count -> multi-node job definition name (empty: no multi-node here)")
    compile_queue: str | None = Field(
        default=None, pattern=f"{COMPILE_QUEUE_SUFFIX}$",
        description="the warm-up compile stage's queue (same job definitions, same hosts; its name ends with "
        f"{COMPILE_QUEUE_SUFFIX}, which the compile quota counts)")

    def json_value(self) -> dict[str, object]:
        """The setting's JSON: node counts as strings, sorted; no compile queue where the stage has none."""
        out: dict[str, object] = {"queue": self.queue, "single_node": self.single_node,
                                  "multi_node": {str(n): name for n, name in sorted(self.multi_node.items())}}
        if self.compile_queue:
            out["compile_queue"] = self.compile_queue
        return out


JobTargets = dict[str, dict[str, JobTarget]]  # track -> instance type -> target
JOB_TARGETS = TypeAdapter(JobTargets, config=ConfigDict(defer_build=True))


def parse_job_targets(value: object) -> JobTargets:
    """The ``JOB_TARGETS`` setting, decoded from JSON, as models."""
    return JOB_TARGETS.validate_python(value)


def job_targets_json(targets: Mapping[str, Mapping[str, JobTarget]]) -> dict[str, dict[str, dict[str, object]]]:
    return {track: {t: target.json_value() for t, target in sorted(by_type.items())}
            for track, by_type in sorted(targets.items())}
