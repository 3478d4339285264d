"""The trial spec: the API body, the CLI's input and the frozen task both tracks train.

Field-level rules live on the models; rules that relate fields to each other (batch arithmetic, parallel
layouts, fault placement, instance families) live in :func:`check_rules`, so that every rejection carries the
path of the field to fix. :func:`parse_trial` is the one entry point: it returns a valid ``TrialSpec`` or raises
``TrialInvalid`` with every problem found.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from lambdas.domain.catalogue import InstanceCatalogue, load_catalogue

SCHEMA_VERSION = 1
TrackName = Literal["gpu", "trn2"]
TRACKS: tuple[TrackName, ...] = ("gpu", "trn2")
Method = Literal["lora", "qlora", "full", "continued_pretraining"]
Route = Literal["gpu", "trn2_trial", "dual_track"]

BATCH_SAFE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
_S3_URI = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/(?P<key>[^\x00-\x1f\x7f]+)$")
_LOCAL_PATH = re.compile(r"^(file://)?[^\x00-\x1f\x7f:]+$")
ALLOW_LOCAL_PATHS = "allow_local_paths"


class _Model(BaseModel):
    # strict: "lots" is never coerced to a number, "true" never to a bool.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


PositiveInt = Annotated[int, Field(ge=1)]


class TinyModelConfig(_Model):
    """Architecture of a small Llama-class model built in code (rehearsals, tests): no weights are downloaded."""

    vocab_size: Annotated[int, Field(ge=16, le=262144)] = 256
    hidden_size: Annotated[int, Field(ge=8, le=16384)] = 64
    intermediate_size: Annotated[int, Field(ge=8, le=65536)] = 172
    num_hidden_layers: Annotated[int, Field(ge=1, le=128)] = 2
    num_attention_heads: Annotated[int, Field(ge=1, le=128)] = 4
    num_key_value_heads: Annotated[int, Field(ge=1, le=128)] = 2


class ModelRef(_Model):
    id: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")]
    revision: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._/-]+$")]
    uri: str | None = Field(
        default=None, description="Where the weights live (s3://... in production). Omit to build `config` in code."
    )
    config: TinyModelConfig | None = Field(
        default=None, description="Build a small Llama-class model from this config instead of loading weights."
    )
    tokenizer: Annotated[str, Field(min_length=1, max_length=128)] | None = Field(
        default=None, description="Tokenizer id or path; `byte` is the built-in byte-level tokenizer."
    )

    @field_validator("uri")
    @classmethod
    def _uri(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else _check_uri(value, info)


class LoraConfig(_Model):
    rank: Annotated[int, Field(ge=1, le=1024)]
    alpha: Annotated[float, Field(gt=0, le=4096)]
    dropout: Annotated[float, Field(ge=0, lt=1)] = 0.0
    target_modules: Annotated[list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.]{1,64}$")]], Field(min_length=1)]


class DataSpec(_Model):
    train_uri: str
    validation_uri: str
    version: Annotated[str, Field(min_length=1, max_length=64)]
    samples: PositiveInt
    shuffle_seed: Annotated[int, Field(ge=0, le=2**32 - 1)]

    @field_validator("train_uri", "validation_uri")
    @classmethod
    def _uri(cls, value: str, info: ValidationInfo) -> str:
        return _check_uri(value, info)


class EvaluationSpec(_Model):
    interval_steps: PositiveInt
    prompts: Annotated[list[Annotated[str, Field(min_length=1, max_length=2000)]], Field(max_length=32)] = Field(
        default_factory=list, description="Prompts whose greedy completions are compared across tracks."
    )
    max_new_tokens: Annotated[int, Field(ge=1, le=512)] = 32
    loss_tolerance: Annotated[float, Field(gt=0, le=1)] = Field(
        default=0.05, description="Largest acceptable relative gap between the tracks' final validation losses."
    )


class FaultInjection(_Model):
    track: TrackName
    at_step: PositiveInt
    mode: Literal["retryable", "permanent"] = Field(
        default="retryable",
        description="retryable: attempt 1 exits with the reserved fault code and Batch retries it; "
        "permanent: every attempt fails, which exercises the GPU fallback.",
    )


class _TrackBase(_Model):
    instance_type: Annotated[str, Field(min_length=1, max_length=32)]
    nodes: Annotated[int, Field(ge=1, le=64)] = 1
    tensor_parallel: PositiveInt = 1
    pipeline_parallel: PositiveInt = 1
    spot: bool = False


class GpuTrack(_TrackBase):
    pass


class Trn2Track(_TrackBase):
    neuron_sdk: Annotated[str, Field(pattern=r"^\d+\.\d+(\.\d+)?$")]
    compiler_flags: Annotated[list[Annotated[str, Field(pattern=r"^--?[A-Za-z0-9][A-Za-z0-9_.=,:+/-]*$")]],
                              Field(max_length=64)] = Field(default_factory=list)
    logical_nc_config: Literal[1, 2] = 2

    _lnc_not_bool = field_validator("logical_nc_config", mode="before")(lambda cls, v: _no_bool(v))


class Tracks(_Model):
    gpu: GpuTrack | None = None
    trn2: Trn2Track | None = None


class Workload(_Model):
    custom_cuda_ops: bool = False
    graph_change_frequency: Literal["rare", "weekly", "daily"] = "rare"
    dynamic_shapes: bool = False
    shared_platform: bool = False
    long_running: bool = False


class Limits(_Model):
    max_usd: Annotated[float, Field(gt=0)] | None = None
    max_hours: Annotated[float, Field(gt=0, le=24 * 14)] | None = None


class TriageOverride(_Model):
    route: Route
    reason: Annotated[str, Field(min_length=10, max_length=1000)]
    approved_by: Annotated[str, Field(min_length=1, max_length=128)]


class TrialSpec(_Model):
    schema_version: Literal[1]
    name: Annotated[str, Field(pattern=BATCH_SAFE_NAME)]
    owner: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
    model: ModelRef
    method: Method
    lora: LoraConfig | None = None
    data: DataSpec
    sequence_length: Annotated[int, Field(ge=8, le=131072)]
    effective_batch_size: PositiveInt
    micro_batch_size: PositiveInt
    max_steps: Annotated[int, Field(ge=1, le=10_000_000)]
    learning_rate: Annotated[float, Field(gt=0, le=1)]
    precision: Literal["bf16", "fp32"]
    seed: Annotated[int, Field(ge=0, le=2**32 - 1)]
    checkpoint_interval_steps: PositiveInt
    evaluation: EvaluationSpec
    fault_injection: FaultInjection | None = None
    tracks: Tracks
    workload: Workload = Field(default_factory=Workload)
    limits: Limits | None = None
    baseline_logs_uri: str | None = Field(default=None, description="GPU baseline logs the trial compares against.")
    triage_override: TriageOverride | None = None

    _version_not_bool = field_validator("schema_version", mode="before")(lambda cls, v: _no_bool(v))

    @field_validator("baseline_logs_uri")
    @classmethod
    def _uri(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else _check_uri(value, info)

    # ---- derived facts -------------------------------------------------------------------------------------
    def track_names(self) -> list[TrackName]:
        return [name for name in TRACKS if getattr(self.tracks, name) is not None]

    def track(self, name: TrackName) -> GpuTrack | Trn2Track:
        track = getattr(self.tracks, name)
        if track is None:
            raise KeyError(f"trial {self.name!r} has no {name} track")
        return track  # type: ignore[no-any-return]

    def canonical_json(self) -> str:
        return canonical_json(self.model_dump(mode="json", exclude_none=True))

    def spec_hash(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()

    @property
    def trial_id(self) -> str:
        """Deterministic id (name + content hash): the same trial submitted twice is the same trial."""
        return f"{self.name}-{self.spec_hash()[:10]}"


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _no_bool(value: Any) -> Any:
    # Literal[1] matches True (True == 1) even in strict mode; a flag is never a version or a core count.
    if isinstance(value, bool):
        raise ValueError(f"must be an integer, not the boolean {str(value).lower()}")
    return value


def _check_uri(value: str, info: ValidationInfo) -> str:
    if _S3_URI.match(value):
        return value
    allow_local = bool(info.context and info.context.get(ALLOW_LOCAL_PATHS))
    if allow_local and _LOCAL_PATH.match(value) and not value.startswith("s3:"):
        return value
    if allow_local:
        raise ValueError("must be s3://bucket/key or a local path")
    raise ValueError("must be an s3://bucket/key URI (local paths are accepted only with --local)")


# ---- layouts -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """How one track's devices are split. `devices_per_node` = GPUs, or logical NeuronCores for Trainium2."""

    devices_per_node: int
    nodes: int
    tensor_parallel: int
    pipeline_parallel: int

    @property
    def world_size(self) -> int:
        return self.devices_per_node * self.nodes

    @property
    def model_parallel(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel

    @property
    def data_parallel(self) -> int:
        return self.world_size // self.model_parallel


def devices_per_node(track: GpuTrack | Trn2Track, catalogue: InstanceCatalogue) -> int:
    info = catalogue.get(track.instance_type)
    if isinstance(track, Trn2Track):
        return info.logical_neuron_cores(track.logical_nc_config)
    return info.accelerators


def track_layout(spec: TrialSpec, name: TrackName, catalogue: InstanceCatalogue | None = None) -> Layout:
    track = spec.track(name)
    cat = catalogue or load_catalogue()
    return Layout(devices_per_node(track, cat), track.nodes, track.tensor_parallel, track.pipeline_parallel)


def gradient_accumulation_steps(spec: TrialSpec, layout: Layout) -> int:
    """Micro-batches per optimizer step on each data-parallel rank, so every track sees the same effective batch."""
    return spec.effective_batch_size // (spec.micro_batch_size * layout.data_parallel)


# ---- errors ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path or '<document>'}: {self.message}"


class TrialInvalid(ValueError):
    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))

    def as_dicts(self) -> list[dict[str, str]]:
        return [{"path": p.path, "message": p.message} for p in self.problems]


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model class a location points into, to list valid field names for an unknown one."""
    model: type[BaseModel] | None = TrialSpec
    for part in loc:
        if model is None or isinstance(part, int):
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            return model
        model = _first_model(field.annotation)
    return model


def _first_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _first_model(arg)
        if found is not None:
            return found
    return None


def _hint(error: Any) -> str:
    kind = error["type"]
    msg: str = error["msg"]
    loc = tuple(error["loc"])
    if kind == "extra_forbidden":
        parent = _model_at(loc[:-1])
        valid = ", ".join(sorted(parent.model_fields)) if parent else ""
        return f"unknown field; remove it{f' (valid fields here: {valid})' if valid else ''}"
    if kind == "missing":
        return "required field is missing; add it"
    if kind == "literal_error":
        return msg.replace("Input should be", "must be")
    if kind.endswith("_type") or kind.endswith("_parsing"):
        return f"{msg} (got {type(error.get('input')).__name__} {error.get('input')!r:.40})"
    if kind == "string_pattern_mismatch":
        pattern = (error.get("ctx") or {}).get("pattern", "")
        if loc and loc[0] == "name":
            return "must be Batch-safe: 1-64 letters, digits, '-' or '_', starting with a letter or digit"
        return f"{msg.replace('String should match pattern', 'must match')}" if pattern else msg
    if kind == "value_error":
        return msg.removeprefix("Value error, ")
    return msg


def problems_from_validation_error(exc: ValidationError) -> list[Problem]:
    return [Problem(_path(tuple(err["loc"])), _hint(err)) for err in exc.errors()]


# ---- cross-field rules -------------------------------------------------------------------------------------


def check_rules(spec: TrialSpec, catalogue: InstanceCatalogue | None = None) -> list[Problem]:
    cat = catalogue or load_catalogue()
    problems: list[Problem] = []
    add = lambda path, message: problems.append(Problem(path, message))  # noqa: E731

    if spec.method in ("lora", "qlora") and spec.lora is None:
        add("lora", f"required when method is {spec.method!r}; add rank, alpha and target_modules")
    if spec.method not in ("lora", "qlora") and spec.lora is not None:
        add("lora", f"only valid for method lora or qlora; remove it for method {spec.method!r}")

    names = spec.track_names()
    if not names:
        add("tracks", "at least one track is required: add tracks.gpu and/or tracks.trn2")

    for name in names:
        track = spec.track(name)
        base = f"tracks.{name}"
        if track.instance_type not in cat.instances:
            valid = ", ".join(cat.types_for(name))
            add(f"{base}.instance_type", f"unknown instance type {track.instance_type!r}; known {name} types: {valid}")
            continue
        family = cat.get(track.instance_type).family
        if family != name:
            valid = ", ".join(cat.types_for(name))
            add(f"{base}.instance_type",
                f"{track.instance_type} is a {family} instance; the {name} track takes only: {valid}")
            continue
        devices = devices_per_node(track, cat)
        unit = "logical NeuronCores" if name == "trn2" else "GPUs"
        world = devices * track.nodes
        mp = track.tensor_parallel * track.pipeline_parallel
        if track.tensor_parallel > devices:
            add(f"{base}.tensor_parallel",
                f"tensor_parallel {track.tensor_parallel} does not fit in one node of {track.instance_type} "
                f"({devices} {unit}); use a divisor of {devices}")
        elif devices % track.tensor_parallel:
            add(f"{base}.tensor_parallel",
                f"tensor_parallel {track.tensor_parallel} must divide the {devices} {unit} of one "
                f"{track.instance_type} node; use one of {_divisors(devices)}")
        elif world % mp:
            add(f"{base}.pipeline_parallel",
                f"tensor_parallel x pipeline_parallel = {mp} must divide {world} {unit} ({track.nodes} node(s) x "
                f"{devices}); use pipeline_parallel in {[d for d in _divisors(world // track.tensor_parallel)]}")
        else:
            dp = world // mp
            per_step = spec.micro_batch_size * dp
            if spec.effective_batch_size % per_step:
                add("effective_batch_size",
                    f"{spec.effective_batch_size} is not a multiple of micro_batch_size x data_parallel = "
                    f"{spec.micro_batch_size} x {dp} = {per_step} on the {name} track; use a multiple of {per_step} "
                    f"(e.g. {per_step * max(1, round(spec.effective_batch_size / per_step))}) or change the layout")

    if "trn2" in names and spec.method == "qlora":
        add("method", "qlora needs CUDA-only 4-bit kernels and cannot run on the trn2 track; use method 'lora' "
                      "(or drop tracks.trn2)")

    for path, value in (("checkpoint_interval_steps", spec.checkpoint_interval_steps),
                        ("evaluation.interval_steps", spec.evaluation.interval_steps)):
        if value > spec.max_steps:
            add(path, f"{value} exceeds max_steps ({spec.max_steps}); use a value in [1, {spec.max_steps}]")

    fault = spec.fault_injection
    if fault is not None:
        if fault.track not in names:
            add("fault_injection.track", f"the trial has no {fault.track} track; use one of {names}")
        first_ckpt = spec.checkpoint_interval_steps
        if fault.at_step <= first_ckpt:
            add("fault_injection.at_step",
                f"step {fault.at_step} comes before the first checkpoint (step {first_ckpt}), so a resume would have "
                f"nothing to load; use a step in ({first_ckpt}, {spec.max_steps})")
        elif fault.at_step >= spec.max_steps:
            add("fault_injection.at_step",
                f"step {fault.at_step} is not before the last step ({spec.max_steps}); use a step in "
                f"({first_ckpt}, {spec.max_steps})")
    return problems


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def parse_trial(data: Any, *, allow_local_paths: bool = False,
                catalogue: InstanceCatalogue | None = None) -> TrialSpec:
    """Validate a decoded trial document (or its JSON text). Raises TrialInvalid listing every problem."""
    context = {ALLOW_LOCAL_PATHS: allow_local_paths}
    try:
        if isinstance(data, str | bytes | bytearray):
            spec = TrialSpec.model_validate_json(data, context=context)
        else:
            if not isinstance(data, dict):
                raise TrialInvalid([Problem("", f"a trial is a JSON object, got {type(data).__name__}")])
            spec = TrialSpec.model_validate(data, context=context)
    except ValidationError as exc:
        problems = problems_from_validation_error(exc)
        if any(err["type"] == "json_invalid" for err in exc.errors()):
            problems = [Problem("", f"malformed JSON: {exc.errors()[0]['msg']}")]
        raise TrialInvalid(problems) from None
    problems = check_rules(spec, catalogue)
    if problems:
        raise TrialInvalid(problems)
    return spec


def json_schema() -> dict[str, Any]:
    return TrialSpec.model_json_schema()
