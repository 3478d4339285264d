"""A job's credentials (``trainer.credentials``): one fetch per node shared through a private file, refreshed before
they expire, retried with backoff when the credentials function is throttled, and never a secret in the job's
settings (the proof is a presigned GetCallerIdentity signed by the job's own credentials)."""

from __future__ import annotations

import json
import stat
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from botocore.exceptions import ClientError
from trainer import credentials
from trainer.credentials import CredentialsRefused, NodeCredentials, fetch, node_job_id, read_shared

from lambdas.adapters.caller_identity import sts_endpoints
from lambdas.domain.job_access import identity_request


def _answer(minutes: float = 60) -> dict[str, Any]:
    expires = (datetime.now(UTC) + timedelta(minutes=minutes)).isoformat()
    return {"bucket": "artifacts", "credentials": {"AccessKeyId": "ASIA", "SecretAccessKey": "s",
                                                   "SessionToken": "t", "Expiration": expires}}


def _throttled() -> ClientError:
    return ClientError({"Error": {"Code": "TooManyRequestsException", "Message": "Rate Exceeded."}}, "Invoke")


def test_a_throttled_invocation_backs_off_with_jitter_and_then_succeeds() -> None:
    """Lambda answers an invocation over the concurrency quota with 429 TooManyRequestsException (Lambda developer
    guide, "Lambda function scaling", throttling), which a new account meets early: the call is retried after a
    random wait up to an exponentially growing cap (full jitter), not given up."""
    calls: list[dict[str, Any]] = []
    waits: list[float] = []

    def invoke(function: str, payload: bytes) -> dict[str, Any]:
        calls.append(json.loads(payload))
        if len(calls) < 4:
            raise _throttled()
        return {"Payload": json.dumps(_answer()).encode(), "FunctionError": None}

    answer = fetch("creds", "job-1", invoke=invoke, proof=lambda: "https://sts.example/proof", sleep=waits.append)
    assert answer["bucket"] == "artifacts" and len(calls) == 4
    assert calls[0] == {"job_id": "job-1", "identity": "https://sts.example/proof"}
    assert len(waits) == 3 and all(0 <= w <= min(30.0, 2 ** i) for i, w in enumerate(waits))


def test_a_refusal_is_never_retried_and_names_the_reason() -> None:
    calls = []

    def invoke(function: str, payload: bytes) -> dict[str, Any]:
        calls.append(payload)
        return {"Payload": json.dumps({"error": "job j is SUCCEEDED"}).encode(), "FunctionError": None}

    with pytest.raises(CredentialsRefused, match="job j is SUCCEEDED"):
        fetch("creds", "j", invoke=invoke, proof=lambda: "p", sleep=lambda s: None)
    assert len(calls) == 1


def test_the_node_fetches_once_writes_a_private_file_and_its_processes_read_it(tmp_path: Path) -> None:
    fetched: list[int] = []

    def fetcher() -> dict[str, Any]:
        fetched.append(1)
        return _answer()

    shared = NodeCredentials("creds", "job-1", fetcher=fetcher)
    path = shared.start()
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        for _ in range(64):  # every process of a trn2 node reads it; none calls the function
            assert read_shared(path)["bucket"] == "artifacts"
        assert fetched == [1]
    finally:
        shared.close()
    assert not path.exists()


def test_the_node_refreshes_its_credentials_before_they_expire(monkeypatch: pytest.MonkeyPatch) -> None:
    """Role chaining caps the writer role's session at one hour (IAM user guide, "Role chaining"): the launcher
    fetches again ``REFRESH_BEFORE_S`` before the expiry, and the file the processes read is replaced whole."""
    monkeypatch.setattr(credentials, "REFRESH_BEFORE_S", 60 * 60 - 1)  # refresh about a second after the start
    answers = iter([_answer(60), _answer(120), _answer(120)])
    refreshed = threading.Event()

    def fetcher() -> dict[str, Any]:
        answer = next(answers)
        if answer["credentials"]["Expiration"] > _answer(90)["credentials"]["Expiration"]:
            refreshed.set()
        return answer

    shared = NodeCredentials("creds", "job-1", fetcher=fetcher)
    path = shared.start()
    try:
        assert refreshed.wait(10)
        time.sleep(0.2)
        assert credentials.expires_in_s(read_shared(path)) > 90 * 60
    finally:
        shared.close()


def test_a_process_waits_for_the_launchers_file_and_gives_up_with_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "credentials.json"
    with pytest.raises(CredentialsRefused, match="was not written"):
        read_shared(path, wait_s=0.0, sleep=lambda s: None)
    path.write_text(json.dumps(_answer(0.5)))  # about to expire: wait for the refresh
    with pytest.raises(CredentialsRefused):
        read_shared(path, wait_s=0.0, sleep=lambda s: None)


def test_a_node_of_a_multi_node_job_is_named_as_batch_describes_it() -> None:
    """DescribeJobs names a node of a multi-node parallel job ``<job id>#<node index>`` (Batch user guide,
    "Multi-node parallel jobs"), and each node is a task of its own."""
    assert node_job_id({"AWS_BATCH_JOB_ID": "j"}) == "j"
    assert node_job_id({"AWS_BATCH_JOB_ID": "j", "AWS_BATCH_JOB_NUM_NODES": "4",
                        "AWS_BATCH_JOB_NODE_INDEX": "2"}) == "j#2"
    assert node_job_id({"AWS_BATCH_JOB_ID": "j#1", "AWS_BATCH_JOB_NUM_NODES": "4"}) == "j#1"


def test_the_proof_is_a_get_of_get_caller_identity_signed_for_stss_regional_endpoint(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Signed as a GET in the query string (SigV4 query-string authentication), for the regional endpoint, and
    short-lived: what the credentials function accepts and sends on."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ASIAEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "token")
    monkeypatch.delenv("AWS_SECURITY_TOKEN", raising=False)
    url = credentials.identity_proof("eu-west-1")
    assert url.startswith("https://sts.eu-west-1.amazonaws.com/?")
    assert identity_request(url, sts_endpoints("eu-west-1")) == url
    query = parse_qs(urlsplit(url).query)
    assert query["X-Amz-Security-Token"] == ["token"] and query["X-Amz-Expires"] == ["60"]


def test_a_launcher_that_becomes_the_nodes_only_process_hands_it_the_credentials_it_holds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A node with one process: the launcher fetched to read the spec, then execs the rank; the rank starts from
    the launcher's answer (no second fetch) and, as nobody else refreshes that file, fetches its own once it is
    about to expire."""
    fetched: list[str] = []

    def fetch(function: str, job_id: str) -> dict[str, Any]:
        fetched.append(job_id)
        return _answer()

    monkeypatch.setattr(credentials, "fetch", fetch)
    variables = credentials.seed(_answer())
    monkeypatch.setenv(credentials.SELF_REFRESH_ENV, variables[credentials.SELF_REFRESH_ENV])
    path = Path(next(v for k, v in variables.items() if k != credentials.SELF_REFRESH_ENV))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert credentials.shared_or_fetched(path, "creds", "job-1")["bucket"] == "artifacts" and fetched == []
    path.write_text(json.dumps(_answer(0.5)))
    credentials.shared_or_fetched(path, "creds", "job-1")
    assert fetched == ["job-1"]
