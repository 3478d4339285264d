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
import re
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from lambdas.domain.canonical import canonical_json
from lambdas.domain.json_types import JsonObject
from lambdas.domain.trial.catalogue import load_catalogue
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
