"""Why a trial spec is refused: ``Problem`` and ``TrialInvalid``, the cross-field rules of :func:`check_rules`, the
stage-dependent input checks (:func:`unreadable_inputs`) and :func:`parse_trial`, the one entry point."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import (
    BaseModel,
    ValidationError,
)

from lambdas.domain.json_types import JsonObject
from lambdas.domain.trial.catalogue import InstanceCatalogue, load_catalogue
from lambdas.domain.trial.layout import devices_per_node, tensor_parallel_problems
from lambdas.domain.trial.spec import (
    ALLOW_LOCAL_PATHS,
    BYTE_TOKENIZER_VOCAB_SIZE,
    LLAMA_LORA_TARGETS,
    LLAMA_UNWRAPPABLE,
    MAX_EFFECTIVE_BATCH_SIZE,
    MIN_ATTEMPT_TIMEOUT_S,
    GpuTrack,
    TrackName,
    TrialSpec,
    Trn2Track,
)

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
