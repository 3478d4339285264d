"""JSON as types, for values that really are arbitrary JSON (a data row, a schedule's state, an adapter's config,
a progress line's fields). Anything with a known shape gets a TypedDict instead; these aliases make mypy check that
a value stays JSON and make a reader narrow it before use."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

JsonScalar: TypeAlias = str | int | float | bool | None
JsonValue: TypeAlias = JsonScalar | list["JsonValue"] | dict[str, "JsonValue"]
JsonObject: TypeAlias = dict[str, JsonValue]
# Read-only views: a function that only reads takes these, so a dict[str, str] or a list[int] may be passed.
JsonIn: TypeAlias = JsonScalar | Sequence["JsonIn"] | Mapping[str, "JsonIn"]
JsonMapping: TypeAlias = Mapping[str, JsonIn]
