"""The per-trial report: both tracks side by side as the source document's record table, the three acceptance
checks, resume evidence, the five-component cost and a verdict.

``build_trial_report`` is pure (summaries, costs and ledger entries in; a ``TrialReport`` out, whose
``model_dump(mode="json")`` is the stored report.json), so the local rehearsal and the workflow's report step produce
the same document from the same evidence.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal

from lambdas.domain.evidence.baseline import Baseline
from lambdas.domain.evidence.evidence import (
    Interval,
)
from lambdas.domain.evidence.run_summary import RunSummary
from lambdas.domain.json_types import JsonMapping
from lambdas.domain.money.cost import COMPONENTS, RunCost
from lambdas.domain.money.ledger import LedgerEntry, suspect_attempts
from lambdas.domain.money.prices import PriceTable, load_price_table
from lambdas.domain.money.run_limits import LimitCrossed
from lambdas.domain.report.checks import (
    _acceptance,
    _baseline,
    _declared,
    _facts,
    _samples,
    _verdict,
    headline,
    rehearsal_headline,
    rehearsal_outcome,
)
from lambdas.domain.report.decision import decide
from lambdas.domain.report.model import (
    CacheEntryRecord,
    Comparison,
    CompileStage,
    CostSection,
    Decision,
    Declared,
    FrozenSettings,
    ModelRef,
    TrackRecord,
    TrialReport,
    UnreadableSummary,
)
from lambdas.domain.report.pilot import build_pilot, is_pilot
from lambdas.domain.report.records import (
    RATE_NOTE,
    REPORT_VERSION,
    VIABLE,
    _interval_view,
    _record_table,
    _steady_cost_ratio,
    _track,
    _unknown_outcome,
    torch_mismatch,
)
from lambdas.domain.report.scaling import build_scaling
from lambdas.domain.report.stages import (
    attempt_timeline,
    compile_section,
    compile_stage,
    image_pull_and_start,
    run_outcomes,
)
from lambdas.domain.trial.spec import TrialSpec
from lambdas.domain.vocabulary import COMPILE_RUN, XLA_LABEL, scaling_nodes


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
    (``lambdas.domain.money.run_limits.LimitCrossed``), when it did; `baseline` is the GPU baseline read from the
    trial's ``baseline_logs_uri`` (or, as text, why it could not be read); `cache_entries` are the compile-cache
    registry's entries of the keys the runs used; `unreadable` names the summaries the evidence could not read (left
    out of the report when None); `prices` is the deployment's price table (overrides applied; the shipped table
    when None), whose Capacity Block and Savings Plan rates the decision prices the trial at."""
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
