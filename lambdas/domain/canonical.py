"""JSON as the plane writes it. ``canonical_json``: one text per value (sorted keys, no spaces, UTF-8 as is), what
hashes and conditional writes compare. ``json_text``: any JSON the plane stores or prints. Both are strict JSON:
NaN and Infinity are not JSON (RFC 8259, section 6), so a non-finite float is written as null (the physics checks,
``lambdas.domain.evidence.physics``, have already named it) and ``allow_nan=False`` refuses anything left."""

from __future__ import annotations

import json
import math
from typing import Any


def finite(value: Any) -> Any:
    """``value`` with every non-finite float (in dicts, lists and tuples, however deep) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def json_text(value: Any, **options: Any) -> str:
    return json.dumps(finite(value), allow_nan=False, **options)


def canonical_json(value: Any) -> str:
    return json_text(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
