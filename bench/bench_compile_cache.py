"""Compile cache: warm vs cold compile seconds through the trainer's compiled mode.

Each repeat creates an empty cache directory and runs the same tiny trial twice as fresh trainer processes
(``python -m trainer run --backend compiled``, ``NEURON_COMPILE_CACHE_URL`` = that directory), exactly what two
Batch jobs sharing a cache prefix do: the first compiles cold and fills the cache, the second starts warm. The
seconds are the trainer's own ``compile.seconds`` (cache set-up plus the first step's excess over a typical step)
from each run's summary; the ratio warm/cold is printed with the miss/hit each run recorded.

    python bench/bench_compile_cache.py [--repeats 1] [--steps 6]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _trial(data: Path, steps: int) -> dict[str, Any]:
    spec = json.loads((ROOT / "examples" / "trial-rehearsal.json").read_text())
    spec["model"]["config"] = {"vocab_size": 264, "hidden_size": 32, "intermediate_size": 64,
                               "num_hidden_layers": 1, "num_attention_heads": 8, "num_key_value_heads": 8}
    spec["data"]["train_uri"] = str(data / "train.jsonl")
    spec["data"]["validation_uri"] = str(data / "validation.jsonl")
    spec.update({"sequence_length": 32, "max_steps": steps, "checkpoint_interval_steps": steps,
                 "effective_batch_size": 8, "learning_rate": 0.01})
    spec["evaluation"] = {"interval_steps": steps, "prompts": [], "max_new_tokens": 1}
    spec.pop("fault_injection", None)
    return spec


def _run(spec: Path, run_dir: Path, cache: Path) -> tuple[dict[str, Any], float]:
    env = {**os.environ, "NEURON_COMPILE_CACHE_URL": str(cache), "AWS_BATCH_JOB_ATTEMPT": "1",
           "DUALTRACK_METRICS": "off", "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "containers")])}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "trainer", "run", "--spec", str(spec), "--track", "trn2",
                           "--run-dir", str(run_dir), "--backend", "compiled", "--quiet"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"trainer exited {done.returncode}: {done.stderr[-2000:]}")
    return json.loads((run_dir / "attempt-1" / "summary.json").read_text()), wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    cold_s, warm_s, cold_wall, warm_wall = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="bench-compile-") as tmp:
        base = Path(tmp)
        data = base / "data"
        data.mkdir()
        lines = (ROOT / "examples" / "data" / "train.jsonl").read_text().splitlines()
        (data / "train.jsonl").write_text("\n".join(lines[:64]) + "\n")
        (data / "validation.jsonl").write_text("\n".join(lines[64:68]) + "\n")
        spec = base / "spec.json"
        spec.write_text(json.dumps(_trial(data, args.steps)))
        for repeat in range(args.repeats):
            cache = base / f"cache-{repeat}"
            cold, wall_c = _run(spec, base / f"cold-{repeat}", cache)
            warm, wall_w = _run(spec, base / f"warm-{repeat}", cache)
            cold_s.append(float(cold["compile"]["seconds"]))
            warm_s.append(float(warm["compile"]["seconds"]))
            cold_wall.append(wall_c)
            warm_wall.append(wall_w)
            print(f"  repeat {repeat + 1}: cold compile {cold_s[-1]:7.2f} s ({cold['compile']['cache']}, "
                  f"{cold['compile'].get('cache_files_after')} cache files written), warm compile "
                  f"{warm_s[-1]:7.2f} s ({warm['compile']['cache']}); job wall {wall_c:6.1f} s vs {wall_w:6.1f} s")
    cold_m, warm_m = statistics.median(cold_s), statistics.median(warm_s)
    print(f"compile      warm / cold compile seconds = {warm_m / cold_m:.3f}  ({warm_m:.2f} s / {cold_m:.2f} s)")
    wall_ratio = statistics.median(warm_wall) / statistics.median(cold_wall)
    print(f"compile      warm / cold job wall time   = {wall_ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
