"""`dualtrack completion SHELL` prints a shtab script generated from the real parser: every command and
subcommand completes, file arguments complete file names, and no other command imports shtab."""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dualtrack.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[3]


def command_paths(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], set[str]]:
    """Every parser that has subcommands, by the words that reach it, with the names of its subcommands."""
    found: dict[tuple[str, ...], set[str]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found[path] = set(action.choices)
            for name, child in action.choices.items():
                found.update(command_paths(child, (*path, name)))
    return found


COMMANDS = command_paths(build_parser())


def script(shell: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["completion", shell]) == 0
    return capsys.readouterr().out


def test_the_bash_script_lists_every_top_level_command(capsys: pytest.CaptureFixture[str]) -> None:
    text = script("bash", capsys)
    listed = re.search(r"^_shtab_dualtrack_subparsers=\((.*)\)$", text, re.M)
    assert listed, "no top-level command list in the script"
    assert set(listed.group(1).split()) == COMMANDS[()] >= {"validate", "report", "local", "completion"}
    assert re.search(r"^complete .*-F _shtab_dualtrack dualtrack$", text, re.M)


@pytest.mark.parametrize("shell", ["bash", "zsh", "tcsh"])
def test_every_subcommand_appears(shell: str, capsys: pytest.CaptureFixture[str]) -> None:
    text = script(shell, capsys)
    words = set(re.findall(r"[\w-]+", text))
    for path, names in COMMANDS.items():
        assert names <= words, f"{shell}: {' '.join(('dualtrack', *path))} is missing {sorted(names - words)}"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completes_commands_subcommands_choices_and_trial_files(capsys: pytest.CaptureFixture[str]) -> None:
    """Source the script and ask it what a user pressing Tab gets, at each level of the command tree."""
    cases = {" ".join(path): sorted(names) for path, names in COMMANDS.items()}
    cases["local run --fail-trn2"] = ["compile", "save", "step"]
    probes = [f'COMP_WORDS=(dualtrack {words} ""); COMP_CWORD={len(words.split()) + 1}; _shtab_dualtrack; '
              f'echo "{words}=${{COMPREPLY[*]}}"' for words in cases]
    probes.append('COMP_WORDS=(dualtrack validate examples/trial-rehe); COMP_CWORD=2; _shtab_dualtrack; '
                  'echo "files=${COMPREPLY[*]}"')
    done = subprocess.run(["bash", "-c", "source /dev/stdin <<<\"$SCRIPT\"\n" + "\n".join(probes)],
                          env={"SCRIPT": script("bash", capsys), "PATH": "/usr/bin:/bin"}, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    answers = dict(line.split("=", 1) for line in done.stdout.splitlines())
    for words, expected in cases.items():
        assert sorted(answers[words].split()) == expected, words
    assert "examples/trial-rehearsal.json" in answers["files"].split()


def test_help_says_how_to_install_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["completion", "--help"])
    out = capsys.readouterr().out
    assert "dualtrack completion bash > ~/.local/share/bash-completion/completions/dualtrack" in out
    assert "zsh" in out and "tcsh" in out


def test_an_unknown_shell_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["completion", "cmd.exe"])
    assert exited.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_start_up_does_not_import_shtab() -> None:
    """Only `dualtrack completion` needs shtab; building the whole parser (every command) leaves it unloaded."""
    check = "import sys; from dualtrack.cli import build_parser; build_parser(); print('shtab' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stderr[-2000:]
