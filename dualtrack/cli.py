"""`dualtrack` command line. Each command lives in dualtrack.commands.<name> and registers itself."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from dualtrack import __version__
from lambdas.domain.prices import PricesInvalid

# Order here is the order in --help.
COMMAND_MODULES: tuple[str, ...] = (
    "dualtrack.commands.validate",
    "dualtrack.commands.triage",
    "dualtrack.commands.estimate",
    "dualtrack.commands.prices",
    "dualtrack.commands.stage",
    *(f"dualtrack.commands.{n}" for n in ("submit", "approve", "status", "watch", "report", "cancel", "cache")),
    "dualtrack.commands.local",
    "dualtrack.commands.openapi",
)

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

DESCRIPTION = """\
Run a fine-tuning trial on an NVIDIA GPU track and an AWS Trainium2 track, side by side, and decide with evidence.

typical flow:
  dualtrack validate trial.json        check the trial (field paths and fixes on every problem)
  dualtrack triage trial.json          route by training shape: gpu, trn2_trial or dual_track
  dualtrack estimate trial.json        worst-case cost from the price table (price x nodes x max_hours)
  dualtrack local run trial.json       rehearse the whole control plane on this machine
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dualtrack", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"dualtrack {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except PricesInvalid as exc:  # a --prices FILE or $DUALTRACK_PRICE_TABLE any pricing command reads
        print(f"dualtrack: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
