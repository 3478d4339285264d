"""The local plane keeps its compile cache between rehearsals as files (``Rehearsal._save_state``): each object key
becomes a path under the state directory's ``compile-cache/``, and never one outside it.

An S3 key is any UTF-8 string (https://docs.aws.amazon.com/AmazonS3/latest/userguide/object-keys.html): ``..``
segments and empty segments are characters to S3, not directions, so a key that would climb out of the state
directory is skipped.
"""

from __future__ import annotations

import json
from pathlib import Path

import boto3
from moto import mock_aws

from dualtrack.local.rehearsal import Rehearsal, RehearsalOptions
from lambdas.domain.trial.rules import parse_trial

ROOT = Path(__file__).resolve().parents[3]


def test_a_cache_key_that_leaves_the_state_directory_is_not_saved(tmp_path: Path) -> None:
    spec = parse_trial(json.loads((ROOT / "examples" / "trial-rehearsal.json").read_text()), allow_local_paths=True)
    state = tmp_path / "state" / "plane"
    rehearsal = Rehearsal(spec, RehearsalOptions(out=tmp_path / "out", quiet=True, state_dir=state))
    rehearsal.env = {"CACHE_BUCKET": "cache"}
    good = "neuron/m/c/" + "a" * 64 + "/graph.neff"
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="cache")
        s3.put_object(Bucket="cache", Key=good, Body=b"g")
        s3.put_object(Bucket="cache", Key="neuron/m/c/k/" + "../" * 6 + "escape.neff", Body=b"e")
        s3.put_object(Bucket="cache", Key="neuron/m/c/k//abs.neff", Body=b"a")
        rehearsal._save_state()
    assert (state / "compile-cache" / good).read_bytes() == b"g"
    assert not list(tmp_path.rglob("escape.neff")) and not list(tmp_path.rglob("abs.neff"))
