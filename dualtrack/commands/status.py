"""`dualtrack status`: one trial's runs (step, loss, attempts, cost so far, fallback), or the list of trials."""

from __future__ import annotations

import argparse

from dualtrack.client.cli_support import add_connection_arguments, describe, emit_json, open_api, remote_command
from dualtrack.client.display import status_lines, trial_list_lines
from dualtrack.client.errors import EXIT_OK, EXIT_TRIAL_FAILED
from lambdas.domain.json_types import JsonMapping
from lambdas.domain.vocabulary import TRIAL_TERMINAL

HELP = describe(
    """\
Show a trial: its status, triage route, and per run (gpu, trn2, gpu-fallback) the step reached, the latest loss,
attempts (with resume points and rerun steps), and the cost so far from the ledger. Without TRIAL_ID, list trials.
Exit code 1 means the trial ended FAILED or CANCELLED, so `dualtrack status ID && next-step` works in scripts.""",
    """\
  dualtrack status llama31-8b-lora-pilot-3f9c2a1b
  dualtrack status --json llama31-8b-lora-pilot-3f9c2a1b | jq .runs.trn2.attempts
  dualtrack status --limit 50""",
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("status", help="a trial's runs, attempts and cost so far", description=HELP,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trial_id", metavar="TRIAL_ID", nargs="?", help="trial id (omit to list trials)")
    parser.add_argument("--limit", type=int, default=25, help="trials per page when listing (1-100, default 25)")
    parser.add_argument("--next-token", help="continue a listing from its `more:` token")
    add_connection_arguments(parser)
    parser.set_defaults(func=run)


def exit_code_for(trial: JsonMapping) -> int:
    status = trial.get("status")
    return EXIT_TRIAL_FAILED if status in TRIAL_TERMINAL and status != "SUCCEEDED" else EXIT_OK


@remote_command
def run(args: argparse.Namespace) -> int:
    api = open_api(args)
    if not args.trial_id:
        listing = api.list(limit=args.limit, next_token=args.next_token)
        if args.json:
            emit_json(listing)
        else:
            print("\n".join(trial_list_lines(listing)))
        return EXIT_OK
    trial = api.get(args.trial_id)
    if args.json:
        emit_json(trial)
    else:
        print("\n".join(status_lines(trial)))
    return exit_code_for(trial)
