"""One small interface over local paths and s3:// URIs for specs, data, checkpoints, summaries and caches."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from trainer.credentials import CredentialsRefused
from trainer.json_types import JsonObject

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


class AlreadyExists(FileExistsError):
    """A write-once object (a checkpoint manifest) is already there."""


@lru_cache(maxsize=1)
def _default_s3() -> S3Client:
    import boto3  # lazy: local runs never need it

    return boto3.client("s3")


# The credentials function's last answer: the bucket and prefixes this job's own credentials reach, among them the
# compile-cache entry it was sent to build (``cache_write_prefix``, None for every other run).
_ISSUED: JsonObject = {}


@lru_cache(maxsize=1)
def _scoped() -> tuple[str, S3Client] | None:
    """(bucket, client) with this job's own credentials for the artifacts bucket, refreshed before they expire, when
    the job definition names the plane's credentials function; None otherwise (a run outside AWS Batch, which uses
    whatever credentials the environment has). A process of a node whose launcher shares the node's credentials
    (``DUALTRACK_CREDENTIALS_FILE``) reads them from there; any other asks the function itself, proving who it is
    (trainer.credentials, lambdas/domain/job_access.py)."""
    from lambdas.domain.job_access import CREDENTIALS_FILE_ENV, FUNCTION_ENV
    from trainer import credentials as job_credentials

    function = os.environ.get(FUNCTION_ENV)
    if not function:
        return None
    shared, job_id = os.environ.get(CREDENTIALS_FILE_ENV), job_credentials.node_job_id()
    if not shared and not job_id:
        raise CredentialsRefused(f"{FUNCTION_ENV} is set, so this job's artifacts need its own credentials, but "
                                 "AWS_BATCH_JOB_ID is not set: only a Batch job can prove it is one")
    import boto3
    import botocore.session
    from botocore.credentials import RefreshableCredentials

    def fetch() -> dict[str, str]:
        answer = job_credentials.shared_or_fetched(Path(shared) if shared else None, function, job_id)
        _ISSUED.update(answer)
        c = answer["credentials"]
        assert isinstance(c, dict)
        return {"access_key": str(c["AccessKeyId"]), "secret_key": str(c["SecretAccessKey"]),
                "token": str(c["SessionToken"]), "expiry_time": str(c["Expiration"])}

    credentials = RefreshableCredentials.create_from_metadata(metadata=fetch(), refresh_using=fetch,
                                                              method="dualtrack-job-credentials")
    session = botocore.session.get_session()
    session._credentials = credentials  # type: ignore[attr-defined]  # how botocore holds refreshable ones
    client = boto3.Session(botocore_session=session).client("s3")
    return str(_ISSUED["bucket"]), client


def _s3(bucket: str) -> Any:
    """The client for ``bucket``: this job's own credentials for the artifacts bucket, the job role's otherwise
    (the compile cache, the teams' data buckets)."""
    scoped = _scoped()
    if scoped is not None and scoped[0] == bucket:
        return scoped[1]
    return _default_s3()


def _writer(bucket: str) -> S3Client:
    """The client a write goes through: this job's own credentials whenever it has them, so that what it may write
    (its run's prefix, the one compile-cache entry it builds) is the writer role's policy, never the job role's."""
    scoped = _scoped()
    if scoped is None:
        return _s3(bucket)
    return scoped[1]


def may_write(uri: str) -> bool:
    """Whether this job's credentials reach the compile-cache entry at ``uri``: always outside AWS Batch (a local
    path, or a run without the plane's credentials function); in a job, only the entry the plane sent it to build."""
    if not is_s3(uri) or _scoped() is None:
        return True
    prefix = _ISSUED.get("cache_write_prefix")
    return bool(prefix) and split_s3(join(uri, ""))[1].startswith(str(prefix))


def issued() -> JsonObject:
    """The credentials function's last answer to this process (empty before the first fetch, or outside a job)."""
    return dict(_ISSUED)


def reset_clients() -> None:
    """Forget cached AWS clients (after credentials or endpoints change, e.g. between mocked tests)."""
    _default_s3.cache_clear()
    _scoped.cache_clear()
    _ISSUED.clear()


def is_s3(uri: str) -> bool:
    return uri.startswith("s3://")


def split_s3(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    return parsed.netloc, parsed.path.lstrip("/")


def local_path(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


def join(base: str, *parts: str) -> str:
    out = base.rstrip("/")
    for part in parts:
        out = f"{out}/{part.strip('/')}"
    return out


def read_bytes(uri: str) -> bytes:
    if is_s3(uri):
        bucket, key = split_s3(uri)
        return _s3(bucket).get_object(Bucket=bucket, Key=key)["Body"].read()  # type: ignore[no-any-return]
    return local_path(uri).read_bytes()


def read_text(uri: str) -> str:
    return read_bytes(uri).decode("utf-8")


def exists(uri: str) -> bool:
    if is_s3(uri):
        bucket, key = split_s3(uri)
        try:
            _s3(bucket).head_object(Bucket=bucket, Key=key)
        except _s3(bucket).exceptions.ClientError:
            return False
        return True
    return local_path(uri).exists()


def write_bytes(uri: str, data: bytes) -> None:
    if is_s3(uri):
        bucket, key = split_s3(uri)
        _writer(bucket).put_object(Bucket=bucket, Key=key, Body=data)
        return
    path = local_path(uri)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)  # readers never see half a file


def write_once(uri: str, data: bytes) -> None:
    """Create ``uri`` only if absent (S3 ``IfNoneMatch="*"``, local ``O_EXCL``); raise AlreadyExists otherwise."""
    if is_s3(uri):
        bucket, key = split_s3(uri)
        client = _writer(bucket)
        try:
            client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
        except client.exceptions.ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code in ("PreconditionFailed", "ConditionalRequestConflict"):
                raise AlreadyExists(uri) from exc
            raise
        return
    path = local_path(uri)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError as exc:
        raise AlreadyExists(uri) from exc
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def list_prefixes(uri: str) -> list[str]:
    """Immediate child "directories" of ``uri`` (their names, not full URIs)."""
    if is_s3(uri):
        bucket, key = split_s3(join(uri, ""))
        prefix = key if key.endswith("/") else f"{key}/"
        names: list[str] = []
        for page in _s3(bucket).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix, Delimiter="/"):
            names += [p["Prefix"][len(prefix):].rstrip("/") for p in page.get("CommonPrefixes", [])]
        return names
    path = local_path(uri)
    return sorted(p.name for p in path.iterdir() if p.is_dir()) if path.is_dir() else []


def list_files(uri: str) -> dict[str, int]:
    """Every object under ``uri``: relative name -> size in bytes."""
    if is_s3(uri):
        bucket, key = split_s3(uri)
        prefix = key if key.endswith("/") or not key else f"{key}/"
        out: dict[str, int] = {}
        for page in _s3(bucket).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                out[obj["Key"][len(prefix):]] = int(obj["Size"])
        return out
    root = local_path(uri)
    if not root.is_dir():
        return {}
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def sync_down(uri: str, directory: Path) -> int:
    """Copy what ``uri`` holds into ``directory`` (files already there with the same size are kept)."""
    directory.mkdir(parents=True, exist_ok=True)
    copied = 0
    for name, size in list_files(uri).items():
        target = directory / name
        if target.exists() and target.stat().st_size == size:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(read_bytes(join(uri, name)))
        copied += 1
    return copied


def sync_up(directory: Path, uri: str) -> int:
    """Upload files in ``directory`` that ``uri`` lacks or holds with another size."""
    remote = list_files(uri)
    copied = 0
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        name = str(path.relative_to(directory))
        if remote.get(name) == path.stat().st_size:
            continue
        write_bytes(join(uri, name), path.read_bytes())
        copied += 1
    return copied
