"""Run every ``bench/bench_*.py`` one after another, each in its own interpreter, and collect their ratio lines.

Each benchmark measures its own pair side by side (interleaved in one process) and prints lines of the form
``<label>  <a> / <b> = <ratio>``; this runner streams each benchmark's output, then repeats all the ratio lines
together at the end so one run of ``make bench`` gives one table. Benchmarks run sequentially so they never
compete for the same cores.

Last, unless ``--skip-rehearsal``: the whole local rehearsal (``dualtrack local run examples/trial-rehearsal.json``)
under ``/usr/bin/time -v``, reporting its wall time and the peak resident memory of the largest process in its tree
(the rehearsal itself or one of its trainer jobs).

    python bench/run_all.py [--only ledger,workflow] [--timeout 900] [--json out/bench.json] [--skip-rehearsal]

``bench_scaling.py`` starts its own torchrun process groups (1, 2 and 4 CPU ranks), so it too runs alone; its
efficiency lines are the ratio lines collected here.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
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


def rehearsal(timeout: float) -> dict[str, object]:
    """Wall seconds and peak RSS (MiB) of ``dualtrack local run`` on the example trial."""
    out = Path(tempfile.mkdtemp(prefix="bench-rehearsal-"))
    command = [str(Path(sys.executable).with_name("dualtrack")), "local", "run",
               str(ROOT / "examples" / "trial-rehearsal.json"), "--out", str(out)]
    timer = shutil.which("time") or ("/usr/bin/time" if Path("/usr/bin/time").exists() else None)
    started = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    # A plane state of its own: the timing is of a cold rehearsal, and the machine's own state is left alone.
    env = {**os.environ, "DUALTRACK_STATE_DIR": str(out / "plane-state")}
    done = subprocess.run(([timer, "-v"] if timer else []) + command, cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, check=False, env=env)
    wall = time.perf_counter() - started
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    if found:
        peak_kib = int(found.group(1))
    elif peak_kib <= before:
        peak_kib = 0  # an earlier child was larger; the tree's own peak is unknown without /usr/bin/time
    shutil.rmtree(out, ignore_errors=True)
    return {"exit_code": done.returncode, "wall_s": round(wall, 1), "peak_rss_mib": round(peak_kib / 1024, 1),
            "tail": (done.stdout + done.stderr)[-1500:]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="comma-separated names (bench_<name>.py)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per benchmark")
    parser.add_argument("--json", help="also write every benchmark's output and ratio lines to this file")
    parser.add_argument("--skip-rehearsal", action="store_true", help="do not time `dualtrack local run`")
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
    measured = None
    if not args.skip_rehearsal and not only:
        print("== dualtrack local run examples/trial-rehearsal.json", flush=True)
        measured = rehearsal(args.timeout)
        print(f"== rehearsal: exit {measured['exit_code']} in {measured['wall_s']} s, "
              f"peak RSS {measured['peak_rss_mib']} MiB (largest process in the tree)", flush=True)
        if measured["exit_code"] != 0:
            print(measured["tail"])
    print("\nratios (each measured side by side within its benchmark):")
    for result in results:
        status = "" if result["exit_code"] == 0 else f"   [exit {result['exit_code']}]"
        for line in result["ratios"] or ["(no ratio lines)"]:
            print(f"  {result['bench']:24s} {line}{status}")
    if measured is not None:
        print(f"  {'rehearsal':24s} wall {measured['wall_s']} s, peak RSS {measured['peak_rss_mib']} MiB")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"benchmarks": results, "rehearsal": measured}, indent=2) + "\n")
    ok = all(r["exit_code"] == 0 for r in results) and (measured is None or measured["exit_code"] == 0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
