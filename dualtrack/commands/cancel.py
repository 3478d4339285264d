"""`dualtrack cancel`: stop a trial's workflow (and with it the Batch jobs of its runs)."""

from __future__ import annotations

import argparse

from dualtrack.client.cli_support import add_connection_arguments, describe, emit_json, open_api, remote_command
from dualtrack.client.errors import EXIT_OK

HELP = describe(
    """\
Cancel a trial: the API records the stop (STOPPING, with your reason), stops its Step Functions execution, which
terminates the runs' Batch jobs, and marks the trial CANCELLED once nothing of it runs. While a job is still
ending the trial stays STOPPING and the answer lists what is pending; the plane's reconciler finishes the stop
within minutes, or run the command again. Cancelling a trial that already ended changes nothing and still exits 0,
so the command is safe to repeat; the answer says whether anything changed.""",
    """\
  dualtrack cancel llama31-8b-lora-pilot-3f9c2a1b --reason "wrong dataset version"
  dualtrack cancel --json ID | jq .changed""",
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("cancel", help="stop a running trial", description=HELP,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trial_id", metavar="TRIAL_ID")
    parser.add_argument("--reason", help="recorded as the trial's status cause (at most 1000 characters)")
    add_connection_arguments(parser)
    parser.set_defaults(func=run)


@remote_command
def run(args: argparse.Namespace) -> int:
    done = open_api(args).cancel(args.trial_id, args.reason)
    if args.json:
        emit_json(done)
    elif done.get("status") == "STOPPING":
        print(f"stopping {args.trial_id}: " + "; ".join(done.get("pending") or ["the stop is being finished"]))
    elif done.get("changed"):
        print(f"cancelled {args.trial_id} (workflow {str(done.get('execution_status', '')).lower() or 'stopped'})")
    else:
        print(f"{args.trial_id} already ended {done.get('status')}: nothing to cancel")
    return EXIT_OK
