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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial

import torch

from lambdas.domain.trial.layout import gradient_accumulation_steps, track_layout
from lambdas.domain.trial.rules import parse_trial
from lambdas.domain.trial.spec import TrialSpec
from trainer import (
    FAILURE_EXIT_CODE,
    FAULT_EXIT_CODE,
    SIGTERM_EXIT_CODE,
    checkpoint,
    ddp,
    fsdp,
    sharded,
    storage,
    tensor_parallel,
)
from trainer.backends import Backend, default_backend, make_backend, no_grad_eval
from trainer.cache import CompileCache
from trainer.config import RunConfig
from trainer.data import BatchPlan, DataError, SampleStream, TokenisedSet, loss_tokens, read_rows
from trainer.distributed import Distributed
from trainer.faults import FaultPlan, ForcedFailure, PlannedFault, TerminationFlag, forced_failure_point
from trainer.json_types import JsonValue
from trainer.learning import Fingerprint, fingerprint, learning_record
from trainer.metrics import CloudWatchPublisher, MetricsLog, NullPublisher, Progress, publishing_enabled
from trainer.modeling import (
    build_model,
    build_tokenizer,
    greedy_complete,
    token_loss_sum,
)
from trainer.optim import Optimizer
from trainer.peers import peer_lost
from trainer.state import TrainState
from trainer.summary import (
    AttemptRecord,
    FinalSample,
    OptimizerSettings,
    build_summary,
    previous_losses,
    write_summary,
)

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


def lr_lambda(max_steps: int) -> Callable[[int], float]:
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


def optimizer_record(spec: TrialSpec, sharding: str) -> OptimizerSettings:
    return {"name": "adamw", "learning_rate": spec.learning_rate, "weight_decay": WEIGHT_DECAY,
            "grad_clip_norm": GRAD_CLIP_NORM, "lr_schedule": "linear warmup, then linear decay",
            "warmup_steps": warmup_steps(spec.max_steps), "final_lr_factor": FINAL_LR_FACTOR, "sharding": sharding}


def run(cfg: RunConfig) -> int:
    """Run one attempt; returns the process exit code. The summary is written on every path out."""
    return Trainer(cfg).run()


class _Interrupted(Exception):
    """The ranks stopped together after a SIGTERM; ``by_peer`` when this process got none itself (another node's
    was reclaimed or stopped), ``checkpointed`` when the step stopped at is committed."""

    def __init__(self, *, by_peer: bool = False, checkpointed: bool = False) -> None:
        super().__init__("interrupted")
        self.by_peer, self.checkpointed = by_peer, checkpointed


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
        self.publisher: CloudWatchPublisher | NullPublisher = (CloudWatchPublisher(trial_id, run_name, cfg.attempt)
                               if self.dist.is_main and publishing_enabled() else NullPublisher())
        self.log = MetricsLog(self.publisher)
        self.progress = Progress(enabled=cfg.progress and self.dist.is_main)
        self.record = AttemptRecord(cfg=cfg, spec=spec, trial_id=trial_id, run=run_name, backend=self.backend,
                                    started_at=self.started_at)
        self.force = forced_failure_point()
        self.cache_setup_s = 0.0
        self.fully_sharded = self.data_parallel = False  # FSDP2, DDP (decided in _set_up)
        self.distributed_model = False  # its parameters are DTensors (FSDP2, tensor parallelism)
        self.pending: list[_Dispatched] = []  # dispatched steps whose loss is not read yet
        self.last_read = 0.0

    @property
    def phases(self) -> dict[str, float]:
        return self.record.phases

    def emit(self, event: str, **fields: JsonValue) -> None:
        self.progress.emit(event, **fields)

    # ---- the attempt -------------------------------------------------------------------------------------------
    def run(self) -> int:
        record = self.record
        self.flag.install()
        exit_code, status, alone = 0, "succeeded", False
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
            # A fault planned on this node only leaves its peers mid-step: it goes without waiting for them.
            alone = record.fault_plan is not None and record.fault_plan.node is not None
        except _Interrupted as stopped:
            exit_code, status = self._interrupted_exit(stopped), "interrupted"
        except Exception as exc:  # every failure still leaves a summary behind
            exit_code, status = self._failure(exc)
            alone = True  # its peers may be inside a collective, or gone
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
        self.dist.close(together=not alone)
        return exit_code

    def _failure(self, exc: Exception) -> tuple[int, str]:
        """The exit of an attempt that raised ``exc``. A collective that lost its peers once a checkpoint exists
        is resumable (``FAULT_EXIT_CODE``, which the job definitions retry): Batch takes a multi-node job's status
        from its main node, so this is how the main node reports a child node that is gone (its planned fault, a
        Spot reclaim, a crash). Before any checkpoint, or for any other error, the attempt failed."""
        record = self.record
        record.error = f"{type(exc).__name__}: {exc}"[:2000]
        self.emit("error", error=record.error)
        if not (peer_lost(exc) and self._resumable()):
            return FAILURE_EXIT_CODE, "failed"
        plan = record.fault_plan
        if plan is not None and plan.fired_elsewhere(record.global_step + 1):
            record.fault_fired = True  # the planned fault, on another node: this node saw it as a lost peer
            self.emit("fault", step=plan.at_step, mode=plan.mode, exit_code=FAULT_EXIT_CODE, node=plan.node)
            return FAULT_EXIT_CODE, "faulted"
        return FAULT_EXIT_CODE, "interrupted"

    def _interrupted_exit(self, stopped: _Interrupted) -> int:
        """A stop after SIGTERM: 143 when this process was signalled (a cancel, this host reclaimed: Batch's own
        status reason decides), resumable when only a peer was and the stop is checkpointed (a child node's Spot
        reclaim must not end the job that its main node reports)."""
        if stopped.by_peer and (stopped.checkpointed or self._resumable()):
            return FAULT_EXIT_CODE
        return SIGTERM_EXIT_CODE

    def _resumable(self) -> bool:
        """Whether a retry of this attempt resumes rather than starts over: it resumed from a checkpoint, or one of
        the run's checkpoints is committed (its manifest written: looked up in storage, since the peer may have been
        lost between the manifest's write and the commit's last collective)."""
        if self.record.resumed_from_step is not None or getattr(getattr(self, "checkpointer", None), "saved", None):
            return True
        with contextlib.suppress(Exception):  # storage unreachable too: nothing to resume from that we can see
            run_dir = self.cfg.run_dir
            return any(storage.exists(checkpoint.manifest_uri(run_dir, step))
                       for step in checkpoint.list_steps(run_dir))
        return False

    def _set_up(self) -> None:
        """Layout, model, data, compile cache, optimizer, scheduler and checkpointer."""
        spec, cfg, backend, record = self.spec, self.cfg, self.backend, self.record
        # The run's own layout: a scaling run (gpu-n1) trains at its node count, the gradient accumulation taking up
        # the difference in data-parallel ranks so the effective batch is the main run's.
        layout = track_layout(spec, cfg.track, run=cfg.run)  # type: ignore[arg-type]
        self.plan = BatchPlan(spec.micro_batch_size, layout.data_parallel, gradient_accumulation_steps(spec, layout))
        record.layout, record.plan, record.world_size_run = layout, self.plan, self.dist.world_size
        # One process per device forms whole tensor-parallel groups; a stand-in with fewer processes runs replicas.
        degree = tensor_parallel.degree(self.dist.world_size, layout.tensor_parallel, layout.data_parallel)
        if degree > 1 and not backend.torch_data_parallel:
            raise tensor_parallel.TensorParallelError(
                f"tensor_parallel {degree} needs DTensor, which the retired PyTorch/XLA backend ({backend.name}) "
                "does not run: pin a TorchNeuron image (tracks.trn2.neuron_sdk 2.33 or later) or use "
                "tensor_parallel 1")
        replicas = self.dist.world_size // degree
        full_parameter = spec.method in ("full", "continued_pretraining")
        # Both tracks, the same APIs: DTensor tensor parallelism over "tp"; over "dp", FSDP2 for full-parameter runs
        # and for tensor-parallel replicas (DDP takes no DTensor parameters), DDP for the rest.
        self.fully_sharded = backend.torch_data_parallel and replicas > 1 and (full_parameter or degree > 1)
        self.data_parallel = backend.torch_data_parallel and replicas > 1 and not self.fully_sharded
        if degree > 1 or self.fully_sharded:
            self.dist.form_mesh(degree)
        record.tensor_parallel_run = degree
        record.model_parallel_run = layout.pipeline_parallel == 1
        try:
            ranks = self.plan.ranks(self.dist.replica, self.dist.replicas)
        except DataError as exc:
            track = spec.run_track(cfg.run or cfg.track)
            raise DataError(f"track {cfg.track} layout {track.instance_type} x {layout.nodes} node(s), "
                            f"tensor_parallel {layout.tensor_parallel}, pipeline_parallel "
                            f"{layout.pipeline_parallel} has data_parallel {layout.data_parallel}: {exc}") from None
        self.tokenizer = build_tokenizer(spec)
        self.model = build_model(spec, self.tokenizer)
        if layout.tensor_parallel > 1:  # a layout one process per device could not run fails here too
            tensor_parallel.check_model(self.model, layout.tensor_parallel)
        self.phases["environment_s"] = time.perf_counter() - self.t0

        t = time.perf_counter()
        train = TokenisedSet.build(read_rows(spec.data.train_uri), self.tokenizer, spec.sequence_length)
        record.data_samples = len(train)  # what data.samples declares: the report checks the two agree
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
        mesh = self.dist.mesh  # formed above wherever tensor parallelism or FSDP2 runs
        if degree > 1:
            assert mesh is not None
            tensor_parallel.parallelize(self.model, mesh["tp"])
        if self.fully_sharded:
            assert mesh is not None
            fsdp.shard_model(self.model, mesh["dp"])
            if self.dist.stats is not None and not fsdp.time_collectives(self.model, self.dist.stats):
                self.dist.stats.measured = False  # its collectives run inside forward and backward, untimed
        if degree > 1 and self.dist.stats is not None:
            self.dist.stats.untimed.append("tensor-parallel all-reduces inside DTensor's forward and backward")
        self.step_model = self.model
        if self.data_parallel:
            self.step_model = ddp.wrap(self.model, backend.device, self.dist.stats)
        self.step_model = backend.compiled(self.step_model)
        self.distributed_model = sharded.is_sharded(self.model)
        # After the move: on XLA, Module.to() replaces the Parameter objects, so earlier references would be stale.
        self.named = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        self.params = [p for _, p in self.named]
        sharding = "fsdp2" if self.fully_sharded else ("tensor-parallel" if degree > 1 else "replicated")
        self.optimizer = Optimizer(self.named, lr=spec.learning_rate, weight_decay=WEIGHT_DECAY,
                                   twin=self.dist.twin if self.distributed_model else None,
                                   main=self.dist.is_main, sharding=sharding)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer.local, lr_lambda(spec.max_steps))
        self.state = TrainState(self.model, self.optimizer, self.scheduler, main=self.dist.is_main,
                                device=backend.device, identity={"trial": spec.name, "spec_hash": spec.spec_hash()},
                                meta={"track": cfg.track, "run": cfg.run, "backend": backend.name,
                                      "method": spec.method, "attempt": cfg.attempt})
        record.optimizer = optimizer_record(spec, sharding)
        self.checkpointer = checkpoint.Checkpointer(cfg.run_dir, interval=spec.checkpoint_interval_steps,
                                                    max_steps=spec.max_steps, dist=self.dist,
                                                    sharding=sharding,
                                                    asynchronous=asynchronous_checkpoints(),
                                                    on_commit=self._committed, on_exists=self._exists,
                                                    synchronize=backend.synchronize)
        record.asynchronous_checkpoints = self.checkpointer.asynchronous

    def _restore(self) -> None:
        """Load the newest checkpoint that verifies, from this run or the run named to resume from."""
        cfg, record, plan = self.cfg, self.record, self.plan
        t = time.perf_counter()
        sources = [cfg.run_dir] + ([cfg.resume_from] if cfg.resume_from else [])
        found = self.checkpointer.restore(sources, spec_hash=self.spec.spec_hash(), state=self.state)
        record.skipped = found.skipped
        for skipped in found.skipped:
            self.emit("checkpoint_skipped", step=skipped.step, uri=skipped.uri, reason=skipped.reason)
        state = self.state
        if found.loaded is not None:
            ckpt = found.loaded
            record.resumed_from_step, record.resumed_from_uri = ckpt.step, ckpt.uri
            record.resume_position_ok = state.position == ckpt.step * plan.global_batch and state.step == ckpt.step
            record.previous = previous_losses(sorted({cfg.run_dir, ckpt.uri.rsplit("/checkpoints/", 1)[0]}),
                                              cfg.attempt, cfg.run_dir)
            self.emit("resume", from_step=ckpt.step, uri=ckpt.uri, samples_consumed=state.position)
        self.phases["checkpoint_restore_s"] = time.perf_counter() - t
        record.start_step, record.global_step, record.position = state.step, state.step, state.position
        start_step = state.step
        if found.loaded is not None and cfg.resume_from and found.loaded.uri.startswith(cfg.resume_from.rstrip("/")):
            # Another run's checkpoint (a GPU fallback resuming Trainium2): the fixed evaluation set at the resumed
            # step, before any training here, is the continuity the report shows against that run's last eval.
            self._evaluate(start_step)
            record.resume_eval = (start_step, record.evals[start_step])

    def _train(self) -> None:
        spec, record = self.spec, self.record
        record.fault_plan = FaultPlan.for_run(spec, self.cfg.track, self.cfg.attempt, self.cfg.run)
        with self._reading_weights():
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
        spec, ckpt, state = self.spec, self.checkpointer, self.state
        with self._stop_votes() as stop_requested:
            for step in range(state.step + 1, spec.max_steps + 1):
                self._step(step, overlapping=ckpt.in_flight)
                stop = stop_requested()
                evaluate = step % spec.evaluation.interval_steps == 0 or step == spec.max_steps
                if evaluate or ckpt.due(step) or stop:
                    self._drain()  # the step's own record first, and no device work left behind the pause
                if evaluate:
                    self._evaluate(step)
                self._saving(partial(ckpt.step_end, state, stop=stop, fault_next=fault.fires(step),
                                     fail=self.force == "save"))
                fault.check(step)
                if stop:
                    self._stop(step)
            self._saving(ckpt.wait)

    @contextlib.contextmanager
    def _stop_votes(self) -> Iterator[Callable[[], bool]]:
        """Whether to stop after this step. SIGTERM reaches the ranks a moment apart: they agree whether any got it,
        so all stop at the same step (one rank checkpointing while another starts the next step would hang both).
        Several processes vote asynchronously and read the previous step's answer, so no step waits for the vote.
        On the way out no vote is left in flight, and every step that ran is recorded (a planned fault or an
        interruption included; if the device itself failed, the original error is the one to report)."""
        flag, vote = self.flag, None

        def requested() -> bool:
            nonlocal vote
            if self.dist.world_size <= 1:
                return flag.requested
            answer = vote() if vote is not None else False
            vote = self.dist.vote_any(flag.requested)
            return answer

        try:
            yield requested
        finally:
            if vote is not None:
                with contextlib.suppress(Exception):
                    vote()
            with contextlib.suppress(Exception):
                self._drain()

    def _step(self, step: int, *, overlapping: bool) -> None:
        """Dispatch one optimizer step over every micro-batch this process runs; its loss is read later."""
        backend, dist, plan = self.backend, self.dist, self.plan
        t = time.perf_counter()
        dist.begin_step(step)
        ids, labels = self.stream.take(self.state.position, plan.global_batch)
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
        dist.gradients_ready(self.params)
        sharded.clip_grad_norm_(self.params, GRAD_CLIP_NORM)
        self.optimizer.step(backend)
        lr = float(self.scheduler.get_last_lr()[0])
        self.scheduler.step()
        self.optimizer.zero_grad()
        global_loss = dist.reduce_loss(step_loss)  # before step_end: on XLA it belongs in this step's graph
        backend.step_end()
        state = self.state
        state.step, state.position = step, state.position + plan.global_batch
        self.record.global_step, self.record.position = step, state.position
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

    def _stop(self, step: int) -> None:
        """SIGTERM: the checkpointer finishes what is in flight and saves this step if there is time; then leave."""
        t = time.perf_counter()
        try:
            checkpointed = self.checkpointer.on_stop(self.state)
        finally:
            self.phases["checkpoint_save_s"] += time.perf_counter() - t
        self.emit("interrupted", step=step, checkpointed=checkpointed)
        raise _Interrupted(by_peer=not self.flag.requested, checkpointed=checkpointed)

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

    def _saving(self, call: Callable[[], checkpoint.SavedCheckpoint | None]) -> None:
        """Run a checkpointer call on the training thread, counting its time as checkpoint time."""
        t = time.perf_counter()
        try:
            call()
        finally:
            self.phases["checkpoint_save_s"] += time.perf_counter() - t

    def _exists(self, step: int) -> None:
        self.emit("checkpoint_exists", step=step, uri=checkpoint.step_uri(self.cfg.run_dir, step))

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

    @contextlib.contextmanager
    def _reading_weights(self) -> Iterator[None]:
        """The summary's ``learning`` record: the trainable weights read before the attempt's first optimizer step
        and again after its last (a planned fault or an interruption included), outside the timed loop and on the
        device they trained on, so before the final samples may move the model to the host. A lost peer leaves this
        process's device and weights as they were (the reading is local, no collective): read too. After any other
        failure the device may be gone: no second reading, and no record. A reading never costs the attempt."""
        before = self._fingerprint()
        try:
            yield
        except (PlannedFault, _Interrupted):
            self._record_learning(before)
            raise
        except Exception as exc:
            if peer_lost(exc):
                self._record_learning(before)
            raise
        self._record_learning(before)

    def _fingerprint(self) -> Fingerprint | None:
        try:
            return fingerprint(self.params)
        except Exception as exc:
            self.emit("weights_unread", error=f"{type(exc).__name__}: {exc}"[:500])
            return None

    def _record_learning(self, before: Fingerprint | None) -> None:
        after = self._fingerprint() if before is not None else None
        if before is not None and after is not None:
            self.record.learning = learning_record(before, after, steps=len(self.record.losses))

    def _final_samples(self) -> list[FinalSample]:
        """Process 0 completes the fixed prompts (every process runs a sharded model's forward with it, on the
        device)."""
        together = self.distributed_model
        if not self.spec.evaluation.prompts or not (self.dist.is_main or together):
            return []
        t = time.perf_counter()
        backend, model, evaluation = self.backend, self.model, self.spec.evaluation
        on_device = backend.generates_on_device or together
        device = backend.device if on_device else torch.device("cpu")
        if not on_device:
            model = model.to("cpu")  # a CPU copy of the trained weights
        out: list[FinalSample] = []
        with no_grad_eval(model):
            for prompt in evaluation.prompts:
                text, ids = greedy_complete(model, self.tokenizer, prompt, evaluation.max_new_tokens, device)
                out.append({"prompt": prompt, "completion": text, "token_ids": ids})
        self.phases["eval_s"] += time.perf_counter() - t
        return out if self.dist.is_main else []
