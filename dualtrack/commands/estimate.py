"""`dualtrack estimate`: the pre-flight worst case the API checks against limits.max_usd."""

from __future__ import annotations

import argparse
import json

from dualtrack.commands._common import CommandError, add_trial_argument, load_trial, print_problems, usd
from dualtrack.output_option import add_json_option
from dualtrack.pricing import load_table_file
from lambdas.domain.money.prices import PriceMissing, worst_case_usd
from lambdas.domain.vocabulary import DEFAULT_MAX_ATTEMPTS

HELP = """\
Worst-case cost of a trial: hourly price x nodes x limits.max_hours x attempts for each track, plus a GPU fallback
run when the trial has both tracks, plus each scaling run (a track declaring `"nodes": [1, 2]` also trains a whole
run at each count below the largest: `gpu-n1`, priced at its own node count). Every attempt Batch makes may run
for max_hours (it is each attempt's timeout), so the stage's max_attempts (default 2) multiplies the ceiling. The
API refuses a submission whose worst case exceeds limits.max_usd, or a quota of the owner's team.

exit codes: 0 within limits (or no limits), 1 over limits.max_usd, 2 invalid trial or no price

examples:
  dualtrack estimate examples/trial-llama31-8b-lora.json
  dualtrack estimate --region us-west-2 --prices prices.json trial.json
  dualtrack estimate --attempts 3 trial.json      # a stage with max_attempts 3
"""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("estimate", help="worst-case cost against limits", description=HELP,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    add_trial_argument(parser)
    parser.add_argument("--region", default=None, help="price region (default: the table's default region)")
    parser.add_argument("--prices", metavar="FILE", help="price table file (default: shipped table)")
    parser.add_argument("--attempts", type=int, default=DEFAULT_MAX_ATTEMPTS, choices=range(1, 11), metavar="N",
                        help=f"Batch attempts per run: the stage's max_attempts (default {DEFAULT_MAX_ATTEMPTS})")
    add_json_option(parser, help="machine-readable result on stdout")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        spec = load_trial(args.trial, local=args.local)
    except CommandError as exc:
        print_problems(args.trial, exc.problems, as_json=args.json)
        return 2
    table = load_table_file(args.prices)
    try:
        worst = worst_case_usd(spec, table, args.region, args.attempts)
    except PriceMissing as exc:
        print(f"{args.trial}: {exc}")
        return 2
    limit = spec.limits.max_usd if spec.limits else None
    scaling = spec.scaling_runs()
    over = bool(worst) and limit is not None and worst["total"] > type(worst["total"])(str(limit))
    if args.json:
        print(json.dumps({"trial_id": spec.trial_id, "price_table": table.version,
                          "worst_case_usd": {k: str(v) for k, v in worst.items()},
                          "runs": {name: {"instance_type": spec.run_track(name).instance_type,
                                          "nodes": spec.run_track(name).nodes,
                                          "scaling": name in scaling}
                                   for name in worst if name != "total"},
                          "max_usd": limit, "over_limit": over}, indent=2))
    elif not worst:
        print(f"{spec.trial_id}: no limits.max_hours, so no worst case; add limits {{max_hours, max_usd}}")
    else:
        for name, value in worst.items():
            if name != "total":
                track = spec.run_track(name)
                print(f"  {name:12} {track.instance_type} x{track.nodes} for {spec.limits.max_hours} h "  # type: ignore[union-attr]
                      f"x {args.attempts} attempt(s) = {usd(value)}"
                      + (f" (scaling run of {scaling[name][0]})" if name in scaling else ""))
        print(f"worst case {usd(worst['total'])} (price table {table.version})"
              + (f" vs limits.max_usd {usd(type(worst['total'])(str(limit)))}: {'OVER' if over else 'within'}"
                 if limit is not None else ""))
    return 1 if over else 0
