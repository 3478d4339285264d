"""The pure report builder and its renderings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lambdas.domain.evidence.run_summary import RunSummary
from lambdas.domain.json_types import JsonMapping
from lambdas.domain.money.cost import RunCost
from lambdas.domain.report.build import build_trial_report
from lambdas.domain.report.model import (
    BaselineCompared,
    BaselineUnread,
    Booking,
    Check,
    CompileStage,
    ParallelView,
    TrialReport,
)
from lambdas.domain.trial.rules import parse_trial
from lambdas.rendering.report_html import render_html
from lambdas.rendering.report_markdown import render_markdown
from tests.builders import run_cost, run_summary

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "trial-llama31-8b-lora.json"


def steady(mean: float, n: int = 40, spread: float = 0.004) -> list[float]:
    """Step times around ``mean``, evenly spread (a deterministic stand-in for measured noise)."""
    return [round(mean + spread * ((i * 7919) % 11 - 5) / 5, 6) for i in range(n)]


def summary(run: str, final: float, validation: float, **over: Any) -> RunSummary:
    return run_summary(run, **{
        "tokens_this_attempt": 2_000_000,
        "phases": {"environment_s": 10.0, "compile_s": 5.0, "train_s": 100.0},
        "loss": {
            "initial": 2.5,
            "final": final,
            "per_step": [[1, 2.5], [2, 2.0], [3, final]],
            "eval": [{"step": 100, "loss": 2.2}, {"step": 1000, "loss": validation}],
        },
        "validation_loss": validation,
        "compile": {"seconds": 5.0, "cache": "miss"},
        "throughput": {"tokens_per_s": 1000.0, "step_time_s": 0.1, "samples_per_s": 10.0,
                       "step_times_s": steady(0.08 if run == "trn2" else 0.1)},
        "checkpoints": [{"step": 500, "bytes": 10, "files": 2, "save_s": 1.0, "uri": "s3://a/ckpt/500"}],
        **over,
    })


def cost(total: str) -> RunCost:
    return run_cost(total)


def parallel_of(report: TrialReport, run: str) -> ParallelView:
    parallel = report.tracks[run].parallel
    assert parallel is not None
    return parallel


def stage_of(report: TrialReport) -> CompileStage:
    stage = report.compile.stage
    assert stage is not None
    return stage


def test_report_compares_tracks_and_renders() -> None:
    spec = parse_trial(json.loads(EXAMPLE.read_text()))
    report = build_trial_report(
        spec,
        {"gpu": [summary("gpu", 1.20, 1.25)], "trn2": [summary("trn2", 1.21, 1.26)]},
        {"gpu": cost("10.00"), "trn2": cost("8.00")},
    )
    assert report.comparison.within_tolerance is True
    assert report.comparison.cost_ratio == 0.8
    # No run resumed, so checkpoint loading is not evidenced and the verdict says so.
    assert report.comparison.verdict == "inconclusive"
    assert report.tracks["gpu"].cost.cost_per_effective_step_usd == "0.010000"
    assert report.record_table[0].item == "compile and environment preparation"
    markdown, html = render_markdown(report), render_html(report)
    assert "| checkpoints load | not_evidenced |" in markdown
    assert (
        html.count("<svg") == 2
        and "No Batch transitions recorded" in html
        and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    )


def test_diverging_loss_keeps_gpu() -> None:
    spec = parse_trial(json.loads(EXAMPLE.read_text()))
    resumed = {"resumed_from_step": 200, "continuity": {"global_step_continuous": True, "loss_continuous": True}}
    report = build_trial_report(
        spec,
        {"gpu": [summary("gpu", 1.2, 1.25, **resumed)], "trn2": [summary("trn2", 1.6, 1.70, **resumed)]},
        {"gpu": cost("10"), "trn2": cost("5")},
    )
    assert report.comparison.verdict == "stay_on_gpu"
    assert any("consistent with GPU" in r for r in report.comparison.reasons)


def test_a_trn2_job_that_found_no_capacity_is_its_own_outcome_not_a_training_failure() -> None:
    """A queue's job state time limit cancels a job that waited RUNNABLE with "Canceled by JobStateTimeLimit action
    due to reason: CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY"
    (https://docs.aws.amazon.com/batch/latest/userguide/job_stuck_in_runnable_time_limit_actions.html): nothing
    trained, so the verdict cannot be "stay on GPU" on Trainium2's account."""
    from datetime import UTC, datetime

    from lambdas.domain.money.ledger import transition_entry

    spec = parse_trial(json.loads(EXAMPLE.read_text()))
    at = datetime(2026, 12, 3, 12, tzinfo=UTC)
    reason = "Canceled by JobStateTimeLimit action due to reason: CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY"
    ledger = [
        transition_entry(spec.trial_id, "trn2", job_id="j1", attempt=0, status="RUNNABLE", at=at),
        transition_entry(spec.trial_id, "trn2", job_id="j1", attempt=0, status="FAILED", at=at, status_reason=reason),
        transition_entry(spec.trial_id, "gpu", job_id="j2", attempt=1, status="SUCCEEDED", at=at),
        transition_entry(spec.trial_id, "gpu-fallback", job_id="j3", attempt=1, status="FAILED", at=at,
                         status_reason="Essential container in task exited", exit_code=1),
    ]
    report = build_trial_report(spec, {"gpu": [summary("gpu", 1.2, 1.25)]}, {"gpu": cost("10.00")}, ledger)
    trn2 = report.tracks["trn2"]
    assert (trn2.outcome, trn2.status, trn2.status_reason) == ("no_capacity", "no_capacity", reason)
    assert report.tracks["gpu"].outcome == "succeeded"
    assert report.tracks["gpu-fallback"].outcome == "failed"  # it ran and failed: a training failure
    assert report.comparison.verdict == "inconclusive"
    assert "no capacity" in report.comparison.reasons[0]
    assert "| trn2 | no_capacity | Canceled by JobStateTimeLimit" in render_markdown(report)
    assert "<td>no_capacity</td>" in render_html(report)
    misconfigured = reason.replace("CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY",
                                   "MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT")
    ledger[1] = transition_entry(spec.trial_id, "trn2", job_id="j1", attempt=0, status="FAILED", at=at,
                                 status_reason=misconfigured)
    assert build_trial_report(spec, {}, {}, ledger).tracks["trn2"].outcome == "not_placed"


def test_the_parallel_layout_says_what_ran_on_what() -> None:
    """Every device a run is billed for trains: the report gives devices billed, the layout's ranks on them
    (utilisation 1.0), how many processes ran those ranks (a stand-in simulates them) and the collectives' cost."""
    spec = parse_trial(json.loads(EXAMPLE.read_text()))
    layout = {"devices_per_node": 8, "nodes": 2, "tensor_parallel": 1, "pipeline_parallel": 1, "data_parallel": 16,
              "gradient_accumulation_steps": 4, "micro_batch_size": 1, "effective_batch_size": 64,
              "world_size_run": 2}
    communication = {"world_size": 2, "measured": True, "communication_s": 3.5, "communication_share": 0.25,
                     "sync_wait_median_s": 0.004, "sync_wait_max_s": 0.02}
    report = build_trial_report(
        spec, {"gpu": [summary("gpu", 1.2, 1.25, layout=layout, communication=communication)]}, {"gpu": cost("10")})
    parallel = parallel_of(report, "gpu")
    assert (parallel.devices_billed, parallel.layout_ranks, parallel.device_utilisation) == (16, 16, 1.0)
    assert parallel.processes == 2 and "simulating ranks" in parallel.basis
    assert (parallel.communication_s, parallel.communication_share) == (3.5, 0.25)
    assert "| gpu | 2 | 16 | 16 | 1 | 2 | 3.5 | 0.25 | 0.004 |" in render_markdown(report)
    assert build_trial_report(spec, {"gpu": [summary("gpu", 1.2, 1.25)]}, {}).tracks["gpu"].parallel is None


def test_a_node_failure_reports_effective_steps_rerun_share_and_whether_saves_slowed_the_steps() -> None:
    """The document's multi-node questions after a node failure: effective steps (the global step reached), steps
    executed over all attempts, the share of them executed again after the resume, and whether background
    checkpoint saves slowed the steps they overlapped (the attempt that timed the most steps)."""
    spec = parse_trial(json.loads(EXAMPLE.read_text()))
    first = summary("gpu", 1.3, 1.35, status="failed", global_step=600, steps_this_attempt=600,
                    checkpoint_overlap={"asynchronous": True, "steps_overlapping": 40, "steps_clear": 559,
                                        "step_time_overlapping_s": 0.21, "step_time_clear_s": 0.2,
                                        "slowdown": 1.05})
    second = summary("gpu", 1.2, 1.25, attempt=2, start_step=500, steps_this_attempt=500, resumed_from_step=500,
                     rerun_steps=100, checkpoint_overlap={"asynchronous": True, "steps_overlapping": 30,
                                                          "steps_clear": 469, "slowdown": 1.1})
    report = build_trial_report(spec, {"gpu": [first, second]}, {"gpu": cost("10")})
    gpu = report.tracks["gpu"]
    assert gpu.steps_completed == 1000
    assert (gpu.resume.steps_executed, gpu.resume.rerun_steps) == (1100, 100)
    assert gpu.resume.rerun_share == round(100 / 1100, 4)
    assert gpu.checkpoint.asynchronous is True and gpu.checkpoint.save_slowdown == 1.05
    rows = {row.item: row.figures("gpu") for row in report.record_table}
    assert rows["effective training"]["effective_steps"] == 1000
    assert rows["effective training"]["steps_executed"] == 1100
    assert rows["failed reruns"]["rerun_share"] == 0.0909
    assert rows["checkpoint"]["save_slowdown"] == 1.05
    assert "| gpu | - | 500 | 100 | 0.0909 | " in render_markdown(report)


def test_a_tensor_parallel_layout_the_trainer_does_not_shard_reads_as_the_devices_that_train() -> None:
    """tensor_parallel 8 on a trn2.48xlarge (64 logical NeuronCores): unless the trainer sharded the model over each
    group of 8, one device per group trains and the other 56 hold replicas. Utilisation says 8 / 64, not 100 %."""
    spec = parse_trial(json.loads(EXAMPLE.read_text()))
    layout = {"devices_per_node": 64, "nodes": 1, "tensor_parallel": 8, "pipeline_parallel": 1, "data_parallel": 8,
              "gradient_accumulation_steps": 1, "micro_batch_size": 1, "effective_batch_size": 8,
              "world_size_run": 1}
    report = build_trial_report(spec, {"trn2": [summary("trn2", 1.2, 1.25, layout=layout)]}, {"trn2": cost("10")})
    parallel = parallel_of(report, "trn2")
    assert (parallel.devices_billed, parallel.layout_ranks, parallel.device_utilisation) == (64, 8, 0.125)
    assert "56 of 64 billed devices hold replicas" in parallel.basis
    sharded = parallel_of(build_trial_report(spec, {"trn2": [summary("trn2", 1.2, 1.25,
                                                                     layout={**layout, "model_parallel_run": True})]},
                                             {"trn2": cost("10")}), "trn2")
    assert sharded.device_utilisation == 1.0 and "replicas" not in sharded.basis
    assert "each process the whole model (tensor_parallel 8 splits it with one process per device)" in sharded.basis
    on_devices = parallel_of(build_trial_report(spec, {"trn2": [summary("trn2", 1.2, 1.25, layout={
        **layout, "model_parallel_run": True, "tensor_parallel_run": 8, "world_size_run": 64})]},
        {"trn2": cost("10")}), "trn2")
    assert on_devices.device_utilisation == 1.0 and on_devices.tensor_parallel_run == 8
    assert on_devices.basis == ("64 process(es) ran the layout's 64 training ranks on backend neuron, the model "
                                   "split over tensor-parallel groups of 8 processes (DTensor; the groups' "
                                   "all-reduces run inside forward and backward and are not in the communication "
                                   "time)")


def test_the_gpu_track_is_checked_against_the_baseline_before_trainium2_against_it() -> None:
    """A trial with a baseline: a GPU track that reproduces it passes the check; one that does not makes a viable
    verdict inconclusive and says why first; a baseline that could not be read is named; no baseline is said."""
    from lambdas.domain.evidence.baseline import parse_baseline

    resumed = {"resumed_from_step": 2, "continuity": {"global_step_continuous": True, "loss_continuous": True}}
    data = json.loads(EXAMPLE.read_text())
    data.pop("failure_recovery")  # no run fails here: recovery would not be evidenced
    spec = parse_trial({**data, "baseline_logs_uri": "s3://example-datasets/baselines/llama-gpu.csv"})
    summaries = {"gpu": [summary("gpu", 1.20, 1.25, **resumed)], "trn2": [summary("trn2", 1.21, 1.26, **resumed)]}
    costs = {"gpu": cost("10.00"), "trn2": cost("8.00")}
    plain = build_trial_report(parse_trial(data), summaries, costs)
    assert plain.comparison.verdict == "trn2_viable_cheaper" and plain.baseline is None
    assert plain.comparison.reasons[-1].startswith("no GPU baseline (baseline_logs_uri)")

    same = parse_baseline(b"step,loss,eval_loss\n1,2.5,\n2,2.0,\n3,1.2,\n100,,2.2\n")
    report = build_trial_report(spec, summaries, costs, baseline=same)
    check = report.acceptance[-1]
    assert check.check == "gpu track reproduces the baseline" and check.status == "pass", check
    assert report.comparison.verdict == "trn2_viable_cheaper"
    assert isinstance(report.baseline, BaselineCompared)
    assert report.baseline.reproduced is True and report.baseline.shared_train_steps == 3

    drifted = parse_baseline(b"step,loss\n1,2.5\n2,2.0\n3,1.6\n")
    report = build_trial_report(spec, summaries, costs, baseline=drifted)
    assert report.comparison.verdict == "inconclusive"
    assert report.comparison.reasons[0].startswith("gpu track reproduces the baseline: fail (csv at s3://")
    assert "| gpu track reproduces the baseline | fail |" in render_markdown(report)

    unread = build_trial_report(spec, summaries, costs, baseline="could not be read (NoSuchKey: ...)")
    assert unread.comparison.verdict == "inconclusive" and isinstance(unread.baseline, BaselineUnread)
    assert unread.baseline.error.startswith("could not")


def _declaring(**fields: Any) -> Any:
    data = json.loads(EXAMPLE.read_text())
    evaluation = {**data["evaluation"], **fields.pop("evaluation", {})}
    return parse_trial({**data, **fields, "evaluation": evaluation})


def _sample(prompt: str, completion: str, tokens: list[int]) -> dict[str, Any]:
    return {"prompt": prompt, "completion": completion, "token_ids": tokens}


def test_the_report_judges_the_failure_recovery_the_trial_declared() -> None:
    failed = summary("trn2", 2.0, 2.1, attempt=1, status="failed", exit_code=75)
    resumed = summary("trn2", 1.21, 1.26, attempt=2, resumed_from_step=200,
                      continuity={"global_step_continuous": True, "loss_continuous": True})
    restarted = summary("trn2", 1.21, 1.26, attempt=2, start_step=0)
    gpu = [summary("gpu", 1.20, 1.25)]
    costs = {"gpu": cost("10.00"), "trn2": cost("8.00")}

    def check(recovery: str, runs: dict[str, list[RunSummary]]) -> Check:
        report = build_trial_report(_declaring(failure_recovery=recovery), {"gpu": gpu, **runs}, costs)
        return next(c for c in report.acceptance if c.check.startswith("failure recovery"))

    assert check("resume_same_track", {"trn2": [failed, resumed]}).status == "pass"
    assert check("restart", {"trn2": [failed, resumed]}).detail == "trn2 resumed from step 200 instead of restarting"
    assert check("restart", {"trn2": [failed, restarted]}).status == "pass"
    fallback = summary("gpu-fallback", 1.22, 1.27, resumed_from_step=200)
    assert check("gpu_fallback", {"trn2": [failed, failed], "gpu-fallback": [fallback]}).status == "pass"
    wrong = check("resume_same_track", {"trn2": [failed, failed], "gpu-fallback": [fallback]})
    assert wrong.status == "fail" and "the GPU fallback ran" in wrong.detail
    assert check("gpu_fallback", {"trn2": [summary("trn2", 1.21, 1.26)]}).status == "not_evidenced"


def test_the_report_judges_the_metrics_the_trial_declared() -> None:
    prompts = ["What is 12 plus 7?", "Capital of Japan?", "Name a prime."]
    spec = _declaring(evaluation={"prompts": prompts, "metrics": ["validation_loss", "perplexity", "exact_match"],
                                  "min_exact_match": 0.6})
    gpu_samples = [_sample(prompts[0], " 19", [1, 2]), _sample(prompts[1], " Tokyo", [3]),
                   _sample(prompts[2], " 7", [4])]
    trn2_samples = [_sample(prompts[0], " 19", [1, 2]), _sample(prompts[1], " Tokyo", [3]),
                    _sample(prompts[2], " 11", [5])]
    costs = {"gpu": cost("10.00"), "trn2": cost("8.00")}
    report = build_trial_report(spec, {"gpu": [summary("gpu", 1.20, 1.25, final_samples=gpu_samples)],
                                       "trn2": [summary("trn2", 1.21, 1.26, final_samples=trn2_samples)]}, costs)
    checks = {c.check: c for c in report.acceptance}
    assert checks["perplexity consistent with GPU"].status == "pass"
    assert checks["fixed prompts complete identically"].status == "pass"
    assert checks["fixed prompts complete identically"].detail.startswith("67% of 3 prompts identical")
    assert report.samples is not None and report.samples.token_similarity == (1 + 1 + 0) / 3
    assert report.declared.metrics == ["validation_loss", "perplexity", "exact_match"]

    blank = [_sample(p, " " * 16, [0] * 16) for p in prompts]  # a stand-in that says nothing proves nothing
    report = build_trial_report(spec, {"gpu": [summary("gpu", 1.20, 1.25, final_samples=blank)],
                                       "trn2": [summary("trn2", 1.21, 1.60, final_samples=blank)]}, costs)
    checks = {c.check: c for c in report.acceptance}
    assert checks["fixed prompts complete identically"].status == "not_evidenced"
    assert "3 of 3 completions empty or whitespace" in checks["fixed prompts complete identically"].detail
    assert checks["perplexity consistent with GPU"].status == "fail"  # exp(1.60) against exp(1.25)


def _resumed_pair(gpu_times: list[float], trn2_times: list[float], stand_in: bool = False) -> TrialReport:
    """A passing trial (both runs resumed with continuity, so every check is evidenced) whose step times are
    the given ones; both instances at the same price. ``stand_in``: both ran on the CPU stand-in."""
    data = json.loads(EXAMPLE.read_text())
    data.pop("failure_recovery")
    spec = parse_trial(data)
    resumed = {"resumed_from_step": 2, "continuity": {"global_step_continuous": True, "loss_continuous": True}}

    def with_times(run: str, times: list[float]) -> RunSummary:
        on = {"backend": "cpu", "stand_in": True} if stand_in else {}
        base = summary(run, 1.20, 1.25, **resumed, **on)
        return base.model_copy(update={"throughput": base.throughput.model_copy(update={"step_times_s": times})})

    return build_trial_report(spec, {"gpu": [with_times("gpu", gpu_times)], "trn2": [with_times("trn2", trn2_times)]},
                              {"gpu": cost("10.00"), "trn2": cost("10.00")})


def test_the_verdict_is_cheaper_only_when_the_interval_excludes_parity() -> None:
    cheaper = _resumed_pair(steady(0.1), steady(0.08)).comparison
    assert cheaper.verdict == "trn2_viable_cheaper"
    assert cheaper.steady_cost_ratio is not None and cheaper.steady_cost_ratio.high < 1
    # The whole trial first (both cost $10: no one-time costs), then the steady-state ratio as its supporting fact.
    assert cheaper.headline.startswith("Trainium2 is cheaper: this trial cost 1.00x the GPU's ($10.00 vs $10.00")
    assert "0.80x per steady-state step (95% interval" in cheaper.headline
    dearer = _resumed_pair(steady(0.1), steady(0.13)).comparison
    assert dearer.verdict == "trn2_viable_not_cheaper"
    assert dearer.steady_cost_ratio is not None and dearer.steady_cost_ratio.low > 1


def test_noise_makes_the_verdict_inconclusive_never_the_opposite_answer() -> None:
    """The rehearsal's failure: the GPU stand-in's step time moved with machine load and the verdict flipped.
    Tracks with the same step-time distribution, drawn noisily several times, never give a definite answer
    against each other more than rarely, and never both answers."""
    import random

    verdicts = []
    for seed in range(12):
        rng = random.Random(seed)
        gpu = [max(0.01, rng.gauss(0.1, 0.03)) for _ in range(30)]
        trn2 = [max(0.01, rng.gauss(0.1, 0.03)) for _ in range(30)]
        verdicts.append(_resumed_pair(gpu, trn2).comparison.verdict)
    assert verdicts.count("inconclusive") >= 10
    assert not {"trn2_viable_cheaper", "trn2_viable_not_cheaper"} <= set(verdicts)


def test_too_few_steady_steps_cannot_decide_and_say_so() -> None:
    report = _resumed_pair(steady(0.1, n=3), steady(0.05, n=3))
    assert report.comparison.verdict == "inconclusive"
    assert "too few steady-state steps" in report.comparison.headline
    uncertainty = report.tracks["gpu"].uncertainty
    assert uncertainty is not None and uncertainty.step_time_s is None


def test_a_rehearsal_on_stand_ins_gives_no_verdict_only_whether_the_pipeline_worked() -> None:
    """The same figures that make real devices "cheaper" make a stand-in run a rehearsal: no verdict, the
    rehearsal's outcome, and its figures labelled as pipeline evidence."""
    report = _resumed_pair(steady(0.1), steady(0.08), stand_in=True)
    comparison = report.comparison
    assert report.stand_in and comparison.verdict is None and comparison.rehearsal == "passed"
    assert comparison.headline.startswith("Pipeline rehearsal passed: every run (gpu, trn2) trained")
    assert "pipeline evidence from stand-ins (gpu on cpu, trn2 on cpu)" in comparison.headline
    assert "cheaper" not in comparison.headline and 3 <= len(comparison.facts) <= 5
    assert any(f.startswith("Steady-state cost per training step, trn2/gpu: 0.80") for f in comparison.facts)


@pytest.mark.parametrize("backend", ["cpu", "compiled"])
def test_a_summary_from_a_stand_in_backend_is_a_stand_in_whatever_its_flag_says(backend: str) -> None:
    """The backend decides: a trn2 summary from the rehearsal's stand-in backend that claims ``stand_in: false``
    is read as a stand-in, so a trial whose figures would make real devices "cheaper" gets no verdict and no
    decision, only the rehearsal's outcome, and the run is labelled a stand-in."""
    assert run_summary("trn2", backend=backend, stand_in=False).stand_in is True
    assert run_summary("trn2", backend="neuron", stand_in=False).stand_in is False
    data = json.loads(EXAMPLE.read_text())
    data.pop("failure_recovery")
    resumed = {"resumed_from_step": 2, "continuity": {"global_step_continuous": True, "loss_continuous": True}}
    report = build_trial_report(parse_trial(data),
                                {"gpu": [summary("gpu", 1.20, 1.25, **resumed)],
                                 "trn2": [summary("trn2", 1.20, 1.25, backend=backend, stand_in=False, **resumed)]},
                                {"gpu": cost("10.00"), "trn2": cost("8.00")})
    assert report.stand_in and report.tracks["trn2"].stand_in and not report.tracks["gpu"].stand_in
    assert report.tracks["trn2"].label.startswith(f"stand-in backend {backend}")
    assert report.comparison.verdict is None and report.comparison.rehearsal == "passed"
    assert report.decision is None and report.comparison.headline.startswith("Pipeline rehearsal passed")


def test_quality_equivalence_is_a_two_one_sided_test_on_the_shared_eval_points() -> None:
    data = json.loads(EXAMPLE.read_text())
    spec = parse_trial(data)
    evals = {"gpu": [[100, 2.2], [500, 1.6], [1000, 1.25]], "trn2": [[100, 2.21], [500, 1.61], [1000, 1.26]]}
    far = {"gpu": evals["gpu"], "trn2": [[100, 2.9], [500, 2.2], [1000, 1.9]]}
    for case, expected in ((evals, "pass"), (far, "fail")):
        summaries = {run: [summary(run, 1.2, points[-1][1], loss={"initial": 2.5, "final": 1.2,
                                                                   "per_step": [[1, 2.5], [3, 1.2]],
                                                                   "eval": points})]
                     for run, points in case.items()}
        report = build_trial_report(spec, summaries, {"gpu": cost("1"), "trn2": cost("1")})
        check = next(c for c in report.acceptance if c.check.startswith("quality equivalent"))
        assert check.status == expected, check
        assert "3 shared eval points" in check.detail


def test_the_fallback_proves_continuity_on_the_fixed_eval_set_and_ends_like_the_gpu_track() -> None:
    spec = parse_trial(json.loads(EXAMPLE.read_text()))
    trn2_eval = [[100, 2.2], [400, 1.8]]
    trn2 = summary("trn2", 1.9, 1.8, status="failed", exit_code=76,
                   loss={"initial": 2.5, "final": 1.9, "per_step": [[1, 2.5], [400, 1.9]], "eval": trn2_eval})

    def fallback(resumed_loss: float, final: float) -> RunSummary:
        return summary("gpu-fallback", final, final, resumed_from_step=400,
                       resume_eval={"step": 400, "loss": resumed_loss},
                       continuity={"global_step_continuous": True, "loss_continuous": True},
                       loss={"initial": 1.9, "final": final, "per_step": [[401, 1.85], [1000, final]],
                             "eval": [[400, resumed_loss], [1000, final]]})

    def checks(resumed_loss: float, final: float) -> dict[str, str]:
        report = build_trial_report(spec, {"gpu": [summary("gpu", 1.2, 1.25)], "trn2": [trn2],
                                           "gpu-fallback": [fallback(resumed_loss, final)]},
                                    {"gpu": cost("10"), "trn2": cost("3"), "gpu-fallback": cost("6")})
        resume_eval = report.tracks["gpu-fallback"].resume.resume_eval
        assert resume_eval is not None and resume_eval.step == 400
        return {c.check: c.status for c in report.acceptance if c.check.startswith("fallback")}

    assert checks(1.801, 1.26) == {"fallback continues trn2 on the fixed eval set": "pass",
                                   "fallback final outputs consistent with GPU": "pass"}
    assert checks(2.4, 1.26)["fallback continues trn2 on the fixed eval set"] == "fail"  # not the same model
    assert checks(1.801, 1.9)["fallback final outputs consistent with GPU"] == "fail"


def test_a_compile_that_served_other_trials_is_booked_as_shared_infrastructure() -> None:
    """The source document's accounting rule: one job's compile is its cost; the same entry serving other trials
    makes it shared infrastructure (the registry records the trials each entry served)."""
    spec = parse_trial(json.loads(EXAMPLE.read_text()))
    key = "ab" * 32
    compiled = {"compile": {"seconds": 300.0, "cache": "miss", "cache_key": key}}
    warm = {"compile": {"seconds": 3.0, "cache": "hit", "cache_key": key}}

    def booking(trn2_compile: dict[str, Any], hit_trials: list[str] | None) -> Booking:
        entries = None if hit_trials is None else {key: {"cache_key": key, "hit_trials": hit_trials}}
        report = build_trial_report(spec, {"gpu": [summary("gpu", 1.2, 1.25)],
                                           "trn2": [summary("trn2", 1.21, 1.26, **trn2_compile)]},
                                    {"gpu": cost("10"), "trn2": cost("8")}, cache_entries=entries)
        assert "Compile cost of trn2" in render_markdown(report)
        found = report.tracks["trn2"].compile.booking
        assert found is not None
        return found

    assert booking(compiled, []).shared is False
    assert booking(compiled, [spec.trial_id]).shared is False  # only its own later attempts
    shared = booking(compiled, ["another-trial", spec.trial_id])
    assert shared.shared is True and shared.other_trials == ["another-trial"]
    assert booking(warm, [spec.trial_id]).basis.startswith("compiled by an earlier trial")
    assert booking(compiled, None).shared is None


def test_a_fallback_that_started_from_scratch_never_reads_resumed_from_step_none() -> None:
    spec = parse_trial(json.loads(EXAMPLE.read_text()))
    trn2 = summary("trn2", 2.4, 2.4, status="failed", exit_code=1)
    fresh = summary("gpu-fallback", 1.2, 1.25)
    report = build_trial_report(spec, {"gpu": [summary("gpu", 1.2, 1.25)], "trn2": [trn2], "gpu-fallback": [fresh]},
                                {"gpu": cost("10"), "trn2": cost("1"), "gpu-fallback": cost("10")})
    assert report.comparison.verdict == "stay_on_gpu"
    assert "None" not in report.comparison.headline
    assert "starting from step 0 (Trainium2 left no checkpoint to resume)" in report.comparison.headline


def _compile_stage_summary(**over: Any) -> RunSummary:
    return run_summary("trn2-compile", **{"global_step": 3, "steps_this_attempt": 3, "backend": "compiled",
                                          "phases": {"environment_s": 4.0, "compile_s": 300.0},
                                          "compile": {"seconds": 300.0, "cache": "miss", "cache_key": "cd" * 32},
                                          **over})


def test_the_warm_up_compile_stage_is_reported_apart_and_priced_into_the_trial() -> None:
    """The stage's cost is all compile and counts in the trial's totals and the Trainium2 side of the cost ratio;
    the training run that followed it hit the cache, so the trial's hit rate is one of two lookups."""
    spec = parse_trial(json.loads(EXAMPLE.read_text()))
    warm = {"compile": {"seconds": 2.0, "cache": "hit", "cache_key": "cd" * 32}}
    stage_cost = run_cost("2.00", run="trn2-compile", effective_training_usd="0", compile_usd="2.00")
    report = build_trial_report(
        spec, {"gpu": [summary("gpu", 1.2, 1.25)], "trn2": [summary("trn2", 1.21, 1.26, **warm)],
               "trn2-compile": [_compile_stage_summary()]},
        {"gpu": cost("10.00"), "trn2": cost("8.00"), "trn2-compile": stage_cost})
    stage = stage_of(report)
    assert (stage.status, stage.compile_s, stage.cache_by_attempt) == ("succeeded", 300.0, ["miss"])
    assert "trn2-compile" not in report.tracks  # not a track: no acceptance check reads it
    assert report.cost.by_run["trn2-compile"].compile_usd == "2.00"
    assert report.cost.trial["total_usd"] == "20.00"
    assert report.comparison.cost_ratio == 1.0  # (8 + 2) / 10
    assert (report.compile.hits, report.compile.lookups, report.compile.hit_rate) == (1, 2, 0.5)
    markdown, html = render_markdown(report), render_html(report)
    assert "Warm-up compile stage (`trn2-compile`" in markdown and "Cache hit rate: 50% (1 of 2 lookups" in markdown
    assert "Warm-up compile stage (<code>trn2-compile</code>" in html and "50% (1 of 2 lookups)" in html


def test_a_failed_warm_up_compile_keeps_the_gpu_and_quotes_the_compiler() -> None:
    spec = parse_trial(json.loads(EXAMPLE.read_text()))
    error = "RuntimeError: neuronx-cc terminated: Estimated peak HBM usage exceeds 96 GB"
    failed = _compile_stage_summary(status="failed", error=error, steps_this_attempt=0, global_step=0,
                                    compile={"seconds": 40.0, "cache": "none", "status": "failed", "error": error})
    fallback = summary("gpu-fallback", 1.2, 1.25)
    report = build_trial_report(
        spec, {"gpu": [summary("gpu", 1.2, 1.25)], "gpu-fallback": [fallback], "trn2-compile": [failed]},
        {"gpu": cost("10"), "gpu-fallback": cost("10"),
         "trn2-compile": run_cost("0.50", run="trn2-compile", effective_training_usd="0", compile_usd="0.50")})
    assert report.comparison.verdict == "stay_on_gpu"
    assert "did not compile in the warm-up compile stage" in report.comparison.headline
    assert "exceeds 96 GB" in report.comparison.headline
    assert "starting from step 0" in report.comparison.headline
    assert stage_of(report).error == error
    assert "> Compiler: RuntimeError: neuronx-cc terminated" in render_markdown(report)
    assert 'class="warn">Compiler: <code>RuntimeError' in render_html(report)


def test_a_warm_key_runs_no_compile_stage_and_says_so() -> None:
    spec = parse_trial(json.loads(EXAMPLE.read_text()))
    report = build_trial_report(spec, {"gpu": [summary("gpu", 1.2, 1.25)], "trn2": [summary("trn2", 1.21, 1.26)]},
                                {"gpu": cost("10"), "trn2": cost("8")})
    assert report.compile.stage is None
    assert "Warm-up compile stage: not run" in render_markdown(report)


def test_the_report_shows_each_cache_entrys_failed_compiles_from_the_registry() -> None:
    spec = parse_trial(json.loads(EXAMPLE.read_text()))
    key = "ef" * 32
    trn2 = summary("trn2", 1.21, 1.26, compile={"seconds": 30.0, "cache": "miss", "cache_key": key})
    entries: dict[str, JsonMapping] = {key: {"cache_key": key, "status": "ready", "hits": 1, "misses": 1,
                                             "failures": 2, "failure_reason": "neuronx-cc: Internal compiler error",
                                             "hit_trials": [spec.trial_id]}}
    report = build_trial_report(spec, {"gpu": [summary("gpu", 1.2, 1.25)], "trn2": [trn2]},
                                {"gpu": cost("10"), "trn2": cost("8")}, cache_entries=entries)
    (entry,) = report.compile.entries
    assert (entry.failures, entry.misses, entry.hits) == (2, 1, 1)
    assert entry.failure_reason == "neuronx-cc: Internal compiler error"
    assert f"| `{key[:16]}` | ready | 1 | 1 | 2 | neuronx-cc: Internal compiler error |" in render_markdown(report)
    assert "Internal compiler error" in render_html(report)


def test_an_attempt_billed_from_its_transitions_instead_of_its_record_is_a_caveat() -> None:
    """AWS Batch API reference, AttemptDetail (https://docs.aws.amazon.com/batch/latest/APIReference/
    API_AttemptDetail.html): an attempt's ``stoppedAt`` cannot precede its ``startedAt``. When the ledger holds such
    a record, the report says the attempt was billed from the job's transitions instead."""
    from datetime import UTC, datetime, timedelta

    from lambdas.domain.money.ledger import attempt_entry, transition_entry

    spec = parse_trial(json.loads(EXAMPLE.read_text()))
    at = datetime(2026, 12, 3, 12, tzinfo=UTC)
    ms = int(at.timestamp() * 1000)
    ledger = [
        transition_entry(spec.trial_id, "gpu", job_id="j2", attempt=1, status="RUNNING", at=at),
        transition_entry(spec.trial_id, "gpu", job_id="j2", attempt=1, status="SUCCEEDED",
                         at=at + timedelta(hours=1)),
        attempt_entry(spec.trial_id, "gpu", job_id="j2", attempt=1, started_at_ms=ms + 3_600_000, stopped_at_ms=ms,
                      exit_code=0, status_reason=None),
    ]
    report = build_trial_report(spec, {"gpu": [summary("gpu", 1.2, 1.25)]}, {"gpu": cost("10.00")}, ledger)
    caveat = ("gpu attempt 1: attempt record stopped before it started; billed from the job's transitions "
              "instead")
    assert caveat in report.comparison.caveats
    assert f"> Fidelity caveat: {caveat}" in render_markdown(report)
    clean = build_trial_report(spec, {"gpu": [summary("gpu", 1.2, 1.25)]}, {"gpu": cost("10.00")}, ledger[:2])
    assert clean.comparison.caveats == []


def test_a_rehearsal_fails_when_a_run_did_not_train() -> None:
    data = json.loads(EXAMPLE.read_text())
    spec = parse_trial(data)
    on = {"backend": "cpu", "stand_in": True}
    report = build_trial_report(spec, {"gpu": [summary("gpu", 1.2, 1.25, **on)],
                                       "trn2": [summary("trn2", 1.2, 1.3, status="failed", **on)]},
                                {"gpu": cost("10.00"), "trn2": cost("10.00")})
    comparison = report.comparison
    assert comparison.verdict is None and comparison.rehearsal == "failed"
    assert comparison.headline.startswith("Pipeline rehearsal failed: the trn2 run ended failed")
    assert "rehearsal" in report.model_dump(mode="json")["comparison"]
