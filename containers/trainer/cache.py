"""The persistent compile cache behind ``NEURON_COMPILE_CACHE_URL``: a local directory, or an s3:// prefix synced
down before the first compile and up afterwards, so the same URL mechanism serves Trainium2 and the local
``compiled`` stand-in. Hit or miss is what the compiler reported, else whether compiling added cache files."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from trainer import storage
from trainer.backends import count_files


@dataclass
class CompileCache:
    url: str | None
    directory: Path | None
    files_before: int = 0

    @classmethod
    def open(cls, url: str | None, *, compiles: bool, on_neuron: bool) -> CompileCache:
        """The cache a backend that ``compiles`` uses; none (outcome "none") for an eager backend."""
        if not url or not compiles:
            return cls(url if compiles else None, None)
        if on_neuron:
            # torch-neuronx reads and writes NEURON_COMPILE_CACHE_URL (local or s3://) itself.
            cache = cls(url, None)
            cache.files_before = len(storage.list_files(url))
            return cache
        if storage.is_s3(url):
            # A fresh local mirror per process: what it holds is exactly what the shared cache held.
            directory = Path(tempfile.mkdtemp(prefix="dualtrack-compile-cache-"))
            storage.sync_down(url, directory)
        else:
            directory = storage.local_path(url)
        directory.mkdir(parents=True, exist_ok=True)
        return cls(url, directory, count_files(directory))

    def files_now(self) -> int:
        if self.directory is not None:
            return count_files(self.directory)
        return len(storage.list_files(self.url)) if self.url else 0

    def outcome(self, counters: tuple[int, int] | None) -> str:
        if self.url is None:
            return "none"
        if counters is not None:
            hits, misses = counters
            return "miss" if misses else ("hit" if hits else "none")
        return "miss" if self.files_now() > self.files_before else ("hit" if self.files_before else "miss")

    def publish(self) -> int:
        """Upload what compiling added (s3:// caches only)."""
        if self.url and self.directory is not None and storage.is_s3(self.url):
            return storage.sync_up(self.directory, self.url)
        return 0
