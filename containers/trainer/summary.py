"""Assembling the attempt's RunSummary, resume-continuity evidence, and writing summary + metrics to the run dir."""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypedDict

from lambdas.domain.evidence.run_summary import STAND_IN_BACKENDS, RunSummary
from lambdas.domain.trial.layout import Layout
from lambdas.domain.trial.spec import TrialSpec
from trainer import storage
from trainer.backends import Backend
from trainer.cache import CompileCache
from trainer.checkpoint import SavedCheckpoint, Skipped
from trainer.config import RunConfig
from trainer.data import BatchPlan
from trainer.distributed import CommunicationRecord
from trainer.environment import environment_record
from trainer.faults import FaultPlan
from trainer.learning import LearningRecord
from trainer.metrics import read_step_losses

MAX_PER_STEP_POINTS = 2000
WARMUP_STEPS = 2  # steady-state step times start after these (the compile step is never among them)
MAX_STEP_TIMES = 4096
ATTEMPT_DIR = re.compile(r"^attempt-(\d+)$")
HEX_KEY = re.compile(r"^[0-9a-f]{64}$")
# Relative loss gap between a re-run step and its first run that still counts as continuous. Stand-ins are
# deterministic on CPU (the gap is 0); accelerators reorder float reductions, bf16 more so.
TOLERANCE = {"fp32": 1e-4, "bf16": 2e-2}


PHASES = ("environment_s", "data_load_s", "compile_s", "train_s", "checkpoint_save_s", "checkpoint_restore_s",
          "eval_s")


# The summary's blocks as the trainer builds them (``lambdas.domain.evidence.run_summary`` validates the whole).
class FinalSample(TypedDict):
    prompt: str
    completion: str
    token_ids: list[int]


class OptimizerSettings(TypedDict):
    """The ``optimizer`` block: what the loop applies beyond the spec's peak learning rate."""

    name: str
    learning_rate: float
    weight_decay: float
    grad_clip_norm: float
    lr_schedule: str
    warmup_steps: int
    final_lr_factor: float
    sharding: str


class ContinuityRecord(TypedDict, total=False):
    """The ``continuity`` block: every entry after a resume, none otherwise."""

    global_step_continuous: bool
    loss_continuous: bool | None
    tolerance: float
    max_rel_delta: float | None
    compared_steps: list[int]


class MeasuredCommunication(CommunicationRecord):
    """The ``communication`` block of a multi-process attempt: the collective statistics with their share of the
    step time (None where the collectives were not timed)."""

    communication_share: float | None


class SingleProcessCommunication(TypedDict):
    """The ``communication`` block of a single process: only the world size (the schema's zeros apply)."""

    world_size: int


class OverlapRecord(TypedDict):
    """The ``checkpoint_overlap`` block."""

    asynchronous: bool
    steps_overlapping: int
    steps_clear: int
    step_time_overlapping_s: float | None
    step_time_clear_s: float | None
    slowdown: float | None


@dataclass
class AttemptRecord:
    """What one attempt did, as the trainer records it while it runs (``trainer.runner.Trainer.record``); the run
    summary is built from it once, at the end, on every path out."""

    cfg: RunConfig
    spec: TrialSpec
    trial_id: str
    run: str
    backend: Backend
    started_at: float
    layout: Layout | None = None
    plan: BatchPlan | None = None
    world_size_run: int = 1
    tensor_parallel_run: int = 1  # the tensor-parallel degree this attempt's processes ran
    model_parallel_run: bool = False  # the layout's model parallelism is run (one process per device)
    start_step: int = 0
    global_step: int = 0
    position: int = 0
    resumed_from_step: int | None = None
    resumed_from_uri: str | None = None
    resume_position_ok: bool = True
    resume_eval: tuple[int, float] | None = None  # (step, loss): the fixed eval set right after another run's restore
    previous: dict[int, float] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    losses: dict[int, float] = field(default_factory=dict)
    evals: dict[int, float] = field(default_factory=dict)
    step_times: list[float] = field(default_factory=list)
    step_overlaps: list[bool] = field(default_factory=list)  # per entry of step_times: a save was in flight
    asynchronous_checkpoints: bool = False
    first_step_s: float | None = None
    saved: list[SavedCheckpoint] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    cache: CompileCache | None = None
    compile_counters: tuple[int, int] | None = None
    cache_files_after: int = 0
    compile_failed: bool = False
    fault_plan: FaultPlan | None = None
    fault_fired: bool = False
    memory_peak_mib: float | None = None
    final_samples: list[FinalSample] = field(default_factory=list)
    validation_loss: float | None = None
    error: str | None = None
    optimizer: OptimizerSettings | None = None
    communication: CommunicationRecord | None = None  # Distributed.communication(); None for a single process
    data_samples: int | None = None  # training samples (rows of data.train_uri) the attempt loaded
    learning: LearningRecord | None = None  # trainer.learning: whether the optimizer steps reached the weights


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def previous_losses(run_dirs: list[str], attempt: int, own_run_dir: str) -> dict[int, float]:
    """Step losses earlier attempts recorded (later attempts win), from their metrics.jsonl files."""
    found: list[tuple[int, int, dict[int, float]]] = []
    for order, run_dir in enumerate(run_dirs):
        for name in storage.list_prefixes(run_dir):
            match = ATTEMPT_DIR.match(name)
            if not match or (run_dir == own_run_dir and int(match.group(1)) >= attempt):
                continue
            uri = storage.join(run_dir, name, "metrics.jsonl")
            try:
                found.append((order, int(match.group(1)), read_step_losses(storage.read_text(uri))))
            except Exception:  # an attempt killed before writing metrics has nothing to compare
                continue
    out: dict[int, float] = {}
    for _, _, losses in sorted(found, key=lambda f: (-f[0], f[1])):
        out.update(losses)
    return out


def continuity(inputs: AttemptRecord) -> ContinuityRecord:
    if inputs.resumed_from_step is None:
        return {}
    tolerance = TOLERANCE.get(inputs.backend.precision, 2e-2)
    steps = sorted(s for s in inputs.losses if s in inputs.previous)
    deltas = [abs(inputs.losses[s] - inputs.previous[s]) / max(abs(inputs.previous[s]), 1e-12) for s in steps]
    first = min(inputs.losses) if inputs.losses else None
    step_ok = inputs.resume_position_ok and (first is None or first == inputs.resumed_from_step + 1)
    return {"global_step_continuous": step_ok,
            "loss_continuous": (max(deltas) <= tolerance) if deltas else None,
            "tolerance": tolerance, "max_rel_delta": max(deltas) if deltas else None, "compared_steps": steps}


def _points(values: dict[int, float]) -> tuple[list[list[float]], bool]:
    items = sorted(values.items())
    if len(items) <= MAX_PER_STEP_POINTS:
        return [[s, v] for s, v in items], False
    stride = -(-len(items) // MAX_PER_STEP_POINTS)
    kept = items[::stride] + ([items[-1]] if (len(items) - 1) % stride else [])
    return [[s, v] for s, v in kept], True


def steady_step_times(step_times: list[float]) -> list[float]:
    """The attempt's steady-state optimizer-step times, the sample the report's intervals are bootstrapped from:
    the first step (compile) is never in ``step_times``; the next WARMUP_STEPS (caches, allocator, autotuning
    settling) are left out too; evenly thinned to at most MAX_STEP_TIMES."""
    steady = step_times[WARMUP_STEPS:]
    if len(steady) > MAX_STEP_TIMES:
        stride = -(-len(steady) // MAX_STEP_TIMES)
        steady = steady[::stride]
    return [round(t, 6) for t in steady]


def _cache_key(spec: TrialSpec, track: str, url: str | None, run: str | None = None) -> str | None:
    """The registry's key: the last segment of the cache URL it handed out, else computed from the spec for the
    run (a scaling run's key is its own node count's)."""
    if track != "trn2" or spec.tracks.trn2 is None:
        return None
    last = (url or "").rstrip("/").rsplit("/", 1)[-1]
    if HEX_KEY.match(last):
        return last
    from lambdas.domain.cache.compile_cache import cache_key

    return cache_key(spec, run=run).key


def _communication(inputs: AttemptRecord) -> MeasuredCommunication | SingleProcessCommunication:
    """Collective timings with their share of the step time; zeros / None for a single process."""
    collectives = inputs.communication
    if collectives is None:
        return {"world_size": inputs.world_size_run}
    step_total = sum(inputs.step_times) + (inputs.first_step_s or 0.0)
    share = collectives["communication_s"] / step_total if step_total > 0 and collectives["measured"] else None
    return {**collectives, "communication_share": share}


def checkpoint_overlap(step_times: list[float], overlaps: list[bool], asynchronous: bool) -> OverlapRecord:
    """Median step time of steps that ran during a background save against steps that did not."""
    during = [t for t, o in zip(step_times, overlaps, strict=False) if o]
    clear = [t for t, o in zip(step_times, overlaps, strict=False) if not o]
    busy = statistics.median(during) if during else None
    idle = statistics.median(clear) if clear else None
    return {"asynchronous": asynchronous, "steps_overlapping": len(during), "steps_clear": len(clear),
            "step_time_overlapping_s": busy, "step_time_clear_s": idle,
            "slowdown": busy / idle if busy is not None and idle else None}


def build_summary(inputs: AttemptRecord, *, status: str, exit_code: int) -> RunSummary:
    spec, cfg, backend, phases = inputs.spec, inputs.cfg, inputs.backend, inputs.phases
    steps_done = len(inputs.losses)
    plan, layout = inputs.plan, inputs.layout
    samples = steps_done * (plan.global_batch if plan else spec.effective_batch_size)
    tokens = samples * spec.sequence_length
    train_s = phases.get("train_s", 0.0)
    per_step, decimated = _points(inputs.losses)
    cache = inputs.cache
    outcome = cache.outcome(inputs.compile_counters) if cache is not None and steps_done else "none"
    rerun = sum(1 for s in inputs.losses if s in inputs.previous) if inputs.resumed_from_step is not None else 0
    fault = inputs.fault_plan
    trn2 = spec.tracks.trn2
    cache_key = _cache_key(spec, cfg.track, cache.url if cache else None, cfg.run)
    record = {
        "trial_id": inputs.trial_id, "track": cfg.track, "run": inputs.run, "attempt": cfg.attempt,
        "backend": backend.name, "stand_in": backend.name in STAND_IN_BACKENDS or backend.stand_in,
        "precision": backend.precision, "status": status, "exit_code": exit_code, "error": inputs.error,
        "global_step": inputs.global_step, "max_steps": spec.max_steps, "start_step": inputs.start_step,
        "resumed_from_step": inputs.resumed_from_step, "resumed_from_uri": inputs.resumed_from_uri,
        "resume_eval": None if inputs.resume_eval is None else {"step": inputs.resume_eval[0],
                                                                 "loss": inputs.resume_eval[1]},
        "rerun_steps": rerun, "steps_this_attempt": steps_done, "tokens_this_attempt": tokens,
        "samples_consumed": inputs.position,
        "layout": None if layout is None or plan is None else {
            "devices_per_node": layout.devices_per_node, "nodes": layout.nodes,
            "tensor_parallel": layout.tensor_parallel, "pipeline_parallel": layout.pipeline_parallel,
            "data_parallel": layout.data_parallel, "gradient_accumulation_steps": plan.accumulation,
            "micro_batch_size": plan.micro_batch_size, "effective_batch_size": plan.global_batch,
            "world_size_run": inputs.world_size_run, "model_parallel_run": inputs.model_parallel_run,
            "tensor_parallel_run": inputs.tensor_parallel_run},
        "phases": {k: round(v, 6) for k, v in phases.items()},
        "throughput": {"tokens_per_s": tokens / train_s if train_s > 0 else None,
                       "step_time_s": statistics.median(inputs.step_times) if inputs.step_times else None,
                       "step_times_s": steady_step_times(inputs.step_times),
                       "samples_per_s": samples / train_s if train_s > 0 else None},
        "loss": {"initial": inputs.losses[min(inputs.losses)] if inputs.losses else None,
                 "final": inputs.losses[max(inputs.losses)] if inputs.losses else None,
                 "per_step": per_step, "per_step_decimated": decimated,
                 "eval": [[s, v] for s, v in sorted(inputs.evals.items())]},
        "checkpoints": [{"step": c.step, "bytes": c.bytes, "files": c.files, "save_s": c.save_s, "uri": c.uri}
                        for c in inputs.saved],
        "checkpoints_skipped": [{"step": s.step, "uri": s.uri, "reason": s.reason} for s in inputs.skipped],
        "checkpoint_restore_s": phases.get("checkpoint_restore_s", 0.0),
        "checkpoint_overlap": checkpoint_overlap(inputs.step_times, inputs.step_overlaps,
                                                 inputs.asynchronous_checkpoints),
        "compile": {"seconds": phases.get("compile_s", 0.0), "cache": outcome,
                    "cache_url": cache.url if cache else None, "cache_key": cache_key,
                    "status": "failed" if inputs.compile_failed else ("ok" if steps_done else "not_run"),
                    "error": inputs.error if inputs.compile_failed else None,
                    "cache_files_before": cache.files_before if cache else 0,
                    "torn_entry": bool(cache and cache.torn),
                    "cache_files_after": inputs.cache_files_after},
        "continuity": continuity(inputs),
        "fault": {"injected_at_step": fault.at_step if fault else None, "mode": fault.mode if fault else None,
                  "fired": inputs.fault_fired},
        "optimizer": inputs.optimizer,
        "communication": _communication(inputs),
        "memory_peak_mib": inputs.memory_peak_mib,
        "final_samples": inputs.final_samples,
        "validation_loss": inputs.validation_loss,
        "learning": inputs.learning,
        "environment": {**environment_record(backend.versions(), trn2.neuron_sdk if trn2 else None),
                        "data_samples": None if inputs.data_samples is None else str(inputs.data_samples)},
        "started_at": _iso(inputs.started_at), "ended_at": _iso(datetime.now(UTC).timestamp()),
    }
    return RunSummary.model_validate(record)


def write_summary(run_dir: str, attempt: int, summary: RunSummary, metrics_jsonl: bytes) -> None:
    body = summary.to_json().encode()
    storage.write_bytes(storage.join(run_dir, f"attempt-{attempt}", "metrics.jsonl"), metrics_jsonl)
    storage.write_bytes(storage.join(run_dir, f"attempt-{attempt}", "summary.json"), body)
    storage.write_bytes(storage.join(run_dir, "summary.json"), body)
