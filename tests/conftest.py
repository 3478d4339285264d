"""Shared fixtures: example trials as dicts, and an isolated AWS environment for every test."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


@pytest.fixture(autouse=True)
def _no_real_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests never reach AWS: fake credentials, a fixed region, metrics publishing off.
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SECURITY_TOKEN": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "DUALTRACK_METRICS": "off",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


def load_example(name: str) -> dict[str, Any]:
    return json.loads((EXAMPLES / name).read_text())


@pytest.fixture
def example_trial() -> dict[str, Any]:
    return copy.deepcopy(load_example("trial-llama31-8b-lora.json"))
