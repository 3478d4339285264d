"""boto3 clients, one per service per execution environment, created on first use (never at import)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import cache
from typing import Any

import boto3
from botocore import UNSIGNED
from botocore.config import Config


@cache
def client(service: str) -> Any:
    return boto3.client(service, config=Config(retries={"mode": "adaptive", "max_attempts": 8}))  # type: ignore[call-overload]


@cache
def unsigned_client(service: str, region: str) -> Any:
    """A client whose requests this function does not sign: it sends requests another principal signed (a job's
    presigned STS GetCallerIdentity), with botocore's endpoint, retries and timeouts."""
    return boto3.client(service, region_name=region, config=Config(  # type: ignore[call-overload]
        signature_version=UNSIGNED, connect_timeout=3, read_timeout=5, retries={"mode": "standard", "max_attempts": 3}))


def reset_clients() -> None:
    """Drop cached clients (tests switch between mocked accounts)."""
    client.cache_clear()
    unsigned_client.cache_clear()


# The continuation token of each list operation the adapters page through: (request parameter, response field).
CONTINUATION = {"query": ("ExclusiveStartKey", "LastEvaluatedKey"), "scan": ("ExclusiveStartKey", "LastEvaluatedKey"),
                "list_objects_v2": ("ContinuationToken", "NextContinuationToken")}


def pages(service: str, operation: str, **params: Any) -> Iterator[dict[str, Any]]:
    """Every page of a list operation, following its continuation token with direct calls. botocore's paginators
    do the same, but an execution environment's first ``get_paginator`` lists every service model directory on disk
    (``can_paginate``): about 15 ms of a cold request here, for no request the API makes."""
    call = getattr(client(service), operation)
    request_field, response_field = CONTINUATION[operation]
    while True:
        page: dict[str, Any] = call(**params)
        yield page
        token = page.get(response_field)
        if not token:
            return
        params = {**params, request_field: token}


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
