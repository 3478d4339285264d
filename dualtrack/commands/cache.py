"""`dualtrack cache list`: compile-cache entries with hit rates and the compile time they saved."""

from __future__ import annotations

import argparse

from dualtrack.client.cli_support import add_connection_arguments, describe, emit_json, open_api, remote_command
from dualtrack.client.display import cache_lines
from dualtrack.client.errors import EXIT_OK

HELP = describe(
    """\
List the Neuron compile-cache registry: one entry per cache key (model, compiler version, sequence length,
parallel layout, flags), with hits, misses, hit rate, first-compile seconds, compile seconds saved by hits, size and
last use; then totals per model and compiler version.""",
    """\
  dualtrack cache list
  dualtrack cache list --model meta-llama-llama-3-1-8b --compiler-version 2.21.0
  dualtrack cache list --json | jq '.groups[] | {model, hit_rate}'""",
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("cache", help="the Neuron compile-cache registry", description=HELP,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="cache_command", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="entries and hit rates", description=HELP,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    listing.add_argument("--model", help="only this model slug")
    listing.add_argument("--compiler-version", help="only this neuronx-cc version")
    add_connection_arguments(listing)
    listing.set_defaults(func=run_list)


@remote_command
def run_list(args: argparse.Namespace) -> int:
    body = open_api(args).compile_cache(model=args.model, compiler_version=args.compiler_version)
    if args.json:
        emit_json(body)
    else:
        print("\n".join(cache_lines(body)))
    return EXIT_OK
