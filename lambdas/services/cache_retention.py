"""Compile-cache retention: which registry entries may be collected, and per-model/compiler statistics.

Pure functions over registry items (no I/O), shared by the API, the cache resolver and the garbage collector.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any


def _at(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def last_activity(entry: dict[str, Any]) -> datetime | None:
    stamps = [_at(entry.get(f)) for f in ("last_used_at", "last_object_at", "created_at")]
    present = [s for s in stamps if s is not None]
    return max(present) if present else None


def expired_entries(
    entries: Iterable[dict[str, Any]], *, now: datetime, retention_days: int, active_keys: set[str]
) -> list[str]:
    """Keys unused for more than `retention_days`, never one an active trial is using (or about to use)."""
    if retention_days < 1:
        raise ValueError("retention_days must be at least 1")
    cutoff = now - timedelta(days=retention_days)
    out = []
    for entry in entries:
        key = entry["cache_key"]
        seen = last_activity(entry)
        if key in active_keys or seen is None or seen >= cutoff:
            continue
        out.append(key)
    return sorted(out)


def entry_view(entry: dict[str, Any]) -> dict[str, Any]:
    hits, misses = int(entry.get("hits") or 0), int(entry.get("misses") or 0)
    first = entry.get("first_compile_s")
    saved = max(0.0, hits * float(first) - float(entry.get("hit_compile_s_total") or 0)) if first else 0.0
    objects = entry.get("objects") or {}
    return {
        "cache_key": entry["cache_key"],
        "prefix": entry.get("prefix"),
        "model": entry.get("model_slug"),
        "compiler_version": entry.get("compiler_version"),
        "status": entry.get("status", "new"),
        "hits": hits,
        "misses": misses,
        "failures": int(entry.get("failures") or 0),
        "hit_rate": round(hits / (hits + misses), 4) if hits + misses else None,
        "first_compile_s": float(first) if first is not None else None,
        "saved_compile_s": round(saved, 3),
        "size_bytes": sum(int(v) for v in objects.values()),
        "objects": len(objects),
        "failure_reason": entry.get("failure_reason"),
        "rejected_reason": entry.get("rejected_reason"),
        "retry_requested": bool(entry.get("retry_requested")),
        "last_used_at": entry.get("last_used_at"),
        "created_at": entry.get("created_at"),
        "components": entry.get("components"),
    }


def group_stats(entries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Hit rate and saved compile seconds per (model, compiler version)."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for entry in entries:
        view = entry_view(entry)
        key = (str(view["model"]), str(view["compiler_version"]))
        g = groups.setdefault(
            key,
            {
                "model": key[0],
                "compiler_version": key[1],
                "entries": 0,
                "hits": 0,
                "misses": 0,
                "failures": 0,
                "saved_compile_s": 0.0,
                "size_bytes": 0,
            },
        )
        g["entries"] += 1
        for name in ("hits", "misses", "failures", "size_bytes"):
            g[name] += view[name]
        g["saved_compile_s"] = round(g["saved_compile_s"] + view["saved_compile_s"], 3)
    for g in groups.values():
        total = g["hits"] + g["misses"]
        g["hit_rate"] = round(g["hits"] / total, 4) if total else None
    return [groups[k] for k in sorted(groups)]
