"""End to end: the local rehearsal runs the synthesized workflow, the real handlers and the real trainer.

Five rehearsals of a small variant of examples/trial-rehearsal.json share one state directory:
1. fresh: the cache is cold, so the warm-up compile stage compiles first and the training job hits; both tracks
   succeed; the faulted Trainium2 track retries, resumes and pays rerun cost;
2. the same trial again: the cache is warm, no compile stage runs, and the training job hits;
3. the Trainium2 track broken on purpose: the workflow runs the GPU fallback from its checkpoints;
4. the Trainium2 queue without capacity: its time limit cancels the waiting job and the fallback runs;
5. another graph (a new key) whose compile fails: the compile stage fails fast to the GPU fallback.
"""

from __future__ import annotations

import io
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from dualtrack.local.progress import Progress
from dualtrack.local.rehearsal import Rehearsal, RehearsalOptions, RehearsalResult
from lambdas.domain.trial.rules import parse_trial
from lambdas.domain.trial.spec import TrialSpec

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

ROOT = Path(__file__).resolve().parents[2]
COMPONENTS = ("effective_training_usd", "compile_usd", "failed_reruns_usd", "checkpoint_storage_usd",
              "queue_environment_usd")


def small_trial(fault_mode: str | None = None, sequence_length: int = 32) -> TrialSpec:
    doc = json.loads((ROOT / "examples" / "trial-rehearsal.json").read_text())
    doc.update(name="e2e-rehearsal", max_steps=12, checkpoint_interval_steps=4, sequence_length=sequence_length)
    doc["evaluation"].update(interval_steps=4, max_new_tokens=4, prompts=doc["evaluation"]["prompts"][:1])
    doc["fault_injection"].update(at_step=6, **({"mode": fault_mode} if fault_mode else {}))
    for key in ("train_uri", "validation_uri"):
        doc["data"][key] = str(ROOT / doc["data"][key])
    return parse_trial(doc, allow_local_paths=True)


def rehearse(out: Path, fault_mode: str | None = None, sequence_length: int = 32,
             **options: Any) -> tuple[RehearsalResult, str]:
    stream = io.StringIO()
    spec = small_trial(fault_mode, sequence_length)
    result = Rehearsal(spec, RehearsalOptions(out=out, timeout_s=1200, state_dir=out / "plane-state", **options),
                       progress=Progress(stream, max_steps=spec.max_steps)).run()
    return result, stream.getvalue()


@pytest.fixture(scope="module")
def rehearsals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[RehearsalResult, str]]:
    out = tmp_path_factory.mktemp("rehearsal")
    runs = {"first": rehearse(out, fresh=True)}
    runs["second"] = rehearse(out)
    runs["fallback"] = rehearse(out, fault_mode="permanent")  # trn2 fails for good after its step-4 checkpoint
    runs["no_capacity"] = rehearse(out, no_capacity="trn2")
    runs["compile_fails"] = rehearse(out, sequence_length=24, fail_trn2="compile")  # a new graph: a cold key
    # Every run kept its own reports; `latest` names the last.
    dirs = [result.out for result, _ in runs.values()]
    assert len(set(dirs)) == 5 and all((d / "report.json").is_file() for d in dirs)
    assert (out / "latest").resolve() == dirs[-1].resolve()
    return runs


def _report(result: RehearsalResult) -> dict[str, Any]:
    assert result.report is not None, f"no report written under {result.out}"
    return result.report


def _usd(value: Any) -> Decimal:
    return Decimal(str(value))


def test_both_tracks_succeed_and_write_every_output(rehearsals: dict[str, tuple[RehearsalResult, str]]) -> None:
    result, printed = rehearsals["first"]
    assert result.status == "SUCCEEDED", printed
    tracks = _report(result)["tracks"]
    assert tracks["gpu"]["status"] == tracks["trn2"]["status"] == "succeeded"
    assert tracks["gpu"]["steps_completed"] == tracks["trn2"]["steps_completed"] == 12
    assert tracks["trn2"]["stand_in"] is True  # the compiled stand-in on a machine without Neuron devices
    for name in ("report.json", "report.md", "report.html", "ledger.json", "execution-history.json"):
        assert (result.out / name).stat().st_size > 0, name
    assert "-> RunTracks" in printed and "fault injected after step 6" in printed
    # The console shows the rehearsal's own progress; what the emulated plane prints goes to plane.log.
    for noise in ('"_aws"', "Traceback", "Warning:", "moto.", "botocore"):
        assert noise not in printed, noise
    # ... and holds no error or warning: what AWS would not log (an IsPresent probe, an empty metric set) is left out.
    plane_log = (result.out / "plane.log").read_text()
    assert not [line for line in plane_log.splitlines() if " ERROR " in line or " WARNING " in line], plane_log
    # Every job wrote with its own run's credentials (the writer role, tagged by the credentials function), and
    # nothing it did was outside them.
    assert {run for trial, run in result.write_sessions if trial == result.trial_id} == {"gpu", "trn2",
                                                                                       "trn2-compile"}
    assert result.access_denied == []


def test_faulted_track_resumed_with_continuity_and_rerun_cost(
        rehearsals: dict[str, tuple[RehearsalResult, str]]) -> None:
    tracks = _report(rehearsals["first"][0])["tracks"]
    resume = tracks["trn2"]["resume"]
    assert resume["injected_at_step"] == 6
    assert resume["resumed_from_step"] == 4
    assert resume["rerun_steps"] == 2
    assert resume["global_step_continuous"] is True
    assert resume["loss_continuous"] is True
    assert tracks["trn2"]["attempts"] == 2
    assert _usd(tracks["trn2"]["cost"]["failed_reruns_usd"]) > 0
    assert tracks["gpu"]["attempts"] == 1
    assert _usd(tracks["gpu"]["cost"]["failed_reruns_usd"]) == 0


def test_cost_components_sum_to_the_total(rehearsals: dict[str, tuple[RehearsalResult, str]]) -> None:
    for name in ("first", "second", "fallback"):
        for run, track in _report(rehearsals[name][0])["tracks"].items():
            cost = track["cost"]
            assert sum(_usd(cost[c]) for c in COMPONENTS) == _usd(cost["total_usd"]), (name, run)


def test_a_cold_key_runs_the_warm_up_compile_stage_and_training_starts_warm(
        rehearsals: dict[str, tuple[RehearsalResult, str]]) -> None:
    result, printed = rehearsals["first"]
    report = _report(result)
    stage, trn2 = report["compile"]["stage"], report["tracks"]["trn2"]["compile"]
    assert stage["status"] == "succeeded" and stage["cache_by_attempt"] == ["miss"], stage
    assert "-> SubmitTrn2CompileJob" in printed and "warm-up compile stage: 3 steps compiled" in printed
    # The training job (and its retry) found every graph the stage compiled.
    assert trn2["cache_by_attempt"] == ["hit", "hit"]
    assert trn2["first_compile_s"] < stage["compile_s"]
    # The stage's cost is compile, in the trial's total, and the report says how it is booked.
    assert _usd(report["cost"]["by_run"]["trn2-compile"]["compile_usd"]) > 0
    assert _usd(report["cost"]["by_run"]["trn2-compile"]["effective_training_usd"]) == 0
    assert sum(_usd(c["total_usd"]) for c in report["cost"]["by_run"].values()) == _usd(
        report["cost"]["trial"]["total_usd"])
    assert stage["booking"]["shared"] is False
    assert (report["compile"]["hits"], report["compile"]["lookups"]) == (2, 3)


def test_a_warm_key_skips_the_stage(
        rehearsals: dict[str, tuple[RehearsalResult, str]]) -> None:
    result, printed = rehearsals["second"]
    report = _report(result)
    assert report["compile"]["stage"] is None and "SubmitTrn2CompileJob" not in printed
    compile_view = report["tracks"]["trn2"]["compile"]
    # Warm from the start, from the cache the first rehearsal left in the registry.
    assert compile_view["cache_by_attempt"][0] == "hit"
    assert compile_view["first_compile_s"] < _report(rehearsals["first"][0])["compile"]["stage"]["compile_s"]


def test_a_failed_warm_up_compile_falls_back_to_the_gpu_at_once(
        rehearsals: dict[str, tuple[RehearsalResult, str]]) -> None:
    result, printed = rehearsals["compile_fails"]
    assert result.succeeded, printed[-3000:]
    report = _report(result)
    stage = report["compile"]["stage"]
    assert stage["status"] == "failed" and "DUALTRACK_FORCE_FAIL=compile" in stage["error"]
    assert "trn2" not in report["tracks"] and "SubmitTrn2Job" not in printed  # training never started on trn2
    fallback = report["tracks"]["gpu-fallback"]
    assert fallback["status"] == "succeeded" and fallback["resume"]["resumed_from_step"] is None
    # Stand-ins: no verdict. The GPU fallback took over where the trial declared resume_same_track, so the
    # rehearsal names the recovery it did not get, and the reasons say why.
    comparison = report["comparison"]
    assert comparison["verdict"] is None and comparison["rehearsal"] == "failed"
    assert comparison["headline"].startswith("Pipeline rehearsal failed: failure recovery as declared")
    assert any("did not compile in the warm-up compile stage" in reason for reason in comparison["reasons"])
    assert "DUALTRACK_FORCE_FAIL=compile" in (result.out / "report.md").read_text()


def test_broken_trn2_track_falls_back_to_gpu(rehearsals: dict[str, tuple[RehearsalResult, str]]) -> None:
    result, printed = rehearsals["fallback"]
    report = _report(result)
    tracks = report["tracks"]
    assert tracks["trn2"]["status"] in ("failed", "faulted")
    assert "gpu-fallback" in tracks, printed
    assert tracks["gpu-fallback"]["status"] == "succeeded"
    assert tracks["gpu-fallback"]["steps_completed"] == 12
    assert "-> SubmitGpuFallbackJob" in printed
    # The fallback resumed Trainium2's newest checkpoint and showed continuity on the fixed evaluation set.
    assert tracks["gpu-fallback"]["resume"]["resumed_from_step"] == 4
    assert tracks["gpu-fallback"]["resume"]["resume_eval"]["step"] == 4
    checks = {c["check"]: c for c in report["acceptance"]}
    assert checks["fallback continues trn2 on the fixed eval set"]["status"] == "pass", checks
    assert checks["fallback final outputs consistent with GPU"]["status"] in ("pass", "fail")


def test_trn2_without_capacity_is_cancelled_and_falls_back(rehearsals: dict[str, tuple[RehearsalResult, str]]) -> None:
    """A job waiting RUNNABLE is cancelled by the queue's job state time limit
    (https://docs.aws.amazon.com/batch/latest/userguide/job_stuck_in_runnable_time_limit_actions.html), so the
    workflow's Catch runs the GPU fallback instead of waiting for the workflow timeout; the report keeps "no
    capacity" apart from a training failure."""
    result, printed = rehearsals["no_capacity"]
    assert result.succeeded, printed[-3000:]
    report = _report(result)
    trn2 = report["tracks"]["trn2"]
    assert trn2["outcome"] == "no_capacity", trn2
    assert "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY" in trn2["status_reason"]
    assert report["tracks"]["gpu-fallback"]["outcome"] == "succeeded"
    assert report["tracks"]["gpu-fallback"]["steps_completed"] == 12
    assert report["comparison"]["verdict"] is None and report["comparison"]["rehearsal"] == "passed"
    assert "no capacity" in report["comparison"]["headline"] or "no_capacity" in report["comparison"]["headline"]
    assert "-> SubmitGpuFallbackJob" in printed


def test_local_run_json_prints_one_object_for_machines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from dualtrack.cli import main

    doc = small_trial().model_dump(mode="json", exclude_none=True)
    doc.update(name="e2e-json", max_steps=4, fault_injection=None)
    doc["evaluation"].update(interval_steps=4)
    trial = tmp_path / "trial.json"
    trial.write_text(json.dumps({k: v for k, v in doc.items() if v is not None}))
    monkeypatch.setenv("DUALTRACK_STATE_DIR", str(tmp_path / "plane-state"))
    code = main(["local", "run", str(trial), "--out", str(tmp_path / "out"), "--json"])
    printed = capsys.readouterr().out
    body = json.loads(printed)  # nothing but the one object
    assert code == 0 and body["status"] == "SUCCEEDED" and body["succeeded"] is True
    assert Path(body["out"]).parent == tmp_path / "out" and body["headline"]
    # A rehearsal on stand-ins answers whether the pipeline worked, never cheaper or not.
    assert body["stand_in"] is True and "verdict" not in body and body["rehearsal"] == "passed"
    assert body["headline"].startswith("Pipeline rehearsal passed")
    assert any(f.endswith("report.html") for f in body["files"])
