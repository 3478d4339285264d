"""boto3 clients, one per service per execution environment, created on first use (never at import)."""

from __future__ import annotations

from functools import cache
from typing import Any

import boto3
from botocore.config import Config


@cache
def client(service: str) -> Any:
    return boto3.client(service, config=Config(retries={"mode": "adaptive", "max_attempts": 8}))  # type: ignore[call-overload]


def reset_clients() -> None:
    """Drop cached clients (tests switch between mocked accounts)."""
    client.cache_clear()


def error_code(exc: BaseException) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))
