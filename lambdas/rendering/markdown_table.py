"""Markdown table rows whose cells may hold text from outside: a Batch status reason, a compiler message, a cancel
reason. A ``|`` in a cell would split it into two columns and a line break would end its row (and could start fake
ones), so every table the reports write builds its rows here: the trial report's and ``report --compare``'s."""

from __future__ import annotations

import re
from collections.abc import Iterable

# A pipe and the backslashes right before it: those are doubled so that none of them escapes the pipe's own.
_PIPE = re.compile(r"(\\*)\|")


def md_cell(text: str) -> str:
    """``text`` as one table cell: each line break (any that ``str.splitlines`` knows) becomes a space, so the cell
    stays on its row, and each ``|`` is escaped (``\\|``, which Markdown shows as ``|``), so it stays one column."""
    flat = " ".join(text.splitlines())
    return _PIPE.sub(lambda found: found.group(1) * 2 + "\\|", flat)


def md_row(cells: Iterable[str]) -> str:
    """One table row, every cell escaped."""
    return "| " + " | ".join(md_cell(text) for text in cells) + " |"
