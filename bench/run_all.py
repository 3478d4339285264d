"""Run every ``bench/bench_*.py`` one after another, each in its own interpreter, and collect their ratio lines.

Each benchmark measures its own pair side by side (interleaved in one process) and prints lines of the form
``<label>  <a> / <b> = <ratio>``; this runner streams each benchmark's output, then repeats all the ratio lines
together at the end so one run of ``make bench`` gives one table. Benchmarks run sequentially so they never
compete for the same cores.

    python bench/run_all.py [--only ledger,workflow] [--timeout 900] [--json out/bench.json]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RATIO = re.compile(r"^\S.*\S\s+=\s+[-+0-9.]+")


def discover(only: set[str] | None) -> list[Path]:
    found = sorted(BENCH.glob("bench_*.py"))
    if only:
        found = [p for p in found if p.stem.removeprefix("bench_") in only]
    return found


def run_one(path: Path, timeout: float) -> tuple[int, float, list[str]]:
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(path)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            print(f"  | {line.rstrip()}", flush=True)
            lines.append(line.rstrip())
            if time.perf_counter() - started > timeout:
                proc.kill()
                lines.append(f"(stopped after {timeout:.0f} s)")
                break
        code = proc.wait()
    except KeyboardInterrupt:
        proc.kill()
        raise
    return code, time.perf_counter() - started, lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="comma-separated names (bench_<name>.py)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per benchmark")
    parser.add_argument("--json", help="also write every benchmark's output and ratio lines to this file")
    args = parser.parse_args()
    only = set(args.only.split(",")) if args.only else None
    results = []
    for path in discover(only):
        print(f"== {path.name}", flush=True)
        code, seconds, lines = run_one(path, args.timeout)
        ratios = [line for line in lines if RATIO.match(line)]
        results.append({"bench": path.name, "exit_code": code, "seconds": round(seconds, 1), "ratios": ratios,
                         "output": lines})
        print(f"== {path.name}: exit {code} in {seconds:.1f} s", flush=True)
    print("\nratios (each measured side by side within its benchmark):")
    for result in results:
        status = "" if result["exit_code"] == 0 else f"   [exit {result['exit_code']}]"
        for line in result["ratios"] or ["(no ratio lines)"]:
            print(f"  {result['bench']:24s} {line}{status}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0 if all(r["exit_code"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
