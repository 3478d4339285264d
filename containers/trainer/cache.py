"""The persistent compile cache behind ``NEURON_COMPILE_CACHE_URL``: a local directory, or an s3:// prefix synced
down before the first compile and up afterwards, so the same URL mechanism serves Trainium2 and the local
``compiled`` stand-in. Hit or miss is what the compiler reported, else whether compiling added cache files.

An entry is complete or absent: it is published with a completion marker (``_dualtrack_complete.json``, written
after every artefact, listing each with its size and sha256), and an entry without one (a job that died while
uploading), or whose artefacts disagree with it (a file replaced, truncated or absent), is torn: never handed to the
compiler, compiled again and published whole. Only the files the marker lists are read, each under the mirror
(an S3 key is any string: a ``..`` or absolute name is refused, never written). A failed compile publishes nothing
but a record of its error under ``_failed/``, so the next attempt compiles again instead of reusing a failure
(Neuron's own cache keeps failed graphs until someone passes ``--retry_failed_compilation``). Only the run the plane
sent to compile the entry publishes it (``storage.may_write``): no other run's credentials reach it."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from lambdas.domain.cache.compile_cache import ENTRY_MARKER as MARKER
from lambdas.domain.cache.compile_cache import (
    QUARANTINE,
    EntryRejected,
    check_digest,
    check_entry,
    completion_marker,
    entry_name,
)
from trainer import storage
from trainer.backends import count_files

log = logging.getLogger(__name__)
_MIRRORS: dict[str, Path] = {}  # entry URL -> this process's local mirror of it
Listing = dict[str, tuple[int, str | None]]  # artefact name -> size, sha256 (as the completion marker lists them)


def _is_artefact(name: str) -> bool:
    """A compiled artefact of the entry: not its marker, not its failure records."""
    return name != MARKER and not name.startswith(f"{QUARANTINE}/") and not Path(name).name.startswith(".")


def _artefacts(files: dict[str, int]) -> dict[str, int]:
    return {name: size for name, size in files.items() if _is_artefact(name)}


def _safe(name: str) -> bool:
    try:
        entry_name(name)
    except EntryRejected:
        return False
    return True


def _inside(directory: Path, name: str) -> Path:
    """Where artefact ``name`` goes in the mirror; EntryRejected for a name that would land outside it."""
    target = directory / entry_name(name)
    if not target.resolve().is_relative_to(directory.resolve()):
        raise EntryRejected(f"object name {name!r} leaves the entry")
    return target


def _listing(url: str, held: dict[str, int]) -> Listing:
    """The artefacts the entry's completion marker lists, each held at its listed size; EntryRejected otherwise."""
    marker = None
    if MARKER in held:
        try:
            marker = json.loads(storage.read_bytes(storage.join(url, MARKER)))
        except ValueError as exc:
            raise EntryRejected(f"the completion marker is not JSON: {exc}") from None
    return check_entry(marker, held)


@dataclass
class CompileCache:
    url: str | None
    directory: Path | None
    files_before: int = 0
    torn: bool = False  # the entry had artefacts it cannot vouch for (see ``problem``): not served, compiled again
    problem: str | None = None  # why the entry was not served
    served: Listing | None = None  # what the mirror received, each file checked against the marker

    @classmethod
    def open(cls, url: str | None, *, compiles: bool, on_neuron: bool) -> CompileCache:
        """The cache a backend that ``compiles`` uses; none (outcome "none") for an eager backend."""
        if not url or not compiles:
            return cls(url if compiles else None, None)
        held = storage.list_files(url)
        listed: Listing = {}
        problem = None
        if _artefacts(held) or MARKER in held:
            try:
                listed = _listing(url, held)
            except EntryRejected as exc:
                problem = str(exc)
        if on_neuron:
            # The retired PyTorch/XLA torch-neuronx reads and writes NEURON_COMPILE_CACHE_URL (local or s3://)
            # itself; a torn entry is reported (the summary says so) and made whole by this attempt's publish.
            return cls(url, None, 0 if problem else len(listed), problem is not None, problem)
        # A local mirror per process and entry: what it holds is what the shared entry held, when complete. It is
        # the same directory for a second attempt in the same process: XLA sets its persistent cache once a process.
        # TorchNeuron gets this mirror too: its NEFF cache is a filesystem path (TORCH_NEURONX_NEFF_CACHE_DIR,
        # "TorchNeuron environment variables"), not an s3:// URL, so S3 is reached only through sync down and publish.
        directory = _MIRRORS.get(url) or Path(tempfile.mkdtemp(prefix="dualtrack-compile-cache-"))
        _MIRRORS[url] = directory
        written: list[Path] = []
        if problem is None and listed:
            try:
                for name, (size, digest) in listed.items():
                    target = _inside(directory, name)
                    data = storage.read_bytes(storage.join(url, name))
                    if len(data) != size:
                        raise EntryRejected(f"{name} read {len(data)} bytes; the completion marker lists {size}")
                    check_digest(name, digest, data)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(data)
                    written.append(target)
            except EntryRejected as exc:
                problem = str(exc)
                for path in written:  # nothing of a rejected entry reaches the compiler
                    path.unlink(missing_ok=True)
        if problem is not None:
            log.warning("compile-cache entry %s not served: %s", url, problem)
        return cls(url, directory, count_files(directory), problem is not None, problem,
                   None if problem is not None else listed)

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
        if not storage.may_write(self.url):
            # Only the run the plane sent to compile the entry may write it; this run's credentials do not reach it.
            log.info("compile-cache entry %s: this run was not sent to build it, so it publishes nothing", self.url)
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
        # The mirror holds artefacts only (the marker and failure records are never downloaded into it). A file the
        # entry served, checked against its marker, is there already; every other one is written, whatever S3 holds
        # under its name (a same-size replacement of a torn entry included).
        written = 0
        files: Listing = {}
        if self.directory is not None:
            for path in sorted(p for p in self.directory.rglob("*") if p.is_file()):
                name = path.relative_to(self.directory).as_posix()
                if not _is_artefact(name):
                    continue
                data = path.read_bytes()
                files[name] = (len(data), hashlib.sha256(data).hexdigest())
                if (self.served or {}).get(name) != files[name]:
                    storage.write_bytes(storage.join(self.url, name), data)
                    written += 1
        else:  # Neuron's own cache wrote the entry: list what it holds (no bytes read, so no hashes)
            files = {name: (size, None) for name, size in _artefacts(storage.list_files(self.url)).items()
                     if _safe(name)}
        if files:
            storage.write_bytes(storage.join(self.url, MARKER), json.dumps(completion_marker(files)).encode())
            written += 1
        return written
