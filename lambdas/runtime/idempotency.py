"""The one idempotency recipe: a side effect runs once per real-world fact.

``once_per_fact`` wraps a function taking ``fact=<pydantic model with a "key" field>`` with Powertools'
``idempotent_function`` keyed on that field (job id + status + attempt; bucket + key + version/etag), results
stored with ``PydanticSerializer``. A function's composition builds it once per execution environment, with the
persistence layer on the function's idempotency table and the function's own DynamoDB client (one client per
service per execution environment). The ledger's conditional writes remain the ground truth
when a record expires or the layer is disabled (``POWERTOOLS_IDEMPOTENCY_DISABLED``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.idempotency.serialization.pydantic import PydanticSerializer
from pydantic import BaseModel

from lambdas.adapters.aws import client

EXPIRES_AFTER_S = 7 * 24 * 3600
Fact = TypeVar("Fact", bound=BaseModel)
Result = TypeVar("Result", bound=BaseModel)


@dataclass(frozen=True)
class OncePerFact(Generic[Fact, Result]):
    """``fn(fact)`` run at most once per ``fact.key`` while its record lives; a repeat returns the stored result."""

    config: IdempotencyConfig
    run: Callable[..., Result]

    def __call__(self, fact: Fact, context: Any = None) -> Result:
        if context is not None and hasattr(context, "get_remaining_time_in_millis"):
            # In-progress records expire with the invocation, so a timed-out attempt can be retried at once.
            self.config.register_lambda_context(context)
        return self.run(fact=fact)


def once_per_fact(fn: Callable[..., Result], *, table: str, result: type[Result]) -> OncePerFact[Any, Result]:
    """``fn`` takes the fact as the keyword ``fact``; its module and name prefix the idempotency key."""
    config = IdempotencyConfig(event_key_jmespath="key", expires_after_seconds=EXPIRES_AFTER_S,
                               raise_on_no_idempotency_key=True)
    store = DynamoDBPersistenceLayer(table_name=table, boto3_client=client("dynamodb"))
    run = idempotent_function(fn, data_keyword_argument="fact", persistence_store=store, config=config,
                              output_serializer=PydanticSerializer(model=result))
    return OncePerFact(config, run)
