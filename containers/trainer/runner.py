"""One attempt of a training run: set up, restore, train with checkpoints and evals, fault where planned, and
leave a summary whatever happens."""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from lambdas.domain.trial import TrialSpec, gradient_accumulation_steps, parse_trial, track_layout
from trainer import FAILURE_EXIT_CODE, SIGTERM_EXIT_CODE, checkpoint, storage
from trainer.backends import Backend, default_backend, make_backend, no_grad_eval
from trainer.cache import CompileCache
from trainer.config import RunConfig
from trainer.data import BatchPlan, DataError, SampleStream, TokenisedSet, loss_tokens, read_rows
from trainer.distributed import Distributed
from trainer.faults import FaultPlan, ForcedFailure, PlannedFault, TerminationFlag, forced_failure_point
from trainer.metrics import CloudWatchPublisher, MetricsLog, NullPublisher, Progress, publishing_enabled
from trainer.modeling import (
    adapter_config,
    build_model,
    build_tokenizer,
    greedy_complete,
    load_weights,
    token_loss_sum,
    weights_state,
)
from trainer.optim import Optimizer
from trainer.summary import SummaryInputs, build_summary, previous_losses, write_summary

# A final checkpoint after SIGTERM is attempted when the last save took less than this (Batch's stop timeout
# before SIGKILL is 30 s by default; Spot gives two minutes' notice before that).
SIGTERM_SAVE_BUDGET_S = float(os.environ.get("DUALTRACK_SIGTERM_SAVE_BUDGET_S", "20"))
# Checkpoints are written on a background thread while training goes on, unless this is "0".
ASYNC_CHECKPOINT_VARIABLE = "DUALTRACK_ASYNC_CHECKPOINT"


def asynchronous_checkpoints() -> bool:
    return os.environ.get(ASYNC_CHECKPOINT_VARIABLE, "1").strip() != "0"


# What the loop applies beyond the spec's peak learning rate (recorded in the summary's ``optimizer`` block).
GRAD_CLIP_NORM = 1.0
WEIGHT_DECAY = 0.0
FINAL_LR_FACTOR = 0.1


def warmup_steps(max_steps: int) -> int:
    return max(1, max_steps // 10)


def lr_lambda(max_steps: int):  # type: ignore[no-untyped-def]
    warmup = warmup_steps(max_steps)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(FINAL_LR_FACTOR, 1.0 - (1.0 - FINAL_LR_FACTOR) * (step - warmup) / max(1, max_steps - warmup))

    return factor


def neuron_environment(spec: TrialSpec, track: str, backend_name: str) -> dict[str, str]:
    """What the Neuron runtime must be told of the spec before it starts: the logical NeuronCore size the layout
    (and so the launcher's process count) was planned with."""
    trn2 = spec.tracks.trn2
    if backend_name != "neuron" or track != "trn2" or trn2 is None:
        return {}
    return {"NEURON_LOGICAL_NC_CONFIG": str(trn2.logical_nc_config)}


def optimizer_record(spec: TrialSpec, sharding: str) -> dict[str, Any]:
    return {"name": "adamw", "learning_rate": spec.learning_rate, "weight_decay": WEIGHT_DECAY,
            "grad_clip_norm": GRAD_CLIP_NORM, "lr_schedule": "linear warmup, then linear decay",
            "warmup_steps": warmup_steps(spec.max_steps), "final_lr_factor": FINAL_LR_FACTOR, "sharding": sharding}


@dataclass
class Attempt:
    cfg: RunConfig
    spec: TrialSpec
    backend: Backend
    progress: Progress
    dist: Distributed
    phases: dict[str, float] = field(default_factory=lambda: dict.fromkeys(
        ("environment_s", "data_load_s", "compile_s", "train_s", "checkpoint_save_s", "checkpoint_restore_s",
         "eval_s"), 0.0))
    losses: dict[int, float] = field(default_factory=dict)
    evals: dict[int, float] = field(default_factory=dict)
    step_times: list[float] = field(default_factory=list)
    step_overlaps: list[bool] = field(default_factory=list)
    saved: list[checkpoint.SavedCheckpoint] = field(default_factory=list)


def run(cfg: RunConfig) -> int:
    """Run one attempt; returns the process exit code. The summary is written on every path out."""
    started_at = time.time()
    t0 = time.perf_counter()
    progress = Progress(enabled=cfg.progress)
    flag = TerminationFlag()
    flag.install()
    spec = parse_trial(storage.read_text(cfg.spec_uri), allow_local_paths=True)
    trial_id = cfg.trial_id or spec.trial_id
    run_name = cfg.run or cfg.track
    backend_name = cfg.backend or default_backend(cfg.track)
    trn2 = spec.tracks.trn2
    flags = list(trn2.compiler_flags) if (trn2 is not None and cfg.track == "trn2") else []
    os.environ.update(neuron_environment(spec, cfg.track, backend_name))
    backend = make_backend(backend_name, spec.precision, flags)
    dist = Distributed.from_env(backend)
    publisher: Any = (CloudWatchPublisher(trial_id, run_name, cfg.attempt)
                      if dist.is_main and publishing_enabled() else NullPublisher())
    log = MetricsLog(publisher)
    job = Attempt(cfg, spec, backend, progress if dist.is_main else Progress(enabled=False), dist)
    inputs = SummaryInputs(cfg=cfg, spec=spec, trial_id=trial_id, run=run_name, backend=backend,
                           started_at=started_at)
    exit_code, status = 0, "succeeded"
    try:
        _train(job, inputs, log, flag, t0)
    except PlannedFault as fault:
        exit_code, status = fault.exit_code, "faulted"
        inputs.fault_fired = True
        job.progress.emit("fault", step=fault.step, mode=fault.mode, exit_code=fault.exit_code)
    except _Interrupted:
        exit_code, status = SIGTERM_EXIT_CODE, "interrupted"
    except Exception as exc:  # every failure still leaves a summary behind
        exit_code, status = FAILURE_EXIT_CODE, "failed"
        inputs.error = f"{type(exc).__name__}: {exc}"[:2000]
        job.progress.emit("error", error=inputs.error)
    finally:
        flag.uninstall()
    inputs.phases, inputs.losses, inputs.evals = job.phases, job.losses, job.evals
    inputs.step_times, inputs.step_overlaps, inputs.saved = job.step_times, job.step_overlaps, job.saved
    inputs.memory_peak_mib = backend.memory_peak_mib()
    with contextlib.suppress(Exception):  # a broken process group must not cost the summary
        inputs.communication = dist.communication()
    if dist.is_main:
        summary = build_summary(inputs, status=status, exit_code=exit_code)
        log.final(summary.phases.model_dump(), summary.memory_peak_mib, summary.compile.cache)
        publisher.close()
        write_summary(cfg.run_dir, cfg.attempt, summary, log.jsonl())
        job.progress.emit("done", status=status, exit_code=exit_code, global_step=summary.global_step,
                          summary=storage.join(cfg.run_dir, f"attempt-{cfg.attempt}", "summary.json"))
    dist.close()
    return exit_code


class _Interrupted(Exception):
    pass


def _train(job: Attempt, inputs: SummaryInputs, log: MetricsLog, flag: TerminationFlag, t0: float) -> None:
    spec, cfg, backend, emit = job.spec, job.cfg, job.backend, job.progress.emit
    force = forced_failure_point()
    layout = track_layout(spec, cfg.track)  # type: ignore[arg-type]
    plan = BatchPlan(spec.micro_batch_size, layout.data_parallel, gradient_accumulation_steps(spec, layout))
    inputs.layout, inputs.plan, inputs.world_size_run = layout, plan, job.dist.world_size
    try:
        ranks = plan.ranks(job.dist.rank, job.dist.world_size)
    except DataError as exc:
        track = spec.track(cfg.track)  # type: ignore[arg-type]
        raise DataError(f"track {cfg.track} layout {track.instance_type} x {layout.nodes} node(s), tensor_parallel "
                        f"{layout.tensor_parallel}, pipeline_parallel {layout.pipeline_parallel} has data_parallel "
                        f"{layout.data_parallel}: {exc}") from None
    tokenizer = build_tokenizer(spec)
    model = build_model(spec, tokenizer)
    job.phases["environment_s"] = time.perf_counter() - t0

    t = time.perf_counter()
    train = TokenisedSet.build(read_rows(spec.data.train_uri), tokenizer, spec.sequence_length)
    valid = TokenisedSet.build(read_rows(spec.data.validation_uri), tokenizer, spec.sequence_length)
    stream = SampleStream(train, spec.data.shuffle_seed)
    job.phases["data_load_s"] = time.perf_counter() - t
    emit("data", train_rows=len(train), validation_rows=len(valid), global_batch=plan.global_batch,
         accumulation=plan.accumulation, data_parallel=plan.data_parallel, processes=job.dist.world_size,
         simulated_ranks=len(ranks))

    t = time.perf_counter()
    cache = CompileCache.open(cfg.compile_cache_url, backend.name, getattr(backend, "on_neuron", False))
    inputs.cache = cache
    backend.configure_cache(cache.directory)
    cache_setup_s = time.perf_counter() - t
    step_model = backend.prepare(model)
    # After the move: on XLA, Module.to() replaces the Parameter objects, so earlier references would be stale.
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    params = [p for _, p in named]
    optimizer = Optimizer(named, lr=spec.learning_rate, weight_decay=WEIGHT_DECAY, dist=job.dist,
                          sharded=spec.method in ("full", "continued_pretraining") and backend.shards_optimizer)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer.local, lr_lambda(spec.max_steps))
    inputs.optimizer = optimizer_record(spec, optimizer.sharding)
    checkpointer = checkpoint.Checkpointer(cfg.run_dir, interval=spec.checkpoint_interval_steps,
                                           max_steps=spec.max_steps, dist=job.dist, sharding=optimizer.sharding,
                                           asynchronous=asynchronous_checkpoints(),
                                           on_commit=lambda saved: _committed(job, saved, log))
    inputs.asynchronous_checkpoints = checkpointer.asynchronous

    t = time.perf_counter()
    sources = [cfg.run_dir] + ([cfg.resume_from] if cfg.resume_from else [])
    found = checkpointer.restore(sources, spec_hash=spec.spec_hash(), names=optimizer.loaded_names())
    inputs.skipped = found.skipped
    for skipped in found.skipped:
        emit("checkpoint_skipped", step=skipped.step, uri=skipped.uri, reason=skipped.reason)
    start_step, position = 0, 0
    if found.loaded is not None:
        ckpt = found.loaded
        load_weights(model, {k: v.to(backend.device) for k, v in ckpt.weights.items()})
        optimizer.load_shard(ckpt.optimizer)
        scheduler.load_state_dict(ckpt.scheduler)
        # The scheduler's state holds the step's rate; the param group (rebuilt, not loaded) must carry it too.
        for group, rate in zip(optimizer.local.param_groups, scheduler.get_last_lr(), strict=True):
            group["lr"] = rate
        checkpoint.restore_rng(ckpt.rng)
        start_step, position = ckpt.step, int(ckpt.state["data_position"]["samples_consumed"])
        inputs.resumed_from_step, inputs.resumed_from_uri = ckpt.step, ckpt.uri
        inputs.resume_position_ok = position == ckpt.step * plan.global_batch
        inputs.previous = previous_losses(sorted({cfg.run_dir, ckpt.uri.rsplit("/checkpoints/", 1)[0]}),
                                          cfg.attempt, cfg.run_dir)
        emit("resume", from_step=ckpt.step, uri=ckpt.uri, samples_consumed=position)
    job.phases["checkpoint_restore_s"] = time.perf_counter() - t
    inputs.start_step, inputs.global_step, inputs.position = start_step, start_step, position

    fault = FaultPlan.for_run(spec, cfg.track, cfg.attempt)
    inputs.fault_plan = fault
    compiling = backend.name in ("compiled", "neuron")
    loop_started = time.perf_counter()
    try:
        _loop(job, inputs, log, flag, stream, plan, step_model, model, optimizer, scheduler, params, valid,
              fault, force, start_step, position, checkpointer)
    finally:
        checkpointer.close()
        loop_s = time.perf_counter() - loop_started
        _finish_compile(job, inputs, cache_setup_s, compiling)
        job.phases["train_s"] = max(0.0, loop_s - job.phases["eval_s"] - job.phases["checkpoint_save_s"]
                                    - (job.phases["compile_s"] - cache_setup_s))
    inputs.final_samples = _final_samples(job, model, tokenizer)
    inputs.validation_loss = job.evals.get(spec.max_steps)


@dataclass
class _Dispatched:
    """A step whose work is queued on the device but whose loss has not been read yet."""

    step: int
    started: float
    read: Callable[[], float]  # from Backend.read_later
    lr: float
    overlapping: bool = False  # a checkpoint was being written while the step ran


class _StepLog:
    """Records each step's loss, time and metrics once its loss is read, at most ``lag`` steps after dispatch.

    A step's time runs from its start, or from when the previous step's loss was read if that is later: with a lag
    the host starts step N+1 before step N finishes on the device, and the device-paced interval is what counts.
    """

    def __init__(self, job: Attempt, inputs: SummaryInputs, log: MetricsLog, plan: BatchPlan, compiling: bool):
        self.job, self.inputs, self.log, self.plan, self.compiling = job, inputs, log, plan, compiling
        self.pending: list[_Dispatched] = []
        self.last_read = 0.0

    def dispatched(self, entry: _Dispatched, lag: int) -> None:
        self.pending.append(entry)
        self.drain(keep=lag)

    def drain(self, keep: int = 0) -> None:
        job, inputs, spec = self.job, self.inputs, self.job.spec
        while len(self.pending) > keep:
            entry = self.pending.pop(0)
            value = entry.read()
            now = time.perf_counter()
            elapsed = now - max(entry.started, self.last_read)
            self.last_read = now
            job.losses[entry.step] = value
            if inputs.first_step_s is None:
                inputs.first_step_s = elapsed
                if self.compiling:
                    job.progress.emit("compile", step=entry.step, first_step_s=round(elapsed, 3))
            else:
                job.step_times.append(elapsed)
                job.step_overlaps.append(entry.overlapping)
            tokens = self.plan.global_batch * spec.sequence_length
            self.log.step(entry.step, value, elapsed, tokens, self.plan.global_batch, entry.lr)
            job.progress.emit("step", step=entry.step, loss=round(value, 6), step_time_s=round(elapsed, 4),
                              tokens_per_s=round(tokens / elapsed, 1) if elapsed > 0 else None)


def _loop(job: Attempt, inputs: SummaryInputs, log: MetricsLog, flag: TerminationFlag, stream: SampleStream,
          plan: BatchPlan, step_model: torch.nn.Module, model: torch.nn.Module, optimizer: Optimizer,
          scheduler: Any, params: list[torch.nn.Parameter], valid: TokenisedSet, fault: FaultPlan,
          force: str | None, start_step: int, position: int, checkpointer: checkpoint.Checkpointer) -> None:
    spec, backend, emit = job.spec, job.backend, job.progress.emit
    steps = _StepLog(job, inputs, log, plan, compiling=backend.name in ("compiled", "neuron"))

    def saving(call: Callable[[], Any]) -> None:
        """Run a checkpointer call on the training thread, counting its time as checkpoint time."""
        t = time.perf_counter()
        try:
            call()
        finally:
            job.phases["checkpoint_save_s"] += time.perf_counter() - t

    try:
        for step in range(start_step + 1, spec.max_steps + 1):
            if checkpointer.in_flight:
                saving(checkpointer.poll)
            overlapping = checkpointer.in_flight
            t = time.perf_counter()
            job.dist.begin_step(step)
            ids, labels = stream.take(position, plan.global_batch)
            norm = float(loss_tokens(labels)) / job.dist.loss_scale
            step_loss = torch.zeros((), device=backend.device)
            if force in ("compile", "step") and step == start_step + 1:
                if force == "compile":
                    inputs.compile_failed = True
                raise ForcedFailure(f"DUALTRACK_FORCE_FAIL={force}: failing in the {force} phase at step {step}")
            for mids, mlabels in plan.micro_batches(ids, labels, process=job.dist.rank,
                                                   processes=job.dist.world_size):
                with backend.autocast():
                    loss = token_loss_sum(step_model, backend.to_device(mids), backend.to_device(mlabels)) / norm
                loss.backward()
                step_loss = step_loss + loss.detach()
            job.dist.reduce_gradients(params)
            torch.nn.utils.clip_grad_norm_(params, GRAD_CLIP_NORM)
            optimizer.step(backend)
            lr = scheduler.get_last_lr()[0]
            scheduler.step()
            optimizer.zero_grad()
            global_loss = job.dist.reduce_loss(step_loss)  # before step_end: on XLA it belongs in this step's graph
            backend.step_end()
            position += plan.global_batch
            inputs.global_step, inputs.position = step, position
            steps.dispatched(_Dispatched(step, t, backend.read_later(global_loss), lr, overlapping),
                             lag=backend.loss_read_lag)

            evaluate = step % spec.evaluation.interval_steps == 0 or step == spec.max_steps
            due = checkpointer.due(step)
            if evaluate or due or flag.requested:
                steps.drain()  # the step's own record first, and no device work left behind the pause
            if evaluate:
                _evaluate(job, model, valid, step, log)
            if due:
                # The last step's checkpoint and one a stop is waiting for are committed before going on.
                blocking = step == spec.max_steps or flag.requested
                saving(partial(_save, job, checkpointer, model, optimizer, scheduler, step, position,
                               blocking=blocking, fail=force == "save"))
            if fault.fires(step):
                saving(checkpointer.wait)  # a planned fault fires after the step's checkpoint is durable
            fault.check(step)
            if flag.requested:
                saving(checkpointer.wait)
                last_save = job.saved[-1].save_s if job.saved else 0.0
                if not due and last_save <= SIGTERM_SAVE_BUDGET_S:
                    saving(partial(_save, job, checkpointer, model, optimizer, scheduler, step, position,
                                   blocking=True, fail=False))
                emit("interrupted", step=step, checkpointed=bool(job.saved and job.saved[-1].step == step))
                raise _Interrupted
        saving(checkpointer.wait)
    finally:
        # A planned fault or an interruption still records every step it ran; if the device itself failed, the
        # original error is the one to report.
        with contextlib.suppress(Exception):
            steps.drain()


def _finish_compile(job: Attempt, inputs: SummaryInputs, cache_setup_s: float, compiling: bool) -> None:
    # The first step of a compiling backend builds its graphs; its excess over a typical step is compile time.
    excess = 0.0
    if compiling and inputs.first_step_s is not None:
        typical = statistics.median(job.step_times) if job.step_times else 0.0
        excess = max(0.0, inputs.first_step_s - typical)
    job.phases["compile_s"] = cache_setup_s + excess
    if inputs.cache is not None:
        inputs.compile_counters = job.backend.compile_counters()
        inputs.cache_files_after = inputs.cache.files_now()
        if job.dist.is_main:
            inputs.cache.publish()


def _evaluate(job: Attempt, model: torch.nn.Module, valid: TokenisedSet, step: int, log: MetricsLog) -> None:
    t = time.perf_counter()
    backend, mbs = job.backend, job.spec.micro_batch_size
    total = torch.zeros((), device=backend.device)
    tokens = 0
    with no_grad_eval(model):
        for i in range(0, len(valid), mbs):
            ids, labels = valid.input_ids[i:i + mbs], valid.labels[i:i + mbs]
            with backend.autocast():
                total = total + token_loss_sum(model, backend.to_device(ids), backend.to_device(labels))
            tokens += loss_tokens(labels)
            backend.step_end()
    value = float(total.item()) / max(1, tokens)
    seconds = time.perf_counter() - t
    job.phases["eval_s"] += seconds
    job.evals[step] = value
    log.eval(step, value, seconds)
    job.progress.emit("eval", step=step, loss=round(value, 6), eval_s=round(seconds, 3))


def _save(job: Attempt, checkpointer: checkpoint.Checkpointer, model: torch.nn.Module, optimizer: Optimizer,
          scheduler: Any, step: int, position: int, *, blocking: bool, fail: bool) -> None:
    """Snapshot the step's state to the CPU (every process its optimizer part, process 0 the rest) and hand it to
    the checkpointer (which reports each commit to ``_committed``)."""
    job.backend.synchronize()
    main = None
    if job.dist.is_main:
        main = checkpoint.MainFiles(
            weights=weights_state(model), lora_config=adapter_config(model), scheduler=scheduler.state_dict(),
            rng=checkpoint.rng_state(),
            state={"global_step": step, "data_position": {"samples_consumed": position},
                   "trial": job.spec.name, "spec_hash": job.spec.spec_hash()},
            meta={"track": job.cfg.track, "run": job.cfg.run, "backend": job.backend.name,
                  "method": job.spec.method, "attempt": job.cfg.attempt})
    started = checkpointer.save(checkpoint.Snapshot(step, optimizer.state_shard(), main), blocking=blocking,
                                fail_before_manifest=fail)
    if not started:
        job.progress.emit("checkpoint_exists", step=step, uri=checkpoint.step_uri(job.cfg.run_dir, step))


def _committed(job: Attempt, saved: checkpoint.SavedCheckpoint, log: MetricsLog) -> None:
    job.saved.append(saved)
    log.checkpoint(saved.step, saved.bytes, saved.files, saved.save_s, saved.uri)
    job.progress.emit("checkpoint", step=saved.step, uri=saved.uri, bytes=saved.bytes, files=saved.files,
                      save_s=round(saved.save_s, 3), blocked_s=round(saved.blocked_s, 3))


def _final_samples(job: Attempt, model: torch.nn.Module, tokenizer: Any) -> list[dict[str, Any]]:
    if not job.dist.is_main or not job.spec.evaluation.prompts:
        return []
    t = time.perf_counter()
    # Generation grows the sequence every token; on a graph-compiling device that is one graph per length,
    # so samples are generated from a CPU copy of the trained weights there.
    device = job.backend.device if job.backend.name in ("cpu", "compiled", "cuda") else torch.device("cpu")
    if device.type == "cpu" and job.backend.name == "neuron":
        model = model.to("cpu")
    out = []
    with no_grad_eval(model):
        for prompt in job.spec.evaluation.prompts:
            text, ids = greedy_complete(model, tokenizer, prompt, job.spec.evaluation.max_new_tokens, device)
            out.append({"prompt": prompt, "completion": text, "token_ids": ids})
    job.phases["eval_s"] += time.perf_counter() - t
    return out
