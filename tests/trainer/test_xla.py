"""The retired PyTorch/XLA path (the ``xla`` backend, ``trainer.legacy_xla``) for real on XLA:CPU (``make check-xla``:
torch-xla side venv, PJRT_DEVICE=CPU): device, mark_step, xm.optimizer_step, the persistent compile cache and
checkpoint save/load through XLA tensors. Skips cleanly where torch-xla is not installed (the main venv)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from trainer import FAULT_EXIT_CODE

from lambdas.domain.vocabulary import trn2_backend
from tests.trainer.helpers import attempt, losses

pytestmark = pytest.mark.xla
pytest.importorskip("torch_xla", reason="torch-xla is installed only in the XLA side venv (make check-xla)")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    # XLA initialises its persistent cache once per process, so the tests here share one.
    return str(tmp_path_factory.mktemp("xla-cache"))


# The shipped examples declare a TorchNeuron release; the retired stack is what an image up to Neuron 2.31 carries,
# so these runs declare the last such release themselves.
XLA_SDK = "2.31.0"


@pytest.fixture
def xla_spec(write_spec: Callable[..., str]) -> Callable[..., str]:
    assert trn2_backend(XLA_SDK) == "xla"

    def write(**overrides: Any) -> str:
        path = Path(write_spec(**overrides))
        spec = json.loads(path.read_text())
        spec["tracks"]["trn2"]["neuron_sdk"] = XLA_SDK
        path.write_text(json.dumps(spec))
        return str(path)

    return write


@pytest.fixture(autouse=True)
def _pjrt_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PJRT_DEVICE", os.environ.get("PJRT_DEVICE", "CPU"))


def test_short_run_through_the_xla_backend(xla_spec: Callable[..., str], tmp_path: Path, cache: str) -> None:
    spec = xla_spec(max_steps=4, checkpoint_interval_steps=2, fault_injection=None,
                    evaluation={"interval_steps": 2, "prompts": ["What is 2 plus 3?"], "max_new_tokens": 3})
    code, summary = attempt(spec, str(tmp_path / "trn2"), track="trn2", backend="xla",
                            cache_url=cache)
    assert code == 0 and summary["backend"] == "xla" and summary["stand_in"]
    assert summary["environment"]["torch_xla"]
    assert summary["compile"]["cache"] == "miss" and summary["compile"]["cache_files_after"] > 0
    per_step = list(losses(summary).values())
    assert per_step[-1] < per_step[0]
    assert [c["step"] for c in summary["checkpoints"]] == [2, 4]
    _, eager = attempt(spec, str(tmp_path / "eager"), track="trn2", backend="cpu")
    assert per_step == pytest.approx(list(losses(eager).values()), rel=1e-4)  # XLA trains like eager


def test_fault_and_resume_through_the_xla_backend(xla_spec: Callable[..., str], tmp_path: Path, cache: str) -> None:
    spec = xla_spec()
    run_dir = str(tmp_path / "trn2")
    code, first = attempt(spec, run_dir, track="trn2", backend="xla", cache_url=cache, number=1)
    assert code == FAULT_EXIT_CODE and first["global_step"] == 10
    code, second = attempt(spec, run_dir, track="trn2", backend="xla", cache_url=cache, number=2)
    assert code == 0 and second["resumed_from_step"] == 8 and second["global_step"] == 12
    # The resumed attempt starts from a warm cache; its first step (optimizer state loaded from the checkpoint)
    # may still trace graphs the faulted attempt never ran, so hit or miss depends on those graphs.
    assert second["compile"]["cache_files_before"] > 0 and second["compile"]["cache"] in ("hit", "miss")
    assert second["continuity"]["global_step_continuous"] is True
    assert second["continuity"]["loss_continuous"] is True, second["continuity"]
