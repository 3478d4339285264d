"""The decorator stack every function's handler wears, in one place: settings checked first (a missing variable
fails before anything else runs), then Powertools' Logger context, Metrics flushing and the Tracer's segment."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from lambdas.runtime.observability import logger, metrics, tracer
from lambdas.runtime.settings import _Settings, with_settings

F = TypeVar("F", bound=Callable[..., Any])


def lambda_handler(settings: type[_Settings], *, correlation_id_path: str | None = None) -> Callable[[F], F]:
    """``@with_settings(settings)`` → ``@logger.inject_lambda_context`` → ``@metrics.log_metrics`` →
    ``@tracer.capture_lambda_handler``, outermost first."""

    def decorate(fn: F) -> F:
        traced = tracer.capture_lambda_handler(fn)
        flushed = metrics.log_metrics(traced)
        logged = logger.inject_lambda_context(flushed, correlation_id_path=correlation_id_path)
        return cast(F, with_settings(settings)(logged))

    return decorate
