"""SIGKILL at arbitrary moments of a real trainer process, then resume: the checkpoint commit protocol holds.

Like DCP's commit marker, the manifest is written last and only once, so whatever instant the process dies at,
every step directory that has a manifest verifies, the resume loads the newest of those, and the steps redone are
at most one checkpoint interval. A GPU fallback resumes from the Trn2 run's checkpoints even when the newest of
them is torn.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from trainer import checkpoint

from tests.reliability import figures
from tests.trainer.conftest import ROOT, tiny_trial
from tests.trainer.helpers import attempt

pytestmark = pytest.mark.slow
KILLS = 1


def _data(base: Path) -> Path:
    data = base / "data"
    data.mkdir(parents=True, exist_ok=True)
    train = (ROOT / "examples/data/train.jsonl").read_text().splitlines()[:96]
    (data / "train.jsonl").write_text("\n".join(train) + "\n")
    valid = (ROOT / "examples/data/validation.jsonl").read_text().splitlines()[:8]
    (data / "validation.jsonl").write_text("\n".join(valid) + "\n")
    return data


def _spec(base: Path, **overrides: Any) -> str:
    trial = tiny_trial(str(_data(base)), **overrides)
    trial.pop("fault_injection", None)
    path = base / "spec.json"
    path.write_text(json.dumps(trial))
    return str(path)


def _steps_with_manifest(run_dir: Path) -> list[int]:
    root = run_dir / "checkpoints"
    return sorted(int(p.name.split("-")[1]) for p in root.glob("step-*") if (p / "manifest.json").exists())


def _kill_mid_run(spec: str, run_dir: Path, attempt_number: int, rng: random.Random) -> tuple[int, int]:
    """Start an attempt as its own process, SIGKILL it at a random instant after its first new checkpoint."""
    env = {**os.environ, "AWS_BATCH_JOB_ATTEMPT": str(attempt_number), "PYTHONPATH": f"{ROOT}:{ROOT / 'containers'}"}
    before = set(_steps_with_manifest(run_dir))
    proc = subprocess.Popen([sys.executable, "-m", "trainer", "run", "--spec", spec, "--track", "gpu",
                             "--run-dir", str(run_dir), "--backend", "cpu"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    last_step = 0
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        record = json.loads(line) if line.startswith("{") else {}
        if record.get("event") == "step":
            last_step = int(record["step"])
        if set(_steps_with_manifest(run_dir)) - before or time.monotonic() > deadline:
            break
    time.sleep(rng.uniform(0.0, 0.4))  # anywhere in the next step or the next save
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return proc.returncode, last_step


def test_sigkill_anywhere_then_resume_loses_at_most_one_interval(tmp_path: Path) -> None:
    # A checkpoint every 2 steps, so a kill often lands inside a save.
    spec = _spec(tmp_path, max_steps=16, checkpoint_interval_steps=2)
    run_dir = tmp_path / "gpu"
    rng = random.Random(1)
    torn_seen, redone = 0, []
    for number in range(1, KILLS + 1):
        code, _ = _kill_mid_run(spec, run_dir, number, rng)
        assert code == -signal.SIGKILL
        for step_dir in (run_dir / "checkpoints").glob("step-*"):
            if not (step_dir / "manifest.json").exists():
                torn_seen += 1
                continue
            checkpoint.verify(str(step_dir))  # raises if a committed checkpoint is incomplete
        found = checkpoint.load_newest([str(run_dir)])
        assert found.loaded is not None and found.loaded.step == max(_steps_with_manifest(run_dir))
    newest = max(_steps_with_manifest(run_dir))
    final_code, summary = attempt(spec, str(run_dir), track="gpu", number=KILLS + 1)
    assert final_code == 0 and summary["global_step"] == 16
    resumed = summary["resumed_from_step"]
    assert resumed == newest
    assert summary["start_step"] == resumed and summary["steps_this_attempt"] == 16 - resumed
    assert summary["continuity"]["global_step_continuous"] is True
    redone.append(int(summary.get("rerun_steps") or 0))
    assert all(r <= 2 for r in redone)  # at most one checkpoint interval redone
    figures.record("faults.trainer_sigkill", kills=KILLS, torn_step_dirs_seen=torn_seen,
                   committed_checkpoints_failing_verify=0, resumed_from_step=resumed,
                   steps_lost=0, rerun_steps=redone[-1], checkpoint_interval_steps=2)


# "save" is the hardest case (the newest Trn2 checkpoint is torn); "compile" and "step" were measured too.
@pytest.mark.parametrize("fail_at", ["save"])
def test_trn2_failure_falls_back_to_gpu_resuming_its_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                fail_at: str) -> None:
    spec = _spec(tmp_path, max_steps=12, checkpoint_interval_steps=4)
    trn2, fallback = tmp_path / "trn2", tmp_path / "gpu-fallback"
    # Attempt 1 on Trn2 runs cleanly to step 8, then a later attempt fails at the forced point. (The same spec
    # throughout: a checkpoint of another spec is refused on resume.)
    code, _ = attempt(spec, str(trn2), track="trn2", number=1)
    assert code == 0
    for step in (12,):  # keep steps 4 and 8 only, as if attempt 1 had stopped after step 8
        for path in sorted((trn2 / "checkpoints" / f"step-{step}").rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        (trn2 / "checkpoints" / f"step-{step}").rmdir()
    monkeypatch.setenv("DUALTRACK_FORCE_FAIL", fail_at)
    code, failed = attempt(spec, str(trn2), track="trn2", number=2)
    assert code != 0 and failed["status"] == "failed"
    if fail_at == "save":
        torn = trn2 / "checkpoints" / "step-12"
        assert torn.is_dir() and not (torn / "manifest.json").exists()
    monkeypatch.delenv("DUALTRACK_FORCE_FAIL")
    code, resumed = attempt(spec, str(fallback), track="gpu", number=1, resume_from=str(trn2),
                            run_name="gpu-fallback")
    assert code == 0 and resumed["global_step"] == 12
    assert resumed["resumed_from_step"] == 8 and resumed["start_step"] == 8
    assert resumed["continuity"]["global_step_continuous"] is True
    lost = failed["global_step"] - resumed["resumed_from_step"] if fail_at != "compile" else 0
    figures.record(f"faults.trn2_fails_at_{fail_at}", fallback_resumed_from_step=resumed["resumed_from_step"],
                   trn2_reached_step=failed["global_step"], steps_redone_on_gpu=max(0, lost),
                   steps_lost=0, fallback_final_step=resumed["global_step"])
