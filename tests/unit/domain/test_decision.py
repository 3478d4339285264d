"""The whole-trial decision: one-time and recurring costs, the break-even point, and the answer at each price basis."""

from __future__ import annotations

import json
import math
from decimal import Decimal
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from lambdas.domain.money.cost import RunCost
from lambdas.domain.money.prices import load_price_table
from lambdas.domain.report.build import build_trial_report
from lambdas.domain.report.decision import primary_of
from lambdas.domain.report.model import BasisDecision, Decision, TrialReport
from lambdas.domain.trial.rules import parse_trial
from lambdas.rendering.report_html import render_html
from lambdas.rendering.report_markdown import render_markdown
from tests.builders import run_cost, run_summary, steady_times, trained_summary

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "trial-llama31-8b-lora.json"


def _report(gpu_cost: RunCost, trn2_cost: RunCost, *, gpu_step: float = 0.1, trn2_step: float = 0.08,
            overrides: dict[str, Any] | None = None, extra_costs: dict[str, RunCost] | None = None) -> TrialReport:
    """A trial whose runs both succeeded, resumed with continuity and passed every check, at these costs."""
    data = json.loads(EXAMPLE.read_text())
    data.pop("failure_recovery")
    spec = parse_trial(data)

    def summary(run: str, step: float) -> Any:
        return trained_summary(run, step, steady_times(step))

    return build_trial_report(spec, {"gpu": [summary("gpu", gpu_step)], "trn2": [summary("trn2", trn2_step)]},
                              {"gpu": gpu_cost, "trn2": trn2_cost, **(extra_costs or {})},
                              prices=load_price_table(overrides) if overrides else None)


def _decision(report: TrialReport) -> Decision:
    assert report.decision is not None, report.comparison.reasons
    return report.decision


def _basis(decision: Decision, basis: str) -> BasisDecision:
    return next(v for v in decision.bases if v.basis == basis)


def _priced(total: str, run: str, instance_type: str, rate: str, confidence: str = "list", **parts: str
            ) -> RunCost:
    return run_cost(total, run, price={"instance_type": instance_type, "region": "us-east-1", "hourly_usd": rate,
                                       "confidence": confidence, "table_version": "v"}, **parts)


def test_one_time_costs_lead_the_headline_when_a_cheaper_step_has_not_paid_them_back() -> None:
    """Trainium2's five-part total is 3x the GPU's (compile $15, reruns $10, training $5 against the GPU's $10),
    while its steady-state step costs 0.8x: the trial is not cheaper, Trainium2 pays back only after the break-even
    point, and the headline says so first."""
    trn2 = run_cost("30", "trn2", effective_training_usd="5", compile_usd="15", failed_reruns_usd="10")
    report = _report(run_cost("10"), trn2)
    decision = _decision(report)
    assert report.comparison.verdict == "trn2_viable_pays_back"
    assert report.comparison.headline.startswith("Trainium2 pays back after ")
    assert "this trial cost 3.00x the GPU's ($30.00 vs $10.00, one-time costs included)" in report.comparison.headline
    assert "compile $15.00, reruns $10.00" in report.comparison.headline
    assert decision.trn2.one_time.total_usd == "25.000000" and decision.trn2.recurring_usd == "5.000000"
    assert decision.gpu.one_time.total_usd == "0.000000"
    primary = primary_of(decision)
    assert primary.trial_ratio == 3.0 and primary.break_even is not None and not primary.break_even.already
    assert decision.trn2.per_step_usd is not None and decision.gpu.per_step_usd is not None
    saved = Decimal(decision.gpu.per_step_usd) - Decimal(decision.trn2.per_step_usd)
    assert math.isclose(primary.break_even.steps, Decimal(25) / saved, rel_tol=1e-4)
    # Each repeat of this trial saves the recurring difference ($10 - $5): five repeats pay the $25 back.
    assert primary.break_even.trials == 5.0


def test_a_trial_already_past_its_break_even_is_cheaper_and_one_never_paid_back_is_not() -> None:
    cheaper = _report(run_cost("10"), run_cost("9", "trn2", effective_training_usd="8", compile_usd="1"))
    assert cheaper.comparison.verdict == "trn2_viable_cheaper"
    assert cheaper.comparison.headline.startswith("Trainium2 is cheaper: this trial cost 0.90x the GPU's")
    assert primary_of(_decision(cheaper)).break_even is not None
    dearer = _report(run_cost("10"), run_cost("20", "trn2", effective_training_usd="12", compile_usd="8"),
                     trn2_step=0.13)
    assert dearer.comparison.verdict == "trn2_viable_not_cheaper"
    assert "its one-time costs never pay back" in dearer.comparison.headline
    assert primary_of(_decision(dearer)).break_even is None


@pytest.mark.parametrize("gpu_compile", ["2", "0"])
def test_a_dearer_trial_with_no_more_one_time_cost_is_not_cheaper_never_a_payback(gpu_compile: str) -> None:
    """Trainium2's step costs 0.8x, it paid no more once than the GPU (nothing, against the GPU's compile of $2 or
    $0), yet the trial cost $11 against $10: its recurring costs (queueing, environment start) made it dearer.
    Nothing is paid back, so no "pays back after 0 steps because of $-2.00 more": not cheaper outright, no
    break-even point."""
    gpu = run_cost("10", effective_training_usd=str(10 - int(gpu_compile)), compile_usd=gpu_compile)
    trn2 = run_cost("11", "trn2", effective_training_usd="5", queue_environment_usd="6")
    report = _report(gpu, trn2)
    primary = primary_of(_decision(report))
    headline = report.comparison.headline
    assert report.comparison.verdict == primary.answer == "trn2_viable_not_cheaper"
    assert primary.break_even is None
    assert "pay" not in headline and "$-" not in headline and "after 0 steps" not in headline
    assert headline.startswith("Trainium2 is not cheaper: this trial cost 1.10x the GPU's ($11.00 vs $10.00")
    assert f"no more in one-time costs than the GPU ($0.00 vs ${gpu_compile}.00)" in headline
    assert f"but more in recurring costs ($11.00 vs ${10 - int(gpu_compile)}.00: " in headline
    assert "| **not cheaper** |" in render_markdown(report)


@pytest.mark.parametrize("trn2_rate", ["0", "10"])
def test_a_basis_that_prices_the_gpu_at_zero_gives_no_answer_and_says_why(trn2_rate: str) -> None:
    """A Capacity Block rate of 0 for the GPU's instance (valid in a price override) gives no Trainium2/GPU ratio:
    building the report does not raise (it raised decimal's DivisionUndefined or DivisionByZero), that basis has
    no answer and says why in words, and the other bases still answer."""
    gpu = _priced("55.04", "gpu", "p5.48xlarge", "55.04")
    trn2 = _priced("35.763", "trn2", "trn2.48xlarge", "35.763")
    overrides = {"instances": {"us-east-1": {"p5.48xlarge": {"capacity_block_hourly_usd": "0"},
                                             "trn2.48xlarge": {"capacity_block_hourly_usd": trn2_rate}}}}
    report = _report(gpu, trn2, overrides=overrides)
    decision = _decision(report)
    block = _basis(decision, "capacity_block")
    assert block.answer is None and block.trial_ratio is None and block.break_even is None
    assert block.rates == {"p5.48xlarge": "0", "trn2.48xlarge": trn2_rate}
    assert block.sentence == ("no answer at the Capacity Block: it prices the GPU's p5.48xlarge at $0/h, so the GPU "
                              "side costs nothing there and no Trainium2/GPU cost ratio exists")
    assert _basis(decision, "on_demand").answer == report.comparison.verdict == "trn2_viable_cheaper"
    assert not decision.flips
    markdown = render_markdown(report)
    assert "| **no ratio** |" in markdown and f"- Capacity Block: {block.sentence}" in markdown
    assert block.sentence in unescape(render_html(report))


def test_the_warm_up_compile_stage_and_the_gpu_fallback_are_one_time_costs_of_the_trainium2_side() -> None:
    stage = run_cost("4", "trn2-compile", effective_training_usd="0", compile_usd="4")
    report = _report(run_cost("10"), run_cost("6", "trn2", effective_training_usd="6"),
                     extra_costs={"trn2-compile": stage})
    decision = _decision(report)
    assert decision.trn2.runs == ["trn2", "trn2-compile"]
    assert decision.trn2.one_time.warm_up_stage_usd == "4.000000" and decision.trn2.total_usd == "10.000000"


def test_each_price_basis_gets_its_answer_and_the_headline_says_when_it_flips() -> None:
    """At on-demand rates Trainium2 (trn2.48xlarge 35.763 USD/h) is cheaper per step than the GPU (p5.48xlarge
    55.04 USD/h) at 0.8x the step time; at these Capacity Block rates it is dearer: the answer flips, and the
    headline says so. A Savings Plan rate appears where the table has one."""
    gpu = _priced("55.04", "gpu", "p5.48xlarge", "55.04")
    trn2 = _priced("35.763", "trn2", "trn2.48xlarge", "35.763")
    overrides = {"instances": {"us-east-1": {
        "p5.48xlarge": {"capacity_block_hourly_usd": "20", "savings_plan_hourly_usd": "40"},
        "trn2.48xlarge": {"capacity_block_hourly_usd": "40", "savings_plan_hourly_usd": "25"}}}}
    report = _report(gpu, trn2, overrides=overrides)
    decision = _decision(report)
    assert [v.basis for v in decision.bases] == ["on_demand", "capacity_block", "savings_plan"]
    assert _basis(decision, "on_demand").answer == "trn2_viable_cheaper"
    block = _basis(decision, "capacity_block")
    assert block.answer == "trn2_viable_not_cheaper" and block.rates == {"p5.48xlarge": "20", "trn2.48xlarge": "40"}
    assert block.steady_cost_ratio is not None and block.steady_cost_ratio.low > 1
    assert _basis(decision, "savings_plan").answer == "trn2_viable_cheaper"
    assert decision.flips
    assert report.comparison.verdict == "trn2_viable_cheaper"  # the basis the runs were billed at
    assert report.comparison.headline.endswith(
        "The answer changes with the price basis: cheaper at on-demand list price; not cheaper at Capacity Block; "
        "cheaper at Savings Plan.")
    assert "Capacity Block" in render_markdown(report)


def test_a_negotiated_rate_is_its_own_basis_beside_the_on_demand_list_price() -> None:
    """Runs billed at an override rate are decided at that rate first; the shipped list price is the on-demand
    basis. Without a Capacity Block rate in the table, that basis names what to add."""
    gpu = _priced("20", "gpu", "p5.48xlarge", "20", confidence="override")
    trn2 = _priced("35.763", "trn2", "trn2.48xlarge", "35.763")
    report = _report(gpu, trn2, overrides={"instances": {"us-east-1": {"p5.48xlarge": "20"}}})
    decision = _decision(report)
    assert decision.primary == "override"
    assert [v.basis for v in decision.bases] == ["on_demand", "override", "capacity_block"]
    assert _basis(decision, "on_demand").rates["p5.48xlarge"] == "55.04"
    assert _basis(decision, "override").rates["p5.48xlarge"] == "20"
    missing = _basis(decision, "capacity_block")
    assert missing.answer is None and "capacity_block_hourly_usd" in missing.sentence
    # (0.08 x 35.763) / (0.1 x 20) = 1.43 per step at the negotiated GPU rate; 0.52 at the list price.
    assert _basis(decision, "override").answer == "trn2_viable_not_cheaper"
    assert _basis(decision, "on_demand").answer == "trn2_viable_cheaper"
    assert report.comparison.verdict == "trn2_viable_not_cheaper" and decision.flips
    assert "not cheaper at negotiated rates (price overrides)" in report.comparison.headline


def test_a_trial_that_failed_a_check_or_ran_on_stand_ins_has_no_decision() -> None:
    data = json.loads(EXAMPLE.read_text())
    spec = parse_trial(data)
    one_track = build_trial_report(spec, {"gpu": [run_summary("gpu")]}, {"gpu": run_cost("10")})
    assert one_track.decision is None and "decision" not in one_track.model_dump(mode="json")


def test_the_decision_sits_under_the_headline_in_markdown_and_html() -> None:
    trn2 = run_cost("30", "trn2", effective_training_usd="5", compile_usd="15", failed_reruns_usd="10")
    report = _report(run_cost("10"), trn2)
    markdown = render_markdown(report)
    assert markdown.index(report.comparison.headline) < markdown.index("## Decision: the whole trial")
    assert "| Trainium2 side | trn2 | $15.00 | $0.00 | $10.00 | $25.00 | $5.00 |" in markdown
    assert "**pays back**" in markdown
    decision = markdown[markdown.index("## Decision"):markdown.index("## ", markdown.index("## Decision") + 3)]
    assert "e-0" not in decision  # a cost per step of $0.00002 is written out, never in exponent form
    html = render_html(report)
    assert html.index("Decision: the whole trial") < html.index("Why: trn2_viable_pays_back")
    assert "<strong>$25.00</strong>" in html
