"""`dualtrack validate`: check a trial file; one line per problem, exit 2 when invalid."""

from __future__ import annotations

import argparse
import json
from decimal import Decimal

from dualtrack.commands._common import CommandError, add_trial_argument, load_trial, print_problems, usd
from dualtrack.output_option import add_json_option
from lambdas.domain.money.prices import PriceMissing, load_price_table, worst_case_usd
from lambdas.domain.trial.budget import budget_problem
from lambdas.domain.trial.layout import gradient_accumulation_steps, track_layout
from lambdas.domain.trial.spec import TrialSpec
from lambdas.domain.vocabulary import DEFAULT_MAX_ATTEMPTS

HELP = """\
Check a trial JSON file against the trial schema and its rules: unknown fields, types, s3:// data URIs,
instance types, parallel layouts (tensor x pipeline must divide the devices), batch arithmetic
(effective_batch_size = micro_batch_size x data_parallel x gradient accumulation on every track) and fault
placement, and the worst case (every attempt of every run at limits.max_hours, at the shipped prices and the
default max_attempts) against limits.max_usd, as the API checks it at submission. Each problem is printed as
`FILE: field.path: what is wrong and what would be valid`.

A track declaring several node counts (`"nodes": [1, 2]`) trains its main run at the largest and one scaling run
per other count (`gpu-n1`): each is listed with its layout and worst case, a whole run of the trial at that count.

With --local the trial id shown is the one `dualtrack local run` gives the same file: a rehearsal stages local data
files into the local stage's data bucket before submitting, and the id hashes the spec the API receives.

exit codes: 0 valid, 2 invalid (or unreadable / malformed JSON)

examples:
  dualtrack validate examples/trial-llama31-8b-lora.json
  dualtrack validate --local examples/trial-rehearsal.json
  dualtrack validate --json trial.json | jq .errors
"""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("validate", help="check a trial file", description=HELP,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    add_trial_argument(parser)
    add_json_option(parser, help="machine-readable result on stdout")
    parser.set_defaults(func=run)


def as_submitted(spec: TrialSpec, *, local: bool) -> tuple[TrialSpec, str]:
    """The spec whose id and hash the trial gets, and where its local data go (empty when nowhere): with --local,
    the spec a rehearsal submits; outside a checkout (no cdk.json to name the bucket) the file's own."""
    if not local:
        return spec, ""
    from dualtrack.local.staging import rehearsal_data_bucket, staged_trial

    try:
        staged = staged_trial(spec, rehearsal_data_bucket())
    except (OSError, ValueError, KeyError, RuntimeError):
        return spec, ""
    where = ", ".join(dict.fromkeys(u.uri.rsplit("/", 1)[0] + "/" for u in staged.uploads))
    return staged.spec, where


def run(args: argparse.Namespace) -> int:
    try:
        spec = load_trial(args.trial, local=args.local)
    except CommandError as exc:
        print_problems(args.trial, exc.problems, as_json=args.json)
        return 2
    submitted, staged_to = as_submitted(spec, local=args.local)
    layouts = {name: track_layout(spec, name) for name in spec.track_names()}
    scaling = {run: (track, track_layout(spec, track, run=run)) for run, (track, _) in spec.scaling_runs().items()}
    try:
        worst = worst_case_usd(spec, load_price_table(), attempts=DEFAULT_MAX_ATTEMPTS)
    except PriceMissing as exc:
        worst, price_note = {}, str(exc)
    else:
        price_note = ""
        # The API's own check (its preflight): a worst case over limits.max_usd is refused at submission.
        over = budget_problem(spec, worst, DEFAULT_MAX_ATTEMPTS)
        if over is not None:
            print_problems(args.trial, [over], as_json=args.json)
            return 2
    if args.json:
        print(json.dumps({
            "valid": True, "file": args.trial, "trial_id": submitted.trial_id, "spec_sha256": submitted.spec_hash(),
            "tracks": {name: {"devices_per_node": lay.devices_per_node, "nodes": lay.nodes,
                              "data_parallel": lay.data_parallel,
                              "gradient_accumulation_steps": gradient_accumulation_steps(spec, lay)}
                       for name, lay in layouts.items()},
            "scaling_runs": {run: {"track": track, "instance_type": spec.track(track).instance_type,
                                   "nodes": lay.nodes, "devices_per_node": lay.devices_per_node,
                                   "data_parallel": lay.data_parallel,
                                   "gradient_accumulation_steps": gradient_accumulation_steps(spec, lay),
                                   "worst_case_usd": str(worst[run]) if run in worst else None}
                             for run, (track, lay) in scaling.items()},
            "worst_case_usd": {k: str(v) for k, v in worst.items()},
        }, indent=2))
        return 0
    print(f"{args.trial}: valid trial {submitted.trial_id}")
    if staged_to:
        print(f"  id as rehearsed: `dualtrack local run` stages the local data files to {staged_to} first")
    rows = [(name, name, lay, "") for name, lay in layouts.items()] + [
        (run, track, lay, f"; scaling run of {track}" + (f", worst case {usd(worst[run])}" if run in worst else ""))
        for run, (track, lay) in scaling.items()]
    column = max(5, *(len(name) for name, *_ in rows))
    for name, track, lay, suffix in rows:
        print(f"  {name:{column}} {spec.track(track).instance_type} x{lay.nodes}: {lay.world_size} devices, "
              f"tp={lay.tensor_parallel} pp={lay.pipeline_parallel} dp={lay.data_parallel}, "
              f"grad accumulation {gradient_accumulation_steps(spec, lay)} "
              f"(effective batch {spec.effective_batch_size}){suffix}")
    if worst:
        parts = ", ".join(f"{k} {usd(v)}" for k, v in worst.items() if k != "total")
        print(f"  worst case at limits.max_hours: {usd(worst['total'])} ({parts})"
              + (f", within limits.max_usd {usd(Decimal(str(spec.limits.max_usd)))}"
                 if spec.limits and spec.limits.max_usd else ""))
    elif price_note:
        print(f"  worst case: {price_note}")
    return 0
