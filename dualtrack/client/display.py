"""Plain-text views of API answers: trial status with per-run progress, lists, cache entries, aligned Markdown."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from lambdas.domain.vocabulary import scaling_nodes

RUN_ORDER = ("gpu", "trn2-compile", "trn2", "gpu-fallback")
BAR_WIDTH = 24


def width(text: str) -> int:
    """Terminal columns: wide (CJK) characters take two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 0 if unicodedata.combining(c) else 1 for c in text)


def pad(text: str, columns: int) -> str:
    return text + " " * max(0, columns - width(text))


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    cells = [[_text(c) for c in row] for row in rows]
    widths = [max([width(h)] + [width(r[i]) for r in cells]) for i, h in enumerate(headers)]
    out = ["  ".join(pad(h, w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    out += ["  ".join(pad(c, w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return out


def money(value: Any) -> str:
    try:
        amount = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return "-"
    return f"${amount.quantize(Decimal('0.01')):,}"


def progress_bar(step: int, total: int | None, columns: int = BAR_WIDTH) -> str:
    if not total:
        return f"step {step}"
    done = max(0.0, min(1.0, step / total))
    filled = round(done * columns)
    return f"[{'#' * filled}{'.' * (columns - filled)}] {step}/{total} ({done:.0%})"


def run_step(run: Mapping[str, Any]) -> int:
    steps = [int(a.get("end_step") or 0) for a in run.get("attempts") or []]
    return max([int(run.get("step") or 0), *steps])


def run_line(name: str, run: Mapping[str, Any], max_steps: int | None) -> str:
    attempts = run.get("attempts") or []
    parts = [pad(name, 12), pad(str(run.get("status", "PENDING")), 9), progress_bar(run_step(run), max_steps)]
    loss = run.get("loss", run.get("latest_loss"))
    if isinstance(loss, int | float):
        parts.append(f"loss {loss:.4f}")
    detail = f"attempts {len(attempts)}"
    resumed = [a for a in attempts if a.get("resumed_from_step") is not None]
    if resumed:
        rerun = sum(int(a.get("rerun_steps") or 0) for a in attempts)
        detail += f" (resumed from step {resumed[-1]['resumed_from_step']}, {rerun} steps rerun)"
    parts.append(detail)
    cost = run.get("cost") or {}
    parts.append(f"cost {money(cost.get('total_usd'))} {'final' if run.get('cost_final') else 'so far'}")
    return "  ".join(parts)


def status_lines(trial: Mapping[str, Any]) -> list[str]:
    triage = trial.get("triage") or {}
    worst = trial.get("worst_case_usd") or {}
    lines = [f"trial {trial.get('trial_id')}  {trial.get('status')}"
             + (f" ({trial['status_cause']})" if trial.get("status_cause") else "")]
    who = ", ".join(f"{k} {trial[k]}" for k in ("name", "owner", "created_at") if trial.get(k))
    if who:
        lines.append(f"  {who}")
    if triage:
        route = f"  route {triage.get('route')} ({triage.get('scenario')}): {triage.get('conclusion', '')}"
        lines.append(route.rstrip())
    runs: Mapping[str, Any] = trial.get("runs") or {}
    max_steps = trial.get("max_steps")
    if not runs:
        lines.append("  no run has started yet (waiting for Batch capacity or the compile-cache step)")
    for name in sorted(runs, key=lambda r: RUN_ORDER.index(r) if r in RUN_ORDER else len(RUN_ORDER)):
        lines.append("  " + run_line(name, runs[name], max_steps))
    if "trn2-compile" in runs:
        lines.append("  trn2-compile: the warm-up compile stage builds the Trainium2 graphs before training (the "
                     "cache had no entry for this trial's key)")
    if "gpu-fallback" in runs:
        lines.append("  fallback: the trn2 run failed, so the GPU fallback resumes from its newest checkpoint")
    scaling = [(name, nodes) for name in runs if (nodes := scaling_nodes(name)) is not None]
    if scaling:
        counts = ", ".join(f"{name} at {nodes} node{'' if nodes == 1 else 's'}" for name, nodes in scaling)
        lines.append(f"  scaling runs ({counts}): the track trained again at another node count, for the report's "
                     "scaling section")
    total = f"cost so far {money(trial.get('total_usd', 0))}"
    if worst.get("total"):
        total += f" of worst case {money(worst['total'])}"
    lines.append(f"  {total}")
    return lines


def trial_list_lines(body: Mapping[str, Any]) -> list[str]:
    trials = body.get("trials") or []
    if not trials:
        return ["no trials yet: submit one with `dualtrack submit TRIAL.json`"]
    rows = [[t.get("trial_id"), t.get("status"), t.get("owner"), t.get("created_at")] for t in trials]
    out = table(("TRIAL", "STATUS", "OWNER", "CREATED"), rows)
    if body.get("next_token"):
        out.append(f"more: --next-token {body['next_token']}")
    return out


def cache_lines(body: Mapping[str, Any]) -> list[str]:
    entries = body.get("entries") or []
    if not entries:
        return ["no compile-cache entries yet: the first Trainium2 run of a graph compiles and fills one"]
    rows = [[e.get("model"), e.get("compiler_version"), str(e.get("cache_key", ""))[:12], e.get("status"),
             e.get("hits"), e.get("misses"), _rate(e.get("hit_rate")), _seconds(e.get("first_compile_s")),
             _seconds(e.get("saved_compile_s")), _bytes(e.get("size_bytes")), e.get("last_used_at")]
            for e in entries]
    out = table(("MODEL", "COMPILER", "KEY", "STATUS", "HITS", "MISSES", "HIT RATE", "FIRST COMPILE", "SAVED",
                 "SIZE", "LAST USED"), rows)
    groups = body.get("groups") or []
    if groups:
        out.append("")
        out += table(("MODEL", "COMPILER", "ENTRIES", "HIT RATE", "SAVED", "SIZE"),
                     [[g.get("model"), g.get("compiler_version"), g.get("entries"), _rate(g.get("hit_rate")),
                       _seconds(g.get("saved_compile_s")), _bytes(g.get("size_bytes"))] for g in groups])
    return out


_SEPARATOR = re.compile(r"^:?-{1,}:?$")


def align_markdown_tables(markdown: str) -> str:
    """Pad pipe tables so their columns line up in a terminal; the result is still valid Markdown."""
    lines = markdown.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        if not lines[i].lstrip().startswith("|"):
            out.append(lines[i])
            i += 1
            continue
        block = []
        while i < len(lines) and lines[i].lstrip().startswith("|"):
            block.append(_cells(lines[i]))
            i += 1
        columns = max(len(r) for r in block)
        rows = [r + [""] * (columns - len(r)) for r in block]
        widths = [max(3, *(width(r[c]) for r in rows if not _is_separator(r))) for c in range(columns)]
        for row in rows:
            if _is_separator(row):
                out.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
            else:
                out.append("| " + " | ".join(pad(c, w) for c, w in zip(row, widths, strict=True)) + " |")
    return "\n".join(out) + ("\n" if markdown.endswith("\n") else "")


def _cells(line: str) -> list[str]:
    text = line.strip()
    text = text[1:] if text.startswith("|") else text
    text = text[:-1] if text.endswith("|") else text
    return [c.strip() for c in re.split(r"(?<!\\)\|", text)]


def _is_separator(row: Sequence[str]) -> bool:
    return all(_SEPARATOR.match(c) for c in row if c) and any(row)


def _text(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


def _rate(value: Any) -> str:
    return "-" if value is None else f"{float(value):.0%}"


def _seconds(value: Any) -> str:
    return "-" if value is None else f"{float(value):,.0f} s"


def _bytes(value: Any) -> str:
    size = float(value or 0)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    return "-"
