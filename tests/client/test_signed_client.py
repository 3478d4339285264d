"""SigV4 signing checked by the shim, retries with backoff, and every transport failure reported plainly."""

from __future__ import annotations

import random
import socket
from typing import Any

import pytest
from botocore.credentials import Credentials

from dualtrack.client.errors import EXIT_CONFIG, EXIT_UNAVAILABLE, ClientFailure, NetworkFailure
from dualtrack.client.http import RetryPolicy, SignedClient
from tests.client.conftest import json_response

CREDS = Credentials("testing", "testing", "testing")


def echo(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return json_response(200, {"path": event["path"], "resource": event["resource"],
                               "query": event["queryStringParameters"], "body": event["body"],
                               "params": event["pathParameters"]})


def client(url: str, sleeps: list[float] | None = None, creds: Credentials = CREDS, **kw: Any) -> SignedClient:
    waits = sleeps if sleeps is not None else []
    return SignedClient(url, "us-east-1", creds, timeout_s=5, sleep=waits.append, rng=random.Random(7), **kw)


def test_requests_are_signed_and_the_signature_verifies(serve: Any) -> None:
    shim = serve(echo)
    got = client(shim.url).request("POST", "/trials", body={"a": 1}, query={"model": "meta-llama/x y", "n": 2})
    assert got.status == 200 and isinstance(got.body, dict)
    assert got.body["path"] == "/trials" and got.body["query"] == {"model": "meta-llama/x y", "n": "2"}
    seen = shim.seen[-1]
    assert seen.verdict == "ok"
    headers = {k.lower(): v for k, v in seen.headers.items()}
    assert headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=testing/")
    assert "/us-east-1/execute-api/aws4_request" in headers["authorization"]
    assert headers["x-amz-security-token"] == "testing" and headers["x-amz-date"]
    path = client(shim.url).request("GET", "/trials/abc-123/report").body
    assert isinstance(path, dict)
    assert path["resource"] == "/trials/{trial_id}/report" and path["params"] == {"trial_id": "abc-123"}


def test_a_wrong_secret_is_rejected_with_403_and_named_as_a_credentials_problem(serve: Any) -> None:
    shim = serve(echo)
    with pytest.raises(ClientFailure) as raised:
        client(shim.url, creds=Credentials("testing", "not-the-secret", "testing")).request("GET", "/trials")
    assert raised.value.status == 403 and raised.value.exit_code == EXIT_CONFIG
    assert "execute-api:Invoke" in raised.value.message
    assert shim.seen[-1].verdict == "rejected: signature mismatch"


def test_a_tampered_body_fails_verification(serve: Any) -> None:
    shim = serve(echo)
    signer = client(shim.url)
    request = signer.signed_request("POST", f"{shim.url}/trials", b'{"a": 1}')
    request.data = b'{"a": 2}'
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, timeout=5)
    assert raised.value.code == 403
    assert shim.seen[-1].verdict == "rejected: signature mismatch"


def test_503_twice_then_success_is_retried_with_backoff(serve: Any) -> None:
    shim = serve(echo)
    shim.fail_next(2, 503)
    sleeps: list[float] = []
    notes: list[str] = []
    got = client(shim.url, sleeps, on_retry=notes.append, retry=RetryPolicy(max_attempts=4, base_s=0.5,
                                                                             cap_s=8)).request("GET", "/trials")
    assert got.status == 200
    assert [s.verdict for s in shim.seen] == ["injected 503", "injected 503", "ok"]
    assert len(sleeps) == 2 and all(0 <= s <= 8 for s in sleeps)  # the shim's Retry-After: 0 is honoured
    assert notes[0].startswith("HTTP 503; retrying in") and "attempt 2 of 4" in notes[0]


def test_retries_are_bounded_and_the_last_answer_is_reported(serve: Any) -> None:
    shim = serve(echo)
    shim.fail_next(5, 429)
    sleeps: list[float] = []
    with pytest.raises(ClientFailure) as raised:
        client(shim.url, sleeps, retry=RetryPolicy(max_attempts=3)).request("GET", "/trials")
    assert raised.value.status == 429 and raised.value.exit_code == EXIT_UNAVAILABLE
    assert "gave up after 3 attempts" in raised.value.message
    assert len(shim.seen) == 3 and len(sleeps) == 2


def test_full_jitter_delays_grow_and_stay_under_the_cap() -> None:
    policy, rng = RetryPolicy(base_s=0.5, cap_s=4), random.Random(1)
    for attempt in range(8):
        bound = min(4, 0.5 * 2**attempt)
        delays = [policy.delay(attempt, rng) for _ in range(200)]
        assert all(0 <= d <= bound for d in delays)
        assert max(delays) > bound * 0.8  # spread over the whole window, not a fixed sleep
    assert policy.delay(0, rng, retry_after=30) == 4


def test_connection_refused_is_retried_then_reported(serve: Any) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sleeps: list[float] = []
    with pytest.raises(NetworkFailure) as raised:
        client(f"http://127.0.0.1:{port}/prod", sleeps, retry=RetryPolicy(max_attempts=3)).request("GET", "/trials")
    assert raised.value.exit_code == EXIT_UNAVAILABLE
    assert f"connection refused by 127.0.0.1:{port}" in raised.value.message
    assert "gave up after 3 attempts" in raised.value.message and len(sleeps) == 2


def test_a_non_json_error_page_is_shown_as_text(serve: Any) -> None:
    shim = serve(lambda e, c: {"statusCode": 502, "headers": {"Content-Type": "text/html"},
                               "body": "Bad Gateway\n<html>...</html>"})
    with pytest.raises(ClientFailure) as raised:
        client(shim.url, retry=RetryPolicy(max_attempts=1)).request("GET", "/trials")
    assert raised.value.message == "HTTP 502: Bad Gateway" and raised.value.exit_code == EXIT_UNAVAILABLE
