"""The report's parallel layout in words: nodes x devices, the world size and how its processes map onto the
devices, and the torch.distributed process group the run used (on a stand-in, also the real device's)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lambdas.domain.evidence.run_summary import RunSummary, parse_summary
from lambdas.domain.report.build import build_trial_report
from lambdas.domain.report.model import ParallelView
from lambdas.domain.trial.rules import parse_trial
from tests.builders import run_cost, run_summary

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "trial-llama31-8b-lora.json"

TWO_NODES = {"devices_per_node": 8, "nodes": 2, "tensor_parallel": 1, "pipeline_parallel": 1, "data_parallel": 16,
             "gradient_accumulation_steps": 4, "micro_batch_size": 1, "effective_batch_size": 64,
             "world_size_run": 2}


def _parallel(summary: RunSummary) -> ParallelView:
    spec = parse_trial(json.loads(EXAMPLE.read_text()))
    report = build_trial_report(spec, {summary.run: [summary]}, {summary.run: run_cost("10", run=summary.run)})
    parallel = report.tracks[summary.run].parallel
    assert parallel is not None
    return parallel


def _summary(run: str, **over: Any) -> RunSummary:
    return run_summary(run, phases={"environment_s": 10.0, "compile_s": 5.0, "train_s": 100.0},
                       tokens_this_attempt=2_000_000, **over)


def test_a_two_node_stand_in_names_its_world_size_and_both_process_groups() -> None:
    parallel = _parallel(_summary("gpu", backend="cpu", stand_in=True, layout=TWO_NODES,
                                  communication={"world_size": 2, "process_group": "gloo"}))
    assert parallel.description == ("2 nodes x 8 devices, world size 2 (one process per node on the CPU stand-in, "
                                    "simulating 16 data-parallel ranks), process group gloo (NCCL on the GPU)")


def test_the_devices_themselves_name_only_the_process_group_they_used() -> None:
    gpu = _parallel(_summary("gpu", layout={**TWO_NODES, "world_size_run": 16},
                             communication={"world_size": 16, "process_group": "nccl"}))
    assert gpu.description == "2 nodes x 8 devices, world size 16 (one process per device), process group nccl"
    trn2_layout = {**TWO_NODES, "nodes": 1, "devices_per_node": 64, "data_parallel": 64, "world_size_run": 64}
    trn2 = _parallel(_summary("trn2", layout=trn2_layout, communication={"world_size": 64, "process_group": "neuron"}))
    assert trn2.description == "1 node x 64 devices, world size 64 (one process per device), process group neuron"


def test_the_trainium2_stand_in_names_neuron_as_the_device_process_group() -> None:
    layout = {**TWO_NODES, "nodes": 1, "devices_per_node": 64, "data_parallel": 8, "tensor_parallel": 8,
              "world_size_run": 1}
    parallel = _parallel(_summary("trn2", backend="compiled", stand_in=True, layout=layout))
    assert parallel.description == (
        "1 node x 64 devices, world size 1 (a single process on the compiled CPU stand-in, simulating 8 "
        "data-parallel ranks), no process group (a single process calls no collective; neuron on Trainium2)")


def test_a_summary_written_before_the_process_group_was_recorded_says_so() -> None:
    parallel = _parallel(_summary("gpu", backend="cpu", stand_in=True, layout=TWO_NODES,
                                  communication={"world_size": 2}))
    assert parallel.communication_s == 0.0
    assert parallel.description.endswith("process group not recorded (NCCL on the GPU)")
    old = _summary("gpu", layout=TWO_NODES, communication={"world_size": 2}).model_dump(mode="json")
    old["communication"].pop("process_group")
    assert parse_summary(json.dumps(old)).communication.process_group is None


def test_the_markdown_and_html_reports_say_it_in_words() -> None:
    from lambdas.rendering.report_html import render_html
    from lambdas.rendering.report_markdown import render_markdown

    summary = _summary("gpu", backend="cpu", stand_in=True, layout=TWO_NODES,
                       communication={"world_size": 2, "process_group": "gloo"})
    spec = parse_trial(json.loads(EXAMPLE.read_text()))
    report = build_trial_report(spec, {"gpu": [summary]}, {"gpu": run_cost("10")})
    words = "world size 2 (one process per node on the CPU stand-in"
    assert f"- gpu: 2 nodes x 8 devices, {words}" in render_markdown(report)
    assert words in render_html(report)
