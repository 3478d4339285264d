"""A thousand trials' events through the ledger path at once, against moto in this process.

Books ``--trials`` trials over ``--teams`` teams (submissions spread over an hour of event time), interleaves every
run's Batch transitions, attempt summaries, checkpoint manifests and shards in one shuffle with ``--duplicates`` of
them delivered twice, and delivers them to the run-events and artifact functions. Prints the rate this process
sustained (moto and the handlers on one core: a floor for the code path, not AWS's throughput), the DynamoDB
requests per event by table, the hottest partition key's share of its table and its peak requests in one minute of
event time (what AWS would see), and whether every run's cost converged to what its events say it used.

    python bench/bench_plane_load.py [--trials 1000] [--teams 50] [--duplicates 0.1]
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path

from stage_env import ENV, REGION  # bench/ is the script directory, first on sys.path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "containers")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--teams", type=int, default=50)
    parser.add_argument("--duplicates", type=float, default=0.1, help="share of events delivered twice")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    os.environ.update(ENV)
    warnings.simplefilter("ignore")
    import boto3
    from bench_ledger import _tables
    from moto import mock_aws

    from dualtrack.local.plane_load import simulate
    from lambdas.runtime.composition import reset_environment

    with mock_aws():
        _tables()
        reset_environment()
        s3 = boto3.client("s3", region_name=REGION)

        def progress(done: int, total: int) -> None:
            print(f"\r  delivered {done:,}/{total:,} events", end="", file=sys.stderr, flush=True)

        figures = simulate({"s3": s3}, trials=args.trials, teams=args.teams, duplicate_share=args.duplicates,
                           seed=args.seed, progress=progress)
    print(file=sys.stderr)
    total = sum(figures.requests.values())
    print(f"trials {figures.trials:,} over {figures.teams} teams; events delivered {figures.events:,} "
          f"({figures.duplicates:,} duplicates)")
    print(f"this process: {figures.wall_s:.0f} s, {figures.events_per_s:.0f} events/s "
          f"(moto and the handlers on one core)")
    print(f"DynamoDB requests: {total:,} ({total / figures.events:.2f} per event)")
    for table, count in sorted(figures.requests.items()):
        (_, key), share = figures.hottest(table)
        print(f"  {table:<22} {count:>9,}  hottest key {key} {share:.4%} of the table")
    minute, events = figures.peak_minute()
    (table, key, at), requests = figures.peak_key_minute()
    print(f"event time: busiest minute {minute} carried {events:,} events ({events / 60:.1f}/s)")
    print(f"event time: hottest key-minute {table} {key} at {at}: {requests} requests "
          f"({requests / 60:.2f}/s against DynamoDB's 1,000 writes/s per partition)")
    print(f"converged: {figures.converged:,}/{figures.runs:,} runs; trials stopped: {figures.stopped}")
    for line in figures.mismatches[:10]:
        print(f"  MISMATCH {line}")
    return 0 if figures.converged == figures.runs and not figures.stopped else 1


if __name__ == "__main__":
    raise SystemExit(main())
