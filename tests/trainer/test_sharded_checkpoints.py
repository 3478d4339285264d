"""Full-parameter training with the optimizer state sharded ZeRO-1 style over the processes, checkpointed with
``torch.distributed.checkpoint``: saved by 4 processes, resumed by 2, and the same losses as one process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.conftest import ROOT

pytestmark = pytest.mark.slow

STEPS = 8
# Four GPUs on one node: data_parallel 4, run by 1, 2 or 4 CPU processes.
TRACKS = {"gpu": {"instance_type": "g6e.12xlarge", "nodes": 1, "tensor_parallel": 1, "pipeline_parallel": 1}}


def _run(spec: str, run_dir: Path, processes: int, attempt: int) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_BATCH_JOB_")}
    env.update({"PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "containers")]), "DUALTRACK_SPEC_URI": spec,
                "DUALTRACK_TRACK": "gpu", "DUALTRACK_RUN_DIR": str(run_dir), "DUALTRACK_BACKEND": "cpu",
                "AWS_BATCH_JOB_ATTEMPT": str(attempt), "DUALTRACK_IMDS_ENDPOINT": "off", "OMP_NUM_THREADS": "1"})
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
                if processes > 1 else [sys.executable])
    return subprocess.run([*launcher, "-m", "trainer", "run", "--quiet"], env=env, capture_output=True, text=True,
                          timeout=240)


def _summary(run_dir: Path, attempt: int) -> dict[str, Any]:
    return json.loads((run_dir / f"attempt-{attempt}" / "summary.json").read_text())


def _losses(summary: dict[str, Any]) -> dict[int, float]:
    return {int(p["step"]): float(p["loss"]) for p in summary["loss"]["per_step"]}


def test_sharded_optimizer_state_saved_by_four_processes_resumes_on_two(write_spec: Any, tmp_path: Path) -> None:
    common = {"method": "full", "lora": None, "max_steps": STEPS, "checkpoint_interval_steps": 4, "tracks": TRACKS,
              "evaluation": {"interval_steps": STEPS, "prompts": [], "max_new_tokens": 1}}
    reference = write_spec("reference.json", fault_injection=None, **common)
    faulted = write_spec("faulted.json", fault_injection={"track": "gpu", "at_step": 6, "mode": "retryable"},
                         **common)

    one = _run(reference, tmp_path / "one", 1, 1)
    assert one.returncode == 0, one.stderr[-3000:]
    expected = _losses(_summary(tmp_path / "one", 1))

    run_dir = tmp_path / "sharded"
    first = _run(faulted, run_dir, 4, 1)
    assert first.returncode != 0
    step_dir = run_dir / "checkpoints" / "step-4"
    manifest = json.loads((step_dir / "manifest.json").read_text())
    assert manifest["optimizer"] == {"format": "torch.distributed.checkpoint", "sharding": "zero-1",
                                     "processes": 4}
    # Each process wrote the state of the parameters it owns: four files, none of them the whole state.
    shards = {f["name"]: f["bytes"] for f in manifest["shards"] if f["name"].endswith(".distcp")}
    assert sorted(shards) == [f"__{p}_0.distcp" for p in range(4)]
    assert max(shards.values()) < 0.6 * sum(shards.values())
    assert (step_dir / "model.safetensors").exists()  # the consolidated weights, for a plain loader

    second = _run(faulted, run_dir, 2, 2)
    assert second.returncode == 0, second.stderr[-3000:]
    before, after = _summary(run_dir, 1), _summary(run_dir, 2)
    assert before["optimizer"]["sharding"] == after["optimizer"]["sharding"] == "zero-1"
    assert after["resumed_from_step"] == 4 and after["layout"]["world_size_run"] == 2
    assert after["continuity"]["loss_continuous"] is True and after["continuity"]["compared_steps"] == [5, 6]
    losses = {**_losses(before), **_losses(after)}
    assert sorted(losses) == list(range(1, STEPS + 1))
    for step, value in expected.items():
        assert losses[step] == pytest.approx(value, abs=1e-5), (step, value, losses[step])
