"""The trial spec: the API body, the CLI's input and the frozen task both tracks train.

Field-level rules live on the models; rules that relate fields to each other (batch arithmetic, parallel
layouts, fault placement, instance families, model sources and architectures, the attempt timeout) live in
:func:`check_rules`, so that every rejection carries the path of the field to fix. :func:`parse_trial` is the one
entry point: it returns a valid ``TrialSpec`` or raises ``TrialInvalid`` with every problem found.

What depends on the stage (which buckets the job role can read) is checked at submission by
:func:`unreadable_inputs`, since ``dualtrack validate`` does not know the stage.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from lambdas.domain.canonical import canonical_json
from lambdas.domain.catalogue import InstanceCatalogue, load_catalogue
from lambdas.domain.json_types import JsonObject
from lambdas.domain.vocabulary import scaling_nodes, scaling_run, track_of

SCHEMA_VERSION = 1
TrackName = Literal["gpu", "trn2"]
TRACKS: tuple[TrackName, ...] = ("gpu", "trn2")
Method = Literal["lora", "qlora", "full", "continued_pretraining"]
Route = Literal["gpu", "trn2_trial", "dual_track"]

BATCH_SAFE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
_S3_URI = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/(?P<key>[^\x00-\x1f\x7f]+)$")
_LOCAL_PATH = re.compile(r"^(file://)?[^\x00-\x1f\x7f:]+$")
ALLOW_LOCAL_PATHS = "allow_local_paths"

# Vocabulary of the trainer's built-in `byte` tokenizer (containers/trainer/tokenizer.py, ByteTokenizer.vocab_size):
# 256 byte ids plus pad, bos and eos. Kept here because the domain never imports trainer code; a unit test asserts
# the two agree.
BYTE_TOKENIZER_VOCAB_SIZE = 256 + 3
# AWS Batch refuses an attempt timeout under 60 seconds
# (https://docs.aws.amazon.com/batch/latest/userguide/job_timeouts.html); limits.max_hours becomes that timeout.
MIN_ATTEMPT_TIMEOUT_S = 60
# Sequences per optimizer step. Large pre-training runs step a few thousand sequences (a few million tokens); the
# bound leaves room above that and keeps the number a step's arithmetic and the report carry finite.
MAX_EFFECTIVE_BATCH_SIZE = 65_536
# The trainer always builds or loads a LlamaForCausalLM; these are the layers peft can wrap with LoRA adapters
# (Linear and Embedding modules), and the Llama modules it refuses (attention/MLP blocks, norms, activations).
LLAMA_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "embed_tokens",
                      "lm_head")
LLAMA_UNWRAPPABLE = ("model", "layers", "self_attn", "mlp", "input_layernorm", "post_attention_layernorm", "norm",
                     "rotary_emb", "act_fn")


class _Model(BaseModel):
    # strict: "lots" is never coerced to a number, "true" never to a bool.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)


PositiveInt = Annotated[int, Field(ge=1)]


class TinyModelConfig(_Model):
    """Architecture of a small Llama-class model built in code (rehearsals, tests): no weights are downloaded."""

    vocab_size: Annotated[int, Field(ge=16, le=262144)] = BYTE_TOKENIZER_VOCAB_SIZE
    hidden_size: Annotated[int, Field(ge=8, le=16384)] = 64
    intermediate_size: Annotated[int, Field(ge=8, le=65536)] = 176
    num_hidden_layers: Annotated[int, Field(ge=1, le=128)] = 2
    num_attention_heads: Annotated[int, Field(ge=1, le=128)] = 8
    num_key_value_heads: Annotated[int, Field(ge=1, le=128)] = 8


class ModelRef(_Model):
    id: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")]
    revision: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._/-]+$")]

    @field_validator("id", "revision")
    @classmethod
    def _no_parent_segments(cls, value: str) -> str:
        # Both become parts of S3 keys and compile-cache prefixes: a ".." segment would climb out of them.
        if ".." in value.split("/") or value.startswith("/") or value.endswith("/") or "//" in value:
            raise ValueError(f"{value!r} has an empty or '..' path segment; it becomes part of S3 keys, so use "
                             "segments of letters, digits, '.', '_' and '-'")
        return value
    uri: str | None = Field(
        default=None,
        description="Where the weights live: an s3:// prefix the job role can read (job subnets have no internet "
        "access, so a hub id alone cannot be loaded). Omit to build `config` in code.",
    )
    config: TinyModelConfig | None = Field(
        default=None, description="Build a small Llama-class model from this config instead of loading weights."
    )
    tokenizer: Annotated[str, Field(min_length=1, max_length=128)] | None = Field(
        default=None,
        description="`byte` (the built-in byte-level tokenizer) or an s3:// prefix holding a saved tokenizer; "
        "omitted: `byte` with `config`, else the tokenizer saved with the weights at `uri`.",
    )

    @field_validator("uri")
    @classmethod
    def _uri(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else _check_uri(value, info)

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None or value == "byte":
            return value
        try:
            return _check_uri(value, info)
        except ValueError:
            where = "an s3://bucket/prefix or a local path" if _allow_local(info) else "an s3://bucket/prefix"
            raise ValueError(
                f"must be 'byte' (the built-in byte tokenizer) or {where} holding a saved tokenizer; job subnets "
                "have no internet access, so a hub id cannot be downloaded"
            ) from None


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


EvalMetric = Literal["validation_loss", "perplexity", "exact_match"]
# How the team expects a failed run to recover (the source document's task description): resume the same track
# from its newest checkpoint, fall back to the GPU track from Trainium2's checkpoint, restart from step 0, or not at
# all (``none``: no GPU fallback runs when the Trainium2 run fails).
Recovery = Literal["resume_same_track", "gpu_fallback", "restart", "none"]


def _validation_loss_only() -> list[EvalMetric]:
    return ["validation_loss"]


class LearningRequirement(_Model):
    """What "the run learned" means for this trial. A run whose weights never changed, or whose training loss did
    not fall, is no evidence about its track (a Trainium2 loop can run to the end with its optimizer updates never
    reaching the weights and raise nothing), so the report gives no verdict on it."""

    min_loss_drop: Annotated[float, Field(ge=0, lt=1)] = Field(
        default=0.01, description="Smallest relative fall of the training loss by by_step: the median of the run's "
        "first steps against the median of its steps up to by_step (0.01: 1%). Medians of a few steps each, so one "
        "noisy batch neither fails a run that learned nor passes one that did not.")
    by_step: Annotated[int, Field(ge=2)] | None = Field(
        default=None, description="The step by which the loss must have fallen by min_loss_drop, at most max_steps; "
        "absent: max_steps.")


class EvaluationSpec(_Model):
    interval_steps: PositiveInt
    prompts: Annotated[list[Annotated[str, Field(min_length=1, max_length=2000)]], Field(max_length=32)] = Field(
        default_factory=list, description="Prompts whose greedy completions are compared across tracks."
    )
    max_new_tokens: Annotated[int, Field(ge=1, le=512)] = 32
    loss_tolerance: Annotated[float, Field(gt=0, le=1)] = Field(
        default=0.05, description="Largest acceptable relative gap between the tracks' final validation losses."
    )
    metrics: Annotated[list[EvalMetric], Field(min_length=1, max_length=3)] = Field(
        default_factory=_validation_loss_only,
        description="What the report judges the tracks' outputs by: validation_loss (always, within "
        "loss_tolerance), perplexity (exp of the validation loss, within loss_tolerance relative), exact_match "
        "(the share of the fixed prompts whose greedy completions are identical across tracks, at least "
        "min_exact_match; needs prompts)")
    min_exact_match: Annotated[float, Field(ge=0, le=1)] = Field(
        default=0.8, description="With the exact_match metric: the share of prompts that must complete identically")
    learning: LearningRequirement | None = Field(
        default=None, description="What each run must show to count as evidence: its weights changed, and its "
        "training loss fell by min_loss_drop by by_step. Absent: the defaults (1% by max_steps), and the trial's "
        "hash is that of a trial written before this field existed.")

    def learning_requirement(self) -> LearningRequirement:
        """The declared learning requirement, or the default one."""
        return self.learning or LearningRequirement()

    @field_validator("metrics")
    @classmethod
    def _metrics_need_their_inputs(cls, metrics: list[EvalMetric], info: ValidationInfo) -> list[EvalMetric]:
        if len(set(metrics)) != len(metrics):
            raise ValueError(f"{metrics} lists a metric twice; list each once")
        if "exact_match" in metrics and not info.data.get("prompts"):
            raise ValueError("exact_match compares the completions of evaluation.prompts: add prompts, or drop "
                             "exact_match")
        return metrics


class FaultInjection(_Model):
    track: TrackName
    at_step: PositiveInt
    mode: Literal["retryable", "permanent"] = Field(
        default="retryable",
        description="retryable: attempt 1 exits with the reserved fault code and Batch retries it; "
        "permanent: every attempt fails, which exercises the GPU fallback.",
    )
    node: Annotated[int, Field(ge=0, le=63)] | None = Field(
        default=None,
        description="the node of a multi-node run whose processes fault (its AWS_BATCH_JOB_NODE_INDEX); every node "
        "when absent. A fault on a child node alone still ends the job as resumable: Batch takes a multi-node job's "
        "status from its main node, whose processes find their peer gone and exit with the reserved fault code.",
    )


# Node counts a track may compare beside its main run's (``nodes: [1, 2]``): each is a full run of the trial.
MAX_SCALING_COUNTS = 3
MAX_NODES = 64
_NODES_DESCRIPTION = (
    "nodes of instance_type the track's run uses; a list (e.g. [1, 2]) runs the track at each count to compare "
    "them: the largest is the main run the verdict uses, the others are scaling runs (<track>-n<count>)")
_NODE_COUNT: JsonObject = {"type": "integer", "minimum": 1, "maximum": MAX_NODES}
# What a client may send (the model keeps the main run's count in ``nodes`` and the others in ``scaling_nodes``).
_NODES_SCHEMA: JsonObject = {
    "anyOf": [dict(_NODE_COUNT), {"type": "array", "items": dict(_NODE_COUNT), "minItems": 1,
                                  "maxItems": MAX_SCALING_COUNTS + 1, "uniqueItems": True}],
    "default": 1, "title": "Nodes", "description": _NODES_DESCRIPTION}


def _nodes_list_problem(counts: list[Any]) -> str | None:
    """Why a ``nodes`` list is not a set of node counts a track can run (None: it is)."""
    if not counts or not all(isinstance(n, int) and not isinstance(n, bool) for n in counts):
        return f"nodes {counts!r}: give a node count or a list of node counts such as [1, 2]"
    if len(set(counts)) != len(counts):
        return f"nodes {counts} lists a count twice; list each once"
    outside = [n for n in counts if not 1 <= n <= MAX_NODES]
    if outside:
        return f"nodes {counts}: each count must be 1 to {MAX_NODES}, not {outside}"
    if len(counts) > MAX_SCALING_COUNTS + 1:
        return (f"nodes {counts} lists {len(counts)} counts; list at most {MAX_SCALING_COUNTS + 1} (the main run "
                f"and {MAX_SCALING_COUNTS} scaling runs, each a full run of the trial)")
    return None


class _TrackBase(_Model):
    instance_type: Annotated[str, Field(min_length=1, max_length=32)]
    nodes: Annotated[int, Field(ge=1, le=MAX_NODES, description=_NODES_DESCRIPTION),
                     WithJsonSchema(_NODES_SCHEMA, mode="validation")] = 1
    scaling_nodes: Annotated[list[Annotated[int, Field(ge=1, le=MAX_NODES)]], Field(
        min_length=1, max_length=MAX_SCALING_COUNTS, json_schema_extra={"uniqueItems": True})] | None = Field(
            default=None, description=(
                "the other node counts the track also runs at, each below nodes, for the report's scaling section "
                "(written for you from a nodes list); each is a full run of the trial at that count, with the same "
                "effective batch"))
    tensor_parallel: PositiveInt = 1
    pipeline_parallel: PositiveInt = 1
    spot: bool = False

    @model_validator(mode="before")
    @classmethod
    def _nodes_list(cls, value: Any) -> Any:
        """``nodes: [1, 2]`` is ``nodes: 2`` (the main run) with ``scaling_nodes: [1]``. A list that is not a set
        of counts stays for ``nodes``' own check, which refuses it at its path."""
        if not isinstance(value, dict) or not isinstance(value.get("nodes"), list):
            return value
        counts = value["nodes"]
        if _nodes_list_problem(counts) is not None or "scaling_nodes" in value:
            return value
        others = sorted(n for n in counts if n != max(counts))
        return {**value, "nodes": max(counts), **({"scaling_nodes": others} if others else {})}

    @field_validator("nodes", mode="before")
    @classmethod
    def _no_bad_list(cls, value: Any) -> Any:
        """A list left here is not a set of counts, or came with scaling_nodes (a good one was split above)."""
        if isinstance(value, list):
            raise ValueError(_nodes_list_problem(value) or "give the node counts once: either a nodes list or "
                             "nodes with scaling_nodes")
        return value

    @field_validator("scaling_nodes")
    @classmethod
    def _counts_below_main(cls, counts: list[int] | None, info: ValidationInfo) -> list[int] | None:
        if counts is None:
            return None
        if len(set(counts)) != len(counts):
            raise ValueError(f"{counts} lists a count twice; list each once")
        nodes = info.data.get("nodes")  # absent when nodes itself was refused
        if isinstance(nodes, int) and max(counts) >= nodes:
            raise ValueError(f"{counts} must be below nodes ({nodes}): the main run is the largest count; write "
                             f"the counts as a nodes list, e.g. nodes: {sorted({*counts, nodes})}")
        return sorted(counts)

    def at_nodes(self, nodes: int) -> Self:
        """This track's configuration for a run at ``nodes`` nodes (a scaling run): no scaling runs of its own."""
        return self.model_copy(update={"nodes": nodes, "scaling_nodes": None})


class GpuTrack(_TrackBase):
    pass


# Options that point the Neuron compiler's persistent cache somewhere else (NEURON_CC_FLAGS="--cache_dir=..."): the
# cache a trial uses is the plane's (its entry under the key), never one the trial names.
CACHE_LOCATION_OPTIONS = frozenset({"cache_dir", "cache_url", "compile_cache_url"})


class Trn2Track(_TrackBase):
    neuron_sdk: Annotated[str, Field(pattern=r"^\d+\.\d+(\.\d+)?$")]
    compiler_flags: Annotated[list[Annotated[str, Field(pattern=r"^--?[A-Za-z0-9][A-Za-z0-9_.=,:+/-]*$")]],
                              Field(max_length=64)] = Field(default_factory=list)
    logical_nc_config: Literal[1, 2] = 2
    execution: Literal["eager", "compiled"] = Field(
        default="compiled", description="how the Trainium2 track runs the training step on TorchNeuron: `compiled` "
        "(the default, the path for performance: torch.compile with the neuron backend, fullgraph, one graph per "
        "shape, cached by the plane) or `eager` (op by op, for validating correctness). The CPU stand-in follows it "
        "with Inductor. Part of the compile-cache key")

    _lnc_not_bool = field_validator("logical_nc_config", mode="before")(lambda cls, v: _no_bool(v))

    @field_validator("compiler_flags", mode="before")
    @classmethod
    def _one_form_per_option(cls, value: Any) -> Any:
        """Flags that mean one thing must be written one way: the compile-cache key hashes them as given, and the
        compiler takes the last of a repeated option, so a value apart from its option, a repeated option or the
        short -O<n> form would either run something else or split one configuration over two cache entries."""
        if not isinstance(value, list):
            return value
        seen: dict[str, str] = {}
        for index, flag in enumerate(value):
            if not isinstance(flag, str):
                continue
            if not flag.startswith("-"):
                before = value[index - 1] if index else None
                fix = f"join it to its option: {before}={flag}" if isinstance(before, str) else "remove it"
                raise ValueError(f"compiler_flags[{index}] {flag!r} is not an option; {fix}")
            if re.fullmatch(r"-O[0-9]", flag):
                raise ValueError(f"compiler_flags[{index}] {flag!r}: write it as --optlevel={flag[2]} (one form per "
                                 "option, so equal settings share a cache entry)")
            name = flag.split("=", 1)[0]
            if name.lstrip("-").replace("-", "_") in CACHE_LOCATION_OPTIONS:
                raise ValueError(f"compiler_flags[{index}] {flag!r} moves the compile cache out of the plane's cache "
                                 "bucket, where no key, completion marker or quarantine covers it: remove it (the "
                                 "workflow sets NEURON_COMPILE_CACHE_URL to the trial's entry in the cache bucket)")
            if name in seen:
                raise ValueError(f"compiler_flags[{index}] {flag!r} repeats {seen[name]!r}; the compiler keeps only "
                                 "the last: give each option once")
            seen[name] = flag
        return value


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
    max_usd: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    max_hours: Annotated[float, Field(gt=0, le=24 * 14, allow_inf_nan=False)] | None = None


class TriageOverride(_Model):
    route: Route
    reason: Annotated[str, Field(min_length=10, max_length=1000)]
    approved_by: Annotated[str, Field(min_length=1, max_length=128)] | None = Field(
        default=None, description="who the submitter consulted (free text, informational): an override is approved "
        "only by a team approver through POST /trials/{id}/approve, which records who and when")


class TrialSpec(_Model):
    schema_version: Literal[1]
    name: Annotated[str, Field(pattern=BATCH_SAFE_NAME)]
    owner: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
    model: ModelRef
    method: Method
    lora: LoraConfig | None = None
    data: DataSpec
    sequence_length: Annotated[int, Field(ge=8, le=131072)]
    effective_batch_size: Annotated[int, Field(ge=1, le=MAX_EFFECTIVE_BATCH_SIZE, description=(
        "sequences per optimizer step (micro_batch_size x data parallel x gradient accumulation steps), at most "
        f"{MAX_EFFECTIVE_BATCH_SIZE}"))]
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
    failure_recovery: Recovery | None = Field(default=None, description=(
        "How a failed run is expected to recover: resume_same_track (Batch retries the attempt, which resumes "
        "from the newest checkpoint), gpu_fallback (Trainium2's checkpoint is resumed on the GPU track; needs a gpu "
        "and a trn2 track and a checkpoint before max_steps), restart (from step 0), or none (no GPU fallback runs "
        "when the Trainium2 run fails). Absent: a trial with both tracks falls back to GPU. The report checks the "
        "runs against it."))
    baseline_logs_uri: str | None = Field(default=None, description=(
        "The team's GPU baseline logs: a Hugging Face Trainer trainer_state.json, a dualtrack metrics.jsonl, or a "
        "CSV of step,loss[,eval_loss]. The report checks that the GPU track reproduces it (losses within "
        "evaluation.loss_tolerance, relative, at shared steps) before comparing Trainium2 with the GPU track."))
    baseline_instance_type: str | None = Field(default=None, description=(
        "The GPU instance type the baseline logs were trained on (e.g. p5.48xlarge): a Trainium2 pilot prices the "
        "baseline's cost per step at it. Absent: the trial's gpu track's, if it declares one."))
    baseline_nodes: Annotated[int, Field(ge=1, le=64)] | None = Field(default=None, description=(
        "How many of baseline_instance_type the baseline ran on (default 1)."))
    triage_override: TriageOverride | None = None

    _version_not_bool = field_validator("schema_version", mode="before")(lambda cls, v: _no_bool(v))

    @field_validator("baseline_logs_uri")
    @classmethod
    def _uri(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else _check_uri(value, info)

    @field_validator("baseline_instance_type")
    @classmethod
    def _baseline_instance(cls, value: str | None) -> str | None:
        if value is None:
            return None
        catalogue = load_catalogue()
        info = catalogue.instances.get(value)
        if info is None or info.family != "gpu":
            types = ", ".join(catalogue.types_for("gpu"))
            raise ValueError(f"{value!r} is not a GPU instance type; use one of: {types}")
        return value

    # ---- derived facts -------------------------------------------------------------------------------------
    def track_names(self) -> list[TrackName]:
        return [name for name in TRACKS if getattr(self.tracks, name) is not None]

    def track(self, name: TrackName) -> GpuTrack | Trn2Track:
        track = getattr(self.tracks, name)
        if track is None:
            raise KeyError(f"trial {self.name!r} has no {name} track")
        return track  # type: ignore[no-any-return]

    def scaling_runs(self) -> dict[str, tuple[TrackName, int]]:
        """Each scaling run's name with its track and node count, in track order then by count."""
        return {scaling_run(name, n): (name, n) for name in self.track_names()
                for n in (self.track(name).scaling_nodes or [])}

    def run_track(self, run: str) -> GpuTrack | Trn2Track:
        """The track configuration ``run`` trains with: its track's, at the scaling run's node count."""
        track = self.track(track_of(run))
        nodes = scaling_nodes(run)
        return track if nodes is None else track.at_nodes(nodes)

    def canonical_json(self) -> str:
        return canonical_json(self.model_dump(mode="json", exclude_none=True))

    def spec_hash(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()

    @property
    def trial_id(self) -> str:
        """Deterministic id (name + content hash): the same trial submitted twice is the same trial."""
        return f"{self.name}-{self.spec_hash()[:10]}"


def _no_bool(value: Any) -> Any:
    # Literal[1] matches True (True == 1) even in strict mode; a flag is never a version or a core count.
    if isinstance(value, bool):
        raise ValueError(f"must be an integer, not the boolean {str(value).lower()}")
    return value


def _allow_local(info: ValidationInfo) -> bool:
    return bool(info.context and info.context.get(ALLOW_LOCAL_PATHS))


_IP_ADDRESS = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")
# Amazon S3 User Guide, "General purpose bucket naming rules": what a bucket name must not be, beyond its characters.
_BUCKET_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_BUCKET_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


def bucket_name_problem(bucket: str) -> str | None:
    """Why S3 would refuse ``bucket`` as a general purpose bucket name (None: it would not), beyond the characters
    and length the URI pattern already checks."""
    if ".." in bucket:
        return f"bucket {bucket!r} has two adjacent periods, which S3 bucket names must not"
    if ".-" in bucket or "-." in bucket:
        return f"bucket {bucket!r} has a period next to a hyphen, which S3 bucket names must not"
    if _IP_ADDRESS.match(bucket):
        return f"bucket {bucket!r} is formatted as an IP address, which S3 bucket names must not be"
    for prefix in _BUCKET_PREFIXES:
        if bucket.startswith(prefix):
            return f"bucket {bucket!r} starts with {prefix!r}, a prefix S3 reserves"
    for suffix in _BUCKET_SUFFIXES:
        if bucket.endswith(suffix):
            return f"bucket {bucket!r} ends with {suffix!r}, a suffix S3 reserves"
    return None


def _check_uri(value: str, info: ValidationInfo) -> str:
    matched = _S3_URI.match(value)
    if matched:
        problem = bucket_name_problem(matched.group("bucket"))
        if problem:
            raise ValueError(f"{problem} (Amazon S3, general purpose bucket naming rules)")
        return value
    allow_local = _allow_local(info)
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


def track_layout(spec: TrialSpec, name: TrackName, catalogue: InstanceCatalogue | None = None,
                 run: str | None = None) -> Layout:
    """The track's layout, for ``run`` when given (a scaling run has its own node count)."""
    track = spec.run_track(run) if run is not None else spec.track(name)
    cat = catalogue or load_catalogue()
    return Layout(devices_per_node(track, cat), track.nodes, track.tensor_parallel, track.pipeline_parallel)


def tensor_parallel_problems(tensor_parallel: int, *, num_attention_heads: int, num_key_value_heads: int,
                             intermediate_size: int) -> list[tuple[str, str]]:
    """(model config field, message) for each dimension ``tensor_parallel`` cannot split evenly: the trainer splits
    whole attention and key/value heads and the MLP's intermediate features over a tensor-parallel group."""
    out = []
    for name, value in (("num_attention_heads", num_attention_heads), ("num_key_value_heads", num_key_value_heads),
                        ("intermediate_size", intermediate_size)):
        if value % tensor_parallel:
            fits = [d for d in range(1, tensor_parallel + 1) if value % d == 0]
            out.append((name, f"tensor_parallel {tensor_parallel} must divide the model's {name} ({value}) to "
                              f"split it evenly; use tensor_parallel in {fits}, or a model whose {name} is a "
                              f"multiple of {tensor_parallel}"))
    return out


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
    given = error.get("input")
    if (loc == ("effective_batch_size",) and isinstance(given, int | float) and not isinstance(given, bool)
            and given > MAX_EFFECTIVE_BATCH_SIZE):  # also a float too large to be read as an integer
        return (f"at most {MAX_EFFECTIVE_BATCH_SIZE} sequences per optimizer step (got {given!r:.40}); use a value "
                f"in [1, {MAX_EFFECTIVE_BATCH_SIZE}]")
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
    return problems_from_errors(exc.errors())


def problems_from_errors(errors: Iterable[Mapping[str, Any]]) -> list[Problem]:
    """Validation errors of a trial document (pydantic's, as dicts), as problems naming the field and the fix."""
    problems = []
    for err in errors:
        if not err["loc"] and err["type"] in ("model_type", "model_attributes_type", "dict_type"):
            problems.append(Problem("", f"a trial is a JSON object, got {type(err.get('input')).__name__}"))
        elif err["type"] == "json_invalid":
            problems.append(Problem("", f"malformed JSON: {err['msg']}"))
        else:
            problems.append(Problem(_path(tuple(err["loc"])), _hint(err)))
    return problems



# ---- cross-field rules -------------------------------------------------------------------------------------


def check_rules(spec: TrialSpec, catalogue: InstanceCatalogue | None = None, *,
                allow_local_paths: bool = False) -> list[Problem]:
    cat = catalogue or load_catalogue()
    problems: list[Problem] = model_problems(spec, allow_local_paths=allow_local_paths)
    add = lambda path, message: problems.append(Problem(path, message))  # noqa: E731

    problems += _method_problems(spec)

    names = spec.track_names()
    if not names:
        add("tracks", "at least one track is required: add tracks.gpu and/or tracks.trn2")

    for name in names:
        problems += _track_problems(spec, name, cat)

    if "trn2" in names and spec.method == "qlora":
        add("method", "qlora needs CUDA-only 4-bit kernels and cannot run on the trn2 track; use method 'lora' "
                      "(or drop tracks.trn2)")

    problems += _interval_problems(spec)
    problems += _fault_problems(spec, names)
    problems += _recovery_problems(spec, names)
    problems += _limits_problems(spec)
    return problems


def _method_problems(spec: TrialSpec) -> list[Problem]:
    """The ``lora`` block is given exactly when the method is lora or qlora."""
    if spec.method in ("lora", "qlora") and spec.lora is None:
        return [Problem("lora", f"required when method is {spec.method!r}; add rank, alpha and target_modules")]
    if spec.method not in ("lora", "qlora") and spec.lora is not None:
        return [Problem("lora", f"only valid for method lora or qlora; remove it for method {spec.method!r}")]
    return []


def _track_problems(spec: TrialSpec, name: TrackName, cat: InstanceCatalogue) -> list[Problem]:
    """One track's rules: its instance type first, then (on a known instance of the right family) its layout."""
    track = spec.track(name)
    wrong_instance = _instance_problem(name, track, cat)
    if wrong_instance is not None:
        return [wrong_instance]
    devices = devices_per_node(track, cat)
    problems = _layout_problems(spec, name, track, devices)
    for nodes in track.scaling_nodes or []:
        if not problems:  # one layout's problems at a time: the main run's first
            problems = [Problem(p.path, f"at {nodes} node(s) (a scaling run): {p.message}")
                        for p in _layout_problems(spec, name, track.at_nodes(nodes), devices)]
    return problems


def _instance_problem(name: TrackName, track: GpuTrack | Trn2Track, cat: InstanceCatalogue) -> Problem | None:
    """The track's instance type is in the catalogue and of the track's family."""
    path = f"tracks.{name}.instance_type"
    if track.instance_type not in cat.instances:
        valid = ", ".join(cat.types_for(name))
        return Problem(path, f"unknown instance type {track.instance_type!r}; known {name} types: {valid}")
    family = cat.get(track.instance_type).family
    if family != name:
        valid = ", ".join(cat.types_for(name))
        return Problem(path, f"{track.instance_type} is a {family} instance; the {name} track takes only: {valid}")
    return None


def _layout_problems(spec: TrialSpec, name: TrackName, track: GpuTrack | Trn2Track, devices: int) -> list[Problem]:
    """The track's parallel layout fits its nodes, the trainer runs it, and the batch size divides over it."""
    problems: list[Problem] = []
    add = lambda path, message: problems.append(Problem(path, message))  # noqa: E731
    base = f"tracks.{name}"
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
        if track.pipeline_parallel > 1:
            add(f"{base}.pipeline_parallel",
                f"pipeline_parallel {track.pipeline_parallel} is not run by the trainer (it splits a model with "
                f"tensor_parallel only); use pipeline_parallel 1 and tensor_parallel in {_divisors(devices)}")
        if spec.model.config is not None and track.tensor_parallel > 1:
            cfg = spec.model.config
            texts = [text for _field, text in tensor_parallel_problems(
                track.tensor_parallel, num_attention_heads=cfg.num_attention_heads,
                num_key_value_heads=cfg.num_key_value_heads, intermediate_size=cfg.intermediate_size)]
            if texts:
                add(f"{base}.tensor_parallel", "; ".join(texts))
        dp = world // mp
        per_step = spec.micro_batch_size * dp
        if spec.effective_batch_size % per_step:
            add("effective_batch_size",
                f"{spec.effective_batch_size} is not a multiple of micro_batch_size x data_parallel = "
                f"{spec.micro_batch_size} x {dp} = {per_step} on the {name} track; use a multiple of {per_step} "
                f"(e.g. {per_step * max(1, round(spec.effective_batch_size / per_step))}) or change the layout")
    return problems


def _interval_problems(spec: TrialSpec) -> list[Problem]:
    """Checkpoint and evaluation intervals, and the step the loss must have fallen by, fall within ``max_steps``."""
    problems = [Problem(path, f"{value} exceeds max_steps ({spec.max_steps}); use a value in [1, {spec.max_steps}]")
                for path, value in (("checkpoint_interval_steps", spec.checkpoint_interval_steps),
                                    ("evaluation.interval_steps", spec.evaluation.interval_steps))
                if value > spec.max_steps]
    by_step = spec.evaluation.learning_requirement().by_step
    if by_step is not None and by_step > spec.max_steps:
        problems.append(Problem("evaluation.learning.by_step",
                                f"{by_step} exceeds max_steps ({spec.max_steps}), so the run never reaches it; use a "
                                f"step in [2, {spec.max_steps}], or leave it out to judge the loss at max_steps"))
    return problems


def _fault_problems(spec: TrialSpec, names: list[TrackName]) -> list[Problem]:
    """An injected fault targets a track of the trial, can be recovered from, and falls between checkpoints."""
    fault = spec.fault_injection
    if fault is None:
        return []
    problems: list[Problem] = []
    add = lambda path, message: problems.append(Problem(path, message))  # noqa: E731
    if fault.track not in names:
        add("fault_injection.track", f"the trial has no {fault.track} track; use one of {names}")
    elif fault.mode == "permanent" and (fault.track != "trn2" or "gpu" not in names):
        add("fault_injection.mode",
            f"a permanent fault on the {fault.track} track has no track to fall back to (only a trn2 run falls "
            "back, onto the gpu track's instance): use mode 'retryable', or a trn2 fault in a trial with a gpu "
            "track")
    elif fault.node is not None and fault.node >= (nodes := spec.track(fault.track).nodes):
        add("fault_injection.node",
            f"node {fault.node} is not a node of the {fault.track} track's run ({nodes} node(s): indexes 0 to "
            f"{nodes - 1}); use one of those, or leave node out to fault every node")
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


def _recovery_problems(spec: TrialSpec, names: list[TrackName]) -> list[Problem]:
    """``gpu_fallback`` has what the fallback needs: a trn2 run to fall back from, the gpu track it runs as (its
    instance type, nodes and layout), and a checkpoint of the trn2 run to resume before the last step."""
    if spec.failure_recovery != "gpu_fallback":
        return []
    missing = [f"tracks.{track}" for track in ("gpu", "trn2") if track not in names]
    if missing:
        return [Problem("failure_recovery", (
            f"gpu_fallback resumes a failed trn2 run on the gpu track's instances, and this trial has no "
            f"{' and no '.join(missing)}: add {' and '.join(missing)}, or declare resume_same_track, restart or "
            "none"))]
    if spec.checkpoint_interval_steps >= spec.max_steps:
        return [Problem("failure_recovery", (
            f"gpu_fallback resumes the trn2 run's newest checkpoint, and checkpoint_interval_steps "
            f"{spec.checkpoint_interval_steps} saves none before the last step ({spec.max_steps}), so the fallback "
            f"would start from step 0: set checkpoint_interval_steps below {spec.max_steps}, or declare restart or "
            "none"))]
    return []


def _limits_problems(spec: TrialSpec) -> list[Problem]:
    """``limits.max_hours`` is long enough to be an AWS Batch attempt timeout."""
    if spec.limits is None or spec.limits.max_hours is None:
        return []
    seconds = int(spec.limits.max_hours * 3600)
    if seconds < MIN_ATTEMPT_TIMEOUT_S:
        return [Problem("limits.max_hours",
                        f"{spec.limits.max_hours} h is {seconds} s, and max_hours becomes the AWS Batch attempt "
                        f"timeout, which must be at least {MIN_ATTEMPT_TIMEOUT_S} s; use at least 0.0167 h (60 s)")]
    return []


def model_problems(spec: TrialSpec, *, allow_local_paths: bool = False) -> list[Problem]:
    """What the trainer would refuse about the model: where it comes from, its architecture, its LoRA targets."""
    problems: list[Problem] = []
    add = lambda path, message: problems.append(Problem(path, message))  # noqa: E731
    model = spec.model
    if model.uri is None and model.config is None:
        if allow_local_paths:
            add("model.uri",
                f"model {model.id!r} is given only by its hub id, which the trainer does not download; give "
                "model.uri (an s3:// URI or a local path to the weights) or model.config for a model built in code")
        else:
            add("model.uri",
                f"model {model.id!r} is given only by its hub id, and the job subnets have no internet access; give "
                "model.uri, an s3:// URI to the weights (saved with save_pretrained), or model.config for a "
                "model built in code")

    cfg = model.config
    if cfg is not None:
        heads, kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        if cfg.hidden_size % heads:
            add("model.config.hidden_size",
                f"{cfg.hidden_size} does not divide by num_attention_heads ({heads}); use a multiple of {heads} "
                f"(e.g. {_nearest_multiple(cfg.hidden_size, heads)})")
        elif (cfg.hidden_size // heads) % 2:
            step = 2 * heads
            add("model.config.hidden_size",
                f"head size hidden_size / num_attention_heads = {cfg.hidden_size} / {heads} = "
                f"{cfg.hidden_size // heads} is odd, and rotary position embeddings need an even head size; use a "
                f"multiple of {step} (e.g. {_nearest_multiple(cfg.hidden_size, step)})")
        if heads % kv_heads:
            add("model.config.num_key_value_heads",
                f"{kv_heads} does not divide num_attention_heads ({heads}); use one of {_divisors(heads)}")
        if (model.tokenizer or "byte") == "byte" and cfg.vocab_size < BYTE_TOKENIZER_VOCAB_SIZE:
            add("model.config.vocab_size",
                f"{cfg.vocab_size} is smaller than the byte tokenizer's {BYTE_TOKENIZER_VOCAB_SIZE} ids; set "
                f"vocab_size >= {BYTE_TOKENIZER_VOCAB_SIZE}")

    if spec.lora is not None:
        targets = spec.lora.target_modules
        leaves = [t.rsplit(".", 1)[-1] for t in targets]
        for i, leaf in enumerate(leaves):
            if leaf in LLAMA_UNWRAPPABLE:
                add(f"lora.target_modules[{i}]",
                    f"{targets[i]!r} is a Llama module LoRA cannot wrap (only Linear and Embedding layers); use "
                    f"layers from {', '.join(LLAMA_LORA_TARGETS)}")
        if not any(leaf in LLAMA_LORA_TARGETS for leaf in leaves):
            add("lora.target_modules",
                f"none of {targets} names a layer of the Llama model, so there is nothing to adapt; use layers from "
                f"{', '.join(LLAMA_LORA_TARGETS)}")
    return problems


def _nearest_multiple(value: int, step: int) -> int:
    return max(step, round(value / step) * step)


# ---- stage-dependent rules (checked at submission) ---------------------------------------------------------


def split_s3_uri(uri: str) -> tuple[str, str]:
    if not uri.startswith("s3://") or "/" not in uri[5:]:
        raise ValueError(f"expected s3://bucket/key, got {uri!r}")
    bucket, key = uri[5:].split("/", 1)
    return bucket, key


def s3_inputs(spec: TrialSpec) -> Iterator[tuple[str, str]]:
    """(field path, URI) of every s3:// location in the trial: what the job role must be able to read."""

    def walk(value: Any, loc: tuple[int | str, ...]) -> Iterator[tuple[str, str]]:
        if isinstance(value, dict):
            for key, item in value.items():
                yield from walk(item, (*loc, key))
        elif isinstance(value, list):
            for index, item in enumerate(value):
                yield from walk(item, (*loc, index))
        elif isinstance(value, str) and value.startswith("s3://"):
            yield _path(loc), value

    yield from walk(spec.model_dump(mode="json", exclude_none=True), ())


def unreadable_inputs(spec: TrialSpec, data_buckets: Iterable[str], *,
                      artifacts_bucket: str | None = None) -> list[Problem]:
    """Every s3:// input the stage's job role cannot read.

    The job role reads the stage's data buckets (``data_buckets`` in the stage settings) and the artifacts bucket
    under ``trials/`` only, so anything else would fail inside the job after the trial has started."""
    readable = tuple(dict.fromkeys(data_buckets))
    places = [f"s3://{b}/" for b in readable] + ([f"s3://{artifacts_bucket}/trials/"] if artifacts_bucket else [])
    into = ", ".join(places) if places else "(none: the stage has no data buckets)"
    problems: list[Problem] = []
    for path, uri in s3_inputs(spec):
        bucket, _, key = uri.removeprefix("s3://").partition("/")
        if bucket in readable:
            continue
        if bucket == artifacts_bucket:
            if key.startswith("trials/"):
                continue
            problems.append(Problem(
                path, f"the job role reads the artifacts bucket {bucket} only under trials/; move the object under "
                      f"s3://{bucket}/trials/ or into one of: {into}"))
            continue
        problems.append(Problem(
            path, f"the job role cannot read bucket {bucket}; add it to the stage setting data_buckets in cdk.json "
                  f"(dualtrack:stages.<stage>.data_buckets) or copy the data into one of: {into}"))
    return problems


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def duplicate_keys(text: str | bytes | bytearray) -> list[str]:
    """The keys a JSON text gives twice in one object (empty for none, or for text that is not JSON: the parser
    names that problem)."""
    found: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: set[str] = set()
        for key, _ in items:
            if key in seen and key not in found:
                found.append(key)
            seen.add(key)
        return dict(items)

    try:
        json.loads(text, object_pairs_hook=pairs)
    except (ValueError, RecursionError):
        return []
    return found


def duplicate_key_problems(text: str | bytes | bytearray) -> list[Problem]:
    return [Problem(key, "given more than once; JSON keeps the last silently, so the trial is ambiguous: give each "
                         "field once") for key in duplicate_keys(text)]


def parse_trial(data: Any, *, allow_local_paths: bool = False,
                catalogue: InstanceCatalogue | None = None) -> TrialSpec:
    """Validate a decoded trial document (or its JSON text). Raises TrialInvalid listing every problem."""
    context = {ALLOW_LOCAL_PATHS: allow_local_paths}
    if isinstance(data, str | bytes | bytearray):
        twice = duplicate_key_problems(data)
        if twice:
            raise TrialInvalid(twice)
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
    problems = check_rules(spec, catalogue, allow_local_paths=allow_local_paths)
    if problems:
        raise TrialInvalid(problems)
    return spec


def json_schema() -> JsonObject:
    return TrialSpec.model_json_schema()
