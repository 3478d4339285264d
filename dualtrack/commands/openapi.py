"""`dualtrack openapi`: print or rewrite the trial API's OpenAPI document (generated from the API's routes)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lambdas.handlers.on_trial_api import openapi_document

HELP = """\
Generate the OpenAPI document of the trial API from its routes. Without --write it prints the document;
with --write it rewrites lambdas/openapi.json (the committed copy a test compares against); with --check it
exits 1 when the committed copy is out of date.

examples:
  dualtrack openapi > openapi.json
  dualtrack openapi --write
  dualtrack openapi --check
"""
DEFAULT_PATH = Path(__file__).resolve().parents[2] / "lambdas" / "openapi.json"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "openapi",
        help="generate the trial API's OpenAPI document",
        description=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the committed document")
    mode.add_argument("--check", action="store_true", help="exit 1 when the committed document is stale")
    parser.add_argument("--path", type=Path, default=DEFAULT_PATH, help="document path (default: %(default)s)")
    parser.set_defaults(func=run)


def document() -> str:
    return openapi_document() + "\n"


def run(args: argparse.Namespace) -> int:
    text = document()
    if args.write:
        args.path.write_text(text)
        print(f"wrote {args.path}", file=sys.stderr)
        return 0
    if args.check:
        current = args.path.read_text() if args.path.exists() else ""
        if current != text:
            print(f"{args.path} is out of date; run `dualtrack openapi --write`", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(text)
    return 0
