"""Neuron compile-cache key: what makes a compiled graph reusable, and where it lives in S3.

The Neuron persistent cache is keyed by the XLA graph and the compiler flags; a cache entry is only safe to reuse
when the model version, shapes, parallel layout, precision, flags, compiler and runtime all match. The key hashes
all of them, so any change yields a new, isolated entry; the prefix stays readable by a human.
"""

from __future__ import annotations

import hashlib
import re

from pydantic import BaseModel, ConfigDict

from lambdas.domain.cache.cache_entries import (
    ENTRY_MARKER,
    QUARANTINE,
    EntryRejected,
    RegistryEntry,
    check_digest,
    check_entry,
    completion_marker,
    entry_name,
)
from lambdas.domain.canonical import canonical_json
from lambdas.domain.json_types import JsonObject, JsonValue
from lambdas.domain.trial.catalogue import InstanceCatalogue, load_catalogue
from lambdas.domain.trial.layout import track_layout
from lambdas.domain.trial.spec import TrialSpec, Trn2Track

# The registry's entries and the completion marker need no trial spec: they are lambdas.domain.cache.cache_entries,
# which the functions that only observe, list or check entries load alone; they are named here too, beside the key.
__all__ = [
    "CHANGE_CLASSES",
    "COMPONENT_CLASSES",
    "ENTRY_MARKER",
    "ENVIRONMENT_FIELDS",
    "KEY_VERSION",
    "QUARANTINE",
    "CacheKey",
    "EntryRejected",
    "Explanation",
    "KeyDifference",
    "RegistryEntry",
    "architecture_hash",
    "cache_key",
    "cache_url",
    "check_digest",
    "check_entry",
    "compare_components",
    "completion_marker",
    "entry_name",
    "explain",
    "key_components",
    "slug",
]

# 2: the model's architecture is part of the key; 3: TorchNeuron (torch, execution, fullgraph); 4: every LoRA setting
# (alpha and dropout are constants of the traced graph) and the tokenizer a model built from its config takes its
# special-token ids from (the embedding's padding index).
KEY_VERSION = 4
# Versions an image pins; when the run's environment record is not known yet, the SDK release stands for them.
ENVIRONMENT_FIELDS = ("torch", "neuronx_cc", "torch_neuronx", "neuron_runtime")


class CacheKey(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    key: str
    prefix: str
    model_slug: str
    compiler_version: str
    components: JsonObject


def slug(text: str) -> str:
    return re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9.]+", "-", text.lower())).strip("-.") or "model"


def key_components(spec: TrialSpec, environment: dict[str, str] | None = None,
                   catalogue: InstanceCatalogue | None = None, run: str | None = None) -> JsonObject:
    """The key's components for the trn2 track's main run, or for ``run`` (a scaling run such as ``trn2-n1``
    trains at its own node count, so its data-parallel degree, and its graphs, are its own)."""
    track = spec.tracks.trn2
    if not isinstance(track, Trn2Track):
        raise ValueError("compile-cache keys exist only for trials with a trn2 track")
    cat = catalogue or load_catalogue()
    layout = track_layout(spec, "trn2", cat, run=run)
    env = environment or {}
    pinned = {name: env.get(name) or f"sdk-{track.neuron_sdk}" for name in ENVIRONMENT_FIELDS}
    target_modules: list[JsonValue] | None = [*sorted(spec.lora.target_modules)] if spec.lora else None
    return {
        "key_version": KEY_VERSION,
        "model_id": spec.model.id,
        "model_revision": spec.model.revision,
        "architecture": architecture_hash(spec),
        "method": spec.method,
        "lora_rank": spec.lora.rank if spec.lora else None,
        "lora_target_modules": target_modules,
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
    model_config = ConfigDict(frozen=True, defer_build=True)

    component: str
    a: JsonValue
    b: JsonValue
    change_class: str


class Explanation(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

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


def compare_components(ka: JsonObject, kb: JsonObject, kernels_changed: bool = False) -> Explanation:
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
              catalogue: InstanceCatalogue | None = None, run: str | None = None) -> CacheKey:
    components = key_components(spec, environment, catalogue, run=run)
    digest = hashlib.sha256(canonical_json(components).encode()).hexdigest()
    model_slug = slug(f"{spec.model.id}@{spec.model.revision}")
    compiler = slug(str(components["neuronx_cc"]))
    return CacheKey(key=digest, prefix=f"neuron/{model_slug}/{compiler}/{digest}/", model_slug=model_slug,
                    compiler_version=compiler, components=components)


def cache_url(bucket: str, key: CacheKey) -> str:
    return f"s3://{bucket}/{key.prefix}"
