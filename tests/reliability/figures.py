"""Figures the reliability and security suites measure while they run (cases tried, failures, entries, cost deltas).

Tests call :func:`record`; when ``DUALTRACK_FIGURES`` names a file, the session writes every figure there as JSON
at the end (see ``docs/reliability.md`` for the command that produced the published ones). Without it nothing is
written, so an ordinary ``pytest`` run leaves no files behind.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

ENV = "DUALTRACK_FIGURES"
_lock = threading.Lock()
_figures: dict[str, dict[str, Any]] = {}


def record(name: str, **values: Any) -> None:
    """Merge ``values`` into the figures for ``name``; numbers given as ``+n`` strings are not special."""
    with _lock:
        _figures.setdefault(name, {}).update(values)


def add(name: str, key: str, amount: int = 1) -> None:
    """Count up ``key`` under ``name`` (hypothesis cases tried, failures found)."""
    with _lock:
        bucket = _figures.setdefault(name, {})
        bucket[key] = int(bucket.get(key, 0)) + amount


def snapshot() -> dict[str, dict[str, Any]]:
    with _lock:
        return json.loads(json.dumps(_figures, default=str))


def write_if_requested() -> Path | None:
    target = os.environ.get(ENV)
    if not target or not _figures:
        return None
    path = Path(target)
    existing: dict[str, Any] = {}
    if path.exists():
        try:
            existing = json.loads(path.read_text())
        except ValueError:
            existing = {}
    existing.update(snapshot())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(existing, indent=2, sort_keys=True) + "\n")
    return path
