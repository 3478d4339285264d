"""JSON as types: what ``json.loads`` returns and ``json.dumps`` takes, for data that really is arbitrary JSON (an
event's free-form part, a template, a document read back from S3). Anything with a known shape gets a model or a
TypedDict instead; these aliases make mypy check that a value stays JSON and make a reader narrow before use.

``JsonValue`` is pydantic's (a recursive alias both mypy and pydantic resolve), so the aliases may also type the
fields of a model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TypeAlias

from pydantic import JsonValue
from typing_extensions import TypeAliasType

JsonScalar: TypeAlias = str | int | float | bool | None
JsonObject: TypeAlias = dict[str, JsonValue]

if TYPE_CHECKING:
    # Read-only views: a function that only reads takes these, so a dict[str, str] or a list[int] may be passed.
    JsonIn: TypeAlias = JsonScalar | Sequence["JsonIn"] | Mapping[str, "JsonIn"]
else:
    JsonIn = TypeAliasType("JsonIn", "JsonScalar | Sequence[JsonIn] | Mapping[str, JsonIn]")
JsonMapping: TypeAlias = Mapping[str, JsonIn]

__all__ = ["JsonIn", "JsonMapping", "JsonObject", "JsonScalar", "JsonValue"]
