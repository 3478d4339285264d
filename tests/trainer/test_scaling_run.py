"""A scaling run (``gpu-n1``: the gpu track of a trial declaring ``nodes: [1, 2]``, trained at 1 node) trains at its
own node count with the main run's effective batch, records its own layout, and never takes the track's planned
fault."""

from __future__ import annotations

import os
from typing import Any

import pytest
from trainer import FAILURE_EXIT_CODE, FAULT_EXIT_CODE, storage
from trainer.cli import _launch, main
from trainer.config import ConfigError, RunConfig
from trainer.faults import FaultPlan

from lambdas.domain.trial.rules import parse_trial
from tests.trainer.helpers import attempt, losses

STEPS = 6
# One GPU per node: the main run (2 nodes) has data_parallel 2, the scaling run gpu-n1 data_parallel 1.
TRACKS = {"gpu": {"instance_type": "g6e.xlarge", "nodes": [1, 2], "tensor_parallel": 1, "pipeline_parallel": 1}}
FAULT = {"track": "gpu", "at_step": 3, "mode": "retryable"}


def scaling_spec(write_spec: Any) -> str:
    return str(write_spec(max_steps=STEPS, checkpoint_interval_steps=2, tracks=TRACKS, fault_injection=FAULT,
                          evaluation={"interval_steps": STEPS, "prompts": [], "max_new_tokens": 1}))


@pytest.mark.slow
def test_a_scaling_run_trains_at_its_node_count_without_the_tracks_fault(write_spec: Any, tmp_path: Any) -> None:
    spec = scaling_spec(write_spec)
    code, summary = attempt(spec, str(tmp_path / "gpu-n1"), run_name="gpu-n1")
    assert code == 0 and summary["status"] == "succeeded" and summary["global_step"] == STEPS
    assert (summary["run"], summary["track"]) == ("gpu-n1", "gpu")
    layout = summary["layout"]
    assert (layout["nodes"], layout["data_parallel"], layout["world_size_run"]) == (1, 1, 1)
    assert summary["fault"] == {"injected_at_step": None, "mode": None, "fired": False}

    # The main run is the 2-node one: the fault is its own, and its effective batch is the scaling run's (twice the
    # data-parallel ranks, half the gradient accumulation), so the steps before the fault lose the same.
    main_code, main_summary = attempt(spec, str(tmp_path / "gpu"), run_name="gpu")
    assert main_code == FAULT_EXIT_CODE and main_summary["fault"]["fired"] is True
    main_layout = main_summary["layout"]
    assert (main_layout["nodes"], main_layout["data_parallel"]) == (2, 2)
    assert main_layout["gradient_accumulation_steps"] * 2 == layout["gradient_accumulation_steps"]
    assert main_summary["samples_consumed"] / 3 == summary["samples_consumed"] / STEPS
    scaled, full = losses(summary), losses(main_summary)
    for step in (1, 2, 3):
        assert scaled[step] == pytest.approx(full[step], abs=1e-5), (step, scaled[step], full[step])


def test_the_fault_plan_targets_the_main_run_of_its_track_only(write_spec: Any) -> None:
    spec = parse_trial(storage.read_text(scaling_spec(write_spec)), allow_local_paths=True)
    assert FaultPlan.for_run(spec, "gpu", 1, "gpu").fires(3)
    assert not FaultPlan.for_run(spec, "gpu", 1, "gpu-n1").fires(3)
    assert FaultPlan.for_run(spec, "gpu", 1, "gpu-n1") == FaultPlan(None, None, False)


def test_a_scaling_run_is_named_by_its_run_dir_and_must_be_of_the_track() -> None:
    cfg = RunConfig.resolve(spec="s.json", track="gpu", run_dir="s3://b/trials/t-1/gpu-n1/", env={})
    assert cfg.run == "gpu-n1" and cfg.run_dir == "s3://b/trials/t-1/gpu-n1"
    assert RunConfig.resolve(spec="s.json", track="trn2", run_dir="/x", run="trn2-n2", env={}).run == "trn2-n2"
    with pytest.raises(ConfigError, match="--run gpu-n1 trains on the gpu track, not trn2"):
        RunConfig.resolve(spec="s.json", track="trn2", run_dir="/x/trials/t-1/gpu-n1", env={})
    with pytest.raises(ConfigError, match="or a scaling run"):
        RunConfig.resolve(spec="s.json", track="gpu", run_dir="/x", run="gpu-n0", env={})


def test_the_run_flag_takes_a_scaling_run(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", "--spec", "s.json", "--track", "gpu", "--run-dir", "/x", "--run", "gpu-n0"])
    assert exited.value.code == 2 and "is not a run" in capsys.readouterr().err
    # A valid scaling run gets past the flags (the spec it names is then missing).
    assert main(["run", "--spec", "s.json", "--track", "trn2", "--run-dir", "/x", "--run", "gpu-n1"]) == 2
    assert "trains on the gpu track, not trn2" in capsys.readouterr().err


class _Exec(Exception):
    pass


def test_launch_forms_the_scaling_runs_process_group_for_its_own_node_count(
        write_spec: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Batch starts gpu-n1 as a single-node job: its launch plan expects 1 node, where the main run's expects 2."""
    spec = scaling_spec(write_spec)
    started: list[list[str]] = []

    def execvpe(file: str, argv: list[str], env: dict[str, str]) -> None:
        started.append(argv)
        assert env["DUALTRACK_RUN"] == "gpu-n1"
        raise _Exec

    monkeypatch.setattr(os, "execvpe", execvpe)
    for name in ("AWS_BATCH_JOB_NUM_NODES", "AWS_BATCH_JOB_NODE_INDEX", "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    scaling = RunConfig(spec_uri=spec, track="gpu", run_dir=str(tmp_path / "gpu-n1"), backend="cpu", run="gpu-n1")
    with pytest.raises(_Exec):
        _launch(scaling, [])
    assert started and started[0][-1] == "run"  # one rank, exec'd: no torchrun for a single node

    main_run = RunConfig(spec_uri=spec, track="gpu", run_dir=str(tmp_path / "gpu"), backend="cpu", run="gpu")
    assert _launch(main_run, []) == FAILURE_EXIT_CODE
    assert "the trial declares 2 node(s) but Batch started 1" in capsys.readouterr().err
