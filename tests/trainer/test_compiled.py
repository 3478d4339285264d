"""Compiled mode (``torch.compile`` standing in for graph compilation): a cold cache records a miss, a warm one a
hit with far less compile time and the same losses. One cold compile costs tens of seconds on 2 CPU cores, so
both runs happen once per module, in subprocesses (a fresh process is what a retried Batch job is)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainer.conftest import ROOT, tiny_trial

pytestmark = pytest.mark.slow


def _run(spec: Path, run_dir: Path, cache: str) -> dict:
    env = {**os.environ, "NEURON_COMPILE_CACHE_URL": cache, "AWS_BATCH_JOB_ATTEMPT": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "containers")])}
    done = subprocess.run([sys.executable, "-m", "trainer", "run", "--spec", str(spec), "--track", "trn2",
                           "--run-dir", str(run_dir), "--backend", "compiled"],
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert events[-1]["event"] == "done"
    return json.loads((run_dir / "attempt-1" / "summary.json").read_text())


@pytest.fixture(scope="module")
def cold_then_warm(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    base = tmp_path_factory.mktemp("compiled")
    data = base / "data"
    data.mkdir()
    lines = (ROOT / "examples/data/train.jsonl").read_text().splitlines()
    (data / "train.jsonl").write_text("\n".join(lines[:64]) + "\n")
    (data / "validation.jsonl").write_text("\n".join(lines[64:68]) + "\n")
    trial = tiny_trial(str(data), max_steps=6, checkpoint_interval_steps=3, fault_injection=None,
                       effective_batch_size=8)
    trial["evaluation"] = {"interval_steps": 6, "prompts": [], "max_new_tokens": 1}
    spec = base / "spec.json"
    spec.write_text(json.dumps(trial))
    cache = str(base / "cache")
    return _run(spec, base / "cold", cache), _run(spec, base / "warm", cache)


def test_cold_compile_misses_and_warm_compile_hits(cold_then_warm: tuple[dict, dict]) -> None:
    cold, warm = cold_then_warm
    assert cold["backend"] == warm["backend"] == "compiled" and cold["stand_in"]
    assert cold["compile"]["cache"] == "miss" and warm["compile"]["cache"] == "hit"
    assert cold["compile"]["cache_files_before"] == 0 and cold["compile"]["cache_files_after"] > 0
    assert warm["compile"]["cache_files_before"] >= cold["compile"]["cache_files_after"] > 0
    assert cold["compile"]["cache_key"] == warm["compile"]["cache_key"]
    assert warm["compile"]["seconds"] < 0.7 * cold["compile"]["seconds"]
    # The cold run published a complete entry (artefacts, then the marker); the warm run found it whole.
    assert Path(cold["compile"]["cache_url"], "_dualtrack_complete.json").is_file()
    assert cold["compile"]["torn_entry"] is warm["compile"]["torn_entry"] is False


def test_compiled_mode_trains_the_same_as_it_did_cold(cold_then_warm: tuple[dict, dict]) -> None:
    cold, warm = cold_then_warm
    assert [p["loss"] for p in cold["loss"]["per_step"]] == pytest.approx(
        [p["loss"] for p in warm["loss"]["per_step"]], rel=1e-5)
    assert cold["global_step"] == warm["global_step"] == 6
