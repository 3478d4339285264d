"""Sharded checkpoints with a manifest written last, once (``<run-dir>/checkpoints/step-<N>/``).

Shards: ``adapter_model.safetensors`` (LoRA, peft's standard adapter format, with ``adapter_config.json``) or
``model.safetensors`` (full), ``optimizer.pt``, ``scheduler.pt``, ``rng.pt``, ``trainer_state.json``. The manifest
lists every shard's sha256 and size; a step directory without a manifest (torn) or whose shards do not match it
(corrupt) is skipped on resume and never loaded. Both tracks write and read the same format, so a GPU fallback can
resume a Trainium2 run's checkpoint.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import random
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from trainer import storage

FORMAT = "dualtrack-checkpoint"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
STEP_DIR = re.compile(r"^step-(\d+)$")


def step_uri(run_dir: str, step: int) -> str:
    return storage.join(run_dir, "checkpoints", f"step-{step}")


def to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu")
    if isinstance(value, dict):
        return {k: to_cpu(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(to_cpu(v) for v in value)
    return value


def _torch_bytes(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@dataclass
class SavedCheckpoint:
    step: int
    uri: str
    bytes: int
    files: int
    save_s: float


@dataclass
class LoadedCheckpoint:
    step: int
    uri: str
    manifest: dict[str, Any]
    weights: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    scheduler: dict[str, Any]
    rng: dict[str, Any]
    state: dict[str, Any]
    restore_s: float


@dataclass
class Skipped:
    step: int
    uri: str
    reason: str


@dataclass
class ResumeSearch:
    loaded: LoadedCheckpoint | None
    skipped: list[Skipped] = field(default_factory=list)


class InjectedSaveFailure(RuntimeError):
    pass


def save(run_dir: str, *, step: int, weights: dict[str, torch.Tensor], lora_config: dict[str, Any] | None,
         optimizer: dict[str, Any], scheduler: dict[str, Any], rng: dict[str, Any], state: dict[str, Any],
         meta: dict[str, Any], fail_before_manifest: bool = False) -> SavedCheckpoint:
    """Write the shards, then the manifest (write-once). ``fail_before_manifest`` leaves a torn checkpoint."""
    started = time.perf_counter()
    base = step_uri(run_dir, step)
    weights_name = "adapter_model.safetensors" if lora_config is not None else "model.safetensors"
    shards: dict[str, bytes] = {
        weights_name: save_safetensors(weights, metadata={"format": "pt"}),
        "optimizer.pt": _torch_bytes(to_cpu(optimizer)),
        "scheduler.pt": _torch_bytes(scheduler),
        "rng.pt": _torch_bytes(rng),
        "trainer_state.json": json.dumps(state, sort_keys=True).encode(),
    }
    if lora_config is not None:
        shards["adapter_config.json"] = json.dumps(lora_config, sort_keys=True, default=str).encode()
    for name, data in shards.items():
        storage.write_bytes(storage.join(base, name), data)
    if fail_before_manifest:
        raise InjectedSaveFailure(f"DUALTRACK_FORCE_FAIL=save: stopped before writing {base}/{MANIFEST}")
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "step": step, "weights": weights_name,
        "lora": lora_config is not None, "optimizer": True, "scheduler": True, "rng": True,
        "data_position": state.get("data_position"),
        "shards": [{"name": n, "sha256": hashlib.sha256(d).hexdigest(), "bytes": len(d)} for n, d in shards.items()],
        "created_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"), **meta,
    }
    body = json.dumps(manifest, indent=2, sort_keys=True).encode()
    # Another attempt may already have completed this step: its checkpoint stands and ours is not needed.
    with contextlib.suppress(storage.AlreadyExists):
        storage.write_once(storage.join(base, MANIFEST), body)
    total = sum(len(d) for d in shards.values()) + len(body)
    return SavedCheckpoint(step=step, uri=base, bytes=total, files=len(shards) + 1,
                           save_s=time.perf_counter() - started)


def list_steps(run_dir: str) -> list[int]:
    steps = []
    for name in storage.list_prefixes(storage.join(run_dir, "checkpoints")):
        match = STEP_DIR.match(name)
        if match:
            steps.append(int(match.group(1)))
    return sorted(steps)


def verify(base: str) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The manifest and the shard bytes, or ValueError naming what is wrong."""
    try:
        manifest = json.loads(storage.read_bytes(storage.join(base, MANIFEST)))
    except FileNotFoundError:
        raise ValueError("no manifest.json (torn: the save did not finish)") from None
    except Exception as exc:  # S3 NoSuchKey, bad JSON
        if "NoSuchKey" in repr(exc) or "Not Found" in repr(exc) or "404" in repr(exc):
            raise ValueError("no manifest.json (torn: the save did not finish)") from None
        raise ValueError(f"unreadable manifest.json: {exc}") from None
    if manifest.get("format") != FORMAT or manifest.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"not a {FORMAT} v{FORMAT_VERSION} manifest")
    shards: dict[str, bytes] = {}
    for shard in manifest.get("shards", []):
        try:
            data = storage.read_bytes(storage.join(base, shard["name"]))
        except Exception:
            raise ValueError(f"shard {shard['name']} is missing") from None
        if len(data) != shard["bytes"] or hashlib.sha256(data).hexdigest() != shard["sha256"]:
            raise ValueError(f"shard {shard['name']} does not match its sha256/size in the manifest (corrupt)")
        shards[shard["name"]] = data
    return manifest, shards


def load_newest(run_dirs: list[str], *, max_step: int | None = None) -> ResumeSearch:
    """The newest verifying checkpoint across ``run_dirs`` (own run dir first, then --resume-from)."""
    candidates = sorted({(step, i, d) for i, d in enumerate(run_dirs) for step in list_steps(d)
                         if max_step is None or step <= max_step}, key=lambda c: (-c[0], c[1]))
    skipped: list[Skipped] = []
    for step, _, run_dir in candidates:
        started = time.perf_counter()
        base = step_uri(run_dir, step)
        try:
            manifest, shards = verify(base)
        except ValueError as exc:
            skipped.append(Skipped(step, base, str(exc)))
            continue
        weights = load_safetensors(shards[manifest["weights"]])
        loaded = LoadedCheckpoint(
            step=int(manifest["step"]), uri=base, manifest=manifest, weights=weights,
            optimizer=torch.load(io.BytesIO(shards["optimizer.pt"]), weights_only=False),
            scheduler=torch.load(io.BytesIO(shards["scheduler.pt"]), weights_only=False),
            rng=torch.load(io.BytesIO(shards["rng.pt"]), weights_only=False),
            state=json.loads(shards["trainer_state.json"]), restore_s=0.0)
        loaded.restore_s = time.perf_counter() - started
        return ResumeSearch(loaded, skipped)
    return ResumeSearch(None, skipped)
