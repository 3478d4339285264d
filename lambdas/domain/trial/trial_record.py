"""The stored trial: what the plane knows of a trial after its submission, as one typed record.

The trials table holds one item per trial. Its schema is versioned (``schema_version``): an item written before the
field existed is version 1 and is read through :func:`migrate`, which derives what version 2 adds, so code above the
adapter sees one shape. Counters written by atomic ADD updates (``spend_usd#<run>``, ``written_bytes``, ...) are
flat attributes in the item and typed fields here; :meth:`TrialRecord.from_item` and :meth:`TrialRecord.to_item`
are the only places that know the item's layout.

Version 2 adds ``runs``: per run of the trial, where its jobs go (queue, job definition, nodes) and the instance type
it was submitted for. The cost of a run is priced from that instance type; what Batch reports is checked against it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from lambdas.domain.json_types import JsonObject, JsonValue
from lambdas.domain.money.booking import Booking
from lambdas.domain.money.run_limits import (
    SPEND_ATTRIBUTE,
    WRITTEN_BYTES,
    WRITTEN_OBJECTS,
    LimitCrossed,
    RunLimits,
    TrialUse,
)
from lambdas.domain.vocabulary import (
    COMPILE_RUN,
    COMPILE_TARGET,
    FALLBACK_RUN,
    RUNS,
    TrialStatus,
    scaling_nodes,
    track_of,
)

RECORD_VERSION = 2
SPEND_PREFIX = SPEND_ATTRIBUTE.split("{")[0]  # "spend_usd#"
REFUSED_CLAIMS = "cache_claims_refused"  # the count of the trial's runs' refused compile-cache claims
# The execution input's ``jobs`` names each target by what the workflow submits: a track, ``fallback`` (the GPU
# fallback) or ``compile`` (the warm-up compile stage); this is the run each one is.
RUN_OF_TARGET = {"fallback": FALLBACK_RUN, COMPILE_TARGET: COMPILE_RUN}


class _Stored(BaseModel):
    # Items come back from DynamoDB as plain JSON (numbers as int/float): lax parsing, unknown attributes ignored.
    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)


class JobPlacement(_Stored):
    """Where the workflow submits one target's job: its queue and job definition, and nodes for a multi-node job."""

    queue: str
    definition: str
    nodes: int | None = None


class RunTarget(_Stored):
    """A run's resolved target: its placement and the instance type its jobs were submitted for."""

    queue: str
    definition: str
    nodes: int = 1
    instance_type: str | None = Field(default=None, description="None only for items whose tracks named none")


class ScalingRun(_Stored):
    """One scaling run the workflow's Map state submits: the track trained at another node count."""

    run: str
    track: str
    run_dir: str
    job: JobPlacement

    def payload(self) -> JsonObject:
        return self.model_dump(mode="json", exclude={"job"}) | {"job": self.job.model_dump(mode="json",
                                                                                            exclude_none=True)}


class ExecutionInput(_Stored):
    """The workflow's input, kept on the trial so a start cut short (or an approval) starts what was checked."""

    trial_id: str
    spec_uri: str
    tracks: list[str]
    run_dirs: dict[str, str]
    jobs: dict[str, JobPlacement] = Field(default_factory=dict)
    scaling: list[ScalingRun] = Field(default_factory=list)
    attempt_timeout_s: int
    compile_timeout_s: int

    def payload(self) -> JsonObject:
        """The input as StartExecution takes it (a multi-node target carries ``nodes``, a single-node one not;
        ``scaling`` is always a list, empty without scaling runs, for the workflow's Map state)."""
        return self.model_dump(mode="json", exclude={"jobs", "scaling"}) | {
            "jobs": {target: job.model_dump(mode="json", exclude_none=True) for target, job in self.jobs.items()},
            "scaling": [item.payload() for item in self.scaling]}


class TriageRecord(_Stored):
    route: str
    scenario: str
    scores: dict[str, int]
    conclusion: str
    reasons: list[str]
    risks: list[str]


class Approval(_Stored):
    status: Literal["PENDING", "APPROVED", "REJECTED"]
    reasons: list[str] = Field(default_factory=list)
    requested_by: str | None = None
    requested_at: str | None = None
    decided_by: str | None = None
    decided_as: str | None = None
    decided_at: str | None = None
    comment: str | None = None


class Follows(_Stored):
    """The team's earlier trial of the same model this one follows, and what separates their compile-cache keys."""

    trial_id: str
    same_key: bool
    change_classes: list[str]
    components: list[str]
    summary: str


class TrialRecord(_Stored):
    schema_version: int = RECORD_VERSION
    trial_id: str
    status: TrialStatus
    team: str | None = None
    model_id: str | None = None
    name: str | None = None
    owner: str | None = None
    submitted_by: str | None = None
    submitted_as: str | None = None
    spec_hash: str | None = None
    spec_uri: str | None = None
    created_at: str | None = None
    updated_at: str | None = None
    tracks: dict[str, JsonObject] = Field(default_factory=dict, description="each track's config as submitted")
    runs: dict[str, RunTarget] = Field(default_factory=dict)
    max_steps: int | None = None
    triage: TriageRecord | None = None
    worst_case_usd: dict[str, str] = Field(default_factory=dict)
    queues: dict[str, str] = Field(default_factory=dict)
    booking: Booking | None = None
    execution_input: ExecutionInput | None = None
    execution_arn: str | None = None
    cache_components: JsonObject | None = None
    cache_key: str | None = None
    cache_prefix: str | None = None
    cache_writer: str | None = None
    follows: Follows | None = None
    run_limits: RunLimits | None = None
    approval: Approval | None = None
    status_cause: str | None = None
    stopped_by: LimitCrossed | None = None
    cancelled_by: str | None = None
    stop_requested_at: str | None = None
    stop_requested_from: str | None = None  # the status a stop was requested in (SUBMITTING: a start may be in flight)
    stop_checked_at: str | None = None
    stop_pending: list[str] | None = None
    stopped_at: str | None = None
    total_usd: str | None = None
    spend_usd: dict[str, str] = Field(default_factory=dict, description="per run: its spend the limit guard saw")
    written_bytes: int = 0
    written_objects: int = 0
    cache_claims_refused: int = 0

    @property
    def started(self) -> bool:
        return self.execution_arn is not None

    @property
    def stopped_after_start(self) -> bool:
        """Cancelled (by a person or a limit) after its execution started: its workflow never reaches its report
        step, so the report is written once its runs have settled."""
        return self.status == "CANCELLED" and self.started

    def instance_type(self, run: str) -> str | None:
        """The instance type ``run``'s jobs were submitted for."""
        target = self.runs.get(run)
        if target is not None and target.instance_type:
            return target.instance_type
        declared = self.tracks.get(track_of(run)) or {}
        value = declared.get("instance_type")
        return value if isinstance(value, str) else None

    def run_names(self) -> list[str]:
        """Every run this trial may have: the fixed ones (``RUNS``), then the scaling runs it was placed with."""
        return [*RUNS, *sorted(run for run in self.runs if scaling_nodes(run) is not None)]

    def nodes(self, run: str) -> int:
        target = self.runs.get(run)
        if target is not None:
            return target.nodes
        value = (self.tracks.get(track_of(run)) or {}).get("nodes")
        return value if isinstance(value, int) and value >= 1 else 1

    @property
    def use(self) -> TrialUse:
        return TrialUse(spend_usd=self.spend_usd, written_bytes=self.written_bytes,
                        written_objects=self.written_objects)

    @classmethod
    def from_item(cls, item: Mapping[str, JsonValue]) -> TrialRecord:
        """The record a stored item holds, whatever version wrote it."""
        return cls.model_validate(migrate(dict(item)))

    def to_item(self) -> JsonObject:
        """The item to store: counters as the flat attributes their ADD updates write, no None values."""
        item = self.model_dump(mode="json", exclude_none=True, exclude={"spend_usd"})
        for run, usd in self.spend_usd.items():
            item[SPEND_ATTRIBUTE.format(run=run)] = usd
        return item


def runs_from(execution_input: Mapping[str, JsonValue], tracks: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
    """Version 1 items kept only the workflow's ``jobs`` (by target) and each track's config: each run's target
    with the instance type its track declared."""
    jobs = execution_input.get("jobs")
    runs: dict[str, JsonValue] = {}
    if not isinstance(jobs, dict):
        return runs
    for target, job in jobs.items():
        if not isinstance(job, dict):
            continue
        run = RUN_OF_TARGET.get(target, target)
        declared = tracks.get(track_of(run))
        instance_type = declared.get("instance_type") if isinstance(declared, dict) else None
        runs[run] = {**job, "nodes": job.get("nodes") or 1, "instance_type": instance_type}
    return runs


def migrate(item: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """Bring a stored item to the current version: flat ``spend_usd#<run>`` attributes become ``spend_usd``, and a
    version 1 item gets ``runs`` from its execution input and tracks."""
    spend = {name.removeprefix(SPEND_PREFIX): value for name, value in item.items() if name.startswith(SPEND_PREFIX)}
    out = {name: value for name, value in item.items() if not name.startswith(SPEND_PREFIX)}
    if spend:
        out["spend_usd"] = {run: str(value) for run, value in spend.items()}
    version = out.get("schema_version")
    if not isinstance(version, int) or version < 2:
        execution_input, tracks = out.get("execution_input"), out.get("tracks")
        if isinstance(execution_input, dict) and isinstance(tracks, dict) and "runs" not in out:
            out["runs"] = runs_from(execution_input, tracks)
        out["schema_version"] = RECORD_VERSION
    for counter in (WRITTEN_BYTES, WRITTEN_OBJECTS, REFUSED_CLAIMS):
        value = out.get(counter)
        if isinstance(value, float):
            out[counter] = int(value)
    return out
