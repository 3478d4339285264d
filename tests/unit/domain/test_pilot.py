"""A Trainium2 pilot (``lambdas.domain.report.pilot``): a trial with a trn2 run and no GPU track is judged against the
team's GPU baseline, every figure marked as measured on the trn2 run or read from the baseline."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from lambdas.domain.evidence.baseline import parse_baseline
from lambdas.domain.evidence.run_summary import RunSummary
from lambdas.domain.report.build import build_trial_report
from lambdas.domain.report.model import BaselineUncompared, PilotComparison, TrialReport
from lambdas.domain.report.pilot import NO_INSTANCE, NO_STEP_TIME, PILOT_CHECK
from lambdas.domain.trial.rules import parse_trial
from lambdas.domain.trial.spec import TrialSpec
from tests.builders import run_cost, run_summary

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "trial-llama31-8b-lora.json"
URI = "s3://example-datasets/baselines/llama-gpu.csv"
# The GPU run's losses at the steps the trn2 run logs (1, 2, 3 and the eval at 100), and its per-step time.
MATCHING = b"step,loss,eval_loss,step_time_s\n1,2.5,,0.1\n2,2.0,,0.1\n3,1.2,,0.1\n100,,2.2,\n"


def pilot_spec(gpu_declared: bool = True) -> TrialSpec:
    """A trn2_trial: a trn2 track and the baseline; the GPU track's declaration kept only to name the baseline's
    instance (no gpu run is reported)."""
    data = json.loads(EXAMPLE.read_text())
    data.pop("failure_recovery")  # no run fails here: recovery would not be evidenced
    if not gpu_declared:
        data["tracks"].pop("gpu")
    return parse_trial({**data, "baseline_logs_uri": URI})


def trn2_summary(**over: Any) -> RunSummary:
    times = [round(0.08 + 0.004 * ((i * 7919) % 11 - 5) / 5, 6) for i in range(40)]
    return run_summary("trn2", **{
        "tokens_this_attempt": 2_000_000,
        "phases": {"environment_s": 10.0, "compile_s": 5.0, "train_s": 100.0},
        "loss": {"initial": 2.5, "final": 1.21, "per_step": [[1, 2.5], [2, 2.0], [3, 1.21]],
                 "eval": [{"step": 100, "loss": 2.2}, {"step": 1000, "loss": 1.26}]},
        "validation_loss": 1.26,
        "compile": {"seconds": 5.0, "cache": "miss"},
        "throughput": {"tokens_per_s": 1000.0, "step_time_s": 0.08, "samples_per_s": 10.0, "step_times_s": times},
        "memory_peak_mib": 20480.0,
        "resumed_from_step": 2, "continuity": {"global_step_continuous": True, "loss_continuous": True},
        **over,
    })


def pilot_report(baseline: bytes | str | None, spec: TrialSpec | None = None, **over: Any) -> TrialReport:
    read = parse_baseline(baseline) if isinstance(baseline, bytes) else baseline
    return build_trial_report(spec or pilot_spec(), {"trn2": [trn2_summary(**over)]},
                              {"trn2": run_cost("8.00", run="trn2")}, baseline=read)


def pilot_of(report: TrialReport) -> PilotComparison:
    assert report.pilot is not None
    return report.pilot


def test_a_pilot_whose_losses_match_the_baseline_gets_a_verdict_with_every_figure_sourced() -> None:
    report = pilot_report(MATCHING)
    pilot = pilot_of(report)
    assert report.comparison.verdict == "trn2_viable_cheaper", report.comparison.reasons
    assert not any("both a gpu and a trn2 run" in reason for reason in report.comparison.reasons)
    assert report.comparison.headline.startswith("Trainium2 is cheaper: all acceptance checks pass against the GPU "
                                                 "baseline; trn2 costs")
    check = next(c for c in report.acceptance if c.check == PILOT_CHECK)
    assert check.status == "pass" and check.detail.startswith(f"csv at {URI}: ")
    assert isinstance(report.baseline, BaselineUncompared)  # no gpu track checked against it
    assert pilot.loss.reproduced is True and pilot.loss.shared_train_steps == 3 and pilot.loss.shared_eval_steps == 1
    assert {(row.trn2.source, row.baseline.source) for row in pilot.figures} == {("measured", "from_baseline")}
    rows = {(row.figure, row.unit): row for row in pilot.figures}
    step = rows["step time", "s"]
    assert step.baseline.value == 0.1 and step.baseline.interval is None
    assert step.trn2.interval is not None and step.trn2.value == step.trn2.interval.estimate
    assert rows["peak memory", "MiB"].trn2.value == 20480.0
    assert rows["peak memory", "MiB"].baseline.note == "not in the baseline's logs"
    cost = rows["cost per effective step", "USD"]
    assert cost.baseline.value is not None and "p5.48xlarge" in cost.baseline.note
    assert pilot.cost_ratio is not None and pilot.cost_ratio.high < 1
    assert "only the trn2 side's interval counts" in pilot.rule
    # The section is part of the stored report and reads back; a two-track report has none.
    assert TrialReport.model_validate_json(report.model_dump_json()).pilot == pilot
    assert "pilot" in report.model_dump(mode="json")


def test_a_pilot_whose_losses_diverge_from_the_baseline_stays_on_gpu() -> None:
    drifted = b"step,loss,step_time_s\n1,2.5,0.1\n2,2.0,0.1\n3,1.6,0.1\n"
    report = pilot_report(drifted)
    assert report.comparison.verdict == "stay_on_gpu"
    assert report.comparison.reasons[0].startswith(f"{PILOT_CHECK}: fail (csv at {URI}: largest relative loss gap")
    assert pilot_of(report).loss.reproduced is False


def test_too_few_steps_shared_with_the_baseline_is_inconclusive() -> None:
    report = pilot_report(b"step,loss,step_time_s\n10,2.5,0.1\n20,2.0,0.1\n")
    assert report.comparison.verdict == "inconclusive"
    assert report.comparison.reasons[0].startswith(f"{PILOT_CHECK}: not_evidenced")


def test_a_baseline_without_step_time_or_throughput_is_inconclusive_naming_it() -> None:
    report = pilot_report(b"step,loss,eval_loss\n1,2.5,\n2,2.0,\n3,1.2,\n100,,2.2\n")
    pilot = pilot_of(report)
    assert report.comparison.verdict == "inconclusive" and pilot.cost_ratio is None
    assert NO_STEP_TIME in report.comparison.reasons[0]
    assert {row.figure: row for row in pilot.figures}["step time"].baseline.note == NO_STEP_TIME


def test_a_baseline_throughput_without_step_time_gives_the_step_time_at_the_trials_batch_shape() -> None:
    report = pilot_report(b"step,loss,tokens_per_s\n1,2.5,2621440\n2,2.0,2621440\n3,1.2,2621440\n")
    step = {row.figure: row for row in pilot_of(report).figures}["step time"].baseline
    assert step.value == 0.1  # 64 x 4096 tokens per step at 2,621,440 tokens/s
    assert "over the baseline's tokens per second" in step.note
    assert report.comparison.verdict == "trn2_viable_cheaper"


def test_without_a_declared_gpu_instance_the_baselines_cost_is_not_evidenced() -> None:
    report = pilot_report(MATCHING, pilot_spec(gpu_declared=False))
    cost = {row.figure: row for row in pilot_of(report).figures}["cost per effective step"].baseline
    assert cost.value is None and cost.note == NO_INSTANCE
    assert report.comparison.verdict == "inconclusive"
    assert NO_INSTANCE in report.comparison.reasons[0]


def test_a_declared_baseline_instance_prices_the_baseline_without_a_gpu_track() -> None:
    spec = pilot_spec(gpu_declared=False)
    declared = spec.model_copy(update={"baseline_instance_type": "p5.48xlarge", "baseline_nodes": 2})
    report = pilot_report(MATCHING, declared)
    cost = {row.figure: row for row in pilot_of(report).figures}["cost per effective step"].baseline
    assert cost.value is not None and "p5.48xlarge at 55.04 USD/h x 2 node(s): baseline_instance_type" in cost.note
    assert report.comparison.verdict == "trn2_viable_cheaper"
    # An optional field left out leaves the trial's id as it was (the hash skips absent fields).
    assert parse_trial(spec.model_dump(mode="json", exclude_none=True)).trial_id == spec.trial_id


def test_a_baseline_instance_must_be_a_gpu_type() -> None:
    data = pilot_spec(gpu_declared=False).model_dump(mode="json", exclude_none=True)
    with pytest.raises(ValueError, match=r"'trn2\.48xlarge' is not a GPU instance type; use one of: .*p5\.48xlarge"):
        parse_trial({**data, "baseline_instance_type": "trn2.48xlarge"})


def test_a_baseline_much_faster_than_trn2_is_not_cheaper() -> None:
    report = pilot_report(b"step,loss,step_time_s\n1,2.5,0.0001\n2,2.0,0.0001\n3,1.2,0.0001\n")
    assert report.comparison.verdict == "trn2_viable_not_cheaper", report.comparison.reasons
    ratio = pilot_of(report).cost_ratio
    assert ratio is not None and ratio.low > 1


def test_a_failed_trn2_run_stays_on_gpu_and_an_unread_baseline_names_the_pilot() -> None:
    failed = pilot_report(MATCHING, status="failed")
    assert failed.comparison.verdict == "stay_on_gpu"
    assert failed.comparison.reasons[0].startswith("the trn2 run ended failed")

    unread = pilot_report("could not be read (NoSuchKey: ...)")
    assert unread.pilot is None and unread.comparison.verdict == "inconclusive"
    assert unread.comparison.reasons[0].startswith("gpu track reproduces the baseline: not_evidenced")
    assert any(r.startswith("a Trainium2 pilot (a trn2 run, no gpu run) is judged against its GPU baseline")
               for r in unread.comparison.reasons)
    assert not any("both a gpu and a trn2 run" in r for r in unread.comparison.reasons)
    assert "pilot" not in unread.model_dump(mode="json")


def test_the_markdown_report_shows_the_pilot_beside_its_baseline() -> None:
    from lambdas.rendering.report_markdown import render_markdown

    text = render_markdown(pilot_report(MATCHING, pilot_spec(gpu_declared=False)))
    assert "## Trainium2 pilot against the GPU baseline" in text
    assert "this pilot has no GPU track: its trn2 run is compared with the baseline in the pilot section" in text
    assert "| figure | trn2 (measured) | GPU baseline (from_baseline) |" in text
    assert "| cost per effective step (USD) | " in text and f"- ({NO_INSTANCE}) |" in text
    assert "Cost per step, trn2 / baseline: not evidenced" in text
    assert "## Trainium2 pilot" not in render_markdown(build_trial_report(
        pilot_spec(), {"gpu": [run_summary("gpu")], "trn2": [trn2_summary()]}, {}))


def test_the_html_report_shows_the_pilot_beside_its_baseline() -> None:
    from lambdas.rendering.report_html import render_html

    html = render_html(pilot_report(MATCHING, pilot_spec(gpu_declared=False)))
    assert "<h2>Trainium2 pilot against the GPU baseline</h2>" in html
    assert "<th class=\"num\">trn2 (measured)</th>" in html and f"- ({NO_INSTANCE})".replace("'", "&#39;") in html
    assert "e-05" not in html and "e+04" not in html  # figures written out


def test_a_pilot_on_a_stand_in_gives_no_verdict_and_says_cheaper_nowhere() -> None:
    """The figures that make a pilot on Trainium2 cheaper than its baseline, measured on a stand-in, give the pilot
    no verdict: its reasons, its rule and every rendering of the report leave cheaper, not cheaper and pays back
    unsaid, while the losses are still checked against the baseline and the cost per step is still shown."""
    from lambdas.domain.report.pilot import STAND_IN_RULE
    from lambdas.rendering.report_html import render_html
    from lambdas.rendering.report_markdown import render_markdown

    assert pilot_of(pilot_report(MATCHING)).verdict == "trn2_viable_cheaper"  # the same figures on Trainium2
    report = pilot_report(MATCHING, backend="compiled", stand_in=True)
    pilot = pilot_of(report)
    assert pilot.verdict is None and pilot.rule == STAND_IN_RULE and pilot.cost_ratio is not None
    assert report.comparison.verdict is None and report.comparison.rehearsal == "passed"
    assert next(c for c in report.acceptance if c.check == PILOT_CHECK).status == "pass"
    for text in (report.model_dump_json(), render_markdown(report), render_html(report)):
        assert not re.findall(r"cheaper|pays? back", text, flags=re.IGNORECASE)
