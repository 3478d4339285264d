"""Neuron compile-cache key: what makes a compiled graph reusable, and where it lives in S3.

The Neuron persistent cache is keyed by the XLA graph and the compiler flags; a cache entry is only safe to reuse
when the model version, shapes, parallel layout, precision, flags, compiler and runtime all match. The key hashes
all of them, so any change yields a new, isolated entry; the prefix stays readable by a human.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from pydantic import BaseModel, ConfigDict

from lambdas.domain.canonical import canonical_json
from lambdas.domain.catalogue import InstanceCatalogue, load_catalogue
from lambdas.domain.trial import TrialSpec, Trn2Track, track_layout
from lambdas.domain.vocabulary import COMPILE_RUN

# 2: the model's architecture is part of the key; 3: TorchNeuron (torch, execution, fullgraph); 4: every LoRA setting
# (alpha and dropout are constants of the traced graph) and the tokenizer a model built from its config takes its
# special-token ids from (the embedding's padding index).
KEY_VERSION = 4
# An entry is published with this marker after all its artefacts, listing each with its size and sha256 (complete
# or absent: no marker, or artefacts that disagree with it, not served: check_entry); a failed compile leaves only a
# record under QUARANTINE/ (see containers/trainer/cache.py).
ENTRY_MARKER = "_dualtrack_complete.json"
QUARANTINE = "_failed"
# Versions an image pins; when the run's environment record is not known yet, the SDK release stands for them.
ENVIRONMENT_FIELDS = ("torch", "neuronx_cc", "torch_neuronx", "neuron_runtime")


class CacheKey(BaseModel):
    model_config = ConfigDict(frozen=True)

    key: str
    prefix: str
    model_slug: str
    compiler_version: str
    components: dict[str, Any]


def slug(text: str) -> str:
    return re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9.]+", "-", text.lower())).strip("-.") or "model"


def key_components(spec: TrialSpec, environment: dict[str, str] | None = None,
                   catalogue: InstanceCatalogue | None = None) -> dict[str, Any]:
    track = spec.tracks.trn2
    if not isinstance(track, Trn2Track):
        raise ValueError("compile-cache keys exist only for trials with a trn2 track")
    cat = catalogue or load_catalogue()
    layout = track_layout(spec, "trn2", cat)
    env = environment or {}
    pinned = {name: env.get(name) or f"sdk-{track.neuron_sdk}" for name in ENVIRONMENT_FIELDS}
    return {
        "key_version": KEY_VERSION,
        "model_id": spec.model.id,
        "model_revision": spec.model.revision,
        "architecture": architecture_hash(spec),
        "method": spec.method,
        "lora_rank": spec.lora.rank if spec.lora else None,
        "lora_target_modules": sorted(spec.lora.target_modules) if spec.lora else None,
        "lora_alpha": spec.lora.alpha if spec.lora else None,
        "lora_dropout": spec.lora.dropout if spec.lora else None,
        "tokenizer": (spec.model.tokenizer or "byte") if spec.model.config is not None else None,
        "neuron_sdk": track.neuron_sdk,
        **pinned,
        "sequence_length": spec.sequence_length,
        "micro_batch_size": spec.micro_batch_size,
        "tensor_parallel": layout.tensor_parallel,
        "pipeline_parallel": layout.pipeline_parallel,
        "data_parallel": layout.data_parallel,
        "precision": spec.precision,
        # Flag order can change the compiler's behaviour, so it is kept as given.
        "compiler_flags": list(track.compiler_flags),
        "logical_nc_config": track.logical_nc_config,
        "instance_family": track.instance_type.split(".")[0],
        # TorchNeuron compiles a compiled step as one graph (fullgraph) per input shape; eager runs compile per op.
        "execution": track.execution,
        "fullgraph": track.execution == "compiled",
    }


def architecture_hash(spec: TrialSpec) -> str:
    """The model's architecture: its config when the trial builds the model from one (hidden size, layers, heads,
    vocabulary...), else the weights it loads (whose config.json comes with them)."""
    if spec.model.config is not None:
        return "config:" + hashlib.sha256(canonical_json(spec.model.config.model_dump(mode="json")).encode()
                                          ).hexdigest()[:16]
    return f"weights:{spec.model.uri or spec.model.id + '@' + spec.model.revision}"


# The source document's four classes of change (its graph-change list), and what each means for a compiled graph.
CHANGE_CLASSES: dict[str, str] = {
    "data or hyper-parameters": "same graph: the compile cache is reused",
    "model structure or operators": "a new graph: recompile (keep GPU while it changes daily)",
    "training flow": "a new graph: recompile, and re-verify compile artefacts and memory bounds",
    "low-level extensions": "custom kernels or fused ops: 'PyTorch runs' is not 'migrated'",
    "compiler environment": "a new compiler, runtime, flags or instance family: recompile",
}
COMPONENT_CLASSES: dict[str, str] = {
    "model_id": "model structure or operators", "model_revision": "model structure or operators",
    "architecture": "model structure or operators", "method": "model structure or operators",
    "lora_rank": "model structure or operators", "lora_target_modules": "model structure or operators",
    "lora_alpha": "model structure or operators", "lora_dropout": "model structure or operators",
    "tokenizer": "model structure or operators",
    "precision": "model structure or operators",
    "sequence_length": "training flow", "micro_batch_size": "training flow", "tensor_parallel": "training flow",
    "pipeline_parallel": "training flow", "data_parallel": "training flow",
    "neuron_sdk": "compiler environment", "neuronx_cc": "compiler environment",
    "torch_neuronx": "compiler environment", "neuron_runtime": "compiler environment",
    "compiler_flags": "compiler environment", "logical_nc_config": "compiler environment",
    "instance_family": "compiler environment", "key_version": "compiler environment",
    "torch": "compiler environment", "execution": "training flow", "fullgraph": "training flow",
}


class KeyDifference(BaseModel):
    model_config = ConfigDict(frozen=True)

    component: str
    a: Any
    b: Any
    change_class: str


class Explanation(BaseModel):
    model_config = ConfigDict(frozen=True)

    same_key: bool
    differences: list[KeyDifference]
    change_classes: list[str]
    meaning: list[str]
    summary: str


def explain(a: TrialSpec, b: TrialSpec, environment_a: dict[str, str] | None = None,
            environment_b: dict[str, str] | None = None) -> Explanation:
    """Which key components make two trials miss each other's cache entries, and the change class of each."""
    return compare_components(key_components(a, environment_a), key_components(b, environment_b),
                              a.workload.custom_cuda_ops != b.workload.custom_cuda_ops)


def compare_components(ka: dict[str, Any], kb: dict[str, Any], kernels_changed: bool = False) -> Explanation:
    """``explain`` over two key-component records (as the trials table keeps them)."""
    # A record of an older key version lacks the components added since: the version names that difference.
    versions_differ = ka.get("key_version") != kb.get("key_version")
    differences = [KeyDifference(component=name, a=ka.get(name), b=kb.get(name),
                                 change_class=COMPONENT_CLASSES.get(name, "compiler environment"))
                   for name in dict.fromkeys([*ka, *kb]) if ka.get(name) != kb.get(name)
                   and not (versions_differ and (name not in ka or name not in kb))]
    classes = list(dict.fromkeys(d.change_class for d in differences))
    if kernels_changed:
        classes.append("low-level extensions")
    if not differences and not classes:
        classes = ["data or hyper-parameters"]
    same = not differences
    summary = ("same key: the second trial reuses the first's compiled graphs" if same else
               f"different keys: {', '.join(d.component for d in differences)} differ ({'; '.join(classes)})")
    return Explanation(same_key=same, differences=differences, change_classes=classes,
                       meaning=[f"{c}: {CHANGE_CLASSES[c]}" for c in classes], summary=summary)


def cache_key(spec: TrialSpec, environment: dict[str, str] | None = None,
              catalogue: InstanceCatalogue | None = None) -> CacheKey:
    components = key_components(spec, environment, catalogue)
    digest = hashlib.sha256(canonical_json(components).encode()).hexdigest()
    model_slug = slug(f"{spec.model.id}@{spec.model.revision}")
    compiler = slug(str(components["neuronx_cc"]))
    return CacheKey(key=digest, prefix=f"neuron/{model_slug}/{compiler}/{digest}/", model_slug=model_slug,
                    compiler_version=compiler, components=components)


def cache_url(bucket: str, key: CacheKey) -> str:
    return f"s3://{bucket}/{key.prefix}"


# ---- who may speak for an entry --------------------------------------------------------------------------------
def compile_writer(warm: bool, compile_stage: bool) -> str | None:
    """The run the workflow sends to build a trial's entry: the warm-up compile stage when the entry is cold and the
    stage has a compile queue (its CacheCold choice), else the training run, which compiles it itself; none when the
    entry is warm (the training run is sent to use it, not to write it)."""
    if warm:
        return None
    return COMPILE_RUN if compile_stage else "trn2"


def claim_refusal(trial: dict[str, Any], run: str, claimed: str, outcome: str) -> str | None:
    """Why a run's summary may not report ``outcome`` for entry ``claimed`` (None: it may). A summary speaks only for
    the entry the plane resolved for its trial; any Trainium2 run of the trial may report a hit, but only the run
    sent to compile the entry marks it ready or failed."""
    resolved, writer = trial.get("cache_key"), trial.get("cache_writer")
    if run not in ("trn2", COMPILE_RUN):
        return f"run {run} runs on GPUs and uses no compile-cache entry, but reported {outcome} for {claimed}"
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


def entry_name(name: str) -> str:
    """``name`` as a path inside an entry, or EntryRejected when it would leave the entry (S3 keys are any string:
    ``..`` segments and absolute paths become writes outside a local mirror)."""
    if (not name or name.startswith("/") or "\\" in name or any(ord(c) < 32 for c in name)
            or any(part in ("", ".", "..") for part in name.split("/"))):
        raise EntryRejected(f"object name {name!r} leaves the entry (empty, absolute or '.'/'..' segments)")
    return name


def completion_marker(files: dict[str, tuple[int, str | None]]) -> dict[str, Any]:
    """What a publisher writes last: every artefact (name -> size and, where the publisher read it, sha256)."""
    listed = {name: {"bytes": size, **({"sha256": digest} if digest else {})}
              for name, (size, digest) in sorted(files.items())}
    return {"version": MARKER_VERSION, "files": listed, "count": len(listed),
            "bytes": sum(size for size, _ in files.values())}


def listed_files(marker: Any) -> dict[str, tuple[int, str | None]]:
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


def check_entry(marker: Any, held: dict[str, int]) -> dict[str, tuple[int, str | None]]:
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
