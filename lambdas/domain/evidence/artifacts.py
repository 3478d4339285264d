"""What the trainer writes that the plane reads back into its ledger: checkpoint manifests and attempt summaries.

A job role can write anywhere under its trial's prefix, so what an object says is checked before it becomes a
ledger fact: it must validate against the same models the domain uses (negative or absurd sizes and durations are
refused by their bounds), and it must describe the object it is, the trial, run, attempt or step its key names. A
refused object never enters the ledger, so one forged or malformed file cannot make a run's costing fail.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, TypeVar

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, model_validator

from lambdas.domain.evidence.run_summary import MAX_BYTES, MAX_SECONDS, RunSummary
from lambdas.domain.money.ledger import LedgerEntry, checkpoint_entry, summary_entry
from lambdas.domain.vocabulary import RUN_PATTERN

MAX_STEP = 10**9
_RUN = RUN_PATTERN  # every run, by its exact name (a scaling run's ``<track>-n<nodes>`` included)
CHECKPOINT_MANIFEST = re.compile(
    rf"^trials/(?P<trial>[^/]+)/(?P<run>{_RUN})/checkpoints/"
    r"step-(?P<step>\d+)/manifest\.json$"
)
# Any object a run's job writes (shards, manifests, summaries, logs): counted against the trial's write limits.
RUN_OBJECT = re.compile(rf"^trials/(?P<trial>[^/]+)/(?P<run>{_RUN})/.")
ATTEMPT_SUMMARY = re.compile(
    rf"^trials/(?P<trial>[^/]+)/(?P<run>{_RUN})/attempt-(?P<attempt>\d+)/"
    r"summary\.json$"
)


class ArtifactRejected(ValueError):
    """An object under a trial's prefix that does not describe what its key says, or breaks the models' bounds."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.key, self.reason = key, reason


class ShardRecord(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)

    name: Annotated[str, Field(min_length=1, max_length=512)]
    bytes: Annotated[int, Field(ge=0, le=MAX_BYTES)]


class CheckpointManifest(BaseModel):
    """The trainer's ``manifest.json`` (``containers/trainer/checkpoint.py``), the fields the plane reads."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)

    step: Annotated[int, Field(ge=0, le=MAX_STEP)]
    shards: Annotated[list[ShardRecord], Field(min_length=1, max_length=100_000,
                                               validation_alias=AliasChoices("shards", "files"))]
    bytes: Annotated[int, Field(ge=0, le=MAX_BYTES)] | None = None
    save_s: Annotated[float, Field(ge=0, le=MAX_SECONDS)] = 0.0

    @model_validator(mode="after")
    def _bytes_are_the_shards(self) -> CheckpointManifest:
        total = sum(s.bytes for s in self.shards)
        if self.bytes is not None and self.bytes != total:
            raise ValueError(f"bytes {self.bytes} is not the sum of its shards' bytes ({total})")
        return self


def _problem(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "<document>"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {first['msg']}{more}"


M = TypeVar("M", CheckpointManifest, RunSummary)


def _validated(key: str, document: Any, model: type[M], what: str) -> M:
    """``document`` as ``model``, or ArtifactRejected naming the first problem."""
    if not isinstance(document, dict):
        raise ArtifactRejected(key, f"a {what} must be a JSON object")
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        raise ArtifactRejected(key, _problem(exc)) from None


def artifact_fact(key: str, document: Any, uri: str, sizes: Mapping[str, int] | None = None) -> LedgerEntry | None:
    """The ledger fact an object under ``trials/`` carries, or None for an object the ledger does not record.
    Raises ArtifactRejected for a manifest or summary that is malformed, out of bounds, or about another trial,
    run, attempt or step than its key names. ``sizes`` (object key -> size, as S3 lists the step's directory)
    checks a manifest against what is stored: every shard it lists must exist with the size it claims, so the
    bytes the ledger books are the bytes S3 bills."""
    if (match := CHECKPOINT_MANIFEST.match(key)) is not None:
        manifest = _validated(key, document, CheckpointManifest, "checkpoint manifest")
        if manifest.step != int(match["step"]):
            raise ArtifactRejected(key, f"manifest step {manifest.step} is not the step its key names "
                                        f"({int(match['step'])})")
        if sizes is not None:
            directory = key.rsplit("/", 1)[0] + "/"
            for shard in manifest.shards:
                stored = sizes.get(directory + shard.name)
                if stored is None:
                    raise ArtifactRejected(key, f"shard {shard.name} is not in S3 under {directory}")
                if stored != shard.bytes:
                    raise ArtifactRejected(key, f"shard {shard.name} is {stored} bytes in S3; the manifest says "
                                                f"{shard.bytes}")
        return checkpoint_entry(match["trial"], match["run"], step=manifest.step,
                                bytes_=sum(s.bytes for s in manifest.shards), files=len(manifest.shards),
                                save_s=manifest.save_s, uri=uri.rsplit("/", 1)[0] + "/")
    if (match := ATTEMPT_SUMMARY.match(key)) is not None:
        summary = _validated(key, document, RunSummary, "run summary")
        named = (match["trial"], match["run"], int(match["attempt"]))
        if (summary.trial_id, summary.run, summary.attempt) != named:
            raise ArtifactRejected(key, f"the summary is of trial {summary.trial_id}, run {summary.run}, attempt "
                                        f"{summary.attempt}; its key names {named[0]}, {named[1]}, {named[2]}")
        return summary_entry(*named, summary.model_dump(mode="json"))
    return None
