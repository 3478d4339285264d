"""The persistent compile cache behind ``NEURON_COMPILE_CACHE_URL``: a local directory, or an s3:// prefix synced
down before the first compile and up afterwards, so the same URL mechanism serves Trainium2 and the local
``compiled`` stand-in. Hit or miss is what the compiler reported, else whether compiling added cache files.

An entry is complete or absent: it is published with a completion marker (``_dualtrack_complete.json``, written
after every artefact), and an entry without one (a job that died while uploading) is torn: never served, compiled
again and published whole. A failed compile publishes nothing but a record of its error under ``_failed/``, so the
next attempt compiles again instead of reusing a failure (Neuron's own cache keeps failed graphs until someone
passes ``--retry_failed_compilation``)."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from lambdas.domain.compile_cache import ENTRY_MARKER as MARKER
from lambdas.domain.compile_cache import QUARANTINE
from trainer import storage
from trainer.backends import count_files

_MIRRORS: dict[str, Path] = {}  # entry URL -> this process's local mirror of it


def _artefacts(files: dict[str, int]) -> dict[str, int]:
    """The entry's compiled artefacts: not its marker, not its failure records."""
    return {name: size for name, size in files.items()
            if name != MARKER and not name.startswith(f"{QUARANTINE}/") and not Path(name).name.startswith(".")}


@dataclass
class CompileCache:
    url: str | None
    directory: Path | None
    files_before: int = 0
    torn: bool = False  # the entry had artefacts but no completion marker: not served, compiled again

    @classmethod
    def open(cls, url: str | None, *, compiles: bool, on_neuron: bool) -> CompileCache:
        """The cache a backend that ``compiles`` uses; none (outcome "none") for an eager backend."""
        if not url or not compiles:
            return cls(url if compiles else None, None)
        held = storage.list_files(url)
        torn = bool(_artefacts(held)) and MARKER not in held
        if on_neuron:
            # The retired PyTorch/XLA torch-neuronx reads and writes NEURON_COMPILE_CACHE_URL (local or s3://)
            # itself; a torn entry is reported (the summary says so) and made whole by this attempt's publish.
            return cls(url, None, len(_artefacts(held)), torn)
        # A local mirror per process and entry: what it holds is what the shared entry held, when complete. It is
        # the same directory for a second attempt in the same process: XLA sets its persistent cache once a process.
        # TorchNeuron gets this mirror too: its NEFF cache is a filesystem path (TORCH_NEURONX_NEFF_CACHE_DIR,
        # "TorchNeuron environment variables"), not an s3:// URL, so S3 is reached only through sync down and publish.
        directory = _MIRRORS.get(url) or Path(tempfile.mkdtemp(prefix="dualtrack-compile-cache-"))
        _MIRRORS[url] = directory
        if not torn:
            for name in _artefacts(held):
                target = directory / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(storage.read_bytes(storage.join(url, name)))
        return cls(url, directory, count_files(directory), torn)

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

    def publish(self, *, failed_error: str | None = None, attempt: int = 1) -> int:
        """Publish the entry whole (every artefact, then the completion marker), or, after a failed compile, only
        a record of the failure under ``_failed/`` (the entry itself is left as it was). Returns files written."""
        if not self.url:
            return 0
        if failed_error is not None:
            record = {"attempt": attempt, "error": failed_error[:4000], "at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                          time.gmtime())}
            storage.write_bytes(storage.join(self.url, QUARANTINE, f"attempt-{attempt}-{int(time.time())}.json"),
                                json.dumps(record).encode())
            if self.directory is not None and _MIRRORS.get(self.url) == self.directory:
                del _MIRRORS[self.url]  # what the failed compile left is not reused, not even in this process
                shutil.rmtree(self.directory, ignore_errors=True)
            return 1
        # The mirror holds artefacts only (the marker and failure records are never downloaded into it).
        written = storage.sync_up(self.directory, self.url) if self.directory is not None else 0
        artefacts = _artefacts(storage.list_files(self.url))
        if artefacts:
            storage.write_bytes(storage.join(self.url, MARKER), json.dumps(
                {"files": len(artefacts), "bytes": sum(artefacts.values())}).encode())
            written += 1
        return written
