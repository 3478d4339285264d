"""The trial a rehearsal submits: its local data files replaced by their copies in the stage's data bucket.

The API takes only s3:// URIs, and a trial's id is its name plus the hash of the spec the API receives, so a trial
file with local data paths is, in a rehearsal, the trial of its staged spec. ``dualtrack validate --local`` and
``dualtrack local run`` both name a trial file by :func:`staged_trial`, so they show the same id. Pure apart from
:func:`rehearsal_data_bucket`, which reads ``cdk.json``; the uploads are the rehearsal's to do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from lambdas.domain.trial.rules import parse_trial
from lambdas.domain.trial.spec import TrialSpec

REHEARSAL_STAGE = "local"  # the cdk.json stage `dualtrack local run` stands up
STAGED_FIELDS = ("train_uri", "validation_uri")


@dataclass(frozen=True)
class Upload:
    """A local data file and where the rehearsal puts it."""

    field: str  # data.<field> it was named by
    path: Path
    bucket: str
    key: str

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


@dataclass(frozen=True)
class StagedTrial:
    spec: TrialSpec  # what the API receives: every data URI is s3://
    uploads: tuple[Upload, ...]  # empty when the trial names no local file

    @property
    def trial_id(self) -> str:
        return self.spec.trial_id


def staged_trial(spec: TrialSpec, bucket: str) -> StagedTrial:
    """``spec`` as the rehearsal submits it: each local data file (a path or file:// URI) becomes
    ``s3://BUCKET/<data.version>/<file name>``; s3:// URIs stay as they are. The key holds the file's name only, so
    the id does not depend on the directory the trial file was read from."""
    doc = spec.model_dump(mode="json", exclude_none=True)
    uploads: list[Upload] = []
    for field_name in STAGED_FIELDS:
        uri = doc["data"][field_name]
        if uri.startswith("s3://"):
            continue
        path = Path(uri.removeprefix("file://"))
        upload = Upload(field_name, path, bucket, f"{spec.data.version}/{path.name}")
        doc["data"][field_name] = upload.uri
        uploads.append(upload)
    return StagedTrial(parse_trial(doc) if uploads else spec, tuple(uploads))


def rehearsal_data_bucket(stage: str = REHEARSAL_STAGE) -> str:
    """The bucket a rehearsal stages data into: the first of the stage's ``data_buckets`` in ``cdk.json`` (the job
    role may read only those, and the API accepts only those)."""
    from infra.config import stage_config
    from infra.synth import REPO_ROOT

    context = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    buckets = stage_config(context, stage).data_buckets
    if not buckets:
        raise RuntimeError(f"stage {stage!r} lists no data_buckets in cdk.json: the rehearsal stages local data "
                           "files into the first one")
    return buckets[0]
