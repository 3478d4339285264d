"""`dualtrack approve` / `dualtrack reject`: decide a trial that waits for an approver of its team."""

from __future__ import annotations

import argparse

from dualtrack.client.cli_support import add_connection_arguments, describe, emit_json, open_api, remote_command
from dualtrack.client.errors import EXIT_OK

HELP = describe(
    """\
A trial waits PENDING_APPROVAL when it overrides the triage's route or its worst case is above its team's
approval_threshold_usd. An approver of the trial's team (governance.teams.<team>.approvers or an approver_roles
role), or a platform admin, decides it; its submitter cannot, even when it is an approver. The decision is recorded
with who and when and your comment. Approving starts the trial's workflow with the input checked at submission;
rejecting starts nothing. The first decision wins: deciding a trial that is no longer pending exits 4.""",
    """\
  dualtrack approve llama31-8b-lora-pilot-3f9c2a1b --comment "budget agreed with finance"
  dualtrack reject llama31-8b-lora-pilot-3f9c2a1b --comment "run the 4 h version first"
  dualtrack approve --json ID --comment ok | jq .status""",
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    for name, approve, summary in (("approve", True, "approve a trial waiting for an approver (starts it)"),
                                   ("reject", False, "reject a trial waiting for an approver (starts nothing)")):
        parser = sub.add_parser(name, help=summary, description=HELP,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.add_argument("trial_id", metavar="TRIAL_ID")
        parser.add_argument("--comment", required=True,
                            help="why: recorded with the decision (3 to 1000 characters)")
        add_connection_arguments(parser)
        parser.set_defaults(func=run, approve=approve)


@remote_command
def run(args: argparse.Namespace) -> int:
    done = open_api(args).decide(args.trial_id, approve=args.approve, comment=args.comment)
    if args.json:
        emit_json(done)
    elif args.approve:
        print(f"approved {args.trial_id}: {done.get('status')} (workflow {done.get('execution_arn')})")
    else:
        print(f"rejected {args.trial_id}: nothing was started")
    return EXIT_OK
