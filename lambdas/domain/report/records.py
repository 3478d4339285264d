"""A track's record in the report: its figures, loss, checkpoints, resume evidence, uncertainty and parallel layout
from its summaries and cost, and the source document's record table over the tracks."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal

from lambdas.domain.evidence.evidence import (
    CONFIDENCE,
    MIN_SAMPLES,
    Interval,
    bootstrap,
    ratio_bootstrap,
)
from lambdas.domain.evidence.learning import learning_problems
from lambdas.domain.evidence.physics import run_problems
from lambdas.domain.evidence.run_summary import CheckpointOverlap, LayoutRecord, RunSummary
from lambdas.domain.money.cost import CostBreakdown, RunCost
from lambdas.domain.report.model import (
    NEVER_RAN,
    Booking,
    CacheEntryRecord,
    CheckpointView,
    CompileRecord,
    CostView,
    Figure,
    IntervalView,
    LossPoint,
    LossView,
    ParallelView,
    RecordRow,
    ResumeView,
    RunOutcome,
    Sample,
    Startup,
    Throughput,
    TrackRecord,
    Uncertainty,
    Verdict,
)
from lambdas.domain.trial.spec import TrialSpec
from lambdas.domain.vocabulary import XLA_LABEL, track_of

REPORT_VERSION = 1
VIABLE: tuple[Verdict, ...] = ("trn2_viable_cheaper", "trn2_viable_pays_back", "trn2_viable_not_cheaper")
RATE_NOTE = "priced at the declared instance's rate"


def _num(value: Decimal | None) -> float | None:
    return None if value is None else float(value)


def _merged_loss(summaries: Sequence[RunSummary]) -> list[tuple[int, float]]:
    """Per-step loss by global step; a resumed attempt's values replace the ones it re-ran."""
    return sorted({p.step: p.loss for s in summaries for p in s.loss.per_step}.items())


def _eval_points(summaries: Sequence[RunSummary]) -> list[LossPoint]:
    points = {p.step: p.loss for s in summaries for p in s.loss.eval}
    return [LossPoint(step=k, loss=v) for k, v in sorted(points.items())]


def _interval_view(interval: Interval, digits: int = 6) -> IntervalView:
    return IntervalView.model_validate(interval.as_json(digits))


def _cost_view(cost: RunCost | None, steps: int, tokens: int) -> CostView:
    parts = cost if cost is not None else CostBreakdown()
    total = parts.total_usd
    price = cost.price if cost else None
    return CostView(
        effective_training_usd=str(parts.effective_training_usd),
        compile_usd=str(parts.compile_usd),
        failed_reruns_usd=str(parts.failed_reruns_usd),
        checkpoint_storage_usd=str(parts.checkpoint_storage_usd),
        queue_environment_usd=str(parts.queue_environment_usd),
        total_usd=str(total),
        cost_per_effective_step_usd=str((total / steps).quantize(Decimal("0.000001"))) if steps else None,
        cost_per_1m_tokens_usd=str((total * 1_000_000 / tokens).quantize(Decimal("0.000001"))) if tokens else None,
        price_basis=(
            f"{price.instance_type} at {price.hourly_usd} USD/h ({price.confidence}, table {price.table_version}); "
            if price else "? at ? USD/h (?, table ?); "
        ) + RATE_NOTE + (f"; {price.basis}" if price and price.basis else ""),
        billed_instance_s=_num(cost.billed_instance_seconds) if cost else None,
        queue_s=_num(cost.queue_seconds) if cost else None,
    )


def stack_label(backend: str | None, torch_neuronx: str | None = None) -> str | None:
    """What a run trained on, in words: the retired PyTorch/XLA path is named as such."""
    if backend == "xla":
        return XLA_LABEL
    if backend == "neuron":
        return f"TorchNeuron{' ' + torch_neuronx if torch_neuronx else ''}"
    return {"cuda": "CUDA", "cpu": "CPU stand-in", "compiled": "CPU stand-in (torch.compile)"}.get(str(backend))


def torch_mismatch(torch_by_run: Mapping[str, str | None]) -> str | None:
    """A fidelity caveat when the tracks ran different PyTorch minor versions (``torch_by_run``: each run's PyTorch,
    None when unknown): a difference in the verdict could then be the framework's, not the hardware's."""
    versions = {run: version for run, version in torch_by_run.items() if version}
    minors = {".".join(v.split("+")[0].split(".")[:2]) for v in versions.values()}
    if len(minors) <= 1:
        return None
    listed = ", ".join(f"{run} {version}" for run, version in sorted(versions.items()))
    return f"the tracks ran different PyTorch versions ({listed}): part of any difference may be the framework's"


def _unknown_outcome() -> RunOutcome:
    return RunOutcome(outcome="unknown", status_reason=None, detail=None)


def _track(run: str, summaries: Sequence[RunSummary], cost: RunCost | None, spec: TrialSpec, ended: RunOutcome,
           startup: Startup | None, cache: Mapping[str, CacheEntryRecord]) -> TrackRecord:
    """One run's record from its attempts' summaries, its cost, how its Batch job ended (``ended``) and its
    attempts' image pull and container start (``startup``)."""
    last = summaries[-1] if summaries else None
    tokens = sum(s.tokens_this_attempt for s in summaries)
    steps = last.global_step if last else 0
    stand_in = bool(last and last.stand_in)
    backend = last.backend if last else None
    status: str = last.status if last else "unknown"
    if ended.outcome in NEVER_RAN and status in ("", "unknown"):
        status = ended.outcome
    return TrackRecord(
        run=run,
        status=status,
        backend=backend,
        stand_in=stand_in,
        label=(
            f"stand-in backend {backend!s}: timings are from the stand-in, {RATE_NOTE}"
            if stand_in
            else f"measured on the track's own hardware, {RATE_NOTE}"
        ),
        instance_type=spec.track(track_of(run)).instance_type,
        # Physically impossible figures make the run unusable evidence: shown, never a basis for a verdict.
        unusable=run_problems(summaries) + learning_problems(summaries, spec),
        # The training stack the run actually ran: its PyTorch, and on Trainium2 TorchNeuron or the retired XLA path.
        torch=last.environment.torch if last else None,
        stack=stack_label(backend, last.environment.torch_neuronx if last else None),
        execution=(spec.tracks.trn2.execution if track_of(run) == "trn2" and spec.tracks.trn2 else "eager"),
        steps_completed=steps,
        attempts=len(summaries) or (cost.attempts if cost else 0),
        tokens=tokens,
        compile=_compile_record(spec.trial_id, summaries, cache),
        environment_s=sum(s.phases.environment_s for s in summaries),
        data_load_s=sum(s.phases.data_load_s for s in summaries),
        train_s=sum(s.phases.train_s for s in summaries),
        eval_s=sum(s.phases.eval_s for s in summaries),
        throughput=_throughput(last),
        memory_peak_mib=last.memory_peak_mib if last else None,
        environment=last.environment.model_dump(mode="json", exclude_none=True) if last else {},
        startup=startup or Startup(),
        loss=_loss_view(summaries),
        checkpoint=_checkpoint_view(summaries),
        resume=_resume_view(summaries),
        final_samples=[Sample(prompt=s.prompt, completion=s.completion, token_ids=s.token_ids)
                       for s in (last.final_samples if last else [])],
        cost=_cost_view(cost, steps, tokens),
        uncertainty=_uncertainty(summaries, cost, spec, run),
        parallel=_parallel(last) if last else None,
        outcome=ended.outcome,
        status_reason=ended.status_reason,
        detail=ended.detail,
    )


def _compile_record(trial_id: str, summaries: Sequence[RunSummary], cache: Mapping[str, CacheEntryRecord]
                    ) -> CompileRecord:
    """A run's compiles over its attempts: seconds and cache outcome of each, and how their cost is booked."""
    compiles = [s.compile for s in summaries]
    outcomes: list[str] = [c.cache for c in compiles]
    looked = [c for c in compiles if c.cache in ("hit", "miss", "failed")]
    key = compiles[-1].cache_key if compiles else None
    return CompileRecord(
        first_compile_s=compiles[0].seconds if compiles else None,
        total_s=sum(c.seconds for c in compiles),
        cache=compiles[-1].cache if compiles else "none",
        cache_by_attempt=outcomes,
        seconds_by_attempt=[c.seconds for c in compiles],
        hit_rate=sum(1 for c in compiles if c.cache == "hit") / len(looked) if looked else None,
        cache_key=key,
        booking=compile_booking(trial_id, key, outcomes, cache),
    )


def _throughput(last: RunSummary | None) -> Throughput:
    return Throughput(
        tokens_per_s=last.throughput.tokens_per_s if last else None,
        step_time_s=last.throughput.step_time_s if last else None,
        samples_per_s=last.throughput.samples_per_s if last else None,
    )


def _loss_view(summaries: Sequence[RunSummary]) -> LossView:
    first = summaries[0] if summaries else None
    last = summaries[-1] if summaries else None
    return LossView(
        initial=first.loss.initial if first else None,
        final=last.loss.final if last else None,
        validation=last.validation_loss if last else None,
        eval=_eval_points(summaries),
        per_step=[LossPoint(step=k, loss=v) for k, v in _merged_loss(summaries)],
    )


def _checkpoint_view(summaries: Sequence[RunSummary]) -> CheckpointView:
    checkpoints = {c.step: c for s in summaries for c in s.checkpoints}
    overlap = _checkpoint_overlap(summaries)
    return CheckpointView(
        count=len(checkpoints),
        total_bytes=sum(c.bytes for c in checkpoints.values()),
        files=sum(c.files for c in checkpoints.values()),
        save_s=sum(c.save_s for c in checkpoints.values()),
        restore_s=sum(s.phases.checkpoint_restore_s for s in summaries),
        asynchronous=overlap.asynchronous if overlap else None,
        step_time_overlapping_save_s=overlap.step_time_overlapping_s if overlap else None,
        step_time_clear_s=overlap.step_time_clear_s if overlap else None,
        save_slowdown=overlap.slowdown if overlap else None,
    )


def _resume_view(summaries: Sequence[RunSummary]) -> ResumeView:
    resumed = next((s for s in summaries if s.resumed_from_step is not None), None)
    fault = next((s.fault for s in summaries if s.fault.injected_at_step), None)
    continuity = resumed.continuity if resumed else None
    executed = sum(s.steps_this_attempt for s in summaries)
    rerun = sum(s.rerun_steps for s in summaries)
    at = resumed.resume_eval if resumed else None
    return ResumeView(
        injected_at_step=fault.injected_at_step if fault else None,
        fault_mode=fault.mode if fault else None,
        resumed_from_step=resumed.resumed_from_step if resumed else None,
        rerun_steps=rerun,
        steps_executed=executed,
        rerun_share=round(rerun / executed, 4) if executed else None,
        global_step_continuous=continuity.global_step_continuous if continuity else None,
        loss_continuous=continuity.loss_continuous if continuity else None,
        max_rel_loss_delta=continuity.max_rel_delta if continuity else None,
        resume_eval=LossPoint(step=at.step, loss=at.loss) if at else None,
    )


def _steady_times(summaries: Sequence[RunSummary]) -> list[float]:
    """Every attempt's steady-state step times (compile and warm-up left out by the trainer)."""
    return [t for s in summaries for t in s.throughput.step_times_s]


def _usd_per_s(cost: RunCost | None, nodes: int) -> float | None:
    """What the run's instances cost per second of training, at the rate the cost used."""
    if cost is None or cost.price is None:
        return None
    return float(cost.price.hourly_usd) * nodes / 3600


def _uncertainty(summaries: Sequence[RunSummary], cost: RunCost | None, spec: TrialSpec, run: str
                 ) -> Uncertainty:
    times = _steady_times(summaries)
    step = bootstrap(times)
    if step is None:
        return Uncertainty(steady_steps=len(times), step_time_s=None, tokens_per_s=None,
                           cost_per_effective_step_usd=None,
                           basis=f"too few steady-state steps to bound ({len(times)}; at least {MIN_SAMPLES}): no "
                                 "interval")
    tokens_per_s: IntervalView | None = None
    cost_per_step: IntervalView | None = None
    if step.low > 0:
        tokens_per_step = spec.effective_batch_size * spec.sequence_length
        tokens_per_s = _interval_view(step.inverted(tokens_per_step, "nominal tokens per step (effective batch x "
                                                                     "sequence length) over the step-time interval"), 3)
        rate = _usd_per_s(cost, spec.run_track(run).nodes)  # a scaling run's own node count
        if rate is not None:
            cost_per_step = _interval_view(step.scaled(rate, "step-time interval x the run's price per second (all "
                                                             "its nodes)"), 8)
    return Uncertainty(steady_steps=len(times), step_time_s=_interval_view(step), tokens_per_s=tokens_per_s,
                       cost_per_effective_step_usd=cost_per_step,
                       basis=f"{CONFIDENCE:.0%} intervals over the measured steady-state steps that hold across "
                             "repeated runs (block bootstrap and batch medians, plus a run-to-run allowance; compile "
                             "and warm-up steps left out)")


def _steady_cost_ratio(summaries: Mapping[str, Sequence[RunSummary]], costs: Mapping[str, RunCost],
                       spec: TrialSpec) -> Interval | None:
    """Trainium2's steady-state cost per effective step over the GPU track's, with its bootstrap interval."""
    trn2_rate = _usd_per_s(costs.get("trn2"), spec.track("trn2").nodes) if spec.tracks.trn2 else None
    gpu_rate = _usd_per_s(costs.get("gpu"), spec.track("gpu").nodes) if spec.tracks.gpu else None
    if not trn2_rate or not gpu_rate:
        return None
    return ratio_bootstrap(_steady_times(summaries.get("trn2", [])), _steady_times(summaries.get("gpu", [])),
                           scale=trn2_rate / gpu_rate)


def _checkpoint_overlap(summaries: Sequence[RunSummary]) -> CheckpointOverlap | None:
    """Whether background saves slowed the steps they overlapped: the record of the attempt that timed the most
    steps (medians of different attempts do not combine)."""
    return max((s.checkpoint_overlap for s in summaries),
               key=lambda r: r.steps_overlapping + r.steps_clear, default=None)


def _parallel(summary: RunSummary) -> ParallelView | None:
    """The document's multi-node figures for one run, from its last attempt: how many devices were billed, how many
    of them train (utilisation), how many processes ran them (fewer on a CPU stand-in, which simulates ranks), and
    the collectives' cost. A layout's model-parallel ranks count as training only when the trainer sharded the model
    over them (``layout.model_parallel_run``); otherwise one device per group trains and the report says so. None
    for a summary that predates the layout record."""
    layout = summary.layout
    if layout is None:
        return None
    comm = summary.communication
    billed = layout.nodes * layout.devices_per_node
    model_parallel = layout.tensor_parallel * layout.pipeline_parallel
    sharded = layout.model_parallel_run
    ranks = layout.data_parallel * (model_parallel if sharded else 1)
    processes = layout.world_size_run
    idle = "" if sharded or model_parallel == 1 else (
        f"; tensor_parallel x pipeline_parallel = {model_parallel} is not run by the trainer: one device of each "
        f"group of {model_parallel} trains, {billed - ranks} of {billed} billed devices hold replicas and no samples")
    # The words: world size, how the processes map onto the devices, and the process group (torch.distributed
    # backend) the run used; a stand-in also names the one its track's device uses (cuda: nccl, neuron: neuron).
    real_group, device = {"gpu": ("NCCL", "the GPU"), "trn2": ("neuron", "Trainium2")}[summary.track]
    if processes == 1:
        mapping = "a single process"
    elif processes == billed:
        mapping = "one process per device"
    elif processes == layout.nodes:
        mapping = "one process per node"
    else:
        mapping = f"{processes} processes"
    if summary.stand_in:
        mapping += " on the " + ("compiled CPU" if summary.backend == "compiled" else "CPU") + " stand-in"
    if processes < ranks:
        kind = "data-parallel" if ranks == layout.data_parallel else "training"
        mapping += f", simulating {ranks} {kind} ranks"
    notes = [f"{real_group} on {device}"] if summary.stand_in else []
    if processes == 1:
        group, notes = "no process group", ["a single process calls no collective", *notes]
    elif comm.process_group is None:
        group = "process group not recorded"
    else:
        group = f"process group {comm.process_group}"
    if notes:
        group += f" ({'; '.join(notes)})"
    devices = "device" if layout.devices_per_node == 1 else "devices"
    description = (f"{layout.nodes} node{'' if layout.nodes == 1 else 's'} x {layout.devices_per_node} {devices}, "
                   f"world size {processes} ({mapping}), {group}")
    return ParallelView(
        nodes=layout.nodes,
        devices_billed=billed,
        layout_ranks=ranks,
        device_utilisation=round(ranks / billed, 4) if billed else None,
        processes=processes,
        tensor_parallel_run=layout.tensor_parallel_run,
        basis=(f"{processes} process(es) ran the layout's {ranks} training ranks on backend "
               f"{summary.backend}" + (" (a stand-in simulating ranks)" if processes < ranks else "")
               + _split_basis(layout) + idle),
        communication_s=comm.communication_s,
        communication_share=comm.communication_share,
        sync_wait_median_s=comm.sync_wait_median_s,
        sync_wait_max_s=comm.sync_wait_max_s,
        communication_measured=comm.measured,
        communication_untimed=list(comm.untimed),
        description=description,
    )


def _split_basis(layout: LayoutRecord) -> str:
    tensor, ran = layout.tensor_parallel, layout.tensor_parallel_run
    if tensor == 1:
        return ""
    if ran == tensor:
        return (f", the model split over tensor-parallel groups of {tensor} processes (DTensor; the groups' "
                f"all-reduces run inside forward and backward and are not in the communication time)")
    return f", each process the whole model (tensor_parallel {tensor} splits it with one process per device)"


# Table 2 of the source document: per record item, each figure and where it sits in a track's record, so the table
# is data and its figures come from one place.
RECORD_TABLE: tuple[tuple[str, dict[str, Callable[[TrackRecord], Figure]]], ...] = (
    ("compile and environment preparation",
     {"image_pull_and_start_s": lambda t: t.startup.image_pull_and_start_s, "runtime_init_s": lambda t: t.environment_s,
      "compile_s": lambda t: t.compile.total_s, "first_compile_s": lambda t: t.compile.first_compile_s,
      "cache": lambda t: t.compile.cache, "cache_by_attempt": lambda t: t.compile.cache_by_attempt,
      "cache_hit_rate": lambda t: t.compile.hit_rate}),
    ("effective training",
     {"step_time_s": lambda t: t.throughput.step_time_s, "tokens_per_s": lambda t: t.throughput.tokens_per_s,
      "validation_loss": lambda t: t.loss.validation, "effective_steps": lambda t: t.steps_completed,
      "steps_executed": lambda t: t.resume.steps_executed}),
    ("checkpoint",
     {"save_s": lambda t: t.checkpoint.save_s, "files": lambda t: t.checkpoint.files,
      "total_bytes": lambda t: t.checkpoint.total_bytes, "restore_s": lambda t: t.checkpoint.restore_s,
      "save_slowdown": lambda t: t.checkpoint.save_slowdown,
      "global_step_continuous": lambda t: t.resume.global_step_continuous,
      "loss_continuous": lambda t: t.resume.loss_continuous}),
    ("failed reruns",
     {"failures": lambda t: max(0, t.attempts - 1),  # attempts beyond the first
      "rerun_steps": lambda t: t.resume.rerun_steps, "rerun_share": lambda t: t.resume.rerun_share,
      "data_load_s": lambda t: t.data_load_s}),
    ("platform management",
     {"backend": lambda t: t.backend, "stand_in": lambda t: t.stand_in, "instance_type": lambda t: t.instance_type,
      "compile_cache_key": lambda t: t.compile.cache_key}),
)


def _record_table(tracks: Mapping[str, TrackRecord]) -> list[RecordRow]:
    """Table 2 of the source document, one column per run."""
    return [RecordRow.model_validate({"item": item, **{run: {name: figure(t) for name, figure in figures.items()}
                                                       for run, t in tracks.items()}})
            for item, figures in RECORD_TABLE]


def compile_booking(trial_id: str, key: str | None, outcomes: Sequence[str],
                    cache: Mapping[str, CacheEntryRecord]) -> Booking | None:
    """The source document's accounting rule for a run's compile (its cache ``key`` and cache outcome per attempt,
    against the registry's entries): a compile that serves one job is that job's cost; once the same entry (same
    graph, flags and environment) serves other trials, it is shared infrastructure. None for a run that used no
    compile cache."""
    if not key:
        return None
    entry = cache.get(key)
    others = sorted(set((entry.hit_trials if entry else None) or []) - {trial_id})
    compiled_here = "miss" in outcomes
    if entry is None:
        return Booking(shared=None, other_trials=[], basis="the registry has no entry for this key: booked to this "
                                                           "trial until it does")
    if compiled_here and others:
        return Booking(shared=True, other_trials=others, basis=f"compiled here and since reused by {len(others)} "
                                                               "other trial(s): shared infrastructure")
    if not compiled_here and "hit" in outcomes:
        return Booking(shared=True, other_trials=others, basis="compiled by an earlier trial: shared "
                                                               "infrastructure; this trial paid only the cache load")
    return Booking(shared=False, other_trials=others, basis="no other trial has used this entry: the compile is "
                                                            "this trial's cost")
