"""Sharded checkpoints with a manifest written last, once (``<run-dir>/checkpoints/step-<N>/``).

A step directory holds:

- the weights, consolidated in a standard format a plain single-process loader opens: ``adapter_model.safetensors``
  with ``adapter_config.json`` (LoRA, peft's adapter format) or ``model.safetensors`` (full-parameter);
- the optimizer state, written with ``torch.distributed.checkpoint`` (``.metadata`` and one ``__<p>_0.distcp`` per
  process): each process writes the state of the parameters it owns under ``optim/<parameter name>/<key>``, so
  the checkpoint loads at any process count (each process reads the names it owns now, wherever they were
  written) and on either track (a GPU fallback resumes a Trainium2 run whatever its layout);
- ``scheduler.pt``, ``rng.pt`` and ``trainer_state.json`` (step, data position, spec hash);
- ``manifest.json``, written once by process 0 after every process's files are durable: every file with its sha256
  and size, the step, the data position and the spec hash.

A checkpoint is refused (skipped on resume, never loaded; resume falls back to the newest one that verifies) when it
has no manifest (torn), when its manifest is of another format or belongs to another spec, when a file it lists
would lie outside its own step directory, or when a file is missing or differs from its sha256 and size. A step
whose manifest is already committed is never written again.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import random
import re
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, Protocol, Required, TypeAlias, TypedDict

import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from trainer import storage
from trainer.json_types import JsonObject, JsonScalar

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

    from trainer.distributed import Distributed
    from trainer.state import TrainState

# A final checkpoint after SIGTERM is attempted when the last save took less than this (Batch's stop timeout
# before SIGKILL is 30 s by default; Spot gives two minutes' notice before that).
SIGTERM_SAVE_BUDGET_S = float(os.environ.get("DUALTRACK_SIGTERM_SAVE_BUDGET_S", "20"))

FORMAT = "dualtrack-checkpoint"
FORMAT_VERSION = 2
MANIFEST = "manifest.json"
STEP_DIR = re.compile(r"^step-(\d+)$")
# A file a manifest lists is a plain name inside its step directory: no separators, no "." or "..".
FILE_NAME = re.compile(r"^(?!\.{1,2}$)[A-Za-z0-9_.-]+$")
OPTIM_PREFIX = "optim/"


# ---- the files' shapes -----------------------------------------------------------------------------------------
class FileRecord(TypedDict):
    """One file of a checkpoint, as its manifest lists it."""

    name: str
    sha256: str
    bytes: int


class DataPosition(TypedDict):
    samples_consumed: int


class TrainerStateRecord(TypedDict, total=False):
    """``trainer_state.json``: the step, the data position and the run's identity (``TrainState.identity``)."""

    global_step: Required[int]
    data_position: DataPosition
    trial: str
    spec_hash: str


class CheckpointMeta(TypedDict, total=False):
    """What a run records in each of its manifests unchanged (``TrainState.meta``)."""

    track: str
    run: str | None
    backend: str
    method: str
    attempt: int


class OptimizerLayout(TypedDict):
    format: str
    sharding: str
    processes: int


class Manifest(CheckpointMeta):
    """``manifest.json``. A manifest read back is checked field by field before it is trusted (``verify``)."""

    format: str
    format_version: int
    step: int
    weights: str
    lora: bool
    data_position: DataPosition | None
    spec_hash: str | None
    optimizer: OptimizerLayout
    shards: list[FileRecord]
    bytes: int
    save_s: float
    created_at: str


# Python's ``random`` state: (version, the Mersenne Twister's words and position, the cached Gaussian).
PythonRngState: TypeAlias = tuple[int, tuple[int, ...], float | None]


class RngState(TypedDict):
    """``rng.pt``: every generator the step's randomness comes from."""

    torch: torch.Tensor
    python: PythonRngState
    cuda: NotRequired[list[torch.Tensor]]


# A state a checkpoint holds, as nested containers with tensors among its leaves.
StateTree: TypeAlias = (torch.Tensor | JsonScalar | dict[str | int, "StateTree"] | list["StateTree"]
                        | tuple["StateTree", ...])


def step_uri(run_dir: str, step: int) -> str:
    return storage.join(run_dir, "checkpoints", f"step-{step}")


def manifest_uri(run_dir: str, step: int) -> str:
    return storage.join(step_uri(run_dir, step), MANIFEST)


def to_cpu(value: StateTree) -> StateTree:
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu")
    if isinstance(value, dict):
        return {k: to_cpu(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(to_cpu(v) for v in value)
    return value


def _torch_bytes(obj: JsonObject | RngState) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def rng_state() -> RngState:
    state: RngState = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: RngState) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _file_record(name: str, data: bytes) -> FileRecord:
    return {"name": name, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


# ---- what one process contributes to a checkpoint ---------------------------------------------------------------
@dataclass
class MainFiles:
    """Process 0's part: the consolidated weights and the state every process shares."""

    weights: dict[str, torch.Tensor]
    lora_config: JsonObject | None
    scheduler: JsonObject  # the learning-rate scheduler's state_dict
    rng: RngState
    state: TrainerStateRecord
    meta: CheckpointMeta

    def files(self) -> dict[str, bytes]:
        weights_name = "adapter_model.safetensors" if self.lora_config is not None else "model.safetensors"
        out = {weights_name: save_safetensors(self.weights, metadata={"format": "pt"}),
               "scheduler.pt": _torch_bytes(self.scheduler), "rng.pt": _torch_bytes(self.rng),
               "trainer_state.json": json.dumps(self.state, sort_keys=True).encode()}
        if self.lora_config is not None:
            out["adapter_config.json"] = json.dumps(self.lora_config, sort_keys=True, default=str).encode()
        return out


@dataclass
class Snapshot:
    """One process's copy of a step's state, taken on the training thread; written in the background."""

    step: int
    optimizer: dict[str, dict[str, torch.Tensor]]  # parameter name -> AdamW state, this process's part, on the CPU
    main: MainFiles | None  # process 0 only


def _flat_optimizer(shard: dict[str, dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {f"{OPTIM_PREFIX}{name}/{key}": value for name, state in shard.items() for key, value in state.items()}


def _nested_optimizer(flat: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    out: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in flat.items():
        name, _, leaf = key.removeprefix(OPTIM_PREFIX).rpartition("/")
        out.setdefault(name, {})[leaf] = value
    return out


@contextlib.contextmanager
def _single_process_quiet(group: ProcessGroup | None) -> Iterator[None]:
    """A single process (no process group) is the intended use, not a condition worth a warning per save."""
    with warnings.catch_warnings():
        if group is None:
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def write_process_files(base: str, snapshot: Snapshot, group: ProcessGroup | None) -> list[FileRecord]:
    """Write this process's files into the step directory ``base``; returns their manifest records.

    ``torch.distributed.checkpoint`` writes into a local staging directory (collective over ``group`` when there
    are several processes), then each file goes to the run directory, local or S3."""
    import torch.distributed.checkpoint as dcp

    files: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory(prefix="dualtrack-ckpt-") as staging:
        with _single_process_quiet(group):
            dcp.save(_flat_optimizer(snapshot.optimizer), storage_writer=dcp.FileSystemWriter(staging),
                     process_group=group, no_dist=group is None)
        for path in sorted(Path(staging).iterdir()):
            if path.is_file():
                files[path.name] = path.read_bytes()
    if snapshot.main is not None:
        files.update(snapshot.main.files())
    for name, data in files.items():
        storage.write_bytes(storage.join(base, name), data)
    return [_file_record(name, data) for name, data in files.items()]


def commit(base: str, *, step: int, files: list[FileRecord], main: MainFiles, processes: int,
           sharding: str, save_s: float) -> int:
    """Write the manifest once; returns its size. Another attempt may have committed the step first: its
    checkpoint stands and this one's manifest is not needed."""
    weights = next(f["name"] for f in files if f["name"].endswith(".safetensors"))
    manifest: Manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "step": step, "weights": weights,
        "lora": main.lora_config is not None, "data_position": main.state.get("data_position"),
        "spec_hash": main.state.get("spec_hash"),
        "optimizer": {"format": "torch.distributed.checkpoint", "sharding": sharding, "processes": processes},
        "shards": sorted(files, key=lambda f: f["name"]), "bytes": sum(int(f["bytes"]) for f in files),
        "save_s": round(save_s, 6),
        "created_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"), **main.meta,
    }
    body = json.dumps(manifest, indent=2, sort_keys=True).encode()
    with contextlib.suppress(storage.AlreadyExists):
        storage.write_once(storage.join(base, MANIFEST), body)
    return len(body)


# ---- reading -------------------------------------------------------------------------------------------------
def list_steps(run_dir: str) -> list[int]:
    steps = []
    for name in storage.list_prefixes(storage.join(run_dir, "checkpoints")):
        match = STEP_DIR.match(name)
        if match:
            steps.append(int(match.group(1)))
    return sorted(steps)


def read_manifest(base: str) -> Manifest:
    try:
        manifest: Manifest = json.loads(storage.read_bytes(storage.join(base, MANIFEST)))
    except FileNotFoundError:
        raise ValueError("no manifest.json (torn: the save did not finish)") from None
    except Exception as exc:  # S3 NoSuchKey, bad JSON
        if "NoSuchKey" in repr(exc) or "Not Found" in repr(exc) or "404" in repr(exc):
            raise ValueError("no manifest.json (torn: the save did not finish)") from None
        raise ValueError(f"unreadable manifest.json: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT \
            or manifest.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"not a {FORMAT} v{FORMAT_VERSION} manifest")
    return manifest


def _checked(base: str, record: FileRecord) -> bytes:
    name = str(record.get("name", ""))
    if not FILE_NAME.match(name):
        raise ValueError(f"the manifest lists {name!r}, which is outside its own step directory")
    try:
        data = storage.read_bytes(storage.join(base, name))
    except Exception:
        raise ValueError(f"shard {name} is missing") from None
    if len(data) != record.get("bytes") or hashlib.sha256(data).hexdigest() != record.get("sha256"):
        raise ValueError(f"shard {name} does not match its sha256/size in the manifest (corrupt)")
    return data


def verify(base: str, *, spec_hash: str | None = None) -> tuple[Manifest, dict[str, bytes]]:
    """The manifest and every file's bytes, or ValueError naming what is wrong."""
    manifest = read_manifest(base)
    if spec_hash is not None and manifest.get("spec_hash") != spec_hash:
        raise ValueError(f"belongs to another spec (spec_hash {str(manifest.get('spec_hash'))[:12]}, this run's "
                         f"{spec_hash[:12]})")
    records = manifest.get("shards")
    if not isinstance(records, list) or not records:
        raise ValueError("the manifest lists no shards")
    names = [str(r.get("name")) for r in records if isinstance(r, dict)]
    if len(names) != len(records) or len(set(names)) != len(names):
        raise ValueError("the manifest's shard list is malformed (entries without a name, or a name twice)")
    shards = {str(r["name"]): _checked(base, r) for r in records}
    optimizer = manifest.get("optimizer")
    processes = optimizer.get("processes") if isinstance(optimizer, dict) else None
    if not isinstance(processes, int) or isinstance(processes, bool) or processes < 1:
        raise ValueError("the manifest does not say how many processes wrote the optimizer state")
    # torch.distributed.checkpoint's FileSystemWriter writes one data file per process (``__<rank>_0.distcp``), an
    # empty one included: each must be listed, or the state cannot be read back whole.
    required = [manifest.get("weights"), ".metadata", *(f"__{p}_0.distcp" for p in range(processes)),
                "scheduler.pt", "rng.pt", "trainer_state.json"]
    missing = [n for n in required if n not in shards]
    if missing:
        raise ValueError(f"the manifest lacks {', '.join(map(str, missing))}")
    try:
        own_step = json.loads(shards["trainer_state.json"]).get("global_step")
    except (ValueError, AttributeError):
        raise ValueError("trainer_state.json is not a JSON object") from None
    if own_step is not None and own_step != manifest.get("step"):
        raise ValueError(f"the manifest says step {manifest.get('step')} but its trainer state is step {own_step}")
    return manifest, shards


@dataclass
class Skipped:
    step: int
    uri: str
    reason: str


@dataclass
class Found:
    step: int
    uri: str
    manifest: Manifest


def find_newest(run_dirs: list[str], *, spec_hash: str | None = None,
                max_step: int | None = None) -> tuple[Found | None, list[Skipped]]:
    """The newest checkpoint that verifies across ``run_dirs`` (own run dir first, then --resume-from)."""
    candidates = sorted({(step, i, d) for i, d in enumerate(run_dirs) for step in list_steps(d)
                         if max_step is None or step <= max_step}, key=lambda c: (-c[0], c[1]))
    skipped: list[Skipped] = []
    for step, _, run_dir in candidates:
        base = step_uri(run_dir, step)
        try:
            manifest, _ = verify(base, spec_hash=spec_hash)
        except ValueError as exc:
            skipped.append(Skipped(step, base, str(exc)))
            continue
        if int(manifest.get("step", -1)) != step:
            skipped.append(Skipped(step, base, f"the manifest says step {manifest.get('step')}, not {step}"))
            continue
        return Found(step, base, manifest), skipped
    return None, skipped


class TrainStateDict(TypedDict, total=False):
    """``trainer.state.TrainState``'s state dict: what its ``state_dict`` gives (process 0 every entry, the others
    ``step`` and their share of the optimizer state) and its ``load_state_dict`` takes (``LoadedCheckpoint.as_state``:
    every entry but ``step`` and ``lora_config``)."""

    step: int
    optimizer: Required[dict[str, dict[str, torch.Tensor]]]  # parameter name -> AdamW state
    weights: dict[str, torch.Tensor]
    lora_config: JsonObject | None
    scheduler: JsonObject
    rng: RngState
    trainer: TrainerStateRecord


@dataclass
class LoadedCheckpoint:
    step: int
    uri: str
    manifest: Manifest
    weights: dict[str, torch.Tensor]
    optimizer: dict[str, dict[str, torch.Tensor]]  # parameter name -> state, for the names asked for
    scheduler: JsonObject
    rng: RngState
    state: TrainerStateRecord
    restore_s: float

    def as_state(self) -> TrainStateDict:
        """The shape ``trainer.state.TrainState.load_state_dict`` takes."""
        return {"weights": self.weights, "optimizer": self.optimizer, "scheduler": self.scheduler, "rng": self.rng,
                "trainer": self.state}


TemplateFactory = Callable[[str, str, tuple[int, ...], torch.dtype], torch.Tensor]


def load(found: Found, *, names: list[str] | None, group: ProcessGroup | None,
         make: TemplateFactory | None = None) -> LoadedCheckpoint:
    """Read a verified checkpoint: the weights and shared state, and the optimizer state of ``names`` (every
    parameter when None). Collective over ``group`` when there are several processes. ``make(name, key, size,
    dtype)`` makes the tensor each state entry is read into (default: a whole CPU tensor); a sharded one (a DTensor)
    is filled with this process's part only, whatever layout wrote the checkpoint."""
    import torch.distributed.checkpoint as dcp

    started = time.perf_counter()
    records = {str(r["name"]): r for r in found.manifest["shards"]}
    with tempfile.TemporaryDirectory(prefix="dualtrack-ckpt-") as staging:
        for name, record in records.items():
            if name == ".metadata" or name.endswith(".distcp"):
                (Path(staging) / name).write_bytes(_checked(found.uri, record))
        reader = dcp.FileSystemReader(staging)
        entries = reader.read_metadata().state_dict_metadata
        wanted = None if names is None else set(names)
        template: dict[str, torch.Tensor] = {}
        for key, meta in entries.items():
            name = key.removeprefix(OPTIM_PREFIX).rpartition("/")[0]
            if key.startswith(OPTIM_PREFIX) and (wanted is None or name in wanted):
                size, dtype = tuple(meta.size), meta.properties.dtype  # type: ignore[union-attr]
                template[key] = (torch.empty(size, dtype=dtype) if make is None
                                 else make(name, key.rpartition("/")[2], size, dtype))
        if wanted is not None:
            absent = wanted - {k.removeprefix(OPTIM_PREFIX).rpartition("/")[0] for k in template}
            if absent:
                raise ValueError(f"checkpoint {found.uri} has no optimizer state for {sorted(absent)[:3]}")
        try:
            with _single_process_quiet(group):
                dcp.load(template, storage_reader=reader, process_group=group, no_dist=group is None)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # torch's CheckpointException is a BaseException: it must not end the attempt
            raise CheckpointError(f"checkpoint {found.uri} does not load: {type(exc).__name__}: {exc}"[:2000]) \
                from None
    loaded = LoadedCheckpoint(
        step=found.step, uri=found.uri, manifest=found.manifest,
        weights=load_safetensors(_checked(found.uri, records[found.manifest["weights"]])),
        optimizer=_nested_optimizer(template),
        scheduler=torch.load(io.BytesIO(_checked(found.uri, records["scheduler.pt"])), weights_only=False),
        rng=torch.load(io.BytesIO(_checked(found.uri, records["rng.pt"])), weights_only=False),
        state=json.loads(_checked(found.uri, records["trainer_state.json"])), restore_s=0.0)
    loaded.restore_s = time.perf_counter() - started
    return loaded


@dataclass
class ResumeSearch:
    loaded: LoadedCheckpoint | None
    skipped: list[Skipped] = field(default_factory=list)


def load_newest(run_dirs: list[str], *, spec_hash: str | None = None, max_step: int | None = None) -> ResumeSearch:
    """One process: the newest checkpoint that verifies and loads, with every parameter's optimizer state."""
    skipped: list[Skipped] = []
    while True:
        found, passed = find_newest(run_dirs, spec_hash=spec_hash, max_step=max_step)
        skipped += passed
        if found is None:
            return ResumeSearch(None, skipped)
        try:
            return ResumeSearch(load(found, names=None, group=None), skipped)
        except (ValueError, CheckpointError) as exc:
            skipped.append(Skipped(found.step, found.uri, str(exc)))
            max_step = found.step - 1


# ---- the checkpointer: when to save, saving in the background, committing ---------------------------------------
class InjectedSaveFailure(RuntimeError):
    pass


class CheckpointError(RuntimeError):
    pass


@dataclass
class SavedCheckpoint:
    step: int
    uri: str
    bytes: int
    files: int
    save_s: float  # from the snapshot to the committed manifest
    blocked_s: float = 0.0  # of which the training waited


@dataclass
class _Pending:
    step: int
    started: float
    future: Future[list[FileRecord]]
    main: MainFiles | None
    fail_before_manifest: bool
    blocked_s: float


class Snapshotting(Protocol):
    """What a save asks of the state it saves (``trainer.state.TrainState``): its step, and a copy of it."""

    step: int

    def snapshot(self) -> Snapshot: ...


class Checkpointer:
    """Owns the save policy (when a save is due, which saves block, the final save a SIGTERM leaves time for), the
    saves (in the background where allowed; one in flight at a time) and their commit: once every process's files
    are durable, process 0 writes the manifest. It saves and restores a ``trainer.state.TrainState``.

    ``step_end``, ``poll``, ``wait`` and ``on_stop`` are collective: every process calls them at the same points of
    the loop."""

    def __init__(self, run_dir: str, *, interval: int, max_steps: int, dist: Distributed, sharding: str,
                 asynchronous: bool, on_commit: Callable[[SavedCheckpoint], None] | None = None,
                 on_exists: Callable[[int], None] | None = None, sigterm_budget_s: float = SIGTERM_SAVE_BUDGET_S,
                 synchronize: Callable[[], None] | None = None):
        self.run_dir, self.interval, self.max_steps, self.dist = run_dir, interval, max_steps, dist
        self.on_commit, self.on_exists, self.sigterm_budget_s = on_commit, on_exists, sigterm_budget_s
        self.synchronize = synchronize  # the device's queued work done before the state is copied
        self.sharding = sharding
        self.asynchronous = asynchronous
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint") if asynchronous else None
        self.pending: _Pending | None = None
        self.saved: list[SavedCheckpoint] = []

    def due(self, step: int) -> bool:
        return step % self.interval == 0 or step == self.max_steps

    @property
    def in_flight(self) -> bool:
        return self.pending is not None

    def committed(self, step: int) -> bool:
        """Whether the step's manifest already exists (process 0 looks; everyone gets the answer)."""
        found = storage.exists(manifest_uri(self.run_dir, step)) if self.dist.is_main else False
        return bool(self.dist.broadcast_object(found))

    # ---- the policy -------------------------------------------------------------------------------------------
    def step_end(self, state: Snapshotting, *, stop: bool, fault_next: bool, fail: bool = False) -> None:
        """After a step: commit a save that has finished, save the step if due (blocking for the last step and
        one a stop waits for), and make the step's save durable before a planned fault fires."""
        if self.in_flight:
            self.poll()
        if self.due(state.step):
            self.save_state(state, blocking=state.step == self.max_steps or stop, fail=fail)
        if fault_next:
            self.wait()

    def on_stop(self, state: Snapshotting) -> bool:
        """SIGTERM: finish the save in flight and, unless this step is saved already, save it if the last save took
        no longer than the budget (Batch's stop timeout before SIGKILL is 30 s by default). Returns whether this
        step's checkpoint is committed."""
        self.wait()
        last = self.saved[-1] if self.saved else None
        if (last is None or last.step != state.step) and (last.save_s if last else 0.0) <= self.sigterm_budget_s:
            self.save_state(state, blocking=True, fail=False)
        return bool(self.saved and self.saved[-1].step == state.step)

    def save_state(self, state: Snapshotting, *, blocking: bool, fail: bool) -> None:
        """Snapshot ``state`` (``TrainState``: collective where the weights are sharded) and save it."""
        if self.synchronize is not None:
            self.synchronize()
        if not self.save(state.snapshot(), blocking=blocking, fail_before_manifest=fail) and self.on_exists:
            self.on_exists(state.step)

    def save(self, snapshot: Snapshot, *, blocking: bool, fail_before_manifest: bool = False) -> bool:
        """Start saving ``snapshot``; returns False when the step was already committed (nothing is written).
        A blocking save (the last step, before an interruption, a forced failure) is committed on return."""
        started = time.perf_counter()
        self.wait()
        if self.committed(snapshot.step):
            return False
        base = step_uri(self.run_dir, snapshot.step)
        group = self.dist.checkpoint_group
        future: Future[list[FileRecord]]
        if self._executor is not None and not blocking and not fail_before_manifest:
            future = self._executor.submit(write_process_files, base, snapshot, group)
        else:
            future = Future()
            try:
                future.set_result(write_process_files(base, snapshot, group))
            except Exception as exc:
                future.set_exception(exc)
        self.pending = _Pending(snapshot.step, started, future, snapshot.main, fail_before_manifest,
                                blocked_s=time.perf_counter() - started)
        if blocking or fail_before_manifest:
            self.wait()
        return True

    def poll(self) -> SavedCheckpoint | None:
        """Commit the pending save if every process has finished writing it (collective)."""
        if self.pending is None or not self.dist.all_true(self.pending.future.done()):
            return None
        return self._commit()

    def wait(self) -> SavedCheckpoint | None:
        """Finish and commit the pending save, if any (collective)."""
        if self.pending is None:
            return None
        t = time.perf_counter()
        with contextlib.suppress(Exception):  # the error is reported by _commit
            self.pending.future.result()
        self.pending.blocked_s += time.perf_counter() - t
        return self._commit()

    def _commit(self) -> SavedCheckpoint:
        pending, self.pending = self.pending, None
        assert pending is not None
        error = pending.future.exception()
        mine: str | list[FileRecord] = (f"{type(error).__name__}: {error}" if error is not None
                                        else pending.future.result())
        gathered = self.dist.gather_objects(mine)
        base = step_uri(self.run_dir, pending.step)
        outcome = "ok"
        size, files = 0, 0
        if self.dist.is_main:
            assert gathered is not None and pending.main is not None
            errors = [g for g in gathered if isinstance(g, str)]
            records = [r for g in gathered if not isinstance(g, str) for r in g]
            if errors:
                outcome = f"process files failed: {errors[0]}"
            elif pending.fail_before_manifest:
                outcome = "injected"
            else:
                save_s = time.perf_counter() - pending.started
                size = sum(int(r["bytes"]) for r in records) + commit(
                    base, step=pending.step, files=records, main=pending.main, processes=self.dist.world_size,
                    sharding=self.sharding, save_s=save_s)
                files = len(records) + 1
        outcome = self.dist.broadcast_object(outcome)
        if outcome == "injected":
            raise InjectedSaveFailure(f"DUALTRACK_FORCE_FAIL=save: stopped before writing {base}/{MANIFEST}")
        if outcome != "ok":
            raise CheckpointError(f"checkpoint step {pending.step} was not committed: {outcome}")
        saved = SavedCheckpoint(step=pending.step, uri=base, bytes=size, files=files,
                                save_s=time.perf_counter() - pending.started, blocked_s=pending.blocked_s)
        self.saved.append(saved)
        if self.on_commit is not None:
            self.on_commit(saved)
        return saved

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    # ---- resume ----------------------------------------------------------------------------------------------
    def restore(self, run_dirs: list[str], *, spec_hash: str, state: TrainState) -> ResumeSearch:
        """Process 0 finds the newest checkpoint that verifies and tells the others; every process then reads its
        share of it into ``state`` (``TrainState``)."""
        skipped: list[Skipped] = []
        max_step: int | None = None
        optimizer = state.optimizer
        while True:
            # Process 0's answer reaches every process; the others' stand-in is never read.
            decision = (find_newest(run_dirs, spec_hash=spec_hash, max_step=max_step) if self.dist.is_main
                        else (None, []))
            found, passed = self.dist.broadcast_object(decision)
            skipped += passed
            if found is None:
                return ResumeSearch(None, skipped)
            error: str | None = None
            try:
                loaded = load(found, names=optimizer.loaded_names(), group=self.dist.checkpoint_group,
                              make=optimizer.make_template)
            except (ValueError, CheckpointError) as exc:
                error = str(exc)
            # Every process reads the same files; they agree before any of them changes its state.
            if self.dist.all_true(error is None):
                state.load_state_dict(loaded.as_state())
                return ResumeSearch(loaded, skipped)
            reasons = self.dist.gather_objects(error)
            reason = error or next((r for r in reasons or [] if r), "another process could not load it")
            skipped.append(Skipped(found.step, found.uri, reason))
            max_step = found.step - 1
