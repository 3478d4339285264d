"""Plain-Python <-> DynamoDB attribute maps (floats travel as Decimal, as DynamoDB requires)."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from lambdas.domain.canonical import json_text


def to_item(value: dict[str, Any]) -> dict[str, Any]:
    clean = json.loads(json_text(value, default=str), parse_float=Decimal)
    serializer = TypeSerializer()
    return {k: serializer.serialize(v) for k, v in clean.items() if v is not None}


def from_item(item: dict[str, Any]) -> dict[str, Any]:
    deserializer = TypeDeserializer()
    return {k: _plain(deserializer.deserialize(v)) for k, v in item.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, set):
        return sorted(_plain(v) for v in value)
    return value
