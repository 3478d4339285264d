"""The ``cuda`` backend on a real NVIDIA GPU: bf16 autocast, deferred loss reads through pinned memory, CUDA-event
timing, device memory peaks, checkpoints of device tensors and their resume — on the device and on the CPU.

Skipped where ``torch.cuda.is_available()`` is false (CI, the development machines); ``make check-gpu`` runs this
module on a machine with a GPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from trainer import FAULT_EXIT_CODE

from lambdas.domain.evidence.run_summary import parse_summary
from tests.trainer.helpers import attempt, losses

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU (make check-gpu)")]

# bf16 autocast on the GPU: the resumed attempt replays the same kernels on the same shapes, so its losses match
# the uninterrupted run's closely but, unlike the fp32 CPU stand-in, are not promised bit for bit.
RESUME_TOLERANCE = 1e-3


def _fault(step: int) -> dict[str, Any]:
    return {"track": "gpu", "at_step": step, "mode": "retryable"}


def test_lora_in_bf16_trains_checkpoints_and_resumes_on_the_gpu(write_spec: Any, tmp_path: Path) -> None:
    code, clean = attempt(write_spec("clean.json", fault_injection=None), str(tmp_path / "clean"), backend="cuda")
    assert code == 0
    summary = parse_summary(clean)
    assert summary.backend == "cuda" and not summary.stand_in and summary.precision == "bf16"
    assert summary.environment.gpu_name and summary.environment.cuda
    assert summary.memory_peak_mib is not None and summary.memory_peak_mib > 0
    per_step = [p.loss for p in summary.loss.per_step]
    assert len(per_step) == 12 and all(v == v for v in per_step)  # every step's loss read back, none NaN
    assert sum(per_step[-3:]) / 3 < sum(per_step[:3]) / 3 - 0.05
    assert [c.step for c in summary.checkpoints] == [4, 8, 12] and all(c.files == 8 for c in summary.checkpoints)

    spec, run_dir = write_spec(fault_injection=_fault(10)), str(tmp_path / "gpu")
    code, first = attempt(spec, run_dir, backend="cuda", number=1)
    assert code == FAULT_EXIT_CODE and first["global_step"] == 10
    code, second = attempt(spec, run_dir, backend="cuda", number=2)
    assert code == 0 and second["resumed_from_step"] == 8 and second["continuity"]["loss_continuous"] is True
    reference = losses(clean)
    for step, value in losses(second).items():
        assert value == pytest.approx(reference[step], rel=RESUME_TOLERANCE), (step, reference[step], value)


def test_a_full_parameter_checkpoint_written_from_the_gpu_resumes_on_the_cpu(write_spec: Any,
                                                                              tmp_path: Path) -> None:
    """The fallback direction in reverse: optimizer state saved as device tensors loads into a CPU process."""
    spec = write_spec(method="full", lora=None, fault_injection=_fault(6))
    run_dir = str(tmp_path / "gpu")
    code, first = attempt(spec, run_dir, backend="cuda", number=1)
    assert code == FAULT_EXIT_CODE and first["global_step"] == 6
    manifest = json.loads((Path(run_dir) / "checkpoints" / "step-4" / "manifest.json").read_text())
    assert manifest["optimizer"]["format"] == "torch.distributed.checkpoint"
    code, second = attempt(spec, run_dir, backend="cpu", number=2)
    assert code == 0 and second["resumed_from_step"] == 4 and second["backend"] == "cpu"
    assert second["continuity"]["global_step_continuous"] is True
    # bf16 on the GPU against fp32 on the CPU: the same trajectory within mixed-precision noise.
    gpu, cpu = losses(first), losses(second)
    for step in (5, 6):
        assert cpu[step] == pytest.approx(gpu[step], rel=0.02), (step, gpu[step], cpu[step])
