"""Cold-start import cost of each Lambda handler module, as a ratio to importing the runtime's own libraries.

Each measurement is a fresh interpreter (subprocess) importing one module; the baseline imports
aws_lambda_powertools + pydantic + boto3 alone. Runs are interleaved (baseline, then each handler, repeated) so
machine noise hits both sides alike; the median of the repeats is reported. Columns: the handler module alone;
with boto3 (every function loads it, so this is the like-for-like figure, target <= 1.3); and, for information,
with the task module its first invocation imports as well (what the deferral moved out of the import).

    python bench/bench_imports.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "import aws_lambda_powertools, pydantic, boto3"
TIMER = "import time; t = time.perf_counter(); {stmt}; print(time.perf_counter() - t)"


def handler_modules() -> list[str]:
    return sorted(
        f"lambdas.handlers.{p.stem}" for p in (ROOT / "lambdas" / "handlers").glob("*.py") if not p.stem.startswith("_")
    )


def first_call_imports(module: str) -> list[str]:
    """The modules a handler imports inside its body, i.e. on its first invocation."""
    source = (ROOT / (module.replace(".", "/") + ".py")).read_text()
    return re.findall(r"^\s+from (lambdas\.(?:tasks|handlers)\.\w+) import", source, flags=re.MULTILINE)


def measure(stmt: str) -> float:
    done = subprocess.run(
        [sys.executable, "-c", TIMER.format(stmt=stmt)], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return float(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    modules = handler_modules()
    samples: dict[str, list[float]] = {name: [] for name in ["baseline", *modules]}
    with_sdk: dict[str, list[float]] = {name: [] for name in modules}
    with_task: dict[str, list[float]] = {name: [] for name in modules}
    for _ in range(args.repeats):
        samples["baseline"].append(measure(BASELINE))
        for name in modules:
            samples[name].append(measure(f"import {name}"))
            # The first invocation loads boto3 anyway: this column compares like with like.
            with_sdk[name].append(measure(f"import {name}; import boto3"))
            deferred = "".join(f"; import {task}" for task in first_call_imports(name))
            with_task[name].append(measure(f"import {name}; import boto3{deferred}"))
    base = statistics.median(samples["baseline"])
    print(f"baseline ({BASELINE}): median {base * 1000:.1f} ms over {args.repeats} runs")
    print(f"{'module':45} {'median_ms':>10} {'ratio':>7} {'+boto3_ms':>10} {'ratio':>7} {'+task_ms':>9} {'ratio':>7}")
    for name in modules:
        median, full = statistics.median(samples[name]), statistics.median(with_sdk[name])
        task = statistics.median(with_task[name])
        print(f"{name:45} {median * 1000:10.1f} {median / base:7.2f} {full * 1000:10.1f} {full / base:7.2f} "
              f"{task * 1000:9.1f} {task / base:7.2f}")
    worst = max(statistics.median(with_sdk[name]) for name in modules)
    print(f"handler import + boto3 / baseline (worst handler) = {worst / base:.3f}  (target <= 1.3)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
