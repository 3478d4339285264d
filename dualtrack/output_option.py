"""``--json``, and ``--output json|text`` as the AWS CLI spells it, on every command that can answer in JSON."""

from __future__ import annotations

import argparse
from collections.abc import Sequence


class _Output(argparse.Action):
    """``--output json`` sets what ``--json`` sets; ``--output text`` keeps the text answer."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[object] | None, option_string: str | None = None) -> None:
        namespace.json = values == "json"


def add_json_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup, help: str) -> None:
    parser.add_argument("--json", action="store_true", help=f"{help} (also: --output json)")
    parser.add_argument("--output", choices=("json", "text"), action=_Output, dest="json", default=False,
                        help=argparse.SUPPRESS)
