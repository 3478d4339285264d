"""This job's own credentials for its trial: proven, fetched once per node, shared with the node's processes.

A job asks the plane's credentials function (``DUALTRACK_JOB_ACCESS_FUNCTION``) for its trial's credentials and
proves who it is with a presigned STS GetCallerIdentity request signed by its job role: no setting of the job holds a
secret (see lambdas/domain/job_access.py). Presigning is local (no call to STS from the job; the function makes the
request, outside the job's network), and the proof is addressed to the region's public STS endpoint, the one the
function accepts.

With ``DUALTRACK_CREDENTIALS_PER_NODE=1`` (the job definitions set it) the node's launcher fetches once
(:class:`NodeCredentials`), writes the answer to a file only this user can read (mode 0600, in a 0700 directory),
and refreshes it ``REFRESH_BEFORE_S`` before it expires; the node's processes read the file
(``DUALTRACK_CREDENTIALS_FILE``) instead of calling the function, so a 4-node Trainium2 job makes 4 calls, not 256.
A throttled call (a new account's low Lambda concurrency) is retried with exponential backoff and full jitter, so a
burst of nodes starting together slows down rather than failing; a refusal is never retried.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from trainer.json_types import JsonObject

REFRESH_BEFORE_S = 15 * 60  # the session lasts an hour (a chained role): refresh with a quarter of it left
PROOF_EXPIRES_S = 60
THROTTLED = ("TooManyRequestsException", "ThrottlingException", "Throttling", "RequestLimitExceeded",
             "EC2ThrottledException", "ServiceUnavailableException")
MAX_ATTEMPTS = 10
BACKOFF_BASE_S = 1.0
BACKOFF_CAP_S = 30.0
READ_WAIT_S = 120.0  # how long a process waits for its node's launcher to write (or refresh) the file
# Set when the file was seeded by a launcher that then became the node's one process (exec): nobody refreshes it.
SELF_REFRESH_ENV = "DUALTRACK_CREDENTIALS_SELF_REFRESH"


class CredentialsRefused(RuntimeError):
    """The plane's credentials function would not issue this job its trial's credentials (the reason is its own)."""


def node_job_id(env: Mapping[str, str] | None = None) -> str | None:
    """The id this job (node) is known by to Batch: ``AWS_BATCH_JOB_ID``, and for a node of a multi-node job
    ``<job id>#<node index>`` (how DescribeJobs names a node: its task is the node's, not the job's)."""
    source = os.environ if env is None else env
    job = source.get("AWS_BATCH_JOB_ID")
    try:
        nodes = int(source.get("AWS_BATCH_JOB_NUM_NODES", "1"))
    except ValueError:
        nodes = 1
    if job and "#" not in job and nodes > 1:
        return f"{job}#{source.get('AWS_BATCH_JOB_NODE_INDEX', '0')}"
    return job


def region() -> str:
    """The job's region: Batch (ECS) sets AWS_REGION and AWS_DEFAULT_REGION in the container."""
    found = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not found:
        import boto3

        found = boto3.session.Session().region_name
    if not found:
        raise CredentialsRefused("no AWS region: set AWS_REGION (Batch sets it on every job)")
    return str(found)


def identity_proof(where: str | None = None) -> str:
    """A presigned STS GetCallerIdentity GET, signed with this process's own (job role) credentials in the query
    string (SigV4 query-string authentication), addressed to the region's public STS endpoint and valid for
    ``PROOF_EXPIRES_S``. Signed as a GET by hand: botocore's ``generate_presigned_url`` signs STS's Query actions as
    the POST its client would send, which a GET of the URL does not match."""
    import botocore.session
    from botocore.auth import SigV4QueryAuth
    from botocore.awsrequest import AWSRequest

    from lambdas.domain.job_access import IDENTITY_QUERY

    name = where or region()
    credentials = botocore.session.get_session().get_credentials()
    if credentials is None:
        raise CredentialsRefused("no AWS credentials to sign the identity proof with: a Batch job has its job "
                                 "role's (the ECS task role)")
    request = AWSRequest(method="GET", url=f"https://sts.{name}.amazonaws.com/", params=dict(IDENTITY_QUERY))
    SigV4QueryAuth(credentials.get_frozen_credentials(), "sts", name, expires=PROOF_EXPIRES_S).add_auth(request)
    return str(request.url)


def _error_code(exc: BaseException) -> str:
    return str((getattr(exc, "response", None) or {}).get("Error", {}).get("Code", ""))


def fetch(function: str, job_id: str, *, invoke: Callable[[str, bytes], dict[str, Any]] | None = None,
          proof: Callable[[], str] = identity_proof, sleep: Callable[[float], None] = time.sleep) -> JsonObject:
    """The credentials function's answer for ``job_id`` (``credentials``, ``bucket``, the prefixes), retrying a
    throttled invocation with exponential backoff and full jitter; CredentialsRefused for a refusal."""
    call = invoke or _invoke
    for attempt in range(MAX_ATTEMPTS):
        try:
            response = call(function, json.dumps({"job_id": job_id, "identity": proof()}).encode())
        except Exception as exc:  # botocore's own retries are spent: back off on a throttle, raise anything else
            if _error_code(exc) not in THROTTLED or attempt == MAX_ATTEMPTS - 1:
                raise
            sleep(random.uniform(0, min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** attempt)))
            continue
        answer = json.loads(response["Payload"] or b"{}")
        if response.get("FunctionError") or not isinstance(answer, dict) or "credentials" not in answer:
            reason = answer.get("error") or answer.get("errorMessage") or answer if isinstance(answer, dict) else answer
            raise CredentialsRefused(f"{function} refused this job's credentials: {reason}")
        return answer
    raise AssertionError("unreachable: the last attempt raises")


def _invoke(function: str, payload: bytes) -> dict[str, Any]:
    import boto3

    response = boto3.client("lambda").invoke(FunctionName=function, Payload=payload)
    return {"Payload": response["Payload"].read(), "FunctionError": response.get("FunctionError")}


def expires_in_s(answer: JsonObject, now: datetime | None = None) -> float:
    """Seconds until the answer's credentials expire."""
    credentials = answer.get("credentials")
    stamp = str(credentials.get("Expiration") if isinstance(credentials, dict) else "")
    try:
        at = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return (at - (now or datetime.now(UTC))).total_seconds()


def write_private(path: Path, answer: JsonObject) -> None:
    """Replace ``path`` with ``answer``, readable by this user only (created 0600, then renamed over: a reader sees
    the old file or the new one, never half of one)."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".credentials-")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(answer, handle)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def read_shared(path: Path, *, wait_s: float = READ_WAIT_S, sleep: Callable[[float], None] = time.sleep,
                fresh_for_s: float = 60.0) -> JsonObject:
    """The node's credentials from the launcher's file, waiting (up to ``wait_s``) while it is missing or about to
    expire, as it is between the launcher's start and its first write, or just before a refresh lands."""
    deadline = time.monotonic() + wait_s
    while True:
        with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
            answer = json.loads(path.read_text())
            if isinstance(answer, dict) and expires_in_s(answer) > fresh_for_s:
                return answer
        if time.monotonic() > deadline:
            raise CredentialsRefused(f"the node's credentials file {path} was not written (or refreshed) within "
                                     f"{wait_s:.0f} s: the launcher's fetch failed, see its log")
        sleep(0.5)


def shared_or_fetched(shared: Path | None, function: str, job_id: str | None) -> JsonObject:
    """The node's shared credentials while they are fresh, else this process's own fetch: at once when the file was
    only seeded (``SELF_REFRESH_ENV``: this process is the node's only one, nobody else refreshes it), after waiting
    for the launcher's refresh otherwise (a launcher that failed leaves each process to fetch its own)."""
    if shared is not None:
        with contextlib.suppress(CredentialsRefused):
            return read_shared(shared, wait_s=0.0 if os.environ.get(SELF_REFRESH_ENV) == "1" else READ_WAIT_S)
    if not job_id:
        raise CredentialsRefused("AWS_BATCH_JOB_ID is not set: only a Batch job can prove it is one")
    return fetch(function, job_id)


def seed(answer: JsonObject) -> dict[str, str]:
    """Hand credentials this process already holds to the one process that replaces it (the launcher exec'ing the
    node's only rank), so the node still fetches once: a private file, and the variables that point at it."""
    from lambdas.domain.job_access import CREDENTIALS_FILE_ENV

    path = Path(tempfile.mkdtemp(prefix="dualtrack-credentials-")) / "credentials.json"
    write_private(path, answer)
    return {CREDENTIALS_FILE_ENV: str(path), SELF_REFRESH_ENV: "1"}


class NodeCredentials:
    """The launcher's side: one fetch for the node, written to a private file, refreshed before it expires."""

    def __init__(self, function: str, job_id: str, *, fetcher: Callable[[], JsonObject] | None = None) -> None:
        self.function, self.job_id = function, job_id
        self._fetch = fetcher or (lambda: fetch(function, job_id))
        self.directory = Path(tempfile.mkdtemp(prefix="dualtrack-credentials-"))  # 0700
        self.path = self.directory / "credentials.json"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def start(self, held: JsonObject | None = None) -> Path:
        """Write the node's credentials (``held`` when this process already holds fresh ones, else a fetch, raising
        a refusal at once), then keep them fresh."""
        answer = held if held and expires_in_s(held) > REFRESH_BEFORE_S else self._fetch()
        write_private(self.path, answer)
        self._thread = threading.Thread(target=self._refresh, args=(answer,), name="credentials-refresh",
                                        daemon=True)
        self._thread.start()
        return self.path

    def _refresh(self, answer: JsonObject) -> None:
        while not self._stop.wait(max(1.0, expires_in_s(answer) - REFRESH_BEFORE_S)):
            try:
                answer = self._fetch()
                write_private(self.path, answer)
            except Exception as exc:  # the processes' reads wait, then fail with the file's age: keep the reason
                self.error = exc
                self._stop.wait(30.0)

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self.path.unlink()
            self.directory.rmdir()
