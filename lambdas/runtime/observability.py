"""Powertools Logger, Tracer and Metrics shared by every function (service from POWERTOOLS_SERVICE_NAME), and the
helpers that publish the custom metrics named in ``lambdas.domain.telemetry``.

The Tracer is created on the first invocation rather than at import: building it loads the X-Ray SDK, which
costs more import time than everything else a handler module needs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import wraps
from typing import Any, TypeVar

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from lambdas.domain import telemetry

F = TypeVar("F", bound=Callable[..., Any])

logger = Logger()
metrics = Metrics(namespace=telemetry.NAMESPACE)


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


def count_run_outcomes(new_statuses: Iterable[str]) -> None:
    """RunsSucceeded / RunsFailed, one per terminal transition this invocation was first to record."""
    for status in new_statuses:
        name = telemetry.RUN_OUTCOMES.get(status)
        if name is not None:
            metrics.add_metric(name=name, unit=MetricUnit.Count, value=1)


def count_cache_outcomes(outcomes: Mapping[str, int]) -> None:
    """CompileCacheHits / Misses / Failures for the attempts this invocation was first to count in the registry."""
    for outcome, value in sorted(outcomes.items()):
        name = telemetry.CACHE_OUTCOMES.get(outcome)
        if name is not None and value:
            metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)


def record_trial_cost(total_usd: float) -> None:
    metrics.add_metric(name=telemetry.TRIAL_COST_USD, unit=MetricUnit.NoUnit, value=total_usd)
