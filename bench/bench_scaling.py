"""Data-parallel scaling on this machine: the same tiny trial trained by 1, 2 and 4 CPU ranks over gloo.

Each run is ``python -m torch.distributed.run --standalone --nproc_per_node=N -m trainer run`` with the ``cpu``
backend and ``OMP_NUM_THREADS=1`` per rank (ranks would otherwise fight over the cores). The trial's layout has 4
data-parallel ranks (``g6e.12xlarge``: 4 GPUs, one node), so 1, 2 and 4 processes all share its global batch
evenly (process r of N runs ranks r, r + N, ...; see ``trainer.data.simulated_ranks``) and train the same losses.

Runs are interleaved, the order of N rotated every repeat (a run right after another is slower, so each N must
follow each other equally often: use a multiple of 3 for a balanced set). Per N it prints samples/s in total and per
rank (global batch over the median optimizer-step time, which the first step's warm-up and the end-of-run
checkpoint do not touch; median over repeats), the scaling efficiency samples/s(N) / (N x samples/s(1)), and the
communication share of the step time and the median gradient-sync wait, from the runs' summaries.

On a machine with fewer cores than ranks the ranks share cores: the figures then measure oversubscription, not
the interconnect.
Usage: .venv/bin/python bench/bench_scaling.py [--ranks 1,2,4] [--steps 12] [--repeats 2]
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

ROOT = Path(__file__).resolve().parents[1]
INSTANCE = "g6e.12xlarge"  # 4 GPUs on one node: data_parallel 4


def _spec(steps: int, workdir: Path) -> Path:
    sys.path[:0] = [str(ROOT)]
    from lambdas.domain.trial.layout import gradient_accumulation_steps, track_layout
    from lambdas.domain.trial.rules import parse_trial

    trial = json.loads((ROOT / "examples" / "trial-rehearsal.json").read_text())
    trial.pop("fault_injection", None)
    trial["data"]["train_uri"] = str(ROOT / "examples/data/train.jsonl")
    trial["data"]["validation_uri"] = str(ROOT / "examples/data/validation.jsonl")
    trial.update({"max_steps": steps, "checkpoint_interval_steps": steps, "effective_batch_size": 8,
                  "micro_batch_size": 1})
    trial["evaluation"] = {"interval_steps": steps, "prompts": [], "max_new_tokens": 1}
    trial["tracks"] = {"gpu": {"instance_type": INSTANCE, "nodes": 1, "tensor_parallel": 1, "pipeline_parallel": 1}}
    spec = parse_trial(trial, allow_local_paths=True)
    layout = track_layout(spec, "gpu")
    assert layout.data_parallel == 4, layout
    assert gradient_accumulation_steps(spec, layout) * layout.data_parallel * spec.micro_batch_size == 8
    path = workdir / "spec.json"
    path.write_text(json.dumps(trial))
    return path


def run_ranks(spec: Path, ranks: int, run_dir: Path, timeout: float) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_BATCH_JOB_", "WORLD_SIZE", "RANK"))}
    env.update({"PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "containers")]),
                "DUALTRACK_SPEC_URI": str(spec), "DUALTRACK_TRACK": "gpu", "DUALTRACK_RUN_DIR": str(run_dir),
                "DUALTRACK_BACKEND": "cpu", "DUALTRACK_METRICS": "off", "DUALTRACK_IMDS_ENDPOINT": "off",
                "AWS_BATCH_JOB_ATTEMPT": "1", "OMP_NUM_THREADS": "1"})
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}",
               "-m", "trainer", "run", "--quiet"]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{ranks} rank(s) failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    summary = json.loads((run_dir / "attempt-1" / "summary.json").read_text())
    assert summary["status"] == "succeeded" and summary["layout"]["world_size_run"] == ranks, summary["layout"]
    batch = summary["layout"]["effective_batch_size"]
    comm = summary["communication"]
    return {"samples_per_s": batch / summary["throughput"]["step_time_s"],
            "train_samples_per_s": summary["throughput"]["samples_per_s"],
            "share": comm["communication_share"] or 0.0, "sync_wait_s": comm["sync_wait_median_s"],
            "sync_wait_max_s": comm["sync_wait_max_s"], "final_loss": summary["loss"]["final"], "wall_s": wall}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", default="1,2,4", help="process counts, each dividing 4 (first is the baseline)")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    args = parser.parse_args()
    counts = [int(n) for n in args.ranks.split(",")]
    workdir = Path(tempfile.mkdtemp(prefix="bench-scaling-"))
    spec = _spec(args.steps, workdir)
    results: dict[int, list[dict]] = {n: [] for n in counts}
    for i in range(args.repeats):
        k = i % len(counts)
        for n in counts[k:] + counts[:k]:
            results[n].append(run_ranks(spec, n, workdir / f"n{n}-r{i}", args.timeout))

    print(f"{os.cpu_count()} CPUs, gloo, OMP_NUM_THREADS=1 per rank, {args.steps} steps x {args.repeats} repeats, "
          f"tiny Llama + LoRA, global batch 8 over data_parallel 4 ({INSTANCE} layout)")
    rate = {n: statistics.median(r["samples_per_s"] for r in v) for n, v in results.items()}
    base = counts[0]
    for n, values in results.items():
        waits = [r["sync_wait_s"] for r in values if r["sync_wait_s"] is not None]
        wait = f"{statistics.median(waits) * 1000:7.2f} ms" if waits else "      - "
        runs = ", ".join(f"{r['samples_per_s']:.2f}" for r in values)
        print(f"  N={n}  {rate[n]:7.2f} samples/s total  {rate[n] / n:7.2f} per rank  "
              f"communication share {statistics.median(r['share'] for r in values):6.3f}  "
              f"sync wait (median) {wait}   runs: {runs}")
    losses = {n: {round(r["final_loss"], 5) for r in v} for n, v in results.items()}
    print(f"  final losses by N (the same training whatever N): {losses}")
    for n in counts[1:]:
        print(f"efficiency N={n}  samples/s({n}) / ({n} x samples/s({base})) = "
              f"{rate[n] / (n / base * rate[base]):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
