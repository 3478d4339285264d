"""Markdown and self-contained HTML renderings of a trial report (inline SVG charts, no external assets)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from html import escape
from typing import Any

from lambdas.domain.cost import COMPONENTS

COLOURS = {"gpu": "#1f77b4", "trn2": "#d62728", "gpu-fallback": "#2ca02c"}
COMPONENT_COLOURS = dict(zip(COMPONENTS, ("#4c78a8", "#f58518", "#e45756", "#72b7b2", "#b279a2"), strict=True))


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


def _baseline_line(baseline: Mapping[str, Any] | None) -> str:
    """What the report says of the trial's GPU baseline, in one line."""
    if not baseline:
        return "none declared (baseline_logs_uri): the GPU track is not checked against the team's own GPU logs"
    if baseline.get("error"):
        return f"{baseline['uri']} could not be used: {baseline['error']}"
    if "detail" not in baseline:
        return f"{baseline.get('format')} at {baseline['uri']}; no gpu run reported losses to compare with it"
    verdict = {True: "reproduced", False: "NOT reproduced", None: "not evidenced"}[baseline.get("reproduced")]
    return f"{verdict}: {baseline['format']} at {baseline['uri']}; {baseline['detail']}"


def render_markdown(report: Mapping[str, Any]) -> str:
    tracks: Mapping[str, Any] = report["tracks"]
    runs = list(tracks)
    out = [
        f"# Trial {report['trial_id']}",
        "",
        f"Owner `{report['owner']}` · model `{report['model']['id']}@{report['model']['revision']}` "
        f"({report['model']['method']}) · spec sha256 `{report['spec_hash'][:12]}`",
        "",
    ]
    if report.get("stand_in"):
        out += [
            "> Figures marked stand-in come from a stand-in backend; prices are at the declared instance's rate.",
            "",
        ]
    stopped = report.get("stopped_by")
    if stopped:
        out += [f"> **Stopped at limit `{stopped['limit']}`** ({stopped['source']}): limit {stopped['value']}, "
                f"observed {stopped['observed']}" + (f" on run {stopped['run']}" if stopped.get("run") else "")
                + f" at {stopped['at']}.", ""]
    comparison = report["comparison"]
    if comparison.get("headline"):
        out += [f"**{comparison['headline']}**", ""] + [f"- {f}" for f in comparison.get("facts") or []] + [""]
    out += [f"Verdict code: `{comparison['verdict']}`", ""] + [f"- {r}" for r in comparison["reasons"]] + [""]
    out += [f"GPU baseline: {_baseline_line(report.get('baseline'))}", ""]
    unreadable = report.get("unreadable_summaries") or []
    if unreadable:
        out += ["> Summaries the report could not read (their attempts are missing from the figures below):", ""]
        out += [f"- `{u['key']}`: {_cell(u['error'])}" for u in unreadable] + [""]
    out += ["## How each job ended", "", "| run | outcome | Batch status reason |", "|---|---|---|"]
    out += [f"| {run} | {tracks[run].get('outcome', 'unknown')} | {_cell(tracks[run].get('status_reason'))} |"
            for run in runs] + [""]
    out += ["## Record table", "", "| item | " + " | ".join(runs) + " |", "|---|" + "---|" * len(runs)]
    for row in report["record_table"]:
        cells = [", ".join(f"{k} {_cell(v)}" for k, v in row[run].items()) for run in runs]
        out.append(f"| {row['item']} | " + " | ".join(cells) + " |")
    out += ["", "## Acceptance checks", "", "| check | status | detail |", "|---|---|---|"]
    out += [f"| {c['check']} | {c['status']} | {c['detail']} |" for c in report["acceptance"]]
    parallel = {run: tracks[run].get("parallel") for run in runs if tracks[run].get("parallel")}
    if parallel:
        out += ["", "## Parallel layout", "",
                "| run | nodes | devices billed | training ranks | utilisation | processes | communication_s | "
                "communication share | sync wait median_s | basis |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        out += [f"| {run} | {p['nodes']} | {p['devices_billed']} | {p['layout_ranks']} | "
                f"{_cell(p['device_utilisation'])} | {p['processes']} | {_cell(p['communication_s'])} | "
                f"{_cell(p['communication_share'])} | {_cell(p['sync_wait_median_s'])} | {p['basis']} |"
                for run, p in parallel.items()]
    out += [
        "",
        "## Cost (USD)",
        "",
        "| component | " + " | ".join(runs) + " | trial |",
        "|---|" + "---|" * (len(runs) + 1),
    ]
    for name in (*COMPONENTS, "total_usd", "cost_per_effective_step_usd", "cost_per_1m_tokens_usd"):
        trial = report["cost"]["trial"].get(name, "")
        out.append(f"| {name} | " + " | ".join(_cell(tracks[r]["cost"][name]) for r in runs) + f" | {trial} |")
    out += ["", "Price basis: " + "; ".join(f"{r}: {tracks[r]['cost']['price_basis']}" for r in runs), ""]
    out += [
        "## Resume evidence",
        "",
        "| run | injected_at_step | resumed_from_step | rerun_steps | rerun share | global_step_continuous | "
        "loss_continuous |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        r = tracks[run]["resume"]
        out.append(
            f"| {run} | {_cell(r['injected_at_step'])} | {_cell(r['resumed_from_step'])} | "
            f"{r['rerun_steps']} | {_cell(r['rerun_share'])} | {_cell(r['global_step_continuous'])} | "
            f"{_cell(r['loss_continuous'])} |"
        )
    out += [
        "",
        "## Comparison",
        "",
        f"- final validation-loss delta (relative): {_cell(comparison['final_loss_delta'])} "
        f"(tolerance {comparison['loss_tolerance']}, within: {_cell(comparison['within_tolerance'])})",
        f"- cost ratio: {_cell(comparison['cost_ratio'])} ({comparison['cost_ratio_basis']})",
        "",
    ]
    return "\n".join(out)


def _loss_chart(tracks: Mapping[str, Any], width: int = 640, height: int = 260) -> str:
    series = {run: [(p["step"], p["loss"]) for p in t["loss"]["per_step"]] for run, t in tracks.items()}
    points = [p for s in series.values() for p in s]
    if not points:
        return "<p>No per-step loss recorded.</p>"
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
    y0, y1 = min(p[1] for p in points), max(p[1] for p in points)
    sx = lambda x: 40 + (x - x0) / ((x1 - x0) or 1) * (width - 60)  # noqa: E731
    sy = lambda y: height - 30 - (y - y0) / ((y1 - y0) or 1) * (height - 50)  # noqa: E731
    lines = []
    for i, (run, pts) in enumerate(series.items()):
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        colour = COLOURS.get(run, "#555")
        lines.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{path}"/>'
            f'<text x="{width - 140}" y="{20 + 14 * i}" fill="{colour}">{escape(run)}</text>'
        )
    axes = (
        f'<line x1="40" y1="{height - 30}" x2="{width - 20}" y2="{height - 30}" stroke="#999"/>'
        f'<line x1="40" y1="20" x2="40" y2="{height - 30}" stroke="#999"/>'
        f'<text x="40" y="{height - 10}">step {x0}</text><text x="{width - 90}" y="{height - 10}">step {x1}</text>'
        f'<text x="2" y="20">{y1:.3g}</text><text x="2" y="{height - 32}">{y0:.3g}</text>'
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="loss by global step" '
        f'width="{width}" height="{height}" font-size="11">{axes}{"".join(lines)}</svg>'
    )


def _cost_chart(tracks: Mapping[str, Any], width: int = 640) -> str:
    totals = {run: float(t["cost"]["total_usd"]) for run, t in tracks.items()}
    top = max(totals.values(), default=0.0) or 1.0
    bars = []
    for i, (run, t) in enumerate(tracks.items()):
        x, y = 120.0, 20 + i * 34
        bars.append(f'<text x="4" y="{y + 16}">{escape(run)}</text>')
        for name in COMPONENTS:
            w = float(t["cost"][name]) / top * (width - 220)
            bars.append(
                f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="22" fill="{COMPONENT_COLOURS[name]}">'
                f"<title>{name} {t['cost'][name]}</title></rect>"
            )
            x += w
        bars.append(f'<text x="{x + 6:.1f}" y="{y + 16}">{totals[run]:.2f} USD</text>')
    legend = "".join(
        f'<rect x="{120 + i * 100}" y="{28 + 34 * len(tracks)}" width="10" height="10" '
        f'fill="{COMPONENT_COLOURS[n]}"/><text x="{134 + i * 100}" y="{37 + 34 * len(tracks)}">'
        f"{n.removesuffix('_usd')}</text>"
        for i, n in enumerate(COMPONENTS)
    )
    height = 50 + 34 * len(tracks)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="cost by component" width="{width}" '
        f'height="{height}" font-size="11">{"".join(bars)}{legend}</svg>'
    )


def _timeline_chart(timeline: Sequence[Mapping[str, Any]], width: int = 640) -> str:
    if not timeline:
        return "<p>No Batch transitions recorded.</p>"
    stamp = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()  # noqa: E731
    t0, t1 = stamp(timeline[0]["at"]), stamp(timeline[-1]["at"])
    lanes = sorted({(r["run"], r["attempt"]) for r in timeline})
    marks = []
    for row in timeline:
        lane = lanes.index((row["run"], row["attempt"]))
        x = 140 + (stamp(row["at"]) - t0) / ((t1 - t0) or 1) * (width - 180)
        colour = "#2ca02c" if row["status"] == "SUCCEEDED" else "#d62728" if row["status"] == "FAILED" else "#777"
        marks.append(
            f'<circle cx="{x:.1f}" cy="{24 + lane * 22}" r="4" fill="{colour}"><title>{row["status"]} '
            f"{escape(row['at'])}</title></circle>"
        )
    labels = "".join(f'<text x="4" y="{28 + i * 22}">{escape(r)} attempt {a}</text>' for i, (r, a) in enumerate(lanes))
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="attempt timeline" width="{width}" '
        f'height="{40 + 22 * len(lanes)}" font-size="11">{labels}{"".join(marks)}</svg>'
    )


def render_html(report: Mapping[str, Any]) -> str:
    """One HTML file with the Markdown's content as tables and three inline SVG charts."""
    tracks = report["tracks"]
    runs = list(tracks)
    rows = "".join(
        f"<tr><td>{escape(r['item'])}</td>"
        + "".join(f"<td>{escape(', '.join(f'{k} {_cell(v)}' for k, v in r[run].items()))}</td>" for run in runs)
        + "</tr>"
        for r in report["record_table"]
    )
    outcomes = "".join(
        f"<tr><td>{escape(run)}</td><td>{escape(str(tracks[run].get('outcome', 'unknown')))}</td>"
        f"<td>{escape(_cell(tracks[run].get('status_reason')))}</td></tr>" for run in runs
    )
    checks = "".join(
        f"<tr><td>{escape(c['check'])}</td><td>{c['status']}</td><td>{escape(c['detail'])}</td></tr>"
        for c in report["acceptance"]
    )
    reasons = "".join(f"<li>{escape(r)}</li>" for r in report["comparison"]["reasons"])
    facts = "".join(f"<li>{escape(f)}</li>" for f in report["comparison"].get("facts") or [])
    lead = (f'<p class="headline"><strong>{escape(report["comparison"]["headline"])}</strong></p><ul>{facts}</ul>'
            if report["comparison"].get("headline") else "")
    stand_in = (
        "<p><strong>Figures from a stand-in backend; prices at the declared instance's rate.</strong></p>"
        if report.get("stand_in")
        else ""
    )
    stopped = report.get("stopped_by")
    if stopped:
        stand_in += (f"<p><strong>Stopped at limit {escape(stopped['limit'])}</strong> ({escape(stopped['source'])}): "
                     f"limit {escape(stopped['value'])}, observed {escape(stopped['observed'])}"
                     + (f" on run {escape(stopped['run'])}" if stopped.get("run") else "")
                     + f" at {escape(stopped['at'])}.</p>")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Trial {escape(report["trial_id"])}</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}td,th{{border:1px solid #ccc;padding:4px}}
table{{border-collapse:collapse}}</style></head><body>
<h1>Trial {escape(report["trial_id"])}</h1>{lead}{stand_in}
<h2>Why: {escape(report["comparison"]["verdict"])}</h2><ul>{reasons}</ul>
<p>GPU baseline: {escape(_baseline_line(report.get("baseline")))}</p>
<h2>Loss by global step</h2>{_loss_chart(tracks)}
<h2>Cost by component</h2>{_cost_chart(tracks)}
<h2>Attempt timeline</h2>{_timeline_chart(report.get("timeline") or [])}
<h2>Record table</h2><table><tr><th>item</th>{"".join(f"<th>{escape(r)}</th>" for r in runs)}</tr>{rows}</table>
<h2>How each job ended</h2><table><tr><th>run</th><th>outcome</th><th>Batch status reason</th></tr>{outcomes}</table>
<h2>Acceptance checks</h2><table><tr><th>check</th><th>status</th><th>detail</th></tr>{checks}</table>
</body></html>
"""
