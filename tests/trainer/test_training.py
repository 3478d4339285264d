"""End-to-end attempts of the CPU trainer: loss, checkpoints, planned faults, resume continuity, forced failures."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import pytest
from trainer import FAULT_EXIT_CODE, PERMANENT_FAULT_EXIT_CODE, SIGTERM_EXIT_CODE

from lambdas.domain.evidence.run_summary import parse_summary
from tests.trainer.helpers import attempt, losses

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One clean 12-step run (no fault on its track) shared by the comparisons below."""
    from tests.trainer.conftest import ROOT, tiny_trial

    base = tmp_path_factory.mktemp("clean")
    data = base / "data"
    data.mkdir()
    (data / "train.jsonl").write_text("\n".join((ROOT / "examples/data/train.jsonl").read_text().splitlines()[:96])
                                      + "\n")
    (data / "validation.jsonl").write_text(
        "\n".join((ROOT / "examples/data/validation.jsonl").read_text().splitlines()[:8]) + "\n")
    spec = base / "spec.json"
    trial = tiny_trial(str(data))
    trial["fault_injection"] = None
    trial.pop("fault_injection")
    spec.write_text(json.dumps(trial))
    code, summary = attempt(str(spec), str(base / "trn2"), track="trn2")
    assert code == 0
    return summary


def test_loss_falls_and_summary_is_complete(uninterrupted: dict) -> None:
    summary = parse_summary(uninterrupted)
    assert summary.status == "succeeded" and summary.global_step == 12 and summary.steps_this_attempt == 12
    per_step = [p.loss for p in summary.loss.per_step]
    assert sum(per_step[-3:]) / 3 < sum(per_step[:3]) / 3 - 0.05
    assert [p.step for p in summary.loss.eval] == [6, 12]
    assert summary.validation_loss == summary.loss.eval[-1].loss
    assert [c.step for c in summary.checkpoints] == [4, 8, 12]
    # The adapter and its config, the optimizer (.metadata and one .distcp), scheduler, RNG, trainer state, manifest.
    assert all(c.files == 8 and c.bytes > 0 for c in summary.checkpoints)
    # Saves run in the background: the steps after 4 and 8 may overlap one, and the record says which did.
    overlap = summary.checkpoint_overlap
    assert overlap.asynchronous and overlap.steps_overlapping + overlap.steps_clear == 11
    assert summary.stand_in and summary.backend == "cpu" and summary.precision == "fp32"
    assert summary.layout is not None and summary.layout.data_parallel == 8
    assert summary.tokens_this_attempt == 12 * 8 * 32 and summary.samples_consumed == 96
    assert len(summary.final_samples) == 1 and len(summary.final_samples[0].token_ids) == 4
    assert summary.environment.torch and summary.environment.transformers
    assert summary.phases.train_s > 0 and summary.compile.cache == "none"
    # LoRA r=8 on q, k, v and o of one 32-wide layer: an A (8x32) and a B (32x8) each, the only trainable tensors.
    learning = summary.learning
    assert learning is not None and learning.weights_changed and learning.steps == 12
    assert learning.trainable_params == 4 * 2 * 8 * 32 and learning.trainable_tensors == 8
    assert learning.tensors_changed == 8 and learning.norm_start != learning.norm_end


def test_a_loop_whose_optimizer_step_never_reaches_the_weights_is_recorded_and_named(
        write_spec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop runs, its losses are recorded and nothing raises, but no update lands on the weights: the summary
    says so, and the report's learning gate names the run as one that did not learn."""
    from trainer.optim import Optimizer

    from lambdas.domain.evidence.learning import learning_problems
    from lambdas.domain.trial.rules import parse_trial

    monkeypatch.setattr(Optimizer, "step", lambda self, backend: None)
    spec = write_spec(fault_injection=None)
    code, raw = attempt(spec, str(tmp_path / "gpu"))
    summary = parse_summary(raw)
    assert code == 0 and summary.status == "succeeded" and summary.global_step == 12
    learning = summary.learning
    assert learning is not None and not learning.weights_changed and learning.steps == 12
    assert learning.tensors_changed == 0 and learning.norm_start == learning.norm_end
    trial = parse_trial(Path(spec).read_text(), allow_local_paths=True)
    problems = learning_problems([summary], trial)
    assert problems[0] == ("attempt 1: did not learn: its weights did not change over 12 step(s) (the failure mode "
                           "of a loop whose optimizer step never reached the weights)")


def test_retryable_fault_resumes_bit_for_bit(write_spec, tmp_path: Path, uninterrupted: dict) -> None:
    spec = write_spec()
    run_dir = str(tmp_path / "trn2")
    code, first = attempt(spec, run_dir, track="trn2", number=1)
    assert code == FAULT_EXIT_CODE
    assert first["status"] == "faulted" and first["global_step"] == 10 and first["fault"]["fired"]
    assert first["learning"]["weights_changed"] and first["learning"]["steps"] == 10

    code, second = attempt(spec, run_dir, track="trn2", number=2)
    assert code == 0 and second["status"] == "succeeded" and second["global_step"] == 12
    assert second["resumed_from_step"] == 8 and second["start_step"] == 8
    assert second["rerun_steps"] == 2  # steps 9 and 10 ran before the fault and again after it
    assert second["continuity"]["global_step_continuous"] is True
    assert second["continuity"]["loss_continuous"] is True
    assert second["continuity"]["max_rel_delta"] == 0.0 and second["continuity"]["compared_steps"] == [9, 10]
    assert second["learning"]["weights_changed"] and second["learning"]["steps"] == 4
    clean = losses(uninterrupted)
    # Bit-for-bit on CPU: the resumed attempt's losses equal an uninterrupted run's at every step.
    assert {s: clean[s] for s in range(1, 11)} == losses(first)
    assert {s: clean[s] for s in range(9, 13)} == losses(second)
    top = json.loads(Path(run_dir, "summary.json").read_text())
    assert top["attempt"] == 2


def test_deferred_loss_reads_keep_every_step_and_resume_bit_for_bit(write_spec, tmp_path: Path, uninterrupted: dict,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The cuda and neuron backends read each step's loss one step late (no per-step device sync); the CPU backend
    run the same way must record the same losses, a faulted attempt its last step, and resume bit for bit."""
    from trainer import backends

    order: list[str] = []

    def step_end(self: backends.Backend) -> None:
        order.append("dispatch")

    def read_later(self: backends.Backend, value: object) -> object:
        def read() -> float:
            order.append("read")
            return float(value.item())  # type: ignore[attr-defined]

        return read

    monkeypatch.setattr(backends.CpuBackend, "loss_read_lag", 1)
    monkeypatch.setattr(backends.CpuBackend, "step_end", step_end)
    monkeypatch.setattr(backends.CpuBackend, "read_later", read_later)
    spec = write_spec()
    run_dir = str(tmp_path / "trn2")
    code, first = attempt(spec, run_dir, track="trn2", number=1)
    assert code == FAULT_EXIT_CODE and first["global_step"] == 10
    assert order[:4] == ["dispatch", "dispatch", "read", "dispatch"]  # step 1 is read after step 2 is queued
    code, second = attempt(spec, run_dir, track="trn2", number=2)
    assert code == 0 and second["resumed_from_step"] == 8
    clean = losses(uninterrupted)
    assert {s: clean[s] for s in range(1, 11)} == losses(first)  # the faulted step's loss is recorded too
    assert {s: clean[s] for s in range(9, 13)} == losses(second)
    assert second["continuity"]["max_rel_delta"] == 0.0
    assert all(t > 0 for t in (first["throughput"]["step_time_s"], second["throughput"]["step_time_s"]))


def test_permanent_fault_fails_every_attempt_then_gpu_fallback_resumes(write_spec, tmp_path: Path,
                                                                      uninterrupted: dict) -> None:
    spec = write_spec(fault_injection={"track": "trn2", "at_step": 6, "mode": "permanent"})
    trn2 = str(tmp_path / "trn2")
    assert attempt(spec, trn2, track="trn2", number=1)[0] == PERMANENT_FAULT_EXIT_CODE
    code, again = attempt(spec, trn2, track="trn2", number=2)
    assert code == PERMANENT_FAULT_EXIT_CODE and again["resumed_from_step"] == 4

    fallback = str(tmp_path / "gpu-fallback")
    code, fb = attempt(spec, fallback, track="gpu", resume_from=trn2, run_name="gpu-fallback")
    assert code == 0 and fb["run"] == "gpu-fallback" and fb["resumed_from_step"] == 4
    assert fb["resumed_from_uri"].startswith(trn2)
    assert all(c["uri"].startswith(fallback) for c in fb["checkpoints"])
    assert fb["continuity"]["loss_continuous"] is True
    assert losses(fb) == {s: v for s, v in losses(uninterrupted).items() if s > 4}
    # The fixed evaluation set at the resumed step, before training here: the same weights, the same loss the
    # uninterrupted run measured at that step (when it evaluated there), else at least a finite loss.
    evaluated = {p[0] if isinstance(p, list) else p["step"]: p[1] if isinstance(p, list) else p["loss"]
                 for p in uninterrupted["loss"]["eval"]}
    assert fb["resume_eval"]["step"] == 4 and fb["resume_eval"]["loss"] > 0
    if 4 in evaluated:
        assert fb["resume_eval"]["loss"] == pytest.approx(evaluated[4], rel=1e-5)


def test_corrupt_and_torn_newest_checkpoints_are_skipped(write_spec, tmp_path: Path) -> None:
    spec = write_spec()
    run_dir = tmp_path / "trn2"
    assert attempt(spec, str(run_dir), track="trn2", number=1)[0] == FAULT_EXIT_CODE
    shard = run_dir / "checkpoints" / "step-8" / "adapter_model.safetensors"
    shard.write_bytes(shard.read_bytes()[:-8] + b"garbage!")
    (run_dir / "checkpoints" / "step-9").mkdir()  # torn: shards (none) but no manifest
    code, second = attempt(spec, str(run_dir), track="trn2", number=2)
    assert code == 0 and second["resumed_from_step"] == 4 and second["rerun_steps"] == 6
    reasons = {s["step"]: s["reason"] for s in second["checkpoints_skipped"]}
    assert "corrupt" in reasons[8] and "torn" in reasons[9]
    assert second["continuity"]["loss_continuous"] is True


@pytest.mark.parametrize("point", ["compile", "step", "save"])
def test_forced_failures_exit_1_with_a_summary(write_spec, tmp_path: Path, monkeypatch, point: str) -> None:
    monkeypatch.setenv("DUALTRACK_FORCE_FAIL", point)
    code, summary = attempt(write_spec(fault_injection=None), str(tmp_path / "gpu"))
    assert code == 1 and summary["status"] == "failed" and point in summary["error"]
    assert summary["learning"] is None  # a failure may take the device with it: no second reading of the weights
    if point == "compile":
        assert summary["compile"]["status"] == "failed"
    if point == "save":
        # The shards were written, the manifest never: a torn checkpoint the next attempt must skip.
        assert summary["global_step"] == 4
        assert not (tmp_path / "gpu" / "checkpoints" / "step-4" / "manifest.json").exists()
        monkeypatch.delenv("DUALTRACK_FORCE_FAIL")
        code, retry = attempt(write_spec(fault_injection=None), str(tmp_path / "gpu"), number=2)
        assert code == 0 and retry["resumed_from_step"] is None and retry["checkpoints_skipped"][0]["step"] == 4


def test_sigterm_writes_a_final_checkpoint_and_exits_143(write_spec, tmp_path: Path, monkeypatch) -> None:
    import trainer.runner as runner

    original = runner.MetricsLog.step

    def step_then_signal(self, step, *args, **kwargs):  # type: ignore[no-untyped-def]
        original(self, step, *args, **kwargs)
        if step == 6:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(runner.MetricsLog, "step", step_then_signal)
    assert threading.current_thread() is threading.main_thread()
    code, summary = attempt(write_spec(fault_injection=None), str(tmp_path / "gpu"))
    assert code == SIGTERM_EXIT_CODE and summary["status"] == "interrupted"
    assert [c["step"] for c in summary["checkpoints"]] == [4, 6]
    assert summary["learning"]["weights_changed"] and summary["learning"]["steps"] == 6
    monkeypatch.setattr(runner.MetricsLog, "step", original)
    code, resumed = attempt(write_spec(fault_injection=None), str(tmp_path / "gpu"), number=2)
    assert code == 0 and resumed["resumed_from_step"] == 6 and resumed["rerun_steps"] == 0
    assert resumed["continuity"]["global_step_continuous"] is True
