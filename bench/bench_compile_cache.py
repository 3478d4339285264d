"""Compile cache: warm vs cold compile seconds through the trainer's compiled mode, and the warm-up compile stage
against today's cold start.

Each repeat runs fresh trainer processes (``python -m trainer run --backend compiled``), exactly what Batch jobs
sharing a cache prefix do, on two empty caches side by side:

- cold start: the training job on an empty cache compiles inside training; a second training job on the same cache
  then starts warm (warm / cold);
- warm-up compile stage: a compile-only job (run ``trn2-compile``, what the workflow runs when the key is cold)
  on an empty cache, then the training job, which starts warm.

The seconds are the trainer's own ``compile.seconds`` from each run's summary; the stage's cost is its job wall
time at the trn2.48xlarge rate of the shipped price table (stand-in times: the bill's shape, not its size).

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


def _run(spec: Path, run_dir: Path, cache: Path, run: str = "trn2") -> tuple[dict[str, Any], float]:
    env = {**os.environ, "NEURON_COMPILE_CACHE_URL": str(cache), "AWS_BATCH_JOB_ATTEMPT": "1",
           "DUALTRACK_METRICS": "off", "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "containers")])}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "trainer", "run", "--spec", str(spec), "--track", "trn2",
                           "--run-dir", str(run_dir), "--run", run, "--backend", "compiled", "--quiet"],
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
    sys.path.insert(0, str(ROOT))
    from lambdas.domain.money.prices import load_price_table

    hourly = float(load_price_table().instance_hourly_usd("trn2.48xlarge"))
    figures: dict[str, list[float]] = {name: [] for name in (
        "cold_s", "warm_s", "cold_wall", "warm_wall", "stage_s", "stage_wall", "after_s", "after_wall")}
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
            cold, wall_c = _run(spec, base / f"cold-{repeat}" / "trn2", cache)
            warm, wall_w = _run(spec, base / f"warm-{repeat}" / "trn2", cache)
            staged = base / f"staged-cache-{repeat}"
            stage, wall_s = _run(spec, base / f"staged-{repeat}" / "trn2-compile", staged, run="trn2-compile")
            after, wall_a = _run(spec, base / f"staged-{repeat}" / "trn2", staged)
            for name, value in (("cold_s", cold["compile"]["seconds"]), ("warm_s", warm["compile"]["seconds"]),
                                ("cold_wall", wall_c), ("warm_wall", wall_w),
                                ("stage_s", stage["compile"]["seconds"]), ("stage_wall", wall_s),
                                ("after_s", after["compile"]["seconds"]), ("after_wall", wall_a)):
                figures[name].append(float(value))
            print(f"  repeat {repeat + 1}: cold compile {cold['compile']['seconds']:7.2f} s "
                  f"({cold['compile']['cache']}, {cold['compile'].get('cache_files_after')} cache files written), "
                  f"warm compile {warm['compile']['seconds']:7.2f} s ({warm['compile']['cache']}); job wall "
                  f"{wall_c:6.1f} s vs {wall_w:6.1f} s")
            print(f"            warm-up stage {stage['compile']['seconds']:7.2f} s compiling "
                  f"({stage['compile']['cache']}, job wall {wall_s:6.1f} s), then training compile "
                  f"{after['compile']['seconds']:7.2f} s ({after['compile']['cache']}, job wall {wall_a:6.1f} s)")
    m = {name: statistics.median(values) for name, values in figures.items()}
    print(f"compile      warm / cold compile seconds = {m['warm_s'] / m['cold_s']:.3f}  "
          f"({m['warm_s']:.2f} s / {m['cold_s']:.2f} s)")
    print(f"compile      warm / cold job wall time   = {m['warm_wall'] / m['cold_wall']:.3f}")
    print(f"compile      training compile after the warm-up stage / in a cold start = "
          f"{m['after_s'] / m['cold_s']:.3f}  ({m['after_s']:.2f} s / {m['cold_s']:.2f} s)")
    print(f"compile      warm-up stage + training job wall / cold-start training job wall = "
          f"{(m['stage_wall'] + m['after_wall']) / m['cold_wall']:.3f}  "
          f"({m['stage_wall']:.1f} s + {m['after_wall']:.1f} s / {m['cold_wall']:.1f} s)")
    print(f"compile      warm-up stage cost at trn2.48xlarge {hourly:.4f} USD/h = "
          f"{m['stage_wall'] * hourly / 3600:.4f} USD for {m['stage_wall']:.1f} s (stand-in times; booked as compile)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
