"""One JSON text per value: sorted keys, no spaces, UTF-8 as is. Hashes and conditional writes compare these."""

from __future__ import annotations

import json
from typing import Any


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
