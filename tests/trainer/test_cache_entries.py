"""Compile-cache entries are complete or absent, and a failed compile is quarantined (``trainer.cache``)."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
from moto import mock_aws
from trainer import storage
from trainer.cache import MARKER, QUARANTINE, CompileCache

from lambdas.domain.cache.compile_cache import completion_marker


def _entry(root: Path, *, marker: bool) -> None:
    (root / "graphs").mkdir(parents=True)
    (root / "graphs" / "step.neff").write_bytes(b"x" * 100)
    (root / "index.json").write_text("{}")
    if marker:
        (root / MARKER).write_text(json.dumps(completion_marker({"graphs/step.neff": (100, None),
                                                                 "index.json": (2, None)})))


def test_a_complete_entry_is_served(tmp_path: Path) -> None:
    _entry(tmp_path / "cache", marker=True)
    cache = CompileCache.open(str(tmp_path / "cache"), compiles=True, on_neuron=False)
    assert not cache.torn and cache.files_before == 2
    assert cache.directory is not None and (cache.directory / "graphs" / "step.neff").read_bytes() == b"x" * 100


def test_a_torn_entry_is_never_served_and_is_published_whole_after_compiling_again(tmp_path: Path) -> None:
    _entry(tmp_path / "cache", marker=False)  # a job died while uploading: artefacts, no marker
    cache = CompileCache.open(str(tmp_path / "cache"), compiles=True, on_neuron=False)
    assert cache.torn and cache.files_before == 0 and cache.outcome(None) == "miss"
    assert cache.directory is not None and not any(cache.directory.iterdir())
    (cache.directory / "graphs").mkdir()
    (cache.directory / "graphs" / "step.neff").write_bytes(b"y" * 120)  # compiled again
    assert cache.publish() == 2  # the new artefact, then the marker
    assert (tmp_path / "cache" / "graphs" / "step.neff").read_bytes() == b"y" * 120
    # The dead upload's leftover index.json was not compiled by this attempt: the marker does not vouch for it.
    assert set(json.loads((tmp_path / "cache" / MARKER).read_text())["files"]) == {"graphs/step.neff"}
    again = CompileCache.open(str(tmp_path / "cache"), compiles=True, on_neuron=False)
    assert not again.torn and again.outcome(None) == "hit"


def test_a_failed_compile_is_recorded_aside_and_the_next_attempt_compiles_again(tmp_path: Path) -> None:
    cache = CompileCache.open(str(tmp_path / "cache"), compiles=True, on_neuron=False)
    assert cache.directory is not None
    (cache.directory / "half.neff").write_bytes(b"partial")  # what the failed compile left behind
    assert cache.publish(failed_error="neuronx-cc: Internal compiler error", attempt=1) == 1
    failures = list((tmp_path / "cache" / QUARANTINE).glob("attempt-1-*.json"))
    assert len(failures) == 1 and "Internal compiler error" in failures[0].read_text()
    assert not (tmp_path / "cache" / "half.neff").exists() and not (tmp_path / "cache" / MARKER).exists()
    retry = CompileCache.open(str(tmp_path / "cache"), compiles=True, on_neuron=False)
    assert not retry.torn and retry.files_before == 0  # the failure record is not an artefact: compile again


def test_the_same_rules_hold_for_an_s3_entry() -> None:
    with mock_aws():
        storage.reset_clients()
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="cache")
        s3.put_object(Bucket="cache", Key="neuron/m/c/k/graphs/step.neff", Body=b"z")
        url = "s3://cache/neuron/m/c/k/"
        assert CompileCache.open(url, compiles=True, on_neuron=False).torn
        assert CompileCache.open(url, compiles=True, on_neuron=True).torn  # reported for Neuron's own cache too
        s3.put_object(Bucket="cache", Key=f"neuron/m/c/k/{MARKER}",
                      Body=json.dumps(completion_marker({"graphs/step.neff": (1, None)})).encode())
        cache = CompileCache.open(url, compiles=True, on_neuron=False)
        assert not cache.torn and cache.files_before == 1
        storage.reset_clients()
