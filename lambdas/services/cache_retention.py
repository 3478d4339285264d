"""Compile-cache retention: which registry entries may be collected, and per-model/compiler statistics.

Pure functions over registry items (no I/O), shared by the API, the cache resolver and the garbage collector.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field

from lambdas.domain.cache.cache_entries import EntryStatus, RegistryEntry
from lambdas.domain.json_types import JsonObject


class EntryView(BaseModel):
    """One registry entry as the API and the resolver read it: its counts, hit rate and compile seconds saved."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    cache_key: str
    prefix: str | None
    model: str | None
    compiler_version: str | None
    status: EntryStatus
    hits: int
    misses: int
    failures: int
    hit_rate: float | None
    first_compile_s: float | None
    saved_compile_s: float = Field(description="compile seconds hits saved against the first compile")
    size_bytes: int
    objects: int = Field(description="how many objects the entry holds")
    failure_reason: str | None
    rejected_reason: str | None
    retry_requested: bool
    last_used_at: str | None
    created_at: str | None
    components: JsonObject | None


class CacheGroup(BaseModel):
    """The entries of one model and compiler version, together."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    model: str
    compiler_version: str
    entries: int
    hits: int
    misses: int
    failures: int
    saved_compile_s: float
    size_bytes: int
    hit_rate: float | None


def _at(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def last_activity(entry: RegistryEntry) -> datetime | None:
    stamps = [_at(entry.last_used_at), _at(entry.last_object_at), _at(entry.created_at)]
    present = [s for s in stamps if s is not None]
    return max(present) if present else None


def expired_entries(
    entries: Iterable[RegistryEntry], *, now: datetime, retention_days: int, active_keys: set[str]
) -> list[str]:
    """Keys unused for more than `retention_days`, never one an active trial is using (or about to use)."""
    if retention_days < 1:
        raise ValueError("retention_days must be at least 1")
    cutoff = now - timedelta(days=retention_days)
    out = []
    for entry in entries:
        key = entry.cache_key
        seen = last_activity(entry)
        if key in active_keys or seen is None or seen >= cutoff:
            continue
        out.append(key)
    return sorted(out)


def entry_view(entry: RegistryEntry) -> EntryView:
    hits, misses = entry.hits, entry.misses
    first = entry.first_compile_s
    saved = max(0.0, hits * first - entry.hit_compile_s_total) if first else 0.0
    return EntryView(
        cache_key=entry.cache_key,
        prefix=entry.prefix,
        model=entry.model_slug,
        compiler_version=entry.compiler_version,
        status=entry.status,
        hits=hits,
        misses=misses,
        failures=entry.failures,
        hit_rate=round(hits / (hits + misses), 4) if hits + misses else None,
        first_compile_s=first,
        saved_compile_s=round(saved, 3),
        size_bytes=sum(entry.objects.values()),
        objects=len(entry.objects),
        failure_reason=entry.failure_reason,
        rejected_reason=entry.rejected_reason,
        retry_requested=entry.retry_requested,
        last_used_at=entry.last_used_at,
        created_at=entry.created_at,
        components=entry.components,
    )


def group_stats(entries: Iterable[RegistryEntry]) -> list[CacheGroup]:
    """Hit rate and saved compile seconds per (model, compiler version)."""
    groups: dict[tuple[str, str], list[EntryView]] = {}
    for entry in entries:
        view = entry_view(entry)
        groups.setdefault((str(view.model), str(view.compiler_version)), []).append(view)
    out = []
    for (model, compiler_version), views in sorted(groups.items()):
        hits, misses = sum(v.hits for v in views), sum(v.misses for v in views)
        saved = 0.0
        for view in views:
            saved = round(saved + view.saved_compile_s, 3)
        out.append(CacheGroup(
            model=model, compiler_version=compiler_version, entries=len(views), hits=hits, misses=misses,
            failures=sum(v.failures for v in views), saved_compile_s=saved, size_bytes=sum(v.size_bytes for v in views),
            hit_rate=round(hits / (hits + misses), 4) if hits + misses else None))
    return out
