"""`dualtrack watch`: poll a trial until it reaches a terminal state, redrawing its per-run progress."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable

from dualtrack.client.api import TrialApi
from dualtrack.client.cli_support import add_connection_arguments, describe, open_api, remote_command
from dualtrack.client.display import status_lines
from dualtrack.client.errors import EXIT_INVALID
from dualtrack.commands.status import exit_code_for
from lambdas.domain.json_types import JsonMapping
from lambdas.domain.vocabulary import TRIAL_TERMINAL

HELP = describe(
    """\
Follow a trial live: every --interval seconds show each run's step and progress, latest loss, attempts, cost so
far and whether the GPU fallback took over; stop when the trial is SUCCEEDED, FAILED or CANCELLED. On a terminal
the view redraws in place; otherwise (logs, pipes) a block is printed only when something changed. With --json,
one JSON object per change (JSON Lines). Ctrl-C stops watching; the trial keeps running.""",
    """\
  dualtrack watch llama31-8b-lora-pilot-3f9c2a1b
  dualtrack watch --interval 60 ID && dualtrack report ID --open
  dualtrack watch --json ID | jq -c '{status, total_usd}'""",
)
MIN_INTERVAL_S = 1.0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("watch", help="follow a trial until it finishes", description=HELP,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trial_id", metavar="TRIAL_ID")
    parser.add_argument("--interval", type=float, default=15.0, help="seconds between polls (default 15, min 1)")
    add_connection_arguments(parser)
    parser.set_defaults(func=run)


def watch(api: TrialApi, trial_id: str, *, interval_s: float, as_json: bool, live: bool,
          sleep: Callable[[float], None] = time.sleep, write: Callable[[str], None] | None = None) -> JsonMapping:
    """Poll until a terminal status; returns the last answer. `live` redraws in place with ANSI escapes."""
    out = write or (lambda text: (sys.stdout.write(text), sys.stdout.flush()))
    drawn = 0
    last: str | None = None
    while True:
        trial = api.get(trial_id)
        fingerprint = json.dumps(trial, sort_keys=True, default=str)
        if as_json:
            if fingerprint != last:
                out(json.dumps(trial, sort_keys=True, default=str) + "\n")
        elif live:
            lines = [*status_lines(trial), f"  (polling every {interval_s:g} s; Ctrl-C stops watching)"]
            # Move up over the previous block and clear to the end of the screen before redrawing it.
            out((f"\x1b[{drawn}F\x1b[J" if drawn else "") + "\n".join(lines) + "\n")
            drawn = len(lines)
        elif fingerprint != last:
            out(time.strftime("%H:%M:%S ") + "\n".join(status_lines(trial)) + "\n")
        last = fingerprint
        if trial.get("status") in TRIAL_TERMINAL:
            return trial
        sleep(interval_s)


@remote_command
def run(args: argparse.Namespace) -> int:
    if args.interval < MIN_INTERVAL_S:
        print(f"error: --interval {args.interval:g}: must be at least {MIN_INTERVAL_S:g} second", file=sys.stderr)
        return EXIT_INVALID
    final = watch(open_api(args), args.trial_id, interval_s=args.interval, as_json=args.json,
                  live=sys.stdout.isatty() and not args.json)
    if not args.json:
        print(f"trial {args.trial_id} ended {final.get('status')}")
    return exit_code_for(final)
