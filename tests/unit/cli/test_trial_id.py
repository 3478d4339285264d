"""`validate --local` and the rehearsal name a trial file by the same id: the hash of the spec the API receives,
its local data files staged to the local stage's data bucket (dualtrack.local.staging)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from dualtrack.cli import main
from dualtrack.local.progress import Progress
from dualtrack.local.rehearsal import Rehearsal, RehearsalOptions
from dualtrack.local.staging import rehearsal_data_bucket, staged_trial
from lambdas.domain.trial.rules import parse_trial

ROOT = Path(__file__).resolve().parents[3]
REHEARSAL_TRIAL = ROOT / "examples" / "trial-rehearsal.json"


def validated_id(capsys: pytest.CaptureFixture[str], trial: Path, *flags: str) -> str:
    assert main(["validate", *flags, "--json", str(trial)]) == 0
    return str(json.loads(capsys.readouterr().out)["trial_id"])


def rehearsed_id(trial: Path, tmp_path: Path) -> tuple[str, list[str]]:
    """The id the rehearsal submits the trial file under, and the keys it staged (its own staging step, on moto)."""
    spec = parse_trial(json.loads(trial.read_text()), allow_local_paths=True)
    rehearsal = Rehearsal(spec, RehearsalOptions(out=tmp_path / "out", quiet=True, state_dir=tmp_path / "state"),
                          progress=Progress(io.StringIO(), quiet=True))
    with mock_aws():
        rehearsal._stage_data()
        listed = boto3.client("s3").list_objects_v2(Bucket=rehearsal_data_bucket())
    return rehearsal.spec.trial_id, sorted(o["Key"] for o in listed.get("Contents", []))


def with_absolute_data(tmp_path: Path) -> Path:
    """The rehearsal example written elsewhere, its data named by absolute file:// URIs."""
    doc = json.loads(REHEARSAL_TRIAL.read_text())
    for field in ("train_uri", "validation_uri"):
        doc["data"][field] = (ROOT / doc["data"][field]).as_uri()
    copy = tmp_path / "elsewhere" / "trial.json"
    copy.parent.mkdir()
    copy.write_text(json.dumps(doc))
    return copy


def test_validate_local_shows_the_id_the_rehearsal_submits(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the example names its data relative to the checkout
    shown = validated_id(capsys, REHEARSAL_TRIAL, "--local")
    submitted, keys = rehearsed_id(REHEARSAL_TRIAL, tmp_path)
    assert shown == submitted
    assert keys == ["rehearsal-1/train.jsonl", "rehearsal-1/validation.jsonl"]
    # The text answer shows the same id, and says why it is not the hash of the file as written.
    assert main(["validate", "--local", str(REHEARSAL_TRIAL)]) == 0
    out = capsys.readouterr().out
    assert f"valid trial {submitted}\n" in out and f"s3://{rehearsal_data_bucket()}/rehearsal-1/" in out


def test_the_id_does_not_depend_on_how_the_data_files_are_named(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Staged keys hold the file's name only: the same data named by an absolute file:// URI is the same trial."""
    moved = with_absolute_data(tmp_path)
    shown = validated_id(capsys, moved, "--local")
    assert shown == rehearsed_id(moved, tmp_path)[0]
    assert shown == staged_trial(parse_trial(json.loads(REHEARSAL_TRIAL.read_text()), allow_local_paths=True),
                                 rehearsal_data_bucket()).trial_id


def test_a_trial_with_s3_data_keeps_its_own_id_with_or_without_local(capsys: pytest.CaptureFixture[str]) -> None:
    example = ROOT / "examples" / "trial-llama31-8b-lora.json"
    spec = parse_trial(json.loads(example.read_text()))
    assert staged_trial(spec, "any-bucket").uploads == ()
    assert validated_id(capsys, example) == validated_id(capsys, example, "--local") == spec.trial_id
