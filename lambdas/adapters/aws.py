"""boto3 clients, one per service per execution environment, created on first use (never at import)."""

from __future__ import annotations

from collections.abc import Callable
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


def written(conditional_write: Callable[[], Any]) -> bool:
    """Make a conditional DynamoDB write: True when it was made, False when its condition failed (DynamoDB then
    writes nothing and answers ConditionalCheckFailedException: developer guide, "Condition expressions")."""
    try:
        conditional_write()
    except Exception as exc:
        if error_code(exc) == "ConditionalCheckFailedException":
            return False
        raise
    return True
