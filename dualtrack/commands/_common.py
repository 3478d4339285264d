"""Helpers the commands share: reading a trial file and reporting problems without tracebacks."""

from __future__ import annotations

import argparse
import json
import sys
from decimal import Decimal
from pathlib import Path
from typing import TypeAlias

from lambdas.domain.json_types import JsonScalar, JsonValue
from lambdas.domain.trial.rules import Problem, TrialInvalid, duplicate_key_problems, parse_trial
from lambdas.domain.trial.spec import TrialSpec

# JSON whose numbers may be Decimals and whose arrays may be tuples: what :func:`to_jsonable` turns into JSON.
WithDecimals: TypeAlias = (Decimal | JsonScalar | list["WithDecimals"] | tuple["WithDecimals", ...]
                           | dict[str, "WithDecimals"])


class CommandError(Exception):
    """A user-facing failure: printed as one line per problem, exit code 2."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("; ".join(map(str, problems)))


def add_trial_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trial", metavar="TRIAL.json", help="trial file ('-' reads standard input)")
    parser.add_argument("--local", action="store_true",
                        help="also accept local data paths (rehearsals); the API accepts only s3:// URIs")


def read_trial_text(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    file = Path(path)
    if not file.exists():
        raise CommandError([Problem("", f"{path}: no such file")])
    if file.is_dir():
        raise CommandError([Problem("", f"{path}: is a directory, expected a trial JSON file")])
    try:
        return file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandError([Problem("", f"{path}: cannot read ({exc})")]) from None


def load_trial(path: str, *, local: bool) -> TrialSpec:
    text = read_trial_text(path)
    if not text.strip():
        raise CommandError([Problem("", f"{path}: empty file, expected a trial JSON object")])
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise CommandError([Problem("", f"malformed JSON at {where}: {exc.msg}")]) from None
    twice = duplicate_key_problems(text)
    if twice:
        raise CommandError(twice)
    try:
        return parse_trial(data, allow_local_paths=local)
    except TrialInvalid as exc:
        raise CommandError(exc.problems) from None


def print_problems(source: str, problems: list[Problem], *, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"valid": False, "file": source,
                          "errors": [{"path": p.path, "message": p.message} for p in problems]}, indent=2))
        return
    for problem in problems:
        print(f"{source}: {problem}", file=sys.stderr)


def to_jsonable(value: WithDecimals) -> JsonValue:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dict):
        return {k: to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    return value


def usd(value: Decimal) -> str:
    return f"${value.quantize(Decimal('0.01')):,}"
