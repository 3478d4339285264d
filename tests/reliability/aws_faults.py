"""Throttling injected below botocore's retry layer, so the adapters' real retry configuration handles it.

A ``before-send`` hook answers chosen operations with the error response AWS would send (HTTP 400
``ThrottlingException`` for DynamoDB, HTTP 503 ``SlowDown`` for S3) instead of sending the request; botocore then
parses and classifies it exactly as it would a real one (retryable throttling) and retries with its backoff.
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
    return AWSResponse(url, 400, headers, _Raw(body))  # type: ignore[arg-type]


def _s3_slow_down(url: str) -> AWSResponse:
    body = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
            b"<Message>Please reduce your request rate.</Message><RequestId>slow</RequestId></Error>")
    return AWSResponse(url, 503, {"x-amz-request-id": "slow", "Content-Type": "application/xml"},
                       _Raw(body))  # type: ignore[arg-type]


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

    def __call__(self, request: Any, **_: Any) -> AWSResponse | None:
        with self._lock:
            if self.times is None or self.injected < self.times:
                self.injected += 1
                return RESPONSES[self.service](request.url)
            self.passed += 1
        return None

    def install(self, client: Any) -> Throttle:
        client.meta.events.register_first(f"before-send.{self.service}.{self.operation}", self,
                                          unique_id=f"throttle-{id(self)}")
        return self

    def remove(self, client: Any) -> None:
        client.meta.events.unregister(f"before-send.{self.service}.{self.operation}", unique_id=f"throttle-{id(self)}")
