"""The per-trial report: both tracks side by side as the source document's record table, the three acceptance
checks, resume evidence, the five-component cost and a verdict.

``build_trial_report`` is pure (summaries, costs and ledger entries in; a ``TrialReport`` out, whose
``model_dump(mode="json")`` is the stored report.json), so the local rehearsal and the workflow's report step produce
the same document from the same evidence.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Literal

from lambdas.domain.baseline import Baseline
from lambdas.domain.baseline import compare as compare_baseline
from lambdas.domain.cost import COMPONENTS, CostBreakdown, RunCost
from lambdas.domain.decision import decide, primary_of
from lambdas.domain.evidence import (
    CONFIDENCE,
    MIN_SAMPLES,
    Equivalence,
    Interval,
    bootstrap,
    ratio_bootstrap,
    tost,
)
from lambdas.domain.json_types import JsonMapping
from lambdas.domain.learning import learning_problems
from lambdas.domain.ledger import LedgerEntry, TransitionFact, suspect_attempts
from lambdas.domain.physics import run_problems
from lambdas.domain.pilot import build_pilot, is_pilot, pilot_check
from lambdas.domain.prices import PriceTable, load_price_table
from lambdas.domain.report_model import (
    NEVER_RAN,
    STAND_IN_EVIDENCE,
    BaselineCompared,
    BaselineUncompared,
    BaselineUnread,
    BaselineView,
    Booking,
    CacheEntryRecord,
    CacheEntryView,
    Check,
    CheckpointView,
    CheckStatus,
    Comparison,
    CompileRecord,
    CompileSection,
    CompileStage,
    CostSection,
    CostView,
    Decision,
    Declared,
    Figure,
    FrozenSettings,
    IntervalView,
    LossPoint,
    LossView,
    ModelRef,
    Outcome,
    ParallelView,
    PilotComparison,
    RecordRow,
    ResumeView,
    RunOutcome,
    Sample,
    SamplesView,
    Startup,
    StartupAttempt,
    Throughput,
    TimelineRow,
    TrackRecord,
    TrialReport,
    Uncertainty,
    UnreadableSummary,
    Verdict,
)
from lambdas.domain.run_limits import LimitCrossed
from lambdas.domain.run_summary import CheckpointOverlap, LayoutRecord, RunSummary
from lambdas.domain.scaling import build_scaling
from lambdas.domain.trial import TrialSpec
from lambdas.domain.vocabulary import BATCH_TERMINAL, COMPILE_RUN, XLA_LABEL, scaling_nodes, track_of

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


def _check(name: str, passed: bool | None, detail: str) -> Check:
    status: CheckStatus = "pass" if passed else ("not_evidenced" if passed is None else "fail")
    return Check(check=name, status=status, detail=detail)


def _loss_falls(t: TrackRecord) -> bool | None:
    initial, final = t.loss.initial, t.loss.final
    if initial is None or final is None:
        return None
    evals = [p.loss for p in t.loss.eval]
    trend = not evals or evals[-1] <= evals[0]
    return final < initial and trend and t.resume.loss_continuous is not False


def _acceptance(spec: TrialSpec, tracks: Mapping[str, TrackRecord]) -> tuple[list[Check], float | None]:
    checks = []
    for run, t in tracks.items():
        falls = _loss_falls(t)
        checks.append(
            _check(
                f"{run}: loss keeps falling",
                falls,
                f"initial {t.loss.initial} -> final {t.loss.final}; eval points "
                f"{len(t.loss.eval)}; loss continuous after resume: {t.resume.loss_continuous}",
            )
        )
    resumed = [(run, t) for run, t in tracks.items() if t.resume.resumed_from_step is not None]
    loads = None if not resumed else all(t.resume.global_step_continuous is True for _, t in resumed)
    checks.append(
        _check(
            "checkpoints load",
            loads,
            "; ".join(
                f"{run} resumed from step {t.resume.resumed_from_step}, global step continuous: "
                f"{t.resume.global_step_continuous}"
                for run, t in resumed
            )
            or "no run resumed from a checkpoint",
        )
    )
    gpu = tracks.get("gpu")
    candidate = tracks.get("trn2")
    tolerance = spec.evaluation.loss_tolerance
    delta = None
    reference = gpu.loss.validation if gpu else None
    measured = candidate.loss.validation if candidate else None
    if reference and measured is not None:
        delta = (measured - reference) / reference
    within = None if delta is None else abs(delta) <= tolerance
    if gpu is not None:  # a Trainium2 pilot has no GPU track: its baseline check stands in (lambdas.domain.pilot)
        checks.append(
            _check(
                "final outputs consistent with GPU",
                within,
                f"relative validation-loss delta {delta if delta is None else round(delta, 6)} (tolerance "
                f"{tolerance})",
            )
        )
    fallback = tracks.get("gpu-fallback")
    if fallback and candidate and fallback.resume.resumed_from_step is not None:
        checks += _fallback_checks(fallback, candidate, gpu, tolerance)
    if gpu and candidate:
        equivalence = _equivalence(gpu, candidate, tolerance)
        checks.append(_check("quality equivalent to GPU (TOST on eval losses)",
                             equivalence.equivalent if equivalence.equivalent or not equivalence.different
                             else False, equivalence.detail))
    return checks, delta


def _relative(value: float | None, reference: float | None) -> float | None:
    return None if value is None or not reference else (value - reference) / reference


def _fallback_checks(fallback: TrackRecord, trn2: TrackRecord, gpu: TrackRecord | None,
                     tolerance: float) -> list[Check]:
    """The fallback proves continuity: its loss on the fixed eval set at the resumed step against the Trainium2
    run's last eval at or before that step, then its final results against the GPU track."""
    at = fallback.resume.resume_eval
    before = [p for p in trn2.loss.eval if at and p.step <= at.step]
    last = max(before, key=lambda p: p.step) if before else None
    delta = _relative(at.loss if at else None, last.loss if last else None)
    checks = [_check(
        "fallback continues trn2 on the fixed eval set", None if delta is None else abs(delta) <= tolerance,
        (f"eval loss {at.loss:.4f} at resumed step {at.step} against trn2's {last.loss:.4f} at step "
         f"{last.step}: relative delta {delta:+.4f} (tolerance {tolerance})") if delta is not None and at and last
        else "no eval at the resumed step, or no trn2 eval before it")]
    if gpu is not None:
        final = _relative(fallback.loss.validation, gpu.loss.validation)
        checks.append(_check(
            "fallback final outputs consistent with GPU", None if final is None else abs(final) <= tolerance,
            f"relative validation-loss delta {final if final is None else round(final, 6)} against the gpu track "
            f"(tolerance {tolerance})"))
    return checks


def _equivalence(gpu: TrackRecord, candidate: TrackRecord, tolerance: float) -> Equivalence:
    """TOST of the relative eval-loss differences (Trainium2 against GPU) at the eval points both tracks share,
    against the trial's ``loss_tolerance`` (relative, as the final-output check reads it)."""
    theirs = {p.step: p.loss for p in gpu.loss.eval}
    diffs = [(p.loss - theirs[p.step]) / theirs[p.step] for p in candidate.loss.eval if theirs.get(p.step)]
    return tost(diffs, tolerance)


def _samples(tracks: Mapping[str, TrackRecord]) -> SamplesView | None:
    """The fixed prompts' greedy completions, Trainium2 against GPU: exact matches and token-level similarity
    (positions with the same token over the longer completion), counting only completions that say something."""
    gpu, trn2 = tracks.get("gpu"), tracks.get("trn2")
    if not gpu or not trn2:
        return None
    theirs = {s.prompt: s for s in gpu.final_samples}
    pairs = [(s, theirs[s.prompt]) for s in trn2.final_samples if s.prompt in theirs]
    empty = sum(1 for ours, other in pairs if not ours.completion.strip() or not other.completion.strip())
    judged = [(a, b) for a, b in pairs if a.completion.strip() and b.completion.strip()]
    exact = sum(1 for a, b in judged if a.completion == b.completion)
    similarity = [sum(1 for x, y in zip(a.token_ids, b.token_ids, strict=False) if x == y)
                  / max(len(a.token_ids), len(b.token_ids), 1) for a, b in judged]
    return SamplesView(prompts=len(pairs), judged=len(judged), empty=empty,
                       exact_match_rate=exact / len(judged) if judged else None,
                       token_similarity=sum(similarity) / len(similarity) if similarity else None)


def _recovery(declared: str, tracks: Mapping[str, TrackRecord]) -> tuple[bool | None, str]:
    """Whether the runs recovered from their failures the way the trial declared they would."""
    failed = {run: t for run, t in tracks.items() if run != "gpu-fallback" and (t.attempts or 0) > 1}
    fallback = tracks.get("gpu-fallback")
    trn2 = tracks.get("trn2")
    trn2_outcome = trn2.outcome if trn2 else None
    trn2_succeeded = trn2 is not None and trn2.status == "succeeded"
    if trn2_outcome in NEVER_RAN:
        return None, f"the trn2 run never trained ({trn2_outcome}): the GPU fallback is not a recovery"
    if not failed and fallback is None:
        return None, "no attempt failed, so recovery was not exercised"
    if declared == "gpu_fallback":
        if fallback is None:
            return (None if trn2_succeeded else False,
                    "no GPU fallback ran" + (": the trn2 run recovered on its own track"
                                             if trn2_succeeded else " after the trn2 run failed"))
        resumed = fallback.resume.resumed_from_step
        return resumed is not None, (f"the GPU fallback resumed Trainium2's checkpoint at step {resumed}"
                                     if resumed is not None else "the GPU fallback started from step 0")
    if fallback is not None and declared == "resume_same_track":
        return False, "the trn2 run did not recover on its own track: the GPU fallback ran"
    verdicts = []
    for run, t in failed.items():
        resumed = t.resume.resumed_from_step
        if declared == "resume_same_track":
            verdicts.append((resumed is not None and t.resume.global_step_continuous is not False,
                             f"{run} resumed from step {resumed}" if resumed is not None
                             else f"{run} restarted from step 0"))
        else:  # restart
            verdicts.append((resumed is None, f"{run} restarted from step 0" if resumed is None
                             else f"{run} resumed from step {resumed} instead of restarting"))
    return all(ok for ok, _ in verdicts), "; ".join(text for _, text in verdicts)


def _declared(spec: TrialSpec, tracks: Mapping[str, TrackRecord]) -> list[Check]:
    """Checks of what the trial declared beyond the defaults: its failure-recovery method and its metrics; and, where
    the runs recorded them, its dataset's sample count against what each run loaded and its Neuron SDK against the
    one the trn2 run ran."""
    checks = []
    if spec.failure_recovery == "none":
        ran = tracks.get("gpu-fallback") is not None
        checks.append(_check("failure recovery as declared (none)", not ran,
                             "a GPU fallback ran although the trial declared none" if ran else "no GPU fallback ran"))
    elif spec.failure_recovery is not None:
        ok, detail = _recovery(spec.failure_recovery, tracks)
        checks.append(_check(f"failure recovery as declared ({spec.failure_recovery})", ok, detail))
    loaded = {run: int(t.environment["data_samples"]) for run, t in tracks.items() if "data_samples" in t.environment}
    if loaded:
        wrong = sorted(run for run, count in loaded.items() if count != spec.data.samples)
        checks.append(_check("data.samples matches the data", not wrong, (
            f"declared {spec.data.samples} training samples; "
            + ", ".join(f"{run} loaded {count}" for run, count in sorted(loaded.items()))
            + (f": set data.samples to the rows of data.train_uri, or point data.train_uri at the data of "
               f"version {spec.data.version}" if wrong else ""))))
    trn2_run = tracks.get("trn2")
    ran_sdk = trn2_run.environment.get("neuron_sdk") if trn2_run else None
    if spec.tracks.trn2 is not None and ran_sdk:
        def release(version: str) -> list[str]:  # 2.33 and 2.33.0 name one release
            parts = version.split("+", 1)[0].split(".")
            return parts + ["0"] * (3 - len(parts))

        declared_sdk = spec.tracks.trn2.neuron_sdk
        checks.append(_check("Neuron SDK as declared", release(ran_sdk) == release(declared_sdk),
                             f"the trn2 run ran Neuron SDK {ran_sdk}; the trial declared {declared_sdk}"))
    if "perplexity" in spec.evaluation.metrics:
        checks.append(_perplexity(tracks.get("gpu"), tracks.get("trn2"), spec.evaluation.loss_tolerance))
    if "exact_match" in spec.evaluation.metrics:
        checks.append(_exact_match(_samples(tracks), spec.evaluation.min_exact_match))
    return checks


def _perplexity(gpu: TrackRecord | None, trn2: TrackRecord | None, tolerance: float) -> Check:
    name = "perplexity consistent with GPU"
    gpu_loss = gpu.loss.validation if gpu else None
    trn2_loss = trn2.loss.validation if trn2 else None
    if gpu_loss is None or trn2_loss is None:
        return _check(name, None, "a track has no validation loss")
    ppl_gpu, ppl_trn2 = (math.exp(min(float(x), 50.0)) for x in (gpu_loss, trn2_loss))
    gap = abs(ppl_trn2 - ppl_gpu) / ppl_gpu
    return _check(name, gap <= tolerance, f"trn2 {ppl_trn2:.4f} vs gpu {ppl_gpu:.4f}: relative gap {gap:.2%} "
                                          f"(tolerance {tolerance:.2%})")


def _exact_match(found: SamplesView | None, minimum: float) -> Check:
    name = "fixed prompts complete identically"
    rate = found.exact_match_rate if found else None
    if found is None or not found.judged or rate is None:
        empty = f"; {found.empty} of {found.prompts} completions empty or whitespace" if found else ""
        return _check(name, None, f"no pair of non-empty completions to compare{empty}")
    return _check(name, rate >= minimum,
                  f"{rate:.0%} of {found.judged} prompts identical (at least {minimum:.0%}); "
                  f"token similarity {found.token_similarity:.2f}"
                  + (f"; {found.empty} empty or whitespace completions not counted" if found.empty else ""))


def _baseline(spec: TrialSpec, tracks: Mapping[str, TrackRecord], baseline: Baseline | str | None,
              pilot: PilotComparison | None = None) -> tuple[BaselineView | None, Check | None]:
    """The baseline section and its acceptance check: does this trial's GPU track reproduce the team's GPU logs?
    A pilot (no GPU track) is checked instead: does its trn2 run reproduce them?"""
    uri = spec.baseline_logs_uri
    if uri is None:
        return None, None
    name = "gpu track reproduces the baseline"
    if not isinstance(baseline, Baseline):
        reason = baseline or "the baseline was not read"
        return BaselineUnread(uri=uri, error=reason), _check(name, None, f"{uri}: {reason}")
    if pilot is not None:
        return BaselineUncompared(uri=uri, format=baseline.format), pilot_check(pilot.loss)
    gpu = tracks.get("gpu")
    if gpu is None:
        return (BaselineUncompared(uri=uri, format=baseline.format),
                _check(name, None, "no gpu run reported losses to compare with the baseline"))
    comparison = compare_baseline(baseline, {p.step: p.loss for p in gpu.loss.per_step},
                                  {p.step: p.loss for p in gpu.loss.eval},
                                  spec.evaluation.loss_tolerance)
    return (BaselineCompared.model_validate({"uri": uri, **comparison.model_dump(mode="json")}),
            _check(name, comparison.reproduced, f"{baseline.format} at {uri}: {comparison.detail}"))


def _fallback_note(fallback: TrackRecord | None) -> str:
    if not fallback:
        return "no GPU fallback ran"
    if fallback.resume.resumed_from_step is None:
        return (f"the GPU fallback {fallback.status}, starting from step 0 (Trainium2 left no checkpoint to "
                "resume)")
    return (f"the GPU fallback {fallback.status}, resuming Trainium2's checkpoint at step "
            f"{fallback.resume.resumed_from_step}")


def _verdict(
    checks: Sequence[Check], tracks: Mapping[str, TrackRecord], steady: Interval | None,
    stage: CompileStage | None = None, decide_costs: Callable[[Interval], Decision | None] | None = None,
    stand_in: bool = False,
) -> tuple[Verdict, list[str], Decision | None]:
    """Cheaper or not only when the steady-state cost interval excludes parity: overlapping intervals are noise,
    and noise never turns one definite answer into the other. Once every check passed, the answer is the whole
    trial's ``decision`` at the basis the runs were priced at (one-time costs included: cheaper per step but dearer
    on this trial is "pays back"); the decision is returned with the verdict (None before every check passed).
    On stand-ins (``stand_in``) there is no answer and no decision, only the costs as pipeline evidence."""
    verdict, reasons = _gate(checks, tracks, steady, stage)
    if verdict is not None:
        return verdict, reasons, None
    if stand_in:
        # Stand-ins' times describe the machine they ran on: their costs show that the pipeline priced every run,
        # never which accelerator costs less, so no reason may say so.
        return "inconclusive", [STAND_IN_COSTS], None
    assert steady is not None
    decision = decide_costs(steady) if decide_costs is not None else None
    if decision is not None:
        primary = primary_of(decision)
        if primary.answer is not None:
            lead = "all acceptance checks pass" + ("; " if primary.answer != "inconclusive" else ", but ")
            return primary.answer, [lead + primary.sentence], decision
    text = (f"trn2 costs {steady.estimate:.3f}x the gpu track per steady-state training step "
            f"({steady.confidence:.0%} interval "
            f"{steady.low:.3f}-{steady.high:.3f})")
    if steady.high < 1:
        return "trn2_viable_cheaper", [f"all acceptance checks pass; {text}"], decision
    if steady.low > 1:
        return "trn2_viable_not_cheaper", [f"all acceptance checks pass, but {text}"], decision
    return "inconclusive", [f"all acceptance checks pass, but the interval includes parity: {text}; more steps (or a "
                            "quieter host) would narrow it"], decision


def _gate(checks: Sequence[Check], tracks: Mapping[str, TrackRecord], steady: Interval | None,
          stage: CompileStage | None) -> tuple[Verdict | None, list[str]]:
    """Every reason a trial gets no cost answer (the verdict it gets instead, and why), or ``(None, [])`` when
    every run succeeded, every check passed and the steady-state cost per step is bounded."""
    reasons = [f"{c.check}: {c.status} ({c.detail})" for c in checks if c.status != "pass"]
    if stage is not None and stage.outcome in NEVER_RAN and "trn2" not in tracks:
        return "inconclusive", [f"the warm-up compile stage had {stage.detail}", *reasons]
    if stage is not None and stage.status != "succeeded" and "trn2" not in tracks:
        # The compile chain is the dividing line for Trainium2: the graphs did not compile, so nothing trained there.
        message = stage.error or stage.status_reason or "no message"
        return "stay_on_gpu", [f"the trn2 graphs did not compile in the warm-up compile stage ({message}); "
                               f"{_fallback_note(tracks.get('gpu-fallback'))}", *reasons]
    if "trn2" in tracks and "gpu" not in tracks:  # a pilot with a readable baseline is judged in lambdas.domain.pilot
        return "inconclusive", ["a Trainium2 pilot (a trn2 run, no gpu run) is judged against its GPU baseline "
                                "(baseline_logs_uri), and none was read", *reasons]
    if "trn2" not in tracks or "gpu" not in tracks:
        return "inconclusive", ["both a gpu and a trn2 run are needed to compare", *reasons]
    unusable = [f"{run} {problem}" for run in ("gpu", "trn2") for problem in tracks[run].unusable]
    if unusable:
        return "inconclusive", [f"unusable evidence: {'; '.join(unusable)}", *reasons]
    trn2 = tracks["trn2"]
    if trn2.outcome in NEVER_RAN:
        # The Trainium2 job never ran: that says nothing about Trainium2 for this workload.
        return "inconclusive", [f"the trn2 run had {trn2.detail}", *reasons]
    if trn2.status != "succeeded":
        note = _fallback_note(tracks.get("gpu-fallback"))
        return "stay_on_gpu", [
            f"the trn2 run ended {trn2.status or 'without a summary'}; {note}",
            *reasons,
        ]
    if any(c.status == "fail" for c in checks):
        return "stay_on_gpu", reasons
    if any(c.status == "not_evidenced" for c in checks):
        return "inconclusive", reasons
    if steady is None:
        return "inconclusive", ["too few steady-state steps on one of the tracks to bound the cost per effective "
                                f"step (at least {MIN_SAMPLES} each)"]
    return None, []


HEADLINES: dict[Verdict, str] = {
    "trn2_viable_cheaper": "Trainium2 is cheaper",
    "trn2_viable_pays_back": "Trainium2 pays back",
    "trn2_viable_not_cheaper": "Trainium2 is not cheaper",
    "inconclusive": "Inconclusive",
    "stay_on_gpu": "Stay on GPU",
}
STAND_IN_COSTS = ("all acceptance checks pass; the costs are pipeline evidence from stand-ins (their times priced at "
                  "the declared instances' rates), not a comparison of Trainium2 with the GPU")
REHEARSAL_HEADLINES = {"passed": "Pipeline rehearsal passed", "failed": "Pipeline rehearsal failed"}
STAND_IN_NOTE = ("This run used stand-ins for the accelerators ({backends}): it proves the pipeline, not the "
                 "hardware; its times and costs say nothing about Trainium2 or the GPU.")


def headline(verdict: Verdict, reasons: Sequence[str], steady: Interval | None, tracks: Mapping[str, TrackRecord],
             decision: Decision | None = None) -> str:
    """The one sentence a person reads first: the verdict and why. With a decision, the whole trial first (its
    one-time costs and when Trainium2 pays them back), the steady-state ratio as the supporting fact, and whether
    the answer flips with the price basis."""
    primary = primary_of(decision) if decision is not None else None
    if decision is not None and primary is not None and primary.answer == verdict:
        sentence = primary.sentence
        if verdict != "inconclusive":
            sentence += "; every acceptance check passed"
        estimated = sorted(run for run, t in tracks.items() if "(estimate," in t.cost.price_basis)
        if estimated:
            sentence += f" (priced at an estimated rate for {', '.join(estimated)})"
        sentence += "."
        if decision.flip_note:
            sentence += " " + decision.flip_note
        return sentence
    if verdict in ("trn2_viable_cheaper", "trn2_viable_not_cheaper") and steady is not None:
        why = (f"{steady.estimate:.2f}x the GPU track's cost per steady-state training step ({steady.confidence:.0%} "
               f"interval {steady.low:.2f}-{steady.high:.2f}), every acceptance check passed")
        estimated = sorted(run for run, t in tracks.items() if "(estimate," in t.cost.price_basis)
        if estimated:
            why += f" (priced at an estimated rate for {', '.join(estimated)})"
    else:
        why = reasons[0] if reasons else "no reason recorded"
    sentence = f"{HEADLINES[verdict]}: {why}."
    stand_ins = sorted({f"{run} on {t.backend}" for run, t in tracks.items() if t.stand_in})
    if stand_ins:
        sentence += " " + STAND_IN_NOTE.format(backends=", ".join(stand_ins))
    return sentence


def rehearsal_outcome(checks: Sequence[Check], tracks: Mapping[str, TrackRecord], stage: CompileStage | None,
                      reasons: Sequence[str] = ()) -> tuple[Literal["passed", "failed"], str]:
    """A run on stand-ins proves the pipeline, not the hardware, so it gets no verdict, only whether the pipeline
    worked: every run that had to train trained and left usable evidence (a Trainium2 run that failed counts as
    recovered when the GPU fallback took over and succeeded), and no acceptance check failed. Cost ratios and
    their noise say nothing about stand-ins and do not enter."""
    fallback = tracks.get("gpu-fallback")
    recovered = fallback is not None and fallback.status == "succeeded"
    problems = [f"{run} {problem}" for run, track in tracks.items() for problem in track.unusable]
    problems += [f"the {run} run ended {track.status or 'without a summary'}" for run, track in tracks.items()
                 if track.status != "succeeded" and not (run == "trn2" and recovered)]
    if stage is not None and stage.status not in ("succeeded", "skipped") and not recovered:
        problems.append(f"the warm-up compile stage ended {stage.status}")
    problems += [f"{c.check}: {c.detail}" for c in checks if c.status == "fail"]
    if problems:
        return "failed", problems[0]
    ran = ", ".join(sorted(tracks))
    passed = f"every run ({ran}) trained, checkpointed where due and was costed, and no check failed"
    if recovered and reasons:  # the recovery path was exercised: say what it recovered from
        passed = f"{reasons[0]}; {passed}"
    return "passed", passed


def rehearsal_headline(outcome: tuple[Literal["passed", "failed"], str], tracks: Mapping[str, TrackRecord]) -> str:
    stand_ins = sorted({f"{run} on {t.backend}" for run, t in tracks.items() if t.stand_in})
    return (f"{REHEARSAL_HEADLINES[outcome[0]]}: {outcome[1]}. Its figures are pipeline evidence from stand-ins "
            f"({', '.join(stand_ins)}), not measurements of Trainium2 or the GPU, so it gives no verdict.")


def _facts(tracks: Mapping[str, TrackRecord], checks: Sequence[Check], steady: Interval | None,
           total_ratio: float | None, stand_in: bool = False) -> list[str]:
    """The three to five facts behind the verdict, each with what it measured; on stand-ins the cost ratios say
    they are pipeline evidence."""
    facts = []
    evidence = f"; {STAND_IN_EVIDENCE}" if stand_in else ""
    if steady is not None:
        facts.append(f"Steady-state cost per training step, trn2/gpu: {steady.estimate:.3f} "
                     f"({steady.confidence:.0%} interval "
                     f"{steady.low:.3f}-{steady.high:.3f}; at least {steady.samples} steady-state steps per track"
                     f"{evidence})")
    if total_ratio is not None:
        facts.append(f"Whole-trial cost, trn2 (fallback included)/gpu: {total_ratio:.3f} (compile, environment, "
                     f"reruns and checkpoints included: the five components{evidence})")
    tost_check = next((c for c in checks if c.check.startswith("quality equivalent")), None)
    if tost_check:
        facts.append(f"Quality: {tost_check.detail}")
    for run in ("gpu", "trn2"):
        track = tracks.get(run)
        step = track.uncertainty.step_time_s if track and track.uncertainty else None
        if track and step:
            facts.append(f"{run} step time {step.estimate:.4g} s ({step.confidence:.0%} interval "
                         f"{step.low:.4g}-{step.high:.4g} s over {step.samples} steps, "
                         f"{'stand-in ' + str(track.backend) if track.stand_in else 'measured'})")
    return facts[:5]


# What Batch writes when a queue's job state time limit cancels a job that waited RUNNABLE
# (https://docs.aws.amazon.com/batch/latest/userguide/job_stuck_in_runnable_time_limit_actions.html).
_TIME_LIMIT = re.compile(r"JobStateTimeLimit action due to reason: (?P<reason>(?P<kind>CAPACITY|MISCONFIGURATION):\S+)")


def run_outcomes(entries: Iterable[LedgerEntry]) -> dict[str, RunOutcome]:
    """Per run, how its Batch job ended: ``succeeded``, ``failed`` (it ran and failed), ``no_capacity`` or
    ``not_placed`` (cancelled while RUNNABLE by the queue's time limit: it never ran), with Batch's reason."""
    last: dict[str, TransitionFact] = {}
    for entry in entries:
        fact = entry.fact
        if not isinstance(fact, TransitionFact) or fact.status not in BATCH_TERMINAL:
            continue
        if entry.run not in last or fact.at >= last[entry.run].at:
            last[entry.run] = fact
    outcomes: dict[str, RunOutcome] = {}
    for run, fact in last.items():
        reason = fact.status_reason or ""
        limit = _TIME_LIMIT.search(reason)
        outcome: Outcome
        if fact.status == "SUCCEEDED":
            outcome = "succeeded"
        elif limit:
            outcome = "no_capacity" if limit.group("kind") == "CAPACITY" else "not_placed"
        else:
            outcome = "failed"
        outcomes[run] = RunOutcome(outcome=outcome, status_reason=reason or None, detail=NEVER_RAN.get(outcome))
    return outcomes


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


def image_pull_and_start(entries: Iterable[LedgerEntry]) -> dict[str, Startup]:
    """Per run, the seconds each attempt spent between Batch's STARTING (placed on an instance: the image is
    pulled and the container started) and RUNNING (the container runs), from the jobs' state-change facts."""
    marks: dict[tuple[str, int], dict[str, str]] = {}
    for entry in entries:
        fact = entry.fact
        if isinstance(fact, TransitionFact) and fact.status in ("STARTING", "RUNNING"):
            marks.setdefault((entry.run, fact.attempt), {}).setdefault(fact.status, fact.at)
    totals: dict[str, float] = {}
    attempts: dict[str, list[StartupAttempt]] = {}
    for (run, attempt), seen in sorted(marks.items()):
        if "STARTING" not in seen or "RUNNING" not in seen:
            continue
        seconds = max(0.0, (_instant(seen["RUNNING"]) - _instant(seen["STARTING"])).total_seconds())
        attempts.setdefault(run, []).append(StartupAttempt(attempt=attempt, seconds=round(seconds, 3)))
        totals[run] = round(totals.get(run, 0.0) + seconds, 3)
    return {run: Startup(image_pull_and_start_s=total, by_attempt=attempts[run]) for run, total in totals.items()}


def _instant(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def attempt_timeline(entries: Iterable[LedgerEntry]) -> list[TimelineRow]:
    """Each run's Batch transitions in time order (the report's attempt timeline)."""
    rows = [
        TimelineRow(run=e.run, attempt=e.fact.attempt, status=e.fact.status, at=e.fact.at,
                    status_reason=e.fact.status_reason, exit_code=e.fact.exit_code)
        for e in entries
        if isinstance(e.fact, TransitionFact)
    ]
    return sorted(rows, key=lambda r: (r.at, r.run, r.attempt))


def compile_stage(spec: TrialSpec, summaries: Sequence[RunSummary], cost: RunCost | None,
                  outcome: RunOutcome | None, cache: Mapping[str, CacheEntryRecord],
                  startup: Startup | None = None) -> CompileStage | None:
    """The warm-up compile stage (run ``trn2-compile``), when it ran: how it ended, the compiler's message when it
    failed, its compile seconds and cache outcome per attempt, its cost (all of it compile), how that cost is
    booked and its attempts' image pull and container start. None when the trial's key was warm (or it has no
    Trainium2 track)."""
    if not summaries and cost is None and outcome is None:
        return None
    last = summaries[-1] if summaries else None
    compiles = [s.compile for s in summaries]
    failed = next((c for c in reversed(compiles) if c.status == "failed"), None)
    status: str = last.status if last else "unknown"
    ended = outcome or _unknown_outcome()
    if ended.outcome in NEVER_RAN and status == "unknown":
        status = ended.outcome
    error = (failed.error if failed else None) or (last.error if last and last.status == "failed" else None)
    trn2 = spec.tracks.trn2
    outcomes: list[str] = [c.cache for c in compiles]
    key = compiles[-1].cache_key if compiles else None
    return CompileStage(
        run=COMPILE_RUN,
        status=status,
        outcome=ended.outcome,
        status_reason=ended.status_reason,
        detail=ended.detail,
        backend=last.backend if last else None,
        stand_in=bool(last and last.stand_in),
        instance_type=trn2.instance_type if trn2 else None,
        nodes=trn2.nodes if trn2 else None,
        attempts=len(summaries) or (cost.attempts if cost else 0),
        steps=last.steps_this_attempt if last else 0,
        compile_s=round(sum(c.seconds for c in compiles), 3),
        seconds_by_attempt=[c.seconds for c in compiles],
        cache_by_attempt=outcomes,
        cache_key=key,
        error=error,
        cost=_cost_view(cost, 0, 0),
        booking=compile_booking(spec.trial_id, key, outcomes, cache),
        startup=startup,
    )


def compile_section(tracks: Mapping[str, TrackRecord], stage: CompileStage | None,
                    cache: Mapping[str, CacheEntryRecord]) -> CompileSection:
    """The warm-up compile stage, the registry's entries the trial used, and the trial's compile-cache hit rate: of
    every attempt on the Trainium2 side that looked the key up (the warm-up compile stage's and the training
    run's), how many found it compiled."""
    trn2 = tracks.get("trn2")
    outcomes = [*(stage.cache_by_attempt if stage else []), *(trn2.compile.cache_by_attempt if trn2 else [])]
    looked = [o for o in outcomes if o in ("hit", "miss")]
    hits = sum(1 for o in looked if o == "hit")
    return CompileSection(
        stage=stage, lookups=len(looked), hits=hits, hit_rate=hits / len(looked) if looked else None,
        basis="attempts of the warm-up compile stage and the trn2 run that looked the cache key up",
        entries=cache_entry_views(cache))


def cache_entry_views(cache: Mapping[str, CacheEntryRecord]) -> list[CacheEntryView]:
    """The registry's record of each cache entry the trial's attempts used: lookups that hit, compiles, and failed
    compiles with the last compiler message (a failure is quarantined, so a later attempt compiles again)."""
    return [CacheEntryView(cache_key=key, status=entry.status, hits=entry.hits or 0, misses=entry.misses or 0,
                           failures=entry.failures or 0,
                           failure_reason=entry.failure_reason if entry.failures else None,
                           trials_served=len(entry.hit_trials or []))
            for key, entry in sorted(cache.items())]


def build_trial_report(
    spec: TrialSpec,
    summaries: Mapping[str, Sequence[RunSummary]],
    costs: Mapping[str, RunCost],
    ledger: Iterable[LedgerEntry] = (),
    *,
    generated_at: str | None = None,
    stopped_by: JsonMapping | None = None,
    baseline: Baseline | str | None = None,
    cache_entries: Mapping[str, JsonMapping] | None = None,
    unreadable: Sequence[UnreadableSummary] | None = None,
    prices: PriceTable | None = None,
) -> TrialReport:
    """The trial report. `summaries` maps run -> its attempts' RunSummary (in attempt order), `costs` maps run ->
    its RunCost; `ledger` supplies the attempt timeline; `stopped_by` is the limit the plane stopped the trial at
    (``lambdas.domain.run_limits.LimitCrossed``), when it did; `baseline` is the GPU baseline read from the trial's
    ``baseline_logs_uri`` (or, as text, why it could not be read); `cache_entries` are the compile-cache registry's
    entries of the keys the runs used; `unreadable` names the summaries the evidence could not read (left out of
    the report when None); `prices` is the deployment's price table (overrides applied; the shipped table when
    None), whose Capacity Block and Savings Plan rates the decision prices the trial at."""
    ledger = list(ledger)
    cache = {key: CacheEntryRecord.model_validate(entry) for key, entry in (cache_entries or {}).items()}
    outcomes = run_outcomes(ledger)
    startup = image_pull_and_start(ledger)
    runs = [r for r in ("gpu", "trn2", "gpu-fallback", *spec.scaling_runs())
            if r in summaries or r in costs or r in outcomes]
    tracks = {
        run: _track(run, summaries.get(run, []), costs.get(run), spec, outcomes.get(run) or _unknown_outcome(),
                    startup.get(run), cache)
        for run in runs
    }
    # The runs the verdict judges: a scaling run (``gpu-n1``) is a real run, costed, shown in the record table and
    # required to train on a rehearsal, but it answers how the track scales, not which track is cheaper, so no
    # acceptance check, no comparison and no decision reads it (its own health is stated in the scaling section).
    compared = {run: t for run, t in tracks.items() if scaling_nodes(run) is None}
    stage = compile_stage(spec, summaries.get(COMPILE_RUN, []), costs.get(COMPILE_RUN), outcomes.get(COMPILE_RUN),
                          cache, startup.get(COMPILE_RUN))
    checks, delta = _acceptance(spec, compared)
    checks += _declared(spec, compared)
    steady = _steady_cost_ratio(summaries, costs, spec) if "gpu" in tracks and "trn2" in tracks else None
    shipped = load_price_table()

    def decide_costs(ratio: Interval) -> Decision | None:
        return decide(compared, costs, ratio, prices or shipped, shipped)

    # A run on stand-ins proves the pipeline, not the hardware: nothing in its report answers on cost.
    stand_in = any(t.stand_in for t in tracks.values())
    verdict, reasons, decision = _verdict(checks, compared, steady, stage, decide_costs, stand_in=stand_in)
    pilot = (build_pilot(spec, tracks["trn2"], baseline, checks, costs.get("trn2"), prices or shipped,
                         stand_in=stand_in)
             if is_pilot(compared, baseline) and isinstance(baseline, Baseline) else None)
    baseline_view, baseline_check = _baseline(spec, compared, baseline, pilot)
    if pilot is not None and baseline_check is not None:
        # A Trainium2 pilot: the baseline is the GPU side of the comparison, and the pilot's rule gives the verdict.
        checks.append(baseline_check)
        verdict, reasons = pilot.verdict or "inconclusive", list(pilot.reasons)  # None: stand-ins, no verdict
    elif baseline_check is not None:
        checks.append(baseline_check)
        if baseline_check.status != "pass" and verdict in VIABLE:
            # Trainium2 is compared with a GPU track that is not known to reproduce the team's own GPU runs.
            verdict = "inconclusive"
        if baseline_check.status != "pass":
            reasons = [f"{baseline_check.check}: {baseline_check.status} ({baseline_check.detail})", *reasons]
    else:
        reasons = [*reasons, "no GPU baseline (baseline_logs_uri): the GPU track is not checked against the "
                   "team's own GPU logs"]
    stopped = LimitCrossed.model_validate(stopped_by) if stopped_by else None
    if stopped is not None:
        reasons = [f"The plane stopped this trial: {stopped.message}.", *reasons]
    ratio = _cost_ratio(compared, stage)
    # A rehearsal proves the pipeline: every run it started, scaling runs included, must have trained.
    rehearsal = rehearsal_outcome(checks, tracks, stage, reasons) if stand_in else None
    return TrialReport(
        report_version=REPORT_VERSION,
        trial_id=spec.trial_id,
        name=spec.name,
        owner=spec.owner,
        spec_hash=spec.spec_hash(),
        generated_at=generated_at,
        model=ModelRef(id=spec.model.id, revision=spec.model.revision, method=spec.method),
        frozen=_frozen(spec),
        tracks=tracks,
        record_table=_record_table(tracks),
        acceptance=checks,
        compile=compile_section(tracks, stage, cache),
        cost=_cost_section(tracks, stage),  # every run's cost, scaling runs' included: they are paid for
        timeline=attempt_timeline(ledger),
        comparison=Comparison(
            final_loss_delta=None if delta is None else round(delta, 6),
            loss_tolerance=spec.evaluation.loss_tolerance,
            within_tolerance=None if delta is None else abs(delta) <= spec.evaluation.loss_tolerance,
            cost_ratio=None if ratio is None else round(ratio, 6),
            cost_ratio_basis="(trn2 + gpu-fallback + trn2-compile) total_usd / gpu total_usd",
            steady_cost_ratio=None if steady is None else _interval_view(steady),
            steady_cost_ratio_basis="trn2 / gpu cost per effective step at steady state: each track's median step "
                                    "time x its price per second (all nodes), with a bootstrap interval",
            verdict=None if rehearsal is not None else verdict,
            rehearsal=rehearsal[0] if rehearsal is not None else None,
            headline=(rehearsal_headline(rehearsal, tracks) if rehearsal is not None
                      else headline(verdict, reasons, steady, compared, decision)),
            facts=_facts(compared, checks, steady, ratio, stand_in),
            reasons=reasons,
            caveats=_caveats(compared, ledger),
        ),
        decision=decision if rehearsal is None else None,
        stand_in=stand_in,
        stopped_by=stopped,
        baseline=baseline_view,
        pilot=pilot,
        samples=_samples(compared),
        scaling=build_scaling(spec, tracks, costs, stand_in=stand_in),
        declared=Declared(failure_recovery=spec.failure_recovery, metrics=list(spec.evaluation.metrics)),
        unreadable_summaries=None if unreadable is None else list(unreadable),
    )


def _frozen(spec: TrialSpec) -> FrozenSettings:
    return FrozenSettings(
        sequence_length=spec.sequence_length,
        effective_batch_size=spec.effective_batch_size,
        micro_batch_size=spec.micro_batch_size,
        max_steps=spec.max_steps,
        seed=spec.seed,
        precision=spec.precision,
        data_version=spec.data.version,
        eval_interval_steps=spec.evaluation.interval_steps,
    )


def _cost_ratio(tracks: Mapping[str, TrackRecord], stage: CompileStage | None) -> float | None:
    """The whole trial's cost on the Trainium2 side (its run, the GPU fallback and the warm-up compile stage) over
    the GPU track's."""
    totals = {run: Decimal(t.cost.total_usd) for run, t in tracks.items()}
    stage_total = Decimal(stage.cost.total_usd) if stage else Decimal(0)
    trn2_total = totals.get("trn2", Decimal(0)) + totals.get("gpu-fallback", Decimal(0)) + stage_total
    return float(trn2_total / totals["gpu"]) if totals.get("gpu") else None


def _cost_section(tracks: Mapping[str, TrackRecord], stage: CompileStage | None) -> CostSection:
    """Each run's cost (the warm-up compile stage's as run ``trn2-compile``) and the trial's five components."""
    by_run = {run: t.cost for run, t in tracks.items()}
    if stage:
        by_run[COMPILE_RUN] = stage.cost
    components = {
        name: str(sum((Decimal(cost.components()[name]) for cost in by_run.values()), Decimal(0)))
        for name in (*COMPONENTS, "total_usd")
    }
    return CostSection(by_run=by_run, trial=components, note=f"five components per the cost formula; {RATE_NOTE}")


def _caveats(tracks: Mapping[str, TrackRecord], ledger: Sequence[LedgerEntry]) -> list[str]:
    """What limits the comparison's fidelity: different PyTorch versions, the retired XLA path, attempts billed from
    their transitions because their own record is impossible."""
    found = [torch_mismatch({run: t.torch for run, t in tracks.items()}),
             *(f"{run} ran {XLA_LABEL}: a verdict on it answers a question nobody can act on today"
               for run, t in tracks.items() if t.backend == "xla"),
             *(f"{run} attempt {n}: {why}; billed from the job's transitions instead"
               for run, suspect in suspect_attempts(ledger).items() for n, reasons in suspect.items()
               for why in reasons)]
    return [c for c in found if c]
