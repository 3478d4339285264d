"""The compile-cache registry's entries, who may speak for an entry, and the completion marker that makes an entry
servable. None of it needs a trial spec (the key computed from one is ``lambdas.domain.cache.compile_cache``), so the
functions that only observe, list or check entries load this module alone."""

from __future__ import annotations

import hashlib
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from lambdas.domain.json_types import JsonObject, JsonValue
from lambdas.domain.vocabulary import COMPILE_RUN, scaling_nodes

# An entry is published with this marker after all its artefacts, listing each with its size and sha256 (complete
# or absent: no marker, or artefacts that disagree with it, not served: check_entry); a failed compile leaves only a
# record under QUARANTINE/ (see containers/trainer/cache.py).
ENTRY_MARKER = "_dualtrack_complete.json"
QUARANTINE = "_failed"


# ---- the registry ----------------------------------------------------------------------------------------------
EntryStatus = Literal["new", "ready", "failed", "retry_requested", "rejected"]


class RegistryEntry(BaseModel):
    """One compile-cache entry as the registry keeps it: what its key was computed from, its objects, and each run
    attempt's use of it (counted once per ``observed`` attempt: ``<trial>#<run>#a<attempt>``)."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)

    cache_key: str
    prefix: str | None = None
    model_slug: str | None = None
    compiler_version: str | None = None
    components: JsonObject | None = Field(default=None, description="what the cache key was computed from")
    status: EntryStatus = "new"
    created_at: str | None = None
    last_used_at: str | None = None
    last_object_at: str | None = None
    objects: dict[str, int] = Field(default_factory=dict, description="object name -> size in bytes")
    hits: int = 0
    misses: int = 0
    failures: int = 0
    observed: list[str] = Field(default_factory=list, description="the run attempts already counted")
    hit_trials: list[str] = Field(default_factory=list, description="the trials whose attempts hit the entry")
    hit_compile_s_total: float = Field(default=0.0, description="compile seconds the hits still spent")
    first_compile_s: float | None = Field(default=None, description="the compile that built the entry")
    failure_reason: str | None = None
    retry_requested: bool = False
    rejected_reason: str | None = None
    rejected_at: str | None = None
    rejections: int = 0


# ---- who may speak for an entry --------------------------------------------------------------------------------
def compile_writer(warm: bool, compile_stage: bool) -> str | None:
    """The run the workflow sends to build a trial's entry: the warm-up compile stage when the entry is cold and the
    stage has a compile queue (its CacheCold choice), else the training run, which compiles it itself; none when the
    entry is warm (the training run is sent to use it, not to write it)."""
    if warm:
        return None
    return COMPILE_RUN if compile_stage else "trn2"


def claim_refusal(resolved: str | None, writer: str | None, run: str, claimed: str, outcome: str) -> str | None:
    """Why a run's summary may not report ``outcome`` for entry ``claimed`` (None: it may). A summary speaks only for
    the entry the plane resolved for its trial (``resolved``); any Trainium2 run of the trial may report a hit, but
    only the run sent to compile the entry (``writer``) marks it ready or failed."""
    if run not in ("trn2", COMPILE_RUN):
        why = ("is a scaling run, sent with no compile-cache entry" if scaling_nodes(run) is not None
               else "runs on GPUs and uses no compile-cache entry")
        return f"run {run} {why}, but reported {outcome} for {claimed}"
    if not resolved:
        return f"no compile-cache entry was resolved for this trial, but run {run} reported {outcome} for {claimed}"
    if claimed != resolved:
        return f"run {run} reported {outcome} for entry {claimed}; the plane resolved {resolved} for it"
    if outcome != "hit" and run != writer:
        builder = f"only {writer} was sent to compile" if writer else "no run was sent to compile (it was warm)"
        return f"run {run} reported {outcome} for its entry, which {builder}"
    return None


# ---- the completion marker -------------------------------------------------------------------------------------
MARKER_VERSION = 2  # 1 recorded only a count and a total; 2 lists every artefact with its size and sha256


class EntryRejected(ValueError):
    """A cache entry that must not be served (torn, or disagreeing with its completion marker): the reason."""


def _control(c: str) -> bool:
    """A C0 control (U+0000-U+001F), DEL (U+007F) or a C1 control (U+0080-U+009F: U+0085 is a line break to some
    readers): never in a name a compiler writes, and a line break or terminal escape in every log that shows it."""
    return ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F


def entry_name(name: str) -> str:
    """``name`` as a path inside an entry, or EntryRejected when it would leave the entry (S3 keys are any string:
    ``..`` segments and absolute paths become writes outside a local mirror) or carries a control character."""
    if any(_control(c) for c in name):
        raise EntryRejected(f"object name {name!r} carries a control character (U+0000-U+001F, U+007F-U+009F)")
    if (not name or name.startswith("/") or "\\" in name
            or any(part in ("", ".", "..") for part in name.split("/"))):
        raise EntryRejected(f"object name {name!r} leaves the entry (empty, absolute or '.'/'..' segments)")
    return name


def completion_marker(files: dict[str, tuple[int, str | None]]) -> JsonObject:
    """What a publisher writes last: every artefact (name -> size and, where the publisher read it, sha256)."""
    listed: JsonObject = {}
    for name, (size, digest) in sorted(files.items()):
        record: JsonObject = {"bytes": size}
        if digest:
            record["sha256"] = digest
        listed[name] = record
    return {"version": MARKER_VERSION, "files": listed, "count": len(listed),
            "bytes": sum(size for size, _ in files.values())}


def listed_files(marker: JsonValue) -> dict[str, tuple[int, str | None]]:
    """The artefacts a completion marker lists (name -> size, sha256 or None); EntryRejected for a marker that is
    absent, lists nothing (an older trainer's count-only marker included) or names a path outside the entry."""
    if marker is None:
        raise EntryRejected("no completion marker: the upload did not finish")
    files = marker.get("files") if isinstance(marker, dict) else None
    if not isinstance(files, dict) or not files:
        raise EntryRejected("the completion marker lists no files to check the entry against")
    out: dict[str, tuple[int, str | None]] = {}
    for name, record in files.items():
        size = record.get("bytes") if isinstance(record, dict) else None
        digest = record.get("sha256") if isinstance(record, dict) else None
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise EntryRejected(f"the completion marker gives {name!r} no size")
        if digest is not None and not (isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{64}", digest)):
            raise EntryRejected(f"the completion marker gives {name!r} a malformed sha256")
        out[entry_name(str(name))] = (size, digest)
    return out


def check_entry(marker: JsonValue, held: dict[str, int]) -> dict[str, tuple[int, str | None]]:
    """The marker's files when every one is held at its listed size (``held``: name -> size, as S3 lists them);
    EntryRejected naming the first that is missing or another size. Hashes are the reader's to check (it has the
    bytes): :func:`check_digest`."""
    listed = listed_files(marker)
    for name, (size, _) in listed.items():
        if name not in held:
            raise EntryRejected(f"{name} is listed by the completion marker but absent")
        if held[name] != size:
            raise EntryRejected(f"{name} is {held[name]} bytes; the completion marker lists {size}")
    return listed


def check_digest(name: str, digest: str | None, data: bytes) -> None:
    if digest is not None and hashlib.sha256(data).hexdigest() != digest:
        raise EntryRejected(f"{name}'s sha256 is not the one the completion marker lists")
