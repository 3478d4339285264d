"""`dualtrack prices`: show the price table in force, or refresh it from the AWS Pricing API."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dualtrack.output_option import add_json_option
from dualtrack.pricing import PRICE_TABLE_ENV, load_table_file, refresh

HELP = f"""\
Prices come from a versioned table (shipped with dualtrack, with its source and date), never from constants in
code. `refresh` asks the AWS Pricing API for current on-demand rates (needs AWS credentials with
pricing:GetProducts) and writes a new table; point dualtrack at it with --prices FILE or ${PRICE_TABLE_ENV}.
Rows marked `estimate` have no confirmed public list price: refresh them or override them with your negotiated
rate before trusting a cost comparison.

examples:
  dualtrack prices show
  dualtrack prices refresh --region us-east-1 --out prices.json
"""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("prices", help="show or refresh the price table", description=HELP,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="prices_command", metavar="ACTION", required=True)
    show = actions.add_parser("show", help="print the table in force")
    show.add_argument("--prices", metavar="FILE", help="price table file (default: shipped table)")
    add_json_option(show, help="machine-readable result on stdout")
    show.set_defaults(func=run_show)
    ref = actions.add_parser("refresh", help="pull current on-demand rates from the AWS Pricing API")
    ref.add_argument("--region", default="us-east-1", help="region whose rates to fetch (default us-east-1)")
    ref.add_argument("--out", required=True, metavar="FILE", help="where to write the refreshed table")
    ref.add_argument("--prices", metavar="FILE", help="table to start from (default: shipped table)")
    ref.set_defaults(func=run_refresh)


def run_show(args: argparse.Namespace) -> int:
    table = load_table_file(args.prices)
    if args.json:
        print(table.model_dump_json(indent=2))
        return 0
    print(f"price table {table.version} ({table.currency})\nsource: {table.source}")
    for region, rows in sorted(table.instances.items()):
        print(f"\n{region}")
        for itype, row in sorted(rows.items()):
            print(f"  {itype:16} {row.hourly_usd:>10} USD/h  {row.confidence}")
    return 0


def run_refresh(args: argparse.Namespace) -> int:
    try:
        table, missing = refresh(args.region, base=load_table_file(args.prices),
                                 progress=lambda m: print(m, file=sys.stderr))
    except Exception as exc:  # botocore errors: credentials, throttling, network
        print(f"prices refresh failed: {exc}", file=sys.stderr)
        return 1
    Path(args.out).write_text(table.model_dump_json(indent=2) + "\n")
    print(f"wrote {args.out} (version {table.version})")
    if missing:
        print(f"no on-demand rate returned for: {', '.join(missing)} (kept previous rows)", file=sys.stderr)
    return 0
