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

KEY_VERSION = 1
# Versions an image pins; when the run's environment record is not known yet, the SDK release stands for them.
ENVIRONMENT_FIELDS = ("neuronx_cc", "torch_neuronx", "neuron_runtime")


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
        "method": spec.method,
        "lora_rank": spec.lora.rank if spec.lora else None,
        "lora_target_modules": sorted(spec.lora.target_modules) if spec.lora else None,
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
    }


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
