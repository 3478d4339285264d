"""Reading JSON whose shape the local runtime knows: a template, a Batch job's request, an event, a progress record.

Each reader narrows one value to the shape the reader expects and raises ``TypeError``, naming the value, when it
has another: a malformed document fails where it is read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lambdas.domain.json_types import JsonIn, JsonMapping, JsonObject, JsonValue


def mapping(value: JsonIn) -> JsonMapping:
    """A JSON object, read only."""
    if not isinstance(value, Mapping):
        raise TypeError(f"expected a JSON object, got {value!r}")
    return value


def json_object(value: JsonValue) -> JsonObject:
    """A JSON object the caller may change."""
    if not isinstance(value, dict):
        raise TypeError(f"expected a JSON object, got {value!r}")
    return value


def sequence(value: JsonIn) -> Sequence[JsonIn]:
    """A JSON array (text is not one)."""
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise TypeError(f"expected a JSON array, got {value!r}")
    return value


def integer(value: JsonIn) -> int:
    """``int(value)`` of a number or of numeric text."""
    if not isinstance(value, str | int | float):
        raise TypeError(f"expected a number, got {value!r}")
    return int(value)


def text(value: JsonIn) -> str:
    """A JSON string."""
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def optional_text(value: JsonIn) -> str | None:
    """A JSON string, or None for null or an absent value."""
    return None if value is None else text(value)
