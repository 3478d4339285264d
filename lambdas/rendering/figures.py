"""How the report writes a number: significant figures, written out and grouped, never in exponent form. One place,
so the record table, the decision and the pilot section write the same figure the same way."""

from __future__ import annotations

import math


def places(value: float, digits: int) -> int:
    """Decimal places that write ``value`` to ``digits`` significant figures (negative: round to tens, ...)."""
    if not value or not math.isfinite(value):
        return 0
    found = digits - 1 - math.floor(math.log10(abs(value)))
    rounded = round(value, found)
    # 9.99996 rounds up to 10.00: one place fewer keeps the figures at ``digits``.
    return found - 1 if rounded and abs(rounded) >= 10 ** (digits - found) else found


def fixed(value: float, decimals: int) -> str:
    return f"{round(value, decimals):,.{max(decimals, 0)}f}"


def significant(value: float, digits: int = 4) -> str:
    """``value`` to ``digits`` significant figures, written out and with thousands grouped, trailing zeros
    dropped: 124,800, 2.1 and 0.00001443, never 1.248e+05 or 1.443e-05."""
    if not math.isfinite(value):
        return str(value)
    text = fixed(value, places(value, digits))
    return text.rstrip("0").rstrip(".") if "." in text else text
