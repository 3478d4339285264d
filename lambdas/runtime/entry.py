"""The outermost handler decorator: validate the function's settings before anything else runs.

Handler modules import this at cold start, so it names its settings model rather than importing it: the model,
and pydantic's model machinery with it, loads on the first invocation. A handler module's import then costs about
what importing Powertools, pydantic and boto3 costs (``bench/bench_imports.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, Literal, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
SettingsName = Literal[
    "LedgerSettings",
    "IdempotentSettings",
    "RunEventSettings",
    "ArtifactEventSettings",
    "ApiSettings",
    "CacheSettings",
    "CostReportSettings",
]


def require_settings(name: SettingsName) -> Callable[[F], F]:
    """Validate ``lambdas.runtime.settings.<name>`` from the environment on each call (read once per container)."""

    def decorate(fn: F) -> F:
        @wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            from lambdas.runtime import settings

            settings.settings_for(getattr(settings, name))
            return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
