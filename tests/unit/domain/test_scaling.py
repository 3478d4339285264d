"""The report's scaling section: a track trained at several node counts (``nodes: [1, 2]``), its speed-up,
scaling efficiency and cost per effective step against the smallest count; and the scaling runs kept out of the
verdict while their costs stay in the trial's."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from lambdas.domain.evidence.run_summary import RunSummary
from lambdas.domain.money.cost import RunCost
from lambdas.domain.money.ledger import transition_entry
from lambdas.domain.report.build import build_trial_report
from lambdas.domain.report.model import ScalingPoint, ScalingView, TrialReport
from lambdas.domain.trial.rules import parse_trial
from lambdas.domain.trial.spec import TrialSpec
from lambdas.rendering.report_html import render_html
from lambdas.rendering.report_markdown import render_markdown
from lambdas.rendering.report_text import run_label
from tests.builders import run_cost, steady_times, trained_summary

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "trial-llama31-8b-lora.json"
# The GPU main run at 2 nodes of p5.48xlarge (16 GPUs), its collectives 12% of a step.
LAYOUT = {"devices_per_node": 8, "nodes": 2, "tensor_parallel": 1, "pipeline_parallel": 1, "data_parallel": 16,
          "gradient_accumulation_steps": 4, "micro_batch_size": 1, "effective_batch_size": 64, "world_size_run": 16}
COMMUNICATION = {"world_size": 16, "process_group": "nccl", "measured": True, "steps_timed": 1000,
                 "communication_s": 12.0, "communication_share": 0.12}


def _spec(gpu_nodes: Any = (1, 2)) -> TrialSpec:
    data = json.loads(EXAMPLE.read_text())
    data.pop("failure_recovery")
    data["tracks"]["gpu"]["nodes"] = list(gpu_nodes)
    return parse_trial(data)


def _summary(run: str, step: float, stand_in: bool = False, **over: Any) -> RunSummary:
    """A run that trained, resumed with continuity and passed every check, at median step time ``step`` (44 steady
    steps: their median is exactly ``step``)."""
    throughput = {"tokens_per_s": round(64 * 4096 / step, 3), "step_time_s": step, "samples_per_s": 10.0,
                  "step_times_s": steady_times(step, 44)}
    return trained_summary(run, step, steady_times(step, 44), throughput=throughput,
                           **({"backend": "cpu", "stand_in": True} if stand_in else {}), **over)


def scaled_report(spec: TrialSpec | None = None, *, n1: RunSummary | None = None, stand_in: bool = False,
            costs: dict[str, RunCost] | None = None, scaled: bool = True) -> TrialReport:
    """gpu at 2 nodes (0.1 s a step, $11.50 of effective training over 1,000 steps), gpu-n1 at 1 node (0.174 s,
    $10.00) and trn2 (0.08 s, $6.00); ``n1`` replaces gpu-n1's summary, ``scaled`` False leaves gpu-n1 out."""
    summaries = {"gpu": [_summary("gpu", 0.1, stand_in, layout=LAYOUT, communication=COMMUNICATION)],
                 "trn2": [_summary("trn2", 0.08, stand_in)]}
    prices = {"gpu": run_cost("11.5"), "trn2": run_cost("6", "trn2")}
    if scaled:
        summaries["gpu-n1"] = [n1 if n1 is not None else _summary("gpu-n1", 0.174, stand_in)]
        prices["gpu-n1"] = run_cost("10", "gpu-n1")
    return build_trial_report(spec or _spec(), summaries, {**prices, **(costs or {})})


def _view(report: TrialReport, track: str = "gpu") -> ScalingView:
    assert report.scaling is not None
    return next(view for view in report.scaling if view.track == track)


def _points(report: TrialReport) -> dict[str, ScalingPoint]:
    return {point.run: point for point in _view(report).points}


def test_two_nodes_against_one_speed_up_efficiency_and_cost_ratio_by_hand() -> None:
    """1-node step 0.174 s, 2-node step 0.1 s: speed-up 0.174 / 0.1 = 1.74, efficiency 1.74 / (2 / 1) = 0.87; cost
    per effective step $10.00 / 1,000 = $0.01 at 1 node, $11.50 / 1,000 = $0.0115 at 2 nodes: 1.15x."""
    report = scaled_report()
    view = _view(report)
    assert (view.track, view.instance_type, view.base_nodes) == ("gpu", "p5.48xlarge", 1)
    one, two = view.points
    assert (one.run, one.nodes, one.world_size, two.run, two.nodes, two.world_size) == ("gpu-n1", 1, 8, "gpu", 2, 16)
    assert (one.outcome, two.outcome) == ("succeeded", "succeeded")
    assert (one.speedup, one.efficiency, one.cost_per_step_ratio) == (1.0, 1.0, 1.0)
    assert two.step_time_s == 0.1 and one.step_time_s == 0.174
    assert two.speedup == pytest.approx(1.74) and two.efficiency == pytest.approx(0.87)
    assert one.cost_per_step_usd == pytest.approx(0.01) and two.cost_per_step_usd == pytest.approx(0.0115)
    assert two.cost_per_step_ratio == pytest.approx(1.15)
    assert two.communication_share == 0.12 and one.communication_share is None  # gpu-n1 recorded no layout
    assert two.tokens_per_s == pytest.approx(64 * 4096 / 0.1)
    assert view.summary == ("gpu (p5.48xlarge): 2 nodes train 1.74x faster than 1 node (scaling efficiency 87%) at "
                            "1.15x the cost per effective step; communication takes 12% of a step at 2 nodes.")
    assert [v.track for v in report.scaling or []] == ["gpu"]  # trn2 declared one count: no view


def test_a_trial_without_scaling_runs_has_no_section_and_the_scaling_run_does_not_move_the_verdict() -> None:
    plain = scaled_report(_spec((2,)), scaled=False)
    assert plain.scaling is None and "scaling" not in plain.model_dump(mode="json")
    scaled = scaled_report()
    assert scaled.comparison.verdict == plain.comparison.verdict == "trn2_viable_cheaper"
    assert [c.check for c in scaled.acceptance] == [c.check for c in plain.acceptance]
    assert not [c for c in scaled.acceptance if "gpu-n1" in c.check + c.detail]
    assert scaled.comparison.cost_ratio == plain.comparison.cost_ratio  # trn2 / gpu, gpu-n1 on neither side
    # A scaling run is a real run: its own column in the record table, its own row in the job table.
    assert list(scaled.tracks) == ["gpu", "trn2", "gpu-n1"]
    assert "gpu-n1" in scaled.record_table[0].model_dump()
    assert scaled.tracks["gpu-n1"].uncertainty is not None
    cost_per_step = scaled.tracks["gpu-n1"].uncertainty.cost_per_effective_step_usd
    # Priced at its own node count: 0.174 s x 1 USD/h x 1 node, not the main run's 2 nodes.
    assert cost_per_step is not None and cost_per_step.estimate == pytest.approx(0.174 / 3600, rel=0.02)


def test_the_decision_leaves_the_scaling_run_out_while_the_trial_total_counts_it() -> None:
    report = scaled_report()
    decision = report.decision
    assert decision is not None, report.comparison.reasons
    assert decision.gpu.runs == ["gpu"] and decision.gpu.total_usd == "11.500000"
    assert decision.trn2.runs == ["trn2"] and decision.trn2.total_usd == "6.000000"
    by_run = report.cost.by_run
    assert list(by_run) == ["gpu", "trn2", "gpu-n1"] and by_run["gpu-n1"].total_usd == "10"
    assert Decimal(report.cost.trial["total_usd"]) == Decimal("27.5")  # 11.50 + 6.00 + 10.00: all paid for
    assert Decimal(report.cost.trial["effective_training_usd"]) == Decimal("27.5")


def test_a_failed_scaling_run_has_no_figures_and_the_sentence_says_so() -> None:
    failed = _summary("gpu-n1", 0.174, status="failed", global_step=300, error="NCCL timeout")
    report = scaled_report(n1=failed)
    one, two = _view(report).points
    assert one.outcome == "failed"
    assert (one.step_time_s, one.tokens_per_s, one.communication_share, one.cost_per_step_usd, one.speedup,
            one.efficiency, one.cost_per_step_ratio) == (None,) * 7
    assert (two.speedup, two.efficiency, two.cost_per_step_ratio) == (None, None, None)
    assert two.step_time_s == 0.1  # the main run's own figures stay
    assert _view(report).summary == ("gpu (p5.48xlarge): no speed-up to compare: gpu-n1 (1 node) failed; "
                                     "communication takes 12% of a step at 2 nodes.")
    assert report.comparison.verdict == "trn2_viable_cheaper"  # the verdict judges the main runs only


def test_a_scaling_run_with_no_summary_or_no_evidence_at_all_is_named() -> None:
    costed_only = build_trial_report(_spec(), {"gpu": [_summary("gpu", 0.1)]},
                                     {"gpu": run_cost("11.5"), "gpu-n1": run_cost("10", "gpu-n1")})
    assert "gpu-n1 (1 node) has no summary" in _view(costed_only).summary
    assert _points(costed_only)["gpu-n1"].cost_per_step_usd is None
    nothing = build_trial_report(_spec(), {"gpu": [_summary("gpu", 0.1)]}, {"gpu": run_cost("11.5")})
    assert _points(nothing)["gpu-n1"].outcome == "unknown"
    assert "gpu-n1 (1 node) left no evidence" in _view(nothing).summary


def test_impossible_figures_are_never_shown() -> None:
    """A step time of zero is physically impossible (the run is unusable evidence), and a run whose effective
    training cost nothing has no cost per step: neither becomes a figure."""
    impossible = _summary("gpu-n1", 0.174)
    impossible = impossible.model_copy(update={"throughput": impossible.throughput.model_copy(
        update={"step_time_s": 0.0})})
    report = scaled_report(n1=impossible)
    assert _points(report)["gpu-n1"].step_time_s is None and _points(report)["gpu"].speedup is None
    assert "gpu-n1 (1 node) is unusable evidence (attempt 1: throughput.step_time_s is 0.0" in _view(report).summary
    free = scaled_report(costs={"gpu-n1": run_cost("0", "gpu-n1")})
    assert _points(free)["gpu-n1"].cost_per_step_usd is None
    assert _points(free)["gpu"].cost_per_step_ratio is None and _points(free)["gpu"].speedup == pytest.approx(1.74)
    assert "(cost per effective step not evidenced)" in _view(free).summary


def test_step_time_and_throughput_are_the_steady_state_and_agree() -> None:
    """The speed-up reads the same from step time and throughput: both are the steady-state steps' (a slow first
    attempt's warm-up, which the last attempt's median and tokens over train_s would carry, is left out)."""
    slow = _summary("gpu-n1", 0.174)
    slow = slow.model_copy(update={"throughput": slow.throughput.model_copy(
        update={"step_time_s": 0.9, "tokens_per_s": 1_000.0})})
    report = scaled_report(n1=slow)
    one, two = _view(report).points
    assert one.step_time_s == 0.174 and two.step_time_s == 0.1
    for point in (one, two):
        assert point.tokens_per_s is not None and point.step_time_s is not None
        assert point.tokens_per_s * point.step_time_s == pytest.approx(64 * 4096)  # effective batch x sequence
    assert two.tokens_per_s is not None and one.tokens_per_s is not None
    assert two.tokens_per_s / one.tokens_per_s == pytest.approx(two.speedup, rel=1e-4)


def test_on_stand_ins_the_figures_stay_but_are_labelled_pipeline_evidence() -> None:
    report = scaled_report(stand_in=True)
    assert report.stand_in and report.comparison.verdict is None and report.comparison.rehearsal == "passed"
    assert "every run (gpu, gpu-n1, trn2) trained" in report.comparison.headline
    view = _view(report)
    assert view.points[1].speedup == pytest.approx(1.74)
    assert view.summary.startswith("gpu (p5.48xlarge), pipeline evidence from stand-ins (cpu), not an answer: "
                                   "2 nodes train 1.74x faster than 1 node")
    assert view.summary.endswith("these figures say nothing about how p5.48xlarge scales.")
    # A rehearsal proves the pipeline: a scaling run that failed fails it.
    failed = scaled_report(stand_in=True, n1=_summary("gpu-n1", 0.174, True, status="failed", global_step=300))
    assert failed.comparison.rehearsal == "failed" and "gpu-n1" in failed.comparison.headline


def test_html_and_markdown_render_a_table_per_track_under_its_sentence() -> None:
    report = scaled_report()
    markdown = render_markdown(report)
    section = markdown.split("## Scaling", 1)[1].split("\n## ", 1)[0]
    assert "### gpu (p5.48xlarge)" in section and _view(report).summary in section
    assert ("| nodes | world size | run | outcome | step time (s) | throughput (tokens/s) | speed-up | "
            "scaling efficiency | communication share | cost per effective step | cost ratio |") in section
    assert "| 1 | 8 | gpu-n1 | succeeded | 0.174 | 1,507,000 | 1\u00d7 | 100% | - | $0.01 | 1\u00d7 |" in section
    assert "| 2 | 16 | gpu | succeeded | 0.1 | 2,621,000 | 1.74\u00d7 | 87% | 12% | $0.0115 | 1.15\u00d7 |" in section
    html = render_html(report)
    assert "<h2>Scaling</h2>" in html and "<h3>gpu (p5.48xlarge)</h3>" in html
    table = re.search(r'<table class="scaling">(.*?)</table>', html, flags=re.S)
    assert table
    rows = [[unescape(re.sub(r"<[^>]+>", "", cell)).strip() for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row)]
            for row in re.findall(r"<tr>(.*?)</tr>", table.group(1), flags=re.S)]
    assert rows[1] == ["1", "8", "gpu-n1", "succeeded", "0.174", "1,507,000", "1\u00d7", "100%", "\u2014", "$0.01",
                       "1\u00d7"]
    assert rows[2][6:] == ["1.74\u00d7", "87%", "12%", "$0.0115", "1.15\u00d7"]
    plain = scaled_report(_spec((2,)), scaled=False)
    assert "Scaling" not in render_markdown(plain) and "<h2>Scaling</h2>" not in render_html(plain)


def test_a_scaling_run_reads_as_its_track_at_its_node_count_in_the_timeline_and_the_job_table() -> None:
    assert run_label("gpu-n1", "p5.48xlarge") == "GPU at 1 node (p5.48xlarge)"
    assert run_label("trn2-n2", "trn2.48xlarge", "cpu") == "Trainium2 at 2 nodes (trn2.48xlarge, stand-in cpu)"
    spec = _spec()
    at = datetime(2026, 12, 3, 12, tzinfo=UTC)
    ledger = [transition_entry(spec.trial_id, run, job_id=f"j-{run}", attempt=1, status=status,
                               at=at + timedelta(minutes=minutes))
              for run in ("gpu", "gpu-n1") for status, minutes in (("STARTING", 0), ("RUNNING", 1), ("SUCCEEDED", 30))]
    report = build_trial_report(spec, {"gpu": [_summary("gpu", 0.1)], "gpu-n1": [_summary("gpu-n1", 0.174)]},
                                {"gpu": run_cost("11.5"), "gpu-n1": run_cost("10", "gpu-n1")}, ledger)
    assert {row.run for row in report.timeline} == {"gpu", "gpu-n1"}
    assert report.tracks["gpu-n1"].outcome == "succeeded" and _points(report)["gpu-n1"].outcome == "succeeded"
    html = render_html(report)
    assert "GPU at 1 node (p5.48xlarge), attempt 1" in html
    assert "| gpu-n1 | succeeded |" in render_markdown(report)
