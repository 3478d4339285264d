"""A tiny trial (1-layer Llama, 32-token sequences) and its data, written to a temp dir for each test."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def tiny_trial(data_dir: str, **overrides: Any) -> dict[str, Any]:
    spec = json.loads((ROOT / "examples" / "trial-rehearsal.json").read_text())
    spec["model"]["config"] = {"vocab_size": 264, "hidden_size": 32, "intermediate_size": 64,
                               "num_hidden_layers": 1, "num_attention_heads": 8, "num_key_value_heads": 8}
    spec["data"]["train_uri"] = f"{data_dir}/train.jsonl"
    spec["data"]["validation_uri"] = f"{data_dir}/validation.jsonl"
    spec.update({"sequence_length": 32, "max_steps": 12, "checkpoint_interval_steps": 4, "learning_rate": 0.01})
    spec["evaluation"] = {"interval_steps": 6, "prompts": ["What is 2 plus 3?"], "max_new_tokens": 4}
    spec["fault_injection"] = {"track": "trn2", "at_step": 10, "mode": "retryable"}
    for key, value in overrides.items():
        if value is None:
            spec.pop(key, None)
        else:
            spec[key] = value
    return spec


def write_tiny_data(out: Path) -> Path:
    """96 training and 8 validation rows of the example data in ``out`` (created)."""
    out.mkdir(parents=True)
    source = (ROOT / "examples" / "data" / "train.jsonl").read_text().splitlines()
    (out / "train.jsonl").write_text("\n".join(source[:96]) + "\n")
    validation = (ROOT / "examples" / "data" / "validation.jsonl").read_text().splitlines()
    (out / "validation.jsonl").write_text("\n".join(validation[:8]) + "\n")
    return out


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return write_tiny_data(tmp_path / "data")


@pytest.fixture
def write_spec(tmp_path: Path, data_dir: Path) -> Callable[..., str]:
    def write(name: str = "spec.json", **overrides: Any) -> str:
        path = tmp_path / name
        path.write_text(json.dumps(tiny_trial(str(data_dir), **copy.deepcopy(overrides))))
        return str(path)

    return write


@pytest.fixture(autouse=True)
def _fresh_clients() -> None:
    from trainer import storage

    storage.reset_clients()
