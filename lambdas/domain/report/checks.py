"""The report's acceptance checks, the verdict they gate and the sentences a person reads first (headline,
rehearsal outcome, facts)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from lambdas.domain.evidence.baseline import Baseline
from lambdas.domain.evidence.baseline import compare as compare_baseline
from lambdas.domain.evidence.evidence import (
    MIN_SAMPLES,
    Equivalence,
    Interval,
    tost,
)
from lambdas.domain.report.decision import primary_of
from lambdas.domain.report.model import (
    NEVER_RAN,
    STAND_IN_EVIDENCE,
    BaselineCompared,
    BaselineUncompared,
    BaselineUnread,
    BaselineView,
    Check,
    CheckStatus,
    CompileStage,
    Decision,
    PilotComparison,
    SamplesView,
    TrackRecord,
    Verdict,
)
from lambdas.domain.report.pilot import pilot_check
from lambdas.domain.trial.spec import TrialSpec


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
    # a Trainium2 pilot has no GPU track: its baseline check stands in (lambdas.domain.report.pilot)
    if gpu is not None:
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
    # a pilot with a readable baseline is judged in lambdas.domain.report.pilot
    if "trn2" in tracks and "gpu" not in tracks:
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
