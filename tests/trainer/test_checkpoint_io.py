"""Checkpoint and summary I/O on local paths and on S3 (moto): write-once manifests, verification, resume."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest
import torch
from moto import mock_aws
from trainer import FAULT_EXIT_CODE, checkpoint, storage
from trainer.distributed import Distributed

from tests.trainer.helpers import attempt

SPEC_HASH = "a" * 64


def _checkpointer(run_dir: str, *, asynchronous: bool = False) -> checkpoint.Checkpointer:
    return checkpoint.Checkpointer(run_dir, interval=4, max_steps=100, dist=Distributed(), sharding="replicated",
                                   asynchronous=asynchronous)


def _snapshot(step: int, *, spec_hash: str = SPEC_HASH) -> checkpoint.Snapshot:
    optimizer = {"w": {"step": torch.tensor(float(step)), "exp_avg": torch.full((4,), float(step)),
                       "exp_avg_sq": torch.ones(4)}}
    main = checkpoint.MainFiles(weights={"w": torch.arange(4.0) + step}, lora_config={"r": 2},
                                scheduler={"last_epoch": step}, rng=checkpoint.rng_state(),
                                state={"global_step": step, "data_position": {"samples_consumed": step * 8},
                                       "spec_hash": spec_hash},
                                meta={"track": "trn2"})
    return checkpoint.Snapshot(step, optimizer, main)


def _save(run_dir: str, step: int, *, spec_hash: str = SPEC_HASH) -> checkpoint.SavedCheckpoint:
    saver = _checkpointer(run_dir)
    assert saver.save(_snapshot(step, spec_hash=spec_hash), blocking=True)
    return saver.saved[-1]


@pytest.fixture
def s3_bucket():  # type: ignore[no-untyped-def]
    with mock_aws():
        storage.reset_clients()
        boto3.client("s3").create_bucket(Bucket="artifacts")
        yield "s3://artifacts/trials/t1/trn2"
    storage.reset_clients()


@pytest.mark.parametrize("where", ["local", "s3"])
def test_save_verify_load_round_trip(where: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    run_dir = request.getfixturevalue("s3_bucket") if where == "s3" else str(tmp_path / "run")
    saved = _save(run_dir, 4)
    _save(run_dir, 8)
    # .metadata + one .distcp (the optimizer, torch.distributed.checkpoint), the adapter and its config, the
    # scheduler, the RNG, the trainer state, and the manifest.
    assert saved.files == 8 and saved.bytes > 0
    assert checkpoint.list_steps(run_dir) == [4, 8]
    found = checkpoint.load_newest([run_dir], spec_hash=SPEC_HASH)
    assert found.loaded is not None and found.loaded.step == 8 and not found.skipped
    assert torch.equal(found.loaded.weights["w"], torch.arange(4.0) + 8)
    assert torch.equal(found.loaded.optimizer["w"]["exp_avg"], torch.full((4,), 8.0))
    assert float(found.loaded.optimizer["w"]["step"]) == 8.0
    assert found.loaded.state["data_position"]["samples_consumed"] == 64
    manifest = found.loaded.manifest
    assert manifest["lora"] and manifest["optimizer"]["format"] == "torch.distributed.checkpoint"
    assert manifest["bytes"] == sum(f["bytes"] for f in manifest["shards"])


@pytest.mark.parametrize("where", ["local", "s3"])
def test_manifest_is_written_once(where: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    run_dir = request.getfixturevalue("s3_bucket") if where == "s3" else str(tmp_path / "run")
    uri = storage.join(run_dir, "checkpoints", "step-1", "manifest.json")
    storage.write_once(uri, b"first")
    with pytest.raises(storage.AlreadyExists):
        storage.write_once(uri, b"second")
    assert storage.read_bytes(uri) == b"first"


def test_saving_a_committed_step_touches_none_of_its_files(tmp_path: Path) -> None:
    run_dir = str(tmp_path / "run")
    _save(run_dir, 4)
    step_dir = tmp_path / "run" / "checkpoints" / "step-4"
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in step_dir.iterdir()}
    again = _checkpointer(run_dir)
    assert again.save(_snapshot(4, spec_hash="b" * 64), blocking=True) is False
    assert {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in step_dir.iterdir()} == before
    assert again.saved == []


def test_a_corrupt_newest_checkpoint_is_skipped_on_s3(s3_bucket: str) -> None:
    _save(s3_bucket, 4)
    _save(s3_bucket, 8)
    bucket, key = storage.split_s3(storage.join(s3_bucket, "checkpoints", "step-8", "__0_0.distcp"))
    boto3.client("s3").put_object(Bucket=bucket, Key=key, Body=b"flipped")
    found = checkpoint.load_newest([s3_bucket], spec_hash=SPEC_HASH)
    assert found.loaded is not None and found.loaded.step == 4
    assert found.skipped[0].step == 8 and "__0_0.distcp" in found.skipped[0].reason


def _rewrite_manifest(run_dir: Path, step: int, change: Callable[[dict[str, Any]], None]) -> None:
    path = run_dir / "checkpoints" / f"step-{step}" / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


def _point_outside(manifest: dict[str, Any]) -> None:
    manifest["shards"][0]["name"] = "../step-4/" + manifest["shards"][0]["name"]


def _list_a_missing_shard(manifest: dict[str, Any]) -> None:
    manifest["shards"].append({"name": "__1_0.distcp", "sha256": "0" * 64, "bytes": 10})


def _drop_the_weights(manifest: dict[str, Any]) -> None:
    manifest["shards"] = [f for f in manifest["shards"] if not f["name"].endswith(".safetensors")]


def _drop_the_optimizer_data(manifest: dict[str, Any]) -> None:
    manifest["shards"] = [f for f in manifest["shards"] if f["name"] != "__0_0.distcp"]


@pytest.mark.parametrize(("change", "reason"), [
    (_point_outside, "outside its own step directory"),
    (_drop_the_optimizer_data, "lacks __0_0.distcp"),
    (_list_a_missing_shard, "__1_0.distcp is missing"),
    (_drop_the_weights, "lacks adapter_model.safetensors"),
])
def test_a_manifest_that_disagrees_with_its_files_is_refused(tmp_path: Path, change: Any, reason: str) -> None:
    run_dir = tmp_path / "run"
    _save(str(run_dir), 4)
    _save(str(run_dir), 8)
    _rewrite_manifest(run_dir, 8, change)
    found = checkpoint.load_newest([str(run_dir)], spec_hash=SPEC_HASH)
    assert found.loaded is not None and found.loaded.step == 4
    assert [s.step for s in found.skipped] == [8] and reason in found.skipped[0].reason


def test_a_manifest_claiming_a_later_step_over_earlier_files_is_refused(tmp_path: Path) -> None:
    """A step-20 directory holding step 8's files under a manifest that says 20: the trainer state's own step
    disagrees, so resuming there would replay 12 steps' data as if trained."""
    import shutil

    run_dir = tmp_path / "run"
    _save(str(run_dir), 4)
    _save(str(run_dir), 8)
    shutil.copytree(run_dir / "checkpoints" / "step-8", run_dir / "checkpoints" / "step-20")
    _rewrite_manifest(run_dir, 20, lambda manifest: manifest.update(step=20))
    found = checkpoint.load_newest([str(run_dir)], spec_hash=SPEC_HASH)
    assert found.loaded is not None and found.loaded.step == 8
    assert found.skipped[0].step == 20 and "its trainer state is step 8" in found.skipped[0].reason


def test_optimizer_data_the_reader_cannot_load_falls_back_to_an_older_checkpoint(tmp_path: Path) -> None:
    """The manifest verifies (its hash was rewritten to match), but ``torch.distributed.checkpoint`` cannot read the
    data file: its ``CheckpointException`` is a ``BaseException``, which must not end the attempt."""
    import hashlib

    run_dir = tmp_path / "run"
    _save(str(run_dir), 4)
    _save(str(run_dir), 8)
    data = b"not a torch.distributed.checkpoint data file"
    (run_dir / "checkpoints" / "step-8" / "__0_0.distcp").write_bytes(data)

    def rehash(manifest: dict[str, Any]) -> None:
        record = next(f for f in manifest["shards"] if f["name"] == "__0_0.distcp")
        record.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())

    _rewrite_manifest(run_dir, 8, rehash)
    found = checkpoint.load_newest([str(run_dir)], spec_hash=SPEC_HASH)
    assert found.loaded is not None and found.loaded.step == 4
    assert found.skipped[0].step == 8 and "does not load" in found.skipped[0].reason


def test_a_checkpoint_of_another_spec_is_refused(tmp_path: Path) -> None:
    run_dir = str(tmp_path / "run")
    _save(run_dir, 4)
    _save(run_dir, 8, spec_hash="b" * 64)
    found = checkpoint.load_newest([run_dir], spec_hash=SPEC_HASH)
    assert found.loaded is not None and found.loaded.step == 4
    assert "belongs to another spec" in found.skipped[0].reason
    assert checkpoint.load_newest([run_dir], spec_hash="c" * 64).loaded is None


def test_an_asynchronous_save_commits_only_once_its_files_are_written(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    saver = _checkpointer(str(run_dir), asynchronous=True)
    committed: list[int] = []
    saver.on_commit = lambda saved: committed.append(saved.step)
    assert saver.save(_snapshot(4), blocking=False) and saver.in_flight
    assert saver.pending is not None
    saver.pending.future.result()  # the files are written in the background ...
    assert not (run_dir / "checkpoints" / "step-4" / "manifest.json").exists()  # ... the manifest waits for a poll
    assert saver.poll() is not None and committed == [4] and not saver.in_flight
    assert (run_dir / "checkpoints" / "step-4" / "manifest.json").exists()
    assert saver.save(_snapshot(8), blocking=False)
    saver.save(_snapshot(12), blocking=True)  # one save in flight at a time: 8 commits before 12 starts
    assert committed == [4, 8, 12]
    saver.close()


def test_an_injected_save_failure_leaves_a_torn_step(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    saver = _checkpointer(str(run_dir), asynchronous=True)
    with pytest.raises(checkpoint.InjectedSaveFailure):
        saver.save(_snapshot(4), blocking=False, fail_before_manifest=True)
    assert (run_dir / "checkpoints" / "step-4" / "trainer_state.json").exists()
    found = checkpoint.load_newest([str(run_dir)])
    assert found.loaded is None and "torn" in found.skipped[0].reason


@pytest.mark.slow
def test_fault_and_resume_with_the_run_dir_on_s3(write_spec, s3_bucket: str) -> None:
    spec = write_spec()
    assert attempt(spec, s3_bucket, track="trn2", number=1)[0] == FAULT_EXIT_CODE
    code, second = attempt(spec, s3_bucket, track="trn2", number=2)
    assert code == 0 and second["resumed_from_step"] == 8
    assert second["continuity"]["loss_continuous"] is True
    assert storage.exists(storage.join(s3_bucket, "summary.json"))
    assert storage.exists(storage.join(s3_bucket, "attempt-1", "metrics.jsonl"))
    assert storage.list_prefixes(storage.join(s3_bucket, "checkpoints")) == ["step-12", "step-4", "step-8"]


def test_compile_cache_on_s3_syncs_down_and_up(s3_bucket: str, tmp_path: Path) -> None:
    import hashlib

    from trainer.cache import MARKER, CompileCache

    from lambdas.domain.cache.compile_cache import completion_marker

    url = "s3://artifacts/neuron/tiny/sdk-2.26.0/abc/"
    storage.write_bytes(storage.join(url, "graph-1.bin"), b"old")
    marker = completion_marker({"graph-1.bin": (3, hashlib.sha256(b"old").hexdigest())})  # a complete entry
    storage.write_bytes(storage.join(url, MARKER), json.dumps(marker).encode())
    cache = CompileCache.open(url, compiles=True, on_neuron=False)
    assert cache.directory is not None and cache.files_before == 1
    (cache.directory / "graph-2.bin").write_bytes(b"new")
    assert cache.outcome(None) == "miss" and cache.publish() == 2  # the new graph, then the marker again
    assert sorted(storage.list_files(url)) == [MARKER, "graph-1.bin", "graph-2.bin"]
