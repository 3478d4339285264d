"""One attempt of a training run: set up, restore, train with checkpoints and evals, fault where planned, and
leave a summary whatever happens.

``Trainer`` owns the attempt's state: the model, optimizer and scheduler, the data position, and the
``AttemptRecord`` it fills as it goes (phases, losses, evals, step times, checkpoints); the ``Checkpointer`` owns
whether a save is due and when it is durable; the backend answers what the device can do. The summary is built
from the record once, on every path out of ``Trainer.run``."""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from lambdas.domain.trial import (
    TrialSpec,
    gradient_accumulation_steps,
    parse_trial,
    tensor_parallel_problems,
    track_layout,
)
from trainer import FAILURE_EXIT_CODE, SIGTERM_EXIT_CODE, checkpoint, ddp, fsdp, storage, tensor_parallel
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
from trainer.summary import AttemptRecord, build_summary, previous_losses, write_summary

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


# The warm-up compile stage runs this many optimizer steps (or max_steps, if fewer): the first builds the step's
# graph, the second the graph with the optimizer's state in place, the third confirms nothing new is traced.
COMPILE_STAGE_STEPS = 3


def compile_steps(spec: TrialSpec) -> int:
    return max(1, min(spec.max_steps, COMPILE_STAGE_STEPS))


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
    if backend_name not in ("neuron", "xla") or track != "trn2" or trn2 is None:
        return {}
    return {"NEURON_LOGICAL_NC_CONFIG": str(trn2.logical_nc_config)}


def optimizer_record(spec: TrialSpec, sharding: str) -> dict[str, Any]:
    return {"name": "adamw", "learning_rate": spec.learning_rate, "weight_decay": WEIGHT_DECAY,
            "grad_clip_norm": GRAD_CLIP_NORM, "lr_schedule": "linear warmup, then linear decay",
            "warmup_steps": warmup_steps(spec.max_steps), "final_lr_factor": FINAL_LR_FACTOR, "sharding": sharding}


def check_tensor_parallel(model: torch.nn.Module, size: int) -> None:
    """Refuse a tensor_parallel the model's heads or MLP cannot be split by (whether or not this run splits it)."""
    config = getattr(model, "config", None)
    if config is None:
        return
    problems = tensor_parallel_problems(size, num_attention_heads=config.num_attention_heads,
                                                     num_key_value_heads=config.num_key_value_heads,
                                                     intermediate_size=config.intermediate_size)
    if problems:
        raise tensor_parallel.TensorParallelError("; ".join(f"model {name}: {text}" for name, text in problems))


def run(cfg: RunConfig) -> int:
    """Run one attempt; returns the process exit code. The summary is written on every path out."""
    return Trainer(cfg).run()


class _Interrupted(Exception):
    pass


@dataclass
class _Dispatched:
    """A step whose work is queued on the device but whose loss has not been read yet."""

    step: int
    started: float
    read: Callable[[], float]  # from Backend.read_later
    lr: float
    overlapping: bool = False  # a checkpoint was being written while the step ran


class Trainer:
    """One attempt of one run on this process (one rank of the job, or all of them on a single process)."""

    def __init__(self, cfg: RunConfig):
        self.started_at, self.t0 = time.time(), time.perf_counter()
        self.cfg = cfg
        self.flag = TerminationFlag()
        self.spec: TrialSpec = parse_trial(storage.read_text(cfg.spec_uri), allow_local_paths=True)
        spec = self.spec
        backend_name = cfg.backend or default_backend(cfg.track)
        trn2 = spec.tracks.trn2
        flags = list(trn2.compiler_flags) if (trn2 is not None and cfg.track == "trn2") else []
        os.environ.update(neuron_environment(spec, cfg.track, backend_name))
        execution = trn2.execution if (trn2 is not None and cfg.track == "trn2") else "compiled"
        self.backend: Backend = make_backend(backend_name, spec.precision, flags, execution=execution)
        self.dist = Distributed.from_env(self.backend)
        trial_id, run_name = cfg.trial_id or spec.trial_id, cfg.run or cfg.track
        self.publisher: Any = (CloudWatchPublisher(trial_id, run_name, cfg.attempt)
                               if self.dist.is_main and publishing_enabled() else NullPublisher())
        self.log = MetricsLog(self.publisher)
        self.progress = Progress(enabled=cfg.progress and self.dist.is_main)
        self.record = AttemptRecord(cfg=cfg, spec=spec, trial_id=trial_id, run=run_name, backend=self.backend,
                                    started_at=self.started_at)
        self.force = forced_failure_point()
        self.cache_setup_s = 0.0
        self.fully_sharded = self.data_parallel = False  # FSDP2, DDP (decided in _set_up)
        self.split: tensor_parallel.Sharding | None = None  # tensor-parallel slices (decided in _set_up)
        self.position = 0
        self.pending: list[_Dispatched] = []  # dispatched steps whose loss is not read yet
        self.last_read = 0.0

    @property
    def phases(self) -> dict[str, float]:
        return self.record.phases

    def emit(self, event: str, **fields: Any) -> None:
        self.progress.emit(event, **fields)

    # ---- the attempt -------------------------------------------------------------------------------------------
    def run(self) -> int:
        record = self.record
        self.flag.install()
        exit_code, status = 0, "succeeded"
        try:
            self._set_up()
            if self.cfg.compile_only:
                self._compile_only()
            else:
                self._restore()
                self._train()
        except PlannedFault as fault:
            exit_code, status = fault.exit_code, "faulted"
            record.fault_fired = True
            self.emit("fault", step=fault.step, mode=fault.mode, exit_code=fault.exit_code)
        except _Interrupted:
            exit_code, status = SIGTERM_EXIT_CODE, "interrupted"
        except Exception as exc:  # every failure still leaves a summary behind
            exit_code, status = FAILURE_EXIT_CODE, "failed"
            record.error = f"{type(exc).__name__}: {exc}"[:2000]
            self.emit("error", error=record.error)
        finally:
            self.flag.uninstall()
        record.memory_peak_mib = self.backend.memory_peak_mib()
        with contextlib.suppress(Exception):  # a broken process group must not cost the summary
            record.communication = self.dist.communication()
        if self.dist.is_main:
            summary = build_summary(record, status=status, exit_code=exit_code)
            self.log.final(summary.phases.model_dump(), summary.memory_peak_mib, summary.compile.cache)
            self.publisher.close()
            write_summary(self.cfg.run_dir, self.cfg.attempt, summary, self.log.jsonl())
            self.emit("done", status=status, exit_code=exit_code, global_step=summary.global_step,
                      summary=storage.join(self.cfg.run_dir, f"attempt-{self.cfg.attempt}", "summary.json"))
        self.dist.close()
        return exit_code

    def _set_up(self) -> None:
        """Layout, model, data, compile cache, optimizer, scheduler and checkpointer."""
        spec, cfg, backend, record = self.spec, self.cfg, self.backend, self.record
        layout = track_layout(spec, cfg.track)  # type: ignore[arg-type]
        self.plan = BatchPlan(spec.micro_batch_size, layout.data_parallel, gradient_accumulation_steps(spec, layout))
        record.layout, record.plan, record.world_size_run = layout, self.plan, self.dist.world_size
        # One process per device forms whole tensor-parallel groups; a stand-in with fewer processes runs replicas.
        degree = tensor_parallel.degree(self.dist.world_size, layout.tensor_parallel, layout.data_parallel)
        comm = self.dist.split_tensors(degree)
        record.tensor_parallel_run = degree
        record.model_parallel_run = layout.pipeline_parallel == 1
        try:
            ranks = self.plan.ranks(self.dist.replica, self.dist.replicas)
        except DataError as exc:
            track = spec.track(cfg.track)  # type: ignore[arg-type]
            raise DataError(f"track {cfg.track} layout {track.instance_type} x {layout.nodes} node(s), "
                            f"tensor_parallel {layout.tensor_parallel}, pipeline_parallel "
                            f"{layout.pipeline_parallel} has data_parallel {layout.data_parallel}: {exc}") from None
        self.tokenizer = build_tokenizer(spec)
        self.model = build_model(spec, self.tokenizer)
        if layout.tensor_parallel > 1:  # a layout one process per device could not run fails here too
            check_tensor_parallel(self.model, layout.tensor_parallel)
        if comm is not None:
            self.split = tensor_parallel.split_model(self.model, comm)
        self.phases["environment_s"] = time.perf_counter() - self.t0

        t = time.perf_counter()
        train = TokenisedSet.build(read_rows(spec.data.train_uri), self.tokenizer, spec.sequence_length)
        self.valid = TokenisedSet.build(read_rows(spec.data.validation_uri), self.tokenizer, spec.sequence_length)
        self.stream = SampleStream(train, spec.data.shuffle_seed)
        self.phases["data_load_s"] = time.perf_counter() - t
        self.emit("data", train_rows=len(train), validation_rows=len(self.valid), global_batch=self.plan.global_batch,
                  accumulation=self.plan.accumulation, data_parallel=self.plan.data_parallel,
                  processes=self.dist.world_size, tensor_parallel=degree, simulated_ranks=len(ranks))

        t = time.perf_counter()
        record.cache = CompileCache.open(cfg.compile_cache_url, compiles=backend.compiles,
                                         on_neuron=getattr(backend, "reads_cache_url", False))
        backend.configure_cache(record.cache.directory)
        self.cache_setup_s = time.perf_counter() - t
        self.model = backend.prepare(self.model)
        self.step_model = self.model
        full_parameter = spec.method in ("full", "continued_pretraining")
        # Both tracks, several processes, each running at least one micro-batch: FSDP2 for full-parameter runs, DDP
        # for the others. Otherwise (a tensor-parallel layout, the retired XLA path) the gradients are all-reduced
        # explicitly.
        wrapped = (backend.torch_data_parallel and self.split is None
                   and 1 < self.dist.world_size <= layout.data_parallel)
        self.fully_sharded = wrapped and full_parameter
        self.data_parallel = wrapped and not full_parameter
        cpu_mesh = None
        if self.fully_sharded:
            from torch.distributed.device_mesh import DeviceMesh

            fsdp.shard_model(self.model, backend.device.type, self.dist.world_size)
            cpu_mesh = DeviceMesh.from_group(self.dist.checkpoint_group, "cpu")
            self.dist.gradients_reduced_by_model = True
            if self.dist.stats is not None and not fsdp.time_collectives(self.model, self.dist.stats):
                self.dist.stats.measured = False  # its collectives run inside forward and backward, untimed
        if self.data_parallel:
            self.step_model = ddp.wrap(self.model, backend.device, self.dist.stats)
            self.dist.gradients_reduced_by_model = True
        self.step_model = backend.compiled(self.step_model)
        # After the move: on XLA, Module.to() replaces the Parameter objects, so earlier references would be stale.
        self.named = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        self.params = [p for _, p in self.named]
        self.optimizer = Optimizer(self.named, lr=spec.learning_rate, weight_decay=WEIGHT_DECAY, dist=self.dist,
                                   sharded=full_parameter and backend.shards_optimizer, cpu_mesh=cpu_mesh,
                                   split=self.split)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer.local, lr_lambda(spec.max_steps))
        record.optimizer = optimizer_record(spec, self.optimizer.sharding)
        self.checkpointer = checkpoint.Checkpointer(cfg.run_dir, interval=spec.checkpoint_interval_steps,
                                                    max_steps=spec.max_steps, dist=self.dist,
                                                    sharding=self.optimizer.sharding,
                                                    asynchronous=asynchronous_checkpoints(),
                                                    on_commit=self._committed)
        record.asynchronous_checkpoints = self.checkpointer.asynchronous

    def _restore(self) -> None:
        """Load the newest checkpoint that verifies, from this run or the run named to resume from."""
        cfg, record, plan = self.cfg, self.record, self.plan
        t = time.perf_counter()
        sources = [cfg.run_dir] + ([cfg.resume_from] if cfg.resume_from else [])
        found = self.checkpointer.restore(sources, spec_hash=self.spec.spec_hash(),
                                          names=self.optimizer.loaded_names(), make=self.optimizer.make_template)
        record.skipped = found.skipped
        for skipped in found.skipped:
            self.emit("checkpoint_skipped", step=skipped.step, uri=skipped.uri, reason=skipped.reason)
        start_step, position = 0, 0
        if found.loaded is not None:
            ckpt = found.loaded
            if self.fully_sharded:
                fsdp.load_full_weights(self.model, ckpt.weights)
            else:
                with self._whole(gather=False):  # tensor-parallel slices cut from the whole weights loaded
                    load_weights(self.model, {k: v.to(self.backend.device) for k, v in ckpt.weights.items()})
            self.optimizer.load_shard(ckpt.optimizer)
            self.scheduler.load_state_dict(ckpt.scheduler)
            # The scheduler's state holds the step's rate; the param group (rebuilt, not loaded) must carry it too.
            for group, rate in zip(self.optimizer.local.param_groups, self.scheduler.get_last_lr(), strict=True):
                group["lr"] = rate
            checkpoint.restore_rng(ckpt.rng)
            start_step, position = ckpt.step, int(ckpt.state["data_position"]["samples_consumed"])
            record.resumed_from_step, record.resumed_from_uri = ckpt.step, ckpt.uri
            record.resume_position_ok = position == ckpt.step * plan.global_batch
            record.previous = previous_losses(sorted({cfg.run_dir, ckpt.uri.rsplit("/checkpoints/", 1)[0]}),
                                              cfg.attempt, cfg.run_dir)
            self.emit("resume", from_step=ckpt.step, uri=ckpt.uri, samples_consumed=position)
        self.phases["checkpoint_restore_s"] = time.perf_counter() - t
        record.start_step, record.global_step, record.position = start_step, start_step, position
        self.position = position
        if found.loaded is not None and cfg.resume_from and found.loaded.uri.startswith(cfg.resume_from.rstrip("/")):
            # Another run's checkpoint (a GPU fallback resuming Trainium2): the fixed evaluation set at the resumed
            # step, before any training here, is the continuity the report shows against that run's last eval.
            self._evaluate(start_step)
            record.resume_eval = (start_step, record.evals[start_step])

    def _train(self) -> None:
        spec, record = self.spec, self.record
        record.fault_plan = FaultPlan.for_run(spec, self.cfg.track, self.cfg.attempt)
        loop_started = time.perf_counter()
        try:
            self._loop(record.fault_plan)
        finally:
            self.checkpointer.close()
            loop_s = time.perf_counter() - loop_started
            self._finish_compile()
            self.phases["train_s"] = max(0.0, loop_s - self.phases["eval_s"] - self.phases["checkpoint_save_s"]
                                         - (self.phases["compile_s"] - self.cache_setup_s))
        record.final_samples = self._final_samples()
        record.validation_loss = record.evals.get(spec.max_steps)

    def _compile_only(self) -> None:
        """The warm-up compile stage: the training step's graphs (and the evaluation forward's) built on every rank
        over a few steps and published to the compile cache; nothing else is kept (no checkpoints, and the model
        is discarded). Any failure here is a compile failure: it is quarantined in the cache, never served."""
        record = self.record
        steps = compile_steps(self.spec)
        loop_started = time.perf_counter()
        try:
            for step in range(1, steps + 1):
                self._step(step, overlapping=False)
            self._drain()
            self._evaluate(steps)
        except Exception:
            record.compile_failed = True
            raise
        finally:
            with contextlib.suppress(Exception):
                self._drain()
            loop_s = time.perf_counter() - loop_started
            self._finish_compile()
            # The whole stage is compile time: what the steps and the evaluation took beyond setting the cache up.
            self.phases["compile_s"] = self.cache_setup_s + loop_s
            self.phases["eval_s"] = 0.0
        self.emit("compiled", steps=steps, compile_s=round(self.phases["compile_s"], 3),
                  cache=record.cache.outcome(record.compile_counters) if record.cache is not None else "none")

    # ---- the loop ----------------------------------------------------------------------------------------------
    def _loop(self, fault: FaultPlan) -> None:
        spec, checkpointer, flag = self.spec, self.checkpointer, self.flag
        vote: Callable[[], bool] | None = None
        try:
            for step in range(self.record.start_step + 1, spec.max_steps + 1):
                if checkpointer.in_flight:
                    self._saving(checkpointer.poll)
                self._step(step, overlapping=checkpointer.in_flight)
                evaluate = step % spec.evaluation.interval_steps == 0 or step == spec.max_steps
                due = checkpointer.due(step)
                # SIGTERM reaches the ranks a moment apart: they agree whether any got it, so all stop at the same
                # step (one rank checkpointing while another starts the next step would hang both). Several processes
                # vote asynchronously and read the previous step's answer, so no step waits for the vote.
                if self.dist.world_size <= 1:
                    stop = flag.requested
                else:
                    stop = vote() if vote is not None else False
                    vote = self.dist.vote_any(flag.requested)
                if evaluate or due or stop:
                    self._drain()  # the step's own record first, and no device work left behind the pause
                if evaluate:
                    self._evaluate(step)
                if due:
                    # The last step's checkpoint and one a stop is waiting for are committed before going on.
                    blocking = step == spec.max_steps or stop
                    self._saving(partial(self._save, step, blocking=blocking, fail=self.force == "save"))
                if fault.fires(step):
                    self._saving(checkpointer.wait)  # a planned fault fires after the step's checkpoint is durable
                fault.check(step)
                if stop:
                    self._stop(step, due)
            self._saving(checkpointer.wait)
        finally:
            if vote is not None:  # no collective left in flight on the control group
                with contextlib.suppress(Exception):
                    vote()
            # A planned fault or an interruption still records every step it ran; if the device itself failed, the
            # original error is the one to report.
            with contextlib.suppress(Exception):
                self._drain()

    def _step(self, step: int, *, overlapping: bool) -> None:
        """Dispatch one optimizer step over every micro-batch this process runs; its loss is read later."""
        backend, dist, plan = self.backend, self.dist, self.plan
        t = time.perf_counter()
        dist.begin_step(step)
        ids, labels = self.stream.take(self.position, plan.global_batch)
        norm = float(loss_tokens(labels))
        step_loss = torch.zeros((), device=backend.device)
        if self.force in ("compile", "step") and step == self.record.start_step + 1:
            if self.force == "compile":
                self.record.compile_failed = True
            raise ForcedFailure(f"DUALTRACK_FORCE_FAIL={self.force}: failing in the {self.force} phase at step "
                                f"{step}")
        if backend.compiles and step == self.record.start_step + 1:
            cache = self.record.cache
            self.emit("compiling", step=step, cached_files=cache.files_before if cache is not None else 0)
        batches = plan.micro_batches(ids, labels, process=dist.replica, processes=dist.replicas)
        for index, (mids, mlabels) in enumerate(batches):
            last = index == len(batches) - 1
            if self.fully_sharded:  # reduce-scatter once, after the last micro-batch's backward
                fsdp.sync_gradients(self.model, last)
            with ddp.accumulating(self.step_model) if self.data_parallel and not last else contextlib.nullcontext():
                with backend.autocast():
                    loss = token_loss_sum(self.step_model, backend.to_device(mids),
                                          backend.to_device(mlabels)) / norm
                loss.backward()
            step_loss = step_loss + loss.detach()
        dist.reduce_gradients(self.params)
        if self.split is not None:
            self.split.clip_grad_norm_(self.named, GRAD_CLIP_NORM)
        else:
            torch.nn.utils.clip_grad_norm_(self.params, GRAD_CLIP_NORM)
        self.optimizer.step(backend)
        lr = float(self.scheduler.get_last_lr()[0])
        self.scheduler.step()
        self.optimizer.zero_grad()
        global_loss = dist.reduce_loss(step_loss)  # before step_end: on XLA it belongs in this step's graph
        backend.step_end()
        self.position += plan.global_batch
        self.record.global_step, self.record.position = step, self.position
        self.pending.append(_Dispatched(step, t, backend.read_later(global_loss), lr, overlapping))
        self._drain(keep=backend.loss_read_lag)

    def _drain(self, keep: int = 0) -> None:
        """Record each dispatched step's loss, time and metrics once its loss is read, at most ``keep`` steps
        behind. A step's time runs from its start, or from when the previous step's loss was read if that is later:
        with a lag the host starts step N+1 before step N finishes on the device, and the device-paced interval is
        what counts."""
        record, tokens = self.record, self.plan.global_batch * self.spec.sequence_length
        while len(self.pending) > keep:
            entry = self.pending.pop(0)
            value = entry.read()
            now = time.perf_counter()
            elapsed = now - max(entry.started, self.last_read)
            self.last_read = now
            record.losses[entry.step] = value
            if record.first_step_s is None:
                record.first_step_s = elapsed
                if self.backend.compiles:
                    self.emit("compile", step=entry.step, first_step_s=round(elapsed, 3))
            else:
                record.step_times.append(elapsed)
                record.step_overlaps.append(entry.overlapping)
            self.log.step(entry.step, value, elapsed, tokens, self.plan.global_batch, entry.lr)
            self.emit("step", step=entry.step, loss=round(value, 6), step_time_s=round(elapsed, 4),
                      tokens_per_s=round(tokens / elapsed, 1) if elapsed > 0 else None)

    def _stop(self, step: int, saved_this_step: bool) -> None:
        """SIGTERM: wait for a save in flight, checkpoint this step if there is time, and leave."""
        self._saving(self.checkpointer.wait)
        saved = self.record.saved
        last_save = saved[-1].save_s if saved else 0.0
        if not saved_this_step and last_save <= SIGTERM_SAVE_BUDGET_S:
            self._saving(partial(self._save, step, blocking=True, fail=False))
        self.emit("interrupted", step=step, checkpointed=bool(saved and saved[-1].step == step))
        raise _Interrupted

    # ---- evaluation, checkpoints, compile ----------------------------------------------------------------------
    def _evaluate(self, step: int) -> None:
        t = time.perf_counter()
        backend, mbs, valid = self.backend, self.spec.micro_batch_size, self.valid
        total = torch.zeros((), device=backend.device)
        tokens = 0
        with no_grad_eval(self.model):
            for i in range(0, len(valid), mbs):
                ids, labels = valid.input_ids[i:i + mbs], valid.labels[i:i + mbs]
                with backend.autocast():
                    total = total + token_loss_sum(self.model, backend.to_device(ids), backend.to_device(labels))
                tokens += loss_tokens(labels)
                backend.step_end()
        value = float(total.item()) / max(1, tokens)
        seconds = time.perf_counter() - t
        self.phases["eval_s"] += seconds
        self.record.evals[step] = value
        self.log.eval(step, value, seconds)
        self.emit("eval", step=step, loss=round(value, 6), eval_s=round(seconds, 3))

    def _saving(self, call: Callable[[], Any]) -> None:
        """Run a checkpointer call on the training thread, counting its time as checkpoint time."""
        t = time.perf_counter()
        try:
            call()
        finally:
            self.phases["checkpoint_save_s"] += time.perf_counter() - t

    def _save(self, step: int, *, blocking: bool, fail: bool) -> None:
        """Snapshot the step's state to the CPU (every process its optimizer part, process 0 the rest) and hand it
        to the checkpointer (which reports each commit to ``_committed``)."""
        self.backend.synchronize()
        # Fully sharded weights are gathered whole onto process 0 (every process takes part); tensor-parallel
        # slices by the processes of process 0's group.
        gathered = fsdp.full_weights(self.model, main=self.dist.is_main) if self.fully_sharded else None
        if self.split is not None and self.dist.replica == 0:
            with self._whole(gather=True):
                gathered = weights_state(self.model) if self.dist.is_main else None
        main = None
        if self.dist.is_main:
            cfg, spec = self.cfg, self.spec
            main = checkpoint.MainFiles(
                weights=gathered if gathered is not None else weights_state(self.model),
                lora_config=adapter_config(self.model),
                scheduler=self.scheduler.state_dict(), rng=checkpoint.rng_state(),
                state={"global_step": step, "data_position": {"samples_consumed": self.position},
                       "trial": spec.name, "spec_hash": spec.spec_hash()},
                meta={"track": cfg.track, "run": cfg.run, "backend": self.backend.name, "method": spec.method,
                      "attempt": cfg.attempt})
        started = self.checkpointer.save(checkpoint.Snapshot(step, self.optimizer.state_shard(), main),
                                         blocking=blocking, fail_before_manifest=fail)
        if not started:
            self.emit("checkpoint_exists", step=step, uri=checkpoint.step_uri(self.cfg.run_dir, step))

    def _whole(self, *, gather: bool) -> contextlib.AbstractContextManager[None]:
        """Within the block the trainable parameters are whole (see ``tensor_parallel.Sharding.whole``)."""
        if self.split is None:
            return contextlib.nullcontext()
        return self.split.whole(self.model, [n for n, _ in self.named], gather=gather)

    def _committed(self, saved: checkpoint.SavedCheckpoint) -> None:
        self.record.saved.append(saved)
        self.log.checkpoint(saved.step, saved.bytes, saved.files, saved.save_s, saved.uri)
        self.emit("checkpoint", step=saved.step, uri=saved.uri, bytes=saved.bytes, files=saved.files,
                  save_s=round(saved.save_s, 3), blocked_s=round(saved.blocked_s, 3))

    def _finish_compile(self) -> None:
        # The first step of a compiling backend builds its graphs; its excess over a typical step is compile time.
        record, excess = self.record, 0.0
        if self.backend.compiles and record.first_step_s is not None:
            typical = statistics.median(record.step_times) if record.step_times else 0.0
            excess = max(0.0, record.first_step_s - typical)
        self.phases["compile_s"] = self.cache_setup_s + excess
        if record.cache is not None:
            record.compile_counters = self.backend.compile_counters()
            record.cache_files_after = record.cache.files_now()
            if self.dist.is_main:
                record.cache.publish(failed_error=(record.error or "the compile failed") if record.compile_failed
                                     else None, attempt=self.cfg.attempt)

    def _final_samples(self) -> list[dict[str, Any]]:
        """Process 0 completes the fixed prompts (every process runs a fully sharded model's forward with it, and
        the processes of its tensor-parallel group theirs, on the device)."""
        together = self.fully_sharded or (self.split is not None and self.dist.replica == 0)
        if not self.spec.evaluation.prompts or not (self.dist.is_main or together):
            return []
        t = time.perf_counter()
        backend, model, evaluation = self.backend, self.model, self.spec.evaluation
        on_device = backend.generates_on_device or self.split is not None
        device = backend.device if on_device else torch.device("cpu")
        if not on_device:
            model = model.to("cpu")  # a CPU copy of the trained weights
        out = []
        with no_grad_eval(model):
            for prompt in evaluation.prompts:
                text, ids = greedy_complete(model, self.tokenizer, prompt, evaluation.max_new_tokens, device)
                out.append({"prompt": prompt, "completion": text, "token_ids": ids})
        self.phases["eval_s"] += time.perf_counter() - t
        return out if self.dist.is_main else []
