"""What README.md says of JSON output holds: "Every command that answers in JSON takes `--json` (or `--output json`,
as the AWS CLI spells it)". Each `dualtrack ... --json` usage shown in README.md, docs/*.md or a command's --help is
parsed by the real parser, and every command is checked to take both spellings (dualtrack.output_option)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from dualtrack.cli import build_parser

ROOT = Path(__file__).resolve().parents[3]
PARSER = build_parser()
# Commands whose answer is not a JSON object about what they did, so --json would mean nothing.
WITHOUT_JSON = {
    ("completion",): "prints a shell script",
    ("openapi",): "prints (or writes) the OpenAPI document, which is JSON already",
    ("prices", "refresh"): "writes a price table file (JSON) and says where",
}


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next((dict(a.choices) for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})


def leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[tuple[str, ...],
                                                                              argparse.ArgumentParser]:
    """Every command that runs something (no subcommands of its own), by the words that name it."""
    children = subcommands(parser)
    if not children:
        return {path: parser}
    found: dict[tuple[str, ...], argparse.ArgumentParser] = {}
    for name, child in children.items():
        found.update(leaves(child, (*path, name)))
    return found


LEAVES = leaves(PARSER)


def command_of(words: list[str]) -> tuple[str, ...]:
    """The command a usage names: the longest run of subcommand names its words start with."""
    path: list[str] = []
    parser = PARSER
    for word in (w for w in words if not w.startswith("-")):
        children = subcommands(parser)
        if word not in children:
            break
        path.append(word)
        parser = children[word]
    return tuple(path)


def minimal_argv(path: tuple[str, ...]) -> list[str]:
    """The command with a value for each positional and required option: enough for argparse to accept it."""
    argv = list(path)
    for action in LEAVES[path]._actions:
        if action.option_strings and not action.required:
            continue
        value = str(next(iter(action.choices))) if action.choices else "x"
        count = action.nargs if isinstance(action.nargs, int) else 0 if action.nargs in ("?", "*") else 1
        argv += [*action.option_strings[:1], *[value] * count]
    return argv


def json_usages() -> list[tuple[str, str]]:
    """(where, usage) for each command line shown with --json or --output json: in the Markdown (whole commands
    after `dualtrack`, and code spans that start with a command's name) and in every command's --help."""
    texts = {str(p.relative_to(ROOT)): p.read_text() for p in [ROOT / "README.md", *sorted(ROOT.glob("docs/*.md"))]}
    texts |= {f"dualtrack {' '.join(path)} --help": parser.description or "" for path, parser in LEAVES.items()}
    found: list[tuple[str, str]] = []
    for where, text in texts.items():
        spans = re.findall(r"`([^`\n]+)`", text) + re.findall(r"^\s*(?:\.venv/bin/)?(dualtrack .+)$", text, re.M)
        for span in spans:
            usage = re.split(r"\s(?:\||#|>|&&|;)\s", span.split("dualtrack ", 1)[-1])[0]
            words = [w.strip("[]") for w in usage.split()]
            if ("--json" in words or "--output json" in usage) and words[0] in subcommands(PARSER):
                found.append((where, usage))
    return sorted(set(found))


USAGES = json_usages()


def test_the_documents_show_json_usages() -> None:
    """A guard on the finder: README.md shows the rehearsal's --json, and validate's --help its own."""
    assert any(u.startswith("local run") for w, u in USAGES if w == "README.md")
    assert any(u.startswith("validate") for w, u in USAGES if w.startswith("dualtrack validate"))


@pytest.mark.parametrize(("where", "usage"), USAGES, ids=[f"{w}: {u}" for w, u in USAGES])
def test_each_documented_json_usage_is_accepted(where: str, usage: str) -> None:
    path = command_of([w.strip("[]") for w in usage.split()])
    assert path in LEAVES, f"{where}: `{usage}` names no command"
    for spelling in (["--json"], ["--output", "json"]):
        args = PARSER.parse_args([*minimal_argv(path), *spelling])
        assert args.json is True, f"{where}: `dualtrack {' '.join(path)} {' '.join(spelling)}` is not JSON output"


@pytest.mark.parametrize("path", sorted(LEAVES), ids=[" ".join(p) for p in sorted(LEAVES)])
def test_every_command_takes_json_in_both_spellings(path: tuple[str, ...]) -> None:
    options = LEAVES[path]._option_string_actions
    if path in WITHOUT_JSON:
        assert "--json" not in options, f"{' '.join(path)} takes --json now: drop it from WITHOUT_JSON"
        return
    assert "--json" in options and "--output" in options, f"dualtrack {' '.join(path)} has no --json"
    argv = minimal_argv(path)
    assert PARSER.parse_args([*argv, "--json"]).json is True
    assert PARSER.parse_args([*argv, "--output", "json"]).json is True
    assert PARSER.parse_args([*argv, "--output", "text"]).json is False
    assert PARSER.parse_args(argv).json is False
