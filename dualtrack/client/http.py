"""A SigV4-signed JSON client for the trial API, with bounded retries (exponential backoff, full jitter).

Signing is botocore's (`SigV4Auth`, service `execute-api`); every attempt is signed afresh so a retry never
replays a stale `X-Amz-Date`. Retried: connection failures, timeouts, 429 (except a
team-quota refusal) and 5xx. Repeating a POST is safe
because the API is idempotent by trial id (a repeated submit answers 200 with the same trial).
"""

from __future__ import annotations

import contextlib
import json
import random
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.message import Message
from typing import TYPE_CHECKING, TypeAlias
from urllib.parse import quote, urlencode, urlsplit

from dualtrack import __version__
from dualtrack.client.errors import ConfigFailure, NetworkFailure, api_failure
from lambdas.domain.json_types import JsonIn, JsonValue

if TYPE_CHECKING:
    from botocore.credentials import Credentials

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
SERVICE = "execute-api"
# A query parameter's value; None leaves the parameter out.
QueryValue: TypeAlias = str | int | float | None


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 5
    base_s: float = 0.5
    cap_s: float = 8.0

    def delay(self, attempt: int, rng: random.Random, retry_after: float | None = None) -> float:
        """Full jitter: uniform(0, min(cap, base * 2**attempt)); a server's Retry-After is honoured up to the cap."""
        if retry_after is not None:
            return min(self.cap_s, max(0.0, retry_after))
        return rng.uniform(0, min(self.cap_s, self.base_s * (2 ** attempt)))


@dataclass(frozen=True)
class Response:
    status: int
    headers: Mapping[str, str]
    body: JsonValue  # parsed JSON when the API sent JSON, else text (None when there was no body)
    raw: bytes = b""


@dataclass
class SignedClient:
    base_url: str
    region: str
    credentials: Credentials  # refreshable ones refresh themselves
    timeout_s: float = 30.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    sleep: Callable[[float], None] = time.sleep
    on_retry: Callable[[str], None] | None = None
    rng: random.Random = field(default_factory=random.Random)

    def url(self, path: str, query: Mapping[str, QueryValue] | None = None) -> str:
        clean = {k: str(v) for k, v in (query or {}).items() if v is not None}
        # SigV4's canonical query encodes all but unreserved characters: send exactly that form.
        suffix = "?" + urlencode(sorted(clean.items()), safe="-_.~", quote_via=quote) if clean else ""
        return f"{self.base_url}/{quote(path.lstrip('/'), safe='/')}{suffix}"

    def signed_request(self, method: str, url: str, body: bytes | None) -> urllib.request.Request:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        headers = {"Accept": "application/json", "User-Agent": f"dualtrack/{__version__}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        aws = AWSRequest(method=method, url=url, data=body, headers=headers)
        SigV4Auth(self.credentials, SERVICE, self.region).add_auth(aws)
        prepared = aws.prepare()
        return urllib.request.Request(prepared.url, data=body, headers=dict(prepared.headers.items()), method=method)

    def request(self, method: str, path: str, *, query: Mapping[str, QueryValue] | None = None,
                body: JsonIn = None, ok: tuple[int, ...] = (200, 201, 202)) -> Response:
        url = self.url(path, query)
        data = None if body is None else json.dumps(body, sort_keys=True).encode()
        attempts = max(1, self.retry.max_attempts)
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                response = self._send(method, url, data)
            except _Transient as exc:
                if last:
                    raise NetworkFailure(f"{method} {url}: {exc.reason} (gave up after {attempts} attempts)"
                                         ) from None
                self._wait(attempt, exc.reason, None)
                continue
            if response.status in RETRYABLE_STATUS and not last and not quota_refusal(response.body):
                self._wait(attempt, f"HTTP {response.status}", _retry_after(response.headers))
                continue
            if response.status not in ok:
                failure = api_failure(response.status, response.body)
                if response.status in RETRYABLE_STATUS and attempts > 1 and not quota_refusal(response.body):
                    failure.message += f" (gave up after {attempts} attempts)"
                raise failure
            return response
        raise AssertionError("unreachable: the loop returns or raises")

    def _wait(self, attempt: int, reason: str, retry_after: float | None) -> None:
        delay = self.retry.delay(attempt, self.rng, retry_after)
        if self.on_retry is not None:
            self.on_retry(f"{reason}; retrying in {delay:.1f} s (attempt {attempt + 2} of {self.retry.max_attempts})")
        self.sleep(delay)

    def _send(self, method: str, url: str, data: bytes | None) -> Response:
        request = self.signed_request(method, url, data)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as got:
                return _response(got.status, got.headers, got.read())
        except urllib.error.HTTPError as exc:
            with exc:
                return _response(exc.code, exc.headers, exc.read())
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, ConnectionRefusedError):
                raise _Transient(f"connection refused by {urlsplit(url).netloc}") from None
            if isinstance(reason, socket.gaierror):
                raise _Transient(f"cannot resolve {urlsplit(url).hostname} ({reason.strerror})") from None
            raise _Transient(f"network error: {reason}") from None
        except TimeoutError:
            raise _Transient(f"no answer within {self.timeout_s:g} s") from None
        except (ConnectionError, OSError) as exc:  # reset mid-response, broken pipe
            raise _Transient(f"connection failed: {exc}") from None

    def fetch_unsigned(self, url: str) -> bytes:
        """GET a presigned URL (reports in S3): the signature is in the URL, so no SigV4 header is added."""
        parts = urlsplit(url)
        if parts.scheme not in ("https", "http"):
            raise ConfigFailure(f"the API returned a report URL that is not http(s): {url[:80]}")
        attempts = max(1, self.retry.max_attempts)
        for attempt in range(attempts):
            try:
                with urllib.request.urlopen(url, timeout=self.timeout_s) as got:
                    return bytes(got.read())
            except urllib.error.HTTPError as exc:
                if exc.code not in RETRYABLE_STATUS or attempt == attempts - 1:
                    raise api_failure(exc.code, exc.read().decode(errors="replace"), str(exc.reason)) from None
                self._wait(attempt, f"HTTP {exc.code}", None)
            except (urllib.error.URLError, OSError) as exc:
                if attempt == attempts - 1:
                    raise NetworkFailure(f"GET {parts.netloc}{parts.path}: {exc} "
                                         f"(gave up after {attempts} attempts)") from None
                self._wait(attempt, f"network error: {exc}", None)
        raise AssertionError("unreachable")


class _Transient(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def quota_refusal(body: JsonValue) -> bool:
    """A 429 the API answers for a team quota (its body lists ``quotas``) is a refusal, not throttling: sending it
    again before a trial ends or the month turns cannot succeed, so it is not retried."""
    return isinstance(body, dict) and bool(body.get("quotas"))


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("Retry-After") or headers.get("retry-after")
    try:
        return float(value) if value else None
    except ValueError:
        return None


def _response(status: int, headers: Message | None, raw: bytes) -> Response:
    plain = {k: v for k, v in headers.items()} if headers is not None else {}
    kind = next((v for k, v in plain.items() if k.lower() == "content-type"), "")
    text = raw.decode("utf-8", errors="replace")
    body: JsonValue = text
    if raw and ("json" in kind or text.lstrip()[:1] in ("{", "[")):
        with contextlib.suppress(json.JSONDecodeError):
            body = json.loads(raw)
    elif not raw:
        body = None
    return Response(status, plain, body, raw)
