"""The decorator stack every function's handler wears, in one place: settings checked first (a missing variable
fails before anything else runs), then Powertools' Logger context, Metrics flushing and the Tracer's segment.

Before the first request, everything INIT built is moved out of the garbage collector's sight (``gc.freeze()``).
An execution environment runs one function, and what INIT built (modules, classes, clients, settings) lives as long
as the environment does, so scanning it can only cost: without the freeze, the first request's allocations tip the
collector into a full collection of those 100k objects (75-110 ms here, the largest part of a cold request beyond
the bare function's). Objects made by requests are collected as usual. Python documents ``gc.freeze()`` for
exactly this: objects that outlive the start-up (https://docs.python.org/3/library/gc.html#gc.freeze).
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from typing import Any, TypeVar, cast

from lambdas.domain.telemetry import service_name
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
        checked = with_settings(settings)(logged)
        service = service_name(fn.__module__)

        @functools.wraps(checked)
        def handler(*args: Any, **kwargs: Any) -> Any:
            _end_of_init()
            # The metrics' service dimension is this function's, whichever function made the shared Metrics first
            # (one process hosts every function in the local rehearsal).
            metrics.service = service
            return checked(*args, **kwargs)

        return cast(F, handler)

    return decorate


_init_frozen = False


def _end_of_init() -> None:
    """Freeze what INIT built, once per execution environment (the first request of the process)."""
    global _init_frozen
    if not _init_frozen:
        _init_frozen = True
        gc.freeze()
