"""What the job-side compile cache (``trainer.cache``) hands the runtime: only an entry that is what its completion
marker lists, and never a file outside its own mirror.

The marker lists every artefact with its size and sha256; after downloading, each is checked against it before the
directory goes to the compiler. An entry that disagrees (a file replaced, truncated, absent, or a marker that lists
nothing, as an older trainer's count-only marker) is not used: the attempt compiles fresh and publishes the entry
whole again, every file rewritten (a same-size replacement included). S3 keys are flat names, and ``..`` or a
leading ``/`` are just characters to S3 (https://docs.aws.amazon.com/AmazonS3/latest/userguide/object-keys.html), so
a name that would leave the entry is never written anywhere.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path

import boto3
import pytest
from moto import mock_aws
from trainer import storage
from trainer.cache import MARKER, CompileCache

URL = "s3://cache/neuron/m/c/k/"


def _compile_into(cache: CompileCache, data: bytes = b"n" * 100) -> None:
    assert cache.directory is not None
    (cache.directory / "graphs").mkdir(exist_ok=True)
    (cache.directory / "graphs" / "step.neff").write_bytes(data)


def _published(url: str, data: bytes = b"n" * 100) -> None:
    cache = CompileCache.open(url, compiles=True, on_neuron=False)
    _compile_into(cache, data)
    cache.publish()


def _fresh(url: str) -> CompileCache:
    from trainer import cache as module

    module._MIRRORS.pop(url, None)  # another process: nothing mirrored yet
    return CompileCache.open(url, compiles=True, on_neuron=False)


def test_the_marker_lists_every_artefact_with_its_size_and_hash(tmp_path: Path) -> None:
    url = str(tmp_path / "entry")
    _published(url)
    marker = json.loads((tmp_path / "entry" / MARKER).read_text())
    assert marker["files"] == {"graphs/step.neff": {"bytes": 100,
                                                    "sha256": hashlib.sha256(b"n" * 100).hexdigest()}}
    served = _fresh(url)
    assert not served.torn and served.files_before == 1


@pytest.mark.parametrize("damage", ["same size, other bytes", "truncated", "absent", "count-only marker"])
def test_an_entry_that_disagrees_with_its_marker_is_not_used_and_is_rebuilt_whole(tmp_path: Path,
                                                                                  damage: str) -> None:
    url = str(tmp_path / "entry")
    _published(url)
    artefact = tmp_path / "entry" / "graphs" / "step.neff"
    if damage == "same size, other bytes":
        artefact.write_bytes(b"X" * 100)
    elif damage == "truncated":
        artefact.write_bytes(b"n" * 40)
    elif damage == "absent":
        artefact.unlink()
        (tmp_path / "entry" / "other.neff").write_bytes(b"o")  # still artefacts under the entry
    else:
        (tmp_path / "entry" / MARKER).write_text(json.dumps({"files": 1, "bytes": 100}))
    cache = _fresh(url)
    assert cache.torn and cache.problem, "a damaged entry was handed to the runtime"
    assert cache.directory is not None and not any(cache.directory.rglob("*.neff"))
    assert cache.files_before == 0 and cache.outcome(None) == "miss"
    _compile_into(cache)  # compiled fresh
    cache.publish()
    assert artefact.read_bytes() == b"n" * 100  # rewritten, even where only the bytes differed
    again = _fresh(url)
    assert not again.torn and again.outcome(None) == "hit"


@pytest.mark.parametrize("bad", ["\x1b", "\x7f", "\x85", "\x9b"])
def test_an_entry_listing_a_name_with_a_control_character_is_not_served(tmp_path: Path, bad: str) -> None:
    """A marker listing a name that carries a C0, DEL or C1 control character (U+0085, a line break to some
    readers; U+009B, a terminal's escape) is refused whole, like a name that leaves the entry: nothing of it reaches
    the compiler, and the entry is compiled again."""
    url = str(tmp_path / "entry")
    _published(url)
    name = f"graphs/step{bad}.neff"
    (tmp_path / "entry" / name).write_bytes(b"e" * 10)
    marker = json.loads((tmp_path / "entry" / MARKER).read_text())
    marker["files"][name] = {"bytes": 10, "sha256": hashlib.sha256(b"e" * 10).hexdigest()}
    (tmp_path / "entry" / MARKER).write_text(json.dumps(marker))
    cache = _fresh(url)
    assert cache.torn and "control character" in str(cache.problem)
    assert cache.directory is not None and not any(p.is_file() for p in cache.directory.rglob("*"))


def test_the_same_rules_hold_for_an_s3_entry() -> None:
    with mock_aws():
        storage.reset_clients()
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="cache")
        _published(URL)
        assert not _fresh(URL).torn
        s3.put_object(Bucket="cache", Key="neuron/m/c/k/graphs/step.neff", Body=b"Y" * 100)
        replaced = _fresh(URL)
        assert replaced.torn and "sha256" in str(replaced.problem)
        storage.reset_clients()


def test_a_name_that_leaves_the_entry_is_never_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys under the entry naming ``../..`` and an absolute path: the mirror writes neither."""
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(deep))  # the mirror is made here
    outside = tmp_path / "absolute.neff"
    names = {"../../escape.neff": b"e", "/" + str(outside).lstrip("/"): b"a", "graphs/ok.neff": b"k"}
    with mock_aws():
        storage.reset_clients()
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="cache")
        for name, body in names.items():
            s3.put_object(Bucket="cache", Key=f"neuron/m/c/k/{name}", Body=body)
        listing = {"version": 2, "files": {name: {"bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()}
                                           for name, body in names.items()}}
        s3.put_object(Bucket="cache", Key=f"neuron/m/c/k/{MARKER}", Body=json.dumps(listing).encode())
        cache = _fresh(URL)
        storage.reset_clients()
    assert not (tmp_path / "escape.neff").exists() and not (tmp_path / "a" / "escape.neff").exists()
    assert not outside.exists()
    assert cache.torn and "leaves the entry" in str(cache.problem)
    assert cache.directory is not None and not any(p.is_file() for p in cache.directory.rglob("*"))
