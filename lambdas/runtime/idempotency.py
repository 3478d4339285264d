"""The one idempotency recipe: a side effect runs once per real-world fact.

``once_per_fact`` wraps a function taking ``fact=<pydantic model with a "key" field>`` with Powertools'
``idempotent_function`` keyed on that field (job id + status + attempt; bucket + key + version/etag), results
stored with ``PydanticSerializer``. The persistence layer (and its boto3 client) is built on first use, not at
import. The ledger's conditional writes remain the ground truth when a record expires or the layer is disabled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, get_type_hints

F = TypeVar("F", bound=Callable[..., Any])
EXPIRES_AFTER_S = 7 * 24 * 3600
_config: Any = None
_BUILT: list[list[Callable[..., Any]]] = []  # every decorated function's built wrapper, for reset_idempotency()


def _idempotency_config() -> Any:
    global _config
    if _config is None:
        from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig

        _config = IdempotencyConfig(
            event_key_jmespath="key", expires_after_seconds=EXPIRES_AFTER_S, raise_on_no_idempotency_key=True
        )
    return _config


def reset_idempotency() -> None:
    """Forget built persistence layers and their clients (the environment they were built for has changed)."""
    global _config
    for built in _BUILT:
        built.clear()
    _config = None


def register_context(context: Any) -> None:
    """Let in-progress records expire with the invocation (call once per invocation, before the side effect)."""
    if context is not None and hasattr(context, "get_remaining_time_in_millis"):
        _idempotency_config().register_lambda_context(context)


def once_per_fact(table_name: Callable[[], str]) -> Callable[[F], F]:
    def decorate(fn: F) -> F:
        built: list[Callable[..., Any]] = []
        _BUILT.append(built)

        def wrapper(*, fact: Any) -> Any:
            if not built:
                from aws_lambda_powertools.utilities.idempotency import (
                    DynamoDBPersistenceLayer,
                    idempotent_function,
                )
                from aws_lambda_powertools.utilities.idempotency.serialization.pydantic import PydanticSerializer

                # Resolve the result model here: handler modules use postponed annotations.
                result_model = get_type_hints(fn)["return"]
                store = DynamoDBPersistenceLayer(table_name=table_name())
                built.append(
                    idempotent_function(
                        fn,
                        data_keyword_argument="fact",
                        persistence_store=store,
                        config=_idempotency_config(),
                        output_serializer=PydanticSerializer(model=result_model),
                    )
                )
            return built[0](fact=fact)

        wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
        wrapper.__name__ = fn.__name__
        return wrapper  # type: ignore[return-value]

    return decorate
