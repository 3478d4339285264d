"""`dualtrack triage`: route a trial by its training shape (the source document's tables 1 and 3)."""

from __future__ import annotations

import argparse
import json

from dualtrack.commands._common import CommandError, add_trial_argument, load_trial, print_problems
from dualtrack.output_option import add_json_option
from lambdas.domain.trial.triage import submission_refusal, triage

HELP = """\
Route a trial: gpu, trn2_trial or dual_track, with the matched scenario, its scores (table 3: higher = better
fit, not vendor performance), the conclusion and the main risks (table 1). Blockers (custom CUDA operators,
daily graph changes, dynamic shapes) route to gpu; a gpu-routed trial that still asks for a trn2 track is refused
at submission unless it carries triage_override {route, reason}; such a trial then waits PENDING_APPROVAL until
an approver of its team (not its submitter) approves it (dualtrack approve).

exit codes: 0 routed, 2 invalid trial

examples:
  dualtrack triage examples/trial-llama31-8b-lora.json
  dualtrack triage --json trial.json
"""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("triage", help="route a trial by training shape", description=HELP,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    add_trial_argument(parser)
    add_json_option(parser, help="machine-readable result on stdout")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        spec = load_trial(args.trial, local=args.local)
    except CommandError as exc:
        print_problems(args.trial, exc.problems, as_json=args.json)
        return 2
    result = triage(spec)
    refusal = submission_refusal(spec, result)
    if args.json:
        print(json.dumps({"trial_id": spec.trial_id, **result.model_dump(mode="json"),
                          "submission": {"accepted": refusal is None, "refusal": refusal,
                                         "override": spec.triage_override.model_dump()
                                         if spec.triage_override else None}}, indent=2))
        return 0
    s = result.scores
    print(f"route: {result.route}   scenario: {result.scenario_title} ({result.scenario})")
    print(f"scores (fit, higher is better): gpu {s.gpu} | trn2 trial {s.trn2_trial} | dual track {s.dual_track}")
    print(f"first choice: {result.first_choice}: {result.judgement}")
    print(f"conclusion: {result.conclusion}")
    print(f"main risks: {', '.join(result.risks)}")
    print("why:")
    for reason in result.reasons:
        print(f"  - {reason}")
    print(f"  {result.winner}")
    for note in result.notes:
        print(f"note: {note}")
    if refusal:
        print(f"submission: refused: {refusal}")
    elif spec.triage_override:
        o = spec.triage_override
        print(f"submission: override to {o.route} recorded ({o.reason}); the trial waits for a team approver")
    return 0
