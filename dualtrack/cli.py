"""`dualtrack` command line. Each command lives in dualtrack.commands.<name> and registers itself.

A command module imports what its command needs at its top; this module loads only the module of the command given
(every module for the overall --help), so `dualtrack validate` never imports the local runtime or the CDK app."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from dualtrack import __version__
from lambdas.domain.money.prices import PricesInvalid

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
    "dualtrack.commands.completion",
)

# Commands registered by a module of another name.
MODULE_OF_COMMAND = {"reject": "approve"}

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

DESCRIPTION = """\
Run a fine-tuning trial on an NVIDIA GPU track and an AWS Trainium2 track, side by side, and decide with evidence.

typical flow:
  dualtrack validate trial.json        check the trial (field paths and fixes on every problem)
  dualtrack triage trial.json          route by training shape: gpu, trn2_trial or dual_track
  dualtrack estimate trial.json        worst-case cost from the price table (price x nodes x max_hours)
  dualtrack local run trial.json       rehearse the whole control plane on this machine
"""


def chosen_module(argv: Sequence[str]) -> str | None:
    """The module of the command ``argv`` names, or None (no command, or one this CLI does not have: then every
    command is registered, so the help lists them all and argparse names the valid choices)."""
    first = next((a for a in argv if not a.startswith("-")), None)
    if first is None:
        return None
    module = f"dualtrack.commands.{MODULE_OF_COMMAND.get(first, first)}"
    return module if module in COMMAND_MODULES else None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dualtrack", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"dualtrack {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    only = chosen_module(argv) if argv is not None else None
    for name in COMMAND_MODULES:
        if only is None or name == only:
            importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
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
