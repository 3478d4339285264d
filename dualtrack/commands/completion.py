"""`dualtrack completion`: print a shell completion script generated from the CLI's own parser (shtab)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

SHELLS = ("bash", "zsh", "tcsh")

HELP = """\
Print a completion script for SHELL to standard output. It is generated from this dualtrack's own argument parser,
so it completes every command, subcommand, option and choice of this version, and file names where a command takes
a file (TRIAL.json, --out, --prices, ...). Install it once; run the same line again after upgrading dualtrack.

install:
  bash (bash-completion 2 loads it when a shell starts):
    mkdir -p ~/.local/share/bash-completion/completions
    dualtrack completion bash > ~/.local/share/bash-completion/completions/dualtrack
  zsh (any directory on $fpath, before compinit runs in ~/.zshrc):
    mkdir -p ~/.zfunc && dualtrack completion zsh > ~/.zfunc/_dualtrack
    # in ~/.zshrc: fpath=(~/.zfunc $fpath); autoload -Uz compinit && compinit
  tcsh:
    dualtrack completion tcsh > ~/.dualtrack.completion.csh
    # in ~/.tcshrc: source ~/.dualtrack.completion.csh

  To try it in the current bash without installing: source <(dualtrack completion bash)

exit codes: 0 script printed, 2 unknown shell

examples:
  dualtrack completion bash > ~/.local/share/bash-completion/completions/dualtrack
  dualtrack completion zsh > ~/.zfunc/_dualtrack
"""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("completion", help="print a shell completion script (bash, zsh, tcsh)", description=HELP,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shell", choices=SHELLS, metavar="SHELL", help="one of: " + ", ".join(SHELLS))
    parser.set_defaults(func=run)


def takes_a_path(action: argparse.Action) -> bool:
    """Whether an argument names a file or directory: a Path type, a FILE metavar or a ``*.json`` one."""
    metavar = action.metavar if isinstance(action.metavar, str) else ""
    return action.type is Path or metavar == "FILE" or metavar.endswith(".json")


def mark_paths(parser: argparse.ArgumentParser, file: object) -> None:
    """Complete file names for every path argument of ``parser`` and its subcommands, at any depth."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):  # an alias maps to the same parser
                mark_paths(child, file)
        elif takes_a_path(action) and not hasattr(action, "complete"):
            action.complete = file  # type: ignore[attr-defined]  # shtab reads this attribute


def script(shell: str) -> str:
    """The completion script for ``shell``, from the parser with every command registered."""
    import shtab  # only this command needs it: every other command starts without it

    from dualtrack.cli import build_parser

    parser = build_parser()
    mark_paths(parser, shtab.FILE)
    return shtab.complete(parser, shell=shell)


def run(args: argparse.Namespace) -> int:
    text = script(args.shell)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0
