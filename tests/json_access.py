"""Reading JSON answers in tests: a handler or a use case returns JSON values (``JsonObject``), which a test reads by
key after checking the shape, as any client would."""

from __future__ import annotations

from typing import Any


def obj(value: object) -> dict[str, Any]:
    """``value`` as a JSON object (AssertionError naming what it was otherwise)."""
    assert isinstance(value, dict), f"expected a JSON object, got {type(value).__name__}: {value!r:.200}"
    return value


def arr(value: object) -> list[Any]:
    """``value`` as a JSON array."""
    assert isinstance(value, list), f"expected a JSON array, got {type(value).__name__}: {value!r:.200}"
    return value
