"""Powertools Logger, Tracer and Metrics shared by every function (service from POWERTOOLS_SERVICE_NAME).

The Tracer is created on the first invocation rather than at import: building it loads the X-Ray SDK, which
costs more import time than everything else a handler module needs.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from aws_lambda_powertools import Logger, Metrics

NAMESPACE = "Dualtrack"
F = TypeVar("F", bound=Callable[..., Any])

logger = Logger()
metrics = Metrics(namespace=NAMESPACE)


class _LazyTracer:
    def __init__(self) -> None:
        self._tracer: Any = None

    @property
    def tracer(self) -> Any:
        if self._tracer is None:
            from aws_lambda_powertools import Tracer

            self._tracer = Tracer()
        return self._tracer

    def capture_lambda_handler(self, fn: F) -> F:
        traced: list[Callable[..., Any]] = []

        @wraps(fn)
        def wrapper(event: Any, context: Any) -> Any:
            if not traced:
                traced.append(self.tracer.capture_lambda_handler(fn))
            return traced[0](event, context)

        return wrapper  # type: ignore[return-value]


tracer = _LazyTracer()
