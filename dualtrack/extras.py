"""The optional parts of an install, and the one line a command prints when the part it needs is missing.

`pip install dualtrack` installs the CLI and what the Lambda functions import. Commands that need more name the
extra that brings it, before they import any of it:

  deploy      the CDK app (infra/): aws-cdk-lib, constructs, cdk-nag; `dualtrack stage cost` synthesizes it
  rehearsal   `dualtrack local run`: moto's server with the services the local plane emulates, the CDK app it
              synthesizes, and the trainer's stack (the train extra) its Batch jobs run

Each check looks modules up without importing them (importlib.util.find_spec), so it costs nothing when they are
there; the command then imports them where it uses them.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from typing import TextIO

# Distinct from every other exit code of the CLI (0-6, 8, 130): a script can tell "install more" from a failure.
EXIT_MISSING_EXTRA = 9

DEPLOY_MODULES: tuple[str, ...] = ("aws_cdk", "constructs", "cdk_nag")
TRAIN_MODULES: tuple[str, ...] = ("torch", "transformers", "peft", "safetensors")
# moto's server needs flask; psutil ends the jobs' process trees.
REHEARSAL_MODULES: tuple[str, ...] = ("moto", "flask", "psutil", *DEPLOY_MODULES, *TRAIN_MODULES)

MODULES_OF_EXTRA: dict[str, tuple[str, ...]] = {
    "deploy": DEPLOY_MODULES,
    "train": TRAIN_MODULES,
    "rehearsal": REHEARSAL_MODULES,
}


def missing_modules(modules: Sequence[str]) -> list[str]:
    """The modules of ``modules`` this environment cannot import (looked up, not imported)."""
    missing = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a parent that fails to import; a module set to None in sys.modules
            found = False
        if not found:
            missing.append(name)
    return missing


def install_hint(extra: str) -> str:
    return f"pip install 'dualtrack[{extra}]'"


def missing_extra_message(command: str, extra: str, missing: Sequence[str]) -> str:
    return f"{command} needs the {extra} extra: {install_hint(extra)} (not installed: {', '.join(missing)})"


def extra_missing(extra: str, command: str, *, stream: TextIO | None = None) -> bool:
    """Whether a module of ``extra`` is not installed; if so, print one line naming the extra to install (the
    command then returns EXIT_MISSING_EXTRA)."""
    missing = missing_modules(MODULES_OF_EXTRA[extra])
    if missing:
        print(missing_extra_message(command, extra, missing), file=stream or sys.stderr)
    return bool(missing)
