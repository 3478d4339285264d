"""Full-parameter training sharded over the processes, checkpointed with ``torch.distributed.checkpoint``: both tracks
fully sharded (FSDP2: weights, gradients and optimizer state), the same code on either. Saved by 4 processes, resumed
by 2, across tracks too (a trn2 stand-in checkpoint resumed by the GPU fallback), and always the same losses as one
process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.conftest import ROOT
from tests.trainer.helpers import launched, losses, run_error, summary_of

pytestmark = pytest.mark.slow

STEPS = 8
# data_parallel 4 on both tracks (four GPUs; one Trainium2 chip as four logical NeuronCores), run by 1, 2 or 4 CPU
# processes: the same global batch, accumulation and data order, so the same losses.
TRACKS = {"gpu": {"instance_type": "g6e.12xlarge", "nodes": 1, "tensor_parallel": 1, "pipeline_parallel": 1},
          "trn2": {"instance_type": "trn2.3xlarge", "nodes": 1, "tensor_parallel": 1, "pipeline_parallel": 1,
                   "neuron_sdk": "2.33.0"}}
COMMON = {"method": "full", "lora": None, "max_steps": STEPS, "checkpoint_interval_steps": 4, "tracks": TRACKS,
          "evaluation": {"interval_steps": STEPS, "prompts": ["What is 2 plus 3?"], "max_new_tokens": 2}}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One process, no fault: the losses and final samples every sharded run must reproduce."""
    from tests.trainer.conftest import tiny_trial

    base = tmp_path_factory.mktemp("reference")
    data = base / "data"
    data.mkdir()
    (data / "train.jsonl").write_text("\n".join((ROOT / "examples/data/train.jsonl").read_text().splitlines()[:96])
                                      + "\n")
    (data / "validation.jsonl").write_text(
        "\n".join((ROOT / "examples/data/validation.jsonl").read_text().splitlines()[:8]) + "\n")
    spec = base / "spec.json"
    spec.write_text(json.dumps(tiny_trial(str(data), **{**COMMON, "fault_injection": None})))
    done = launched(str(spec), base / "one", 1, 1)
    assert done.returncode == 0, done.stderr[-3000:]
    return {"data": data, **summary_of(base / "one", 1)}


def _faulted_spec(tmp_path: Path, reference: dict[str, Any], track: str) -> str:
    from tests.trainer.conftest import tiny_trial

    spec = tmp_path / f"faulted-{track}.json"
    spec.write_text(json.dumps(tiny_trial(str(reference["data"]), **{
        **COMMON, "fault_injection": {"track": track, "at_step": 6, "mode": "retryable"}})))
    return str(spec)


def _assert_like_reference(before: dict[str, Any], after: dict[str, Any], reference: dict[str, Any]) -> None:
    assert after["resumed_from_step"] == 4 and after["layout"]["world_size_run"] == 2
    assert after["continuity"]["loss_continuous"] is True and after["continuity"]["compared_steps"] == [5, 6]
    got = {**losses(before), **losses(after)}
    assert sorted(got) == list(range(1, STEPS + 1))
    for step, value in losses(reference).items():
        assert got[step] == pytest.approx(value, abs=1e-5), (step, value, got[step])
    assert after["final_samples"] == reference["final_samples"]


# Both tracks run the same parallelism: FSDP2 shards a full-parameter run's state on the Trainium2 stand-in too.
@pytest.mark.parametrize(("track", "sharding"), [("gpu", "fsdp2"), ("trn2", "fsdp2")])
def test_sharded_state_saved_by_four_processes_resumes_on_two(track: str, sharding: str, tmp_path: Path,
                                                              reference: dict[str, Any]) -> None:
    faulted = _faulted_spec(tmp_path, reference, track)
    run_dir = tmp_path / "sharded"
    first = launched(faulted, run_dir, 4, 1, track)
    assert first.returncode != 0
    step_dir = run_dir / "checkpoints" / "step-4"
    manifest = json.loads((step_dir / "manifest.json").read_text())
    assert manifest["optimizer"] == {"format": "torch.distributed.checkpoint", "sharding": sharding,
                                     "processes": 4}
    # Each process wrote its part of the state: four files, none of them the whole state.
    shards = {f["name"]: f["bytes"] for f in manifest["shards"] if f["name"].endswith(".distcp")}
    assert sorted(shards) == [f"__{p}_0.distcp" for p in range(4)]
    assert max(shards.values()) < 0.6 * sum(shards.values())
    assert (step_dir / "model.safetensors").exists()  # the consolidated weights, for a plain loader

    second = launched(faulted, run_dir, 2, 2, track)
    assert second.returncode == 0, (run_error(run_dir, 2), second.stderr[-2000:])
    before, after = summary_of(run_dir, 1), summary_of(run_dir, 2)
    assert before["optimizer"]["sharding"] == after["optimizer"]["sharding"] == sharding
    # The collectives are timed either way (FSDP2's all-gathers and reduce-scatters through timed wrappers), and
    # every step samples how long the first process waited for the last.
    for summary in (before, after):
        comm = summary["communication"]
        assert comm["measured"] is True and comm["communication_s"] > 0 and comm["sync_samples"] > 0
    _assert_like_reference(before, after, reference)


def test_the_gpu_fallback_resumes_a_trn2_fsdp2_checkpoint_at_another_world_size(tmp_path: Path,
                                                                                reference: dict[str, Any]) -> None:
    """The trn2 stand-in run (4 processes, FSDP2, compiled) stops after its step-4 checkpoint; the GPU fallback (2
    processes, FSDP2, eager) resumes from it: the shards are resharded to the new world size, and the losses stay the
    reference's."""
    faulted = _faulted_spec(tmp_path, reference, "trn2")
    trn2_dir = tmp_path / "trn2"
    first = launched(faulted, trn2_dir, 4, 1, "trn2", backend="compiled")
    assert first.returncode != 0 and summary_of(trn2_dir, 1)["optimizer"]["sharding"] == "fsdp2"
    assert summary_of(trn2_dir, 1)["backend"] == "compiled"
    fallback_dir = tmp_path / "gpu-fallback"
    second = launched(faulted, fallback_dir, 2, 1, "gpu", resume_from=trn2_dir)
    assert second.returncode == 0, second.stderr[-3000:]
    after = summary_of(fallback_dir, 1)
    assert after["optimizer"]["sharding"] == "fsdp2"
    assert after["resumed_from_uri"] == str(trn2_dir / "checkpoints" / "step-4")
    _assert_like_reference(summary_of(trn2_dir, 1), after, reference)
