"""Throttling injected below botocore's retry layer, so the adapters' real retry configuration handles it.

A ``before-send`` hook answers chosen operations with the error response AWS would send (HTTP 400
``ThrottlingException`` for DynamoDB, HTTP 503 ``SlowDown`` for S3) instead of sending the request; botocore then
parses and classifies it exactly as it would a real one (retryable throttling) and retries with its backoff.

AWS executes nothing it throttles ("Throttling errors", DynamoDB developer guide, error handling: the request is
rejected). botocore emits ``before-send`` to every handler and then takes the first response
(``botocore/endpoint.py``: ``emit`` then ``first_non_none_response``), so moto's stubber, a later handler of the
same event, would still execute a throttled request. The hook therefore points the throttled request at a host no
backend serves while the later handlers run, and a handler registered last on the generic ``before-send`` (the
generic event's handlers run after the operation's, moto's among them) points it back for the retry.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from io import BytesIO
from typing import Any

from botocore.awsrequest import AWSResponse


class _Raw(BytesIO):
    def stream(self, **_: Any) -> Any:
        chunk = self.read()
        while chunk:
            yield chunk
            chunk = self.read()


def _dynamodb_throttle(url: str) -> AWSResponse:
    body = json.dumps({"__type": "com.amazonaws.dynamodb.v20120810#ThrottlingException",
                       "message": "Rate of requests exceeds the allowed throughput."}).encode()
    headers = {"x-amzn-RequestId": "throttled", "Content-Type": "application/x-amz-json-1.0"}
    # botocore-stubs declare headers as HTTPHeaders; AWSResponse wraps any mapping in a HeadersDict.
    return AWSResponse(url, 400, headers, _Raw(body))  # type: ignore[arg-type]


def _s3_slow_down(url: str) -> AWSResponse:
    body = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
            b"<Message>Please reduce your request rate.</Message><RequestId>slow</RequestId></Error>")
    headers = {"x-amz-request-id": "slow", "Content-Type": "application/xml"}
    # botocore-stubs declare headers as HTTPHeaders; AWSResponse wraps any mapping in a HeadersDict.
    return AWSResponse(url, 503, headers, _Raw(body))  # type: ignore[arg-type]


RESPONSES: dict[str, Callable[[str], AWSResponse]] = {"dynamodb": _dynamodb_throttle, "s3": _s3_slow_down}


@dataclass
class Throttle:
    """Answer ``service.operation`` with a throttling error for the next ``times`` calls (None: every call)."""

    service: str
    operation: str
    times: int | None
    injected: int = 0
    passed: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _held: dict[int, str] = field(default_factory=dict)  # throttled request -> its real URL

    def __call__(self, request: Any, **_: Any) -> AWSResponse | None:
        with self._lock:
            if self.times is None or self.injected < self.times:
                self.injected += 1
                url = request.url
                self._held[id(request)] = url
                request.url = "http://throttled.invalid/"  # no backend behind it: nothing is executed
                return RESPONSES[self.service](url)
            self.passed += 1
        return None

    def _restore(self, request: Any, **_: Any) -> None:
        with self._lock:
            url = self._held.pop(id(request), None)
        if url is not None:
            request.url = url

    @property
    def _event(self) -> str:
        return f"before-send.{self.service}.{self.operation}"

    def install(self, client: Any) -> Throttle:
        client.meta.events.register_first(self._event, self, unique_id=f"throttle-{id(self)}")
        client.meta.events.register_last("before-send", self._restore, unique_id=f"throttle-restore-{id(self)}")
        return self

    def remove(self, client: Any) -> None:
        client.meta.events.unregister(self._event, unique_id=f"throttle-{id(self)}")
        client.meta.events.unregister("before-send", unique_id=f"throttle-restore-{id(self)}")
