"""``hypothesis_jsonschema.from_schema`` working with current Hypothesis.

hypothesis-jsonschema 0.23.1 (the newest release) drives Hypothesis' private ``many`` helper through a ``more()``
method that newer Hypothesis releases replaced with a context-manager/iterator protocol. The adapter below gives
hypothesis-jsonschema its old interface on top of the new one, for that module only; Hypothesis itself keeps the
real helper. Without the adapter every object schema fails with ``'many' object has no attribute 'more'``.
"""

from __future__ import annotations

import types
from typing import Any

from hypothesis.internal.conjecture import utils as conjecture_utils
from hypothesis_jsonschema import _from_schema, from_schema

__all__ = ["from_schema"]


class _ManyWithMore:
    def __init__(self, data: Any, min_size: int, max_size: float, average_size: float) -> None:
        self._inner = conjecture_utils.many(data, min_size=min_size, max_size=max_size, average_size=average_size)
        self._inner.__enter__()
        self._steps = iter(self._inner)

    def more(self) -> bool:
        try:
            next(self._steps)
        except StopIteration:
            self._inner.__exit__(None, None, None)
            return False
        return True

    def reject(self, why: str | None = None) -> None:
        self._inner.reject(why)


def _install() -> None:
    if hasattr(conjecture_utils.many, "more"):
        return  # an older Hypothesis: nothing to adapt
    proxy = types.ModuleType(conjecture_utils.__name__)
    proxy.__dict__.update(conjecture_utils.__dict__)
    proxy.many = _ManyWithMore  # type: ignore[attr-defined]
    _from_schema.cu = proxy  # type: ignore[attr-defined]


_install()
