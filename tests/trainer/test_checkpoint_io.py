"""Checkpoint and summary I/O on local paths and on S3 (moto): write-once manifests, verification, resume."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest
import torch
from moto import mock_aws
from trainer import FAULT_EXIT_CODE, checkpoint, storage

from tests.trainer.helpers import attempt


def _save(run_dir: str, step: int) -> checkpoint.SavedCheckpoint:
    return checkpoint.save(run_dir, step=step, weights={"w": torch.arange(4.0)}, lora_config={"r": 2},
                           optimizer={"state": {0: {"exp_avg": torch.ones(2)}}}, scheduler={"last_epoch": step},
                           rng=checkpoint.rng_state(), state={"data_position": {"samples_consumed": step * 8}},
                           meta={"track": "trn2"})


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
    assert saved.files == 7 and saved.bytes > 0  # 5 shards + adapter config + manifest
    assert checkpoint.list_steps(run_dir) == [4, 8]
    found = checkpoint.load_newest([run_dir])
    assert found.loaded is not None and found.loaded.step == 8 and not found.skipped
    assert torch.equal(found.loaded.weights["w"], torch.arange(4.0))
    assert found.loaded.state["data_position"]["samples_consumed"] == 64
    assert found.loaded.manifest["optimizer"] and found.loaded.manifest["rng"] and found.loaded.manifest["lora"]


@pytest.mark.parametrize("where", ["local", "s3"])
def test_manifest_is_written_once(where: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    run_dir = request.getfixturevalue("s3_bucket") if where == "s3" else str(tmp_path / "run")
    uri = storage.join(run_dir, "checkpoints", "step-1", "manifest.json")
    storage.write_once(uri, b"first")
    with pytest.raises(storage.AlreadyExists):
        storage.write_once(uri, b"second")
    assert storage.read_bytes(uri) == b"first"


def test_a_corrupt_newest_checkpoint_is_skipped_on_s3(s3_bucket: str) -> None:
    _save(s3_bucket, 4)
    _save(s3_bucket, 8)
    bucket, key = storage.split_s3(storage.join(s3_bucket, "checkpoints", "step-8", "optimizer.pt"))
    boto3.client("s3").put_object(Bucket=bucket, Key=key, Body=b"flipped")
    found = checkpoint.load_newest([s3_bucket])
    assert found.loaded is not None and found.loaded.step == 4
    assert found.skipped[0].step == 8 and "optimizer.pt" in found.skipped[0].reason


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
    from trainer.cache import CompileCache

    url = "s3://artifacts/neuron/tiny/sdk-2.26.0/abc/"
    storage.write_bytes(storage.join(url, "graph-1.bin"), b"old")
    cache = CompileCache.open(url, "compiled", on_neuron=False)
    assert cache.directory is not None and cache.files_before == 1
    (cache.directory / "graph-2.bin").write_bytes(b"new")
    assert cache.outcome(None) == "miss" and cache.publish() == 1
    assert sorted(storage.list_files(url)) == ["graph-1.bin", "graph-2.bin"]
