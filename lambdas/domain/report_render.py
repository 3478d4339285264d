"""Markdown and self-contained HTML renderings of a trial report (inline SVG charts, no external assets)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from functools import lru_cache
from html import escape
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from lambdas.domain.cost import COMPONENTS

COLOURS = {"gpu": "#1f77b4", "trn2": "#d62728", "gpu-fallback": "#2ca02c"}
# Two tracks that train alike draw one curve over the other: each run has its own dash, so both stay visible.
DASHES = {"gpu": "", "trn2": "6 4", "gpu-fallback": "2 3"}
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


def _compile_lines(report: Mapping[str, Any]) -> list[str]:
    """The warm-up compile stage (when it ran) and the trial's cache hit rate."""
    view = report.get("compile") or {}
    stage = view.get("stage")
    rate = view.get("hit_rate")
    out = ["## Compile", "",
           f"Cache hit rate: {'-' if rate is None else f'{rate:.0%}'} ({view.get('hits', 0)} of "
           f"{view.get('lookups', 0)} lookups; {view.get('basis', '')})", ""]
    entries = view.get("entries") or []
    if entries:
        out += ["| cache entry | status | hits | compiles | failed compiles | last failure |",
                "|---|---|---|---|---|---|"]
        out += [f"| `{e['cache_key'][:16]}` | {e['status']} | {e['hits']} | {e['misses']} | {e['failures']} | "
                f"{_cell(e['failure_reason'])} |" for e in entries] + [""]
    if not stage:
        return [*out, "Warm-up compile stage: not run (the cache key was warm, or the trial has no trn2 track).", ""]
    booking = stage.get("booking") or {}
    out += [f"Warm-up compile stage (`{stage['run']}`, {stage.get('instance_type')} x {stage.get('nodes')}"
            f"{', stand-in ' + str(stage['backend']) if stage.get('stand_in') else ''}): **{stage['status']}**, "
            f"{_cell(stage['compile_s'])} s compiling over {stage['attempts']} attempt(s), cache "
            f"{', '.join(stage['cache_by_attempt']) or '-'}, cost {stage['cost']['total_usd']} USD (all compile)"
            + (f", booked as {'shared infrastructure' if booking.get('shared') else 'this trial'} "
               f"({booking['basis']})" if booking.get("basis") else "") + ".", ""]
    if stage.get("error") or stage.get("detail"):
        out += [f"> Compiler: {_cell(stage.get('error') or stage.get('detail'))}", ""]
    return out


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
    out += [f"> Fidelity caveat: {c}" for c in comparison.get("caveats") or []] + (
        [""] if comparison.get("caveats") else [])
    out += [f"Verdict code: `{comparison['verdict']}`", ""] + [f"- {r}" for r in comparison["reasons"]] + [""]
    stacks = [f"{run}: {tracks[run].get('stack') or tracks[run].get('backend')}, PyTorch "
              f"{tracks[run].get('torch') or 'unknown'}, {tracks[run].get('execution', 'eager')}" for run in runs]
    out += ["Training stacks: " + "; ".join(stacks), ""]
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
    for run in runs:
        booking = tracks[run]["compile"].get("booking") or {}
        if booking.get("basis"):
            out += [f"Compile cost of {run}: {'shared infrastructure' if booking.get('shared') else 'this trial'}"
                    f" ({booking['basis']})", ""]
    out += _compile_lines(report)
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


def _ticks(low: float, high: float, count: int = 6) -> list[float]:
    """About ``count`` round tick values covering [low, high] (1, 2 or 5 times a power of ten apart)."""
    span = (high - low) or abs(high) or 1.0
    raw = span / max(1, count - 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(low / step) * step
    return [round(first + i * step, 10) for i in range(int((high - first) / step + 1e-9) + 1)]


def loss_chart(tracks: Mapping[str, Any], width: int = 720, height: int = 300) -> dict[str, Any]:
    """The loss chart's geometry: one line per run, its validation points, and the fault, retry, resume and
    fallback marked where they happened."""
    left, right, top, bottom = 56, width - 16, 16, height - 40
    series: dict[str, list[tuple[float, float]]] = {
        run: [(p["step"], p["loss"]) for p in t["loss"]["per_step"]] for run, t in tracks.items()}
    evals: dict[str, list[tuple[float, float]]] = {
        run: [(p["step"], p["loss"]) for p in t["loss"]["eval"]] for run, t in tracks.items()}
    points = [p for s in (*series.values(), *evals.values()) for p in s]
    if not points:
        return {"series": []}
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
    y0, y1 = min(p[1] for p in points), max(p[1] for p in points)
    pad = (y1 - y0) * 0.05 or 0.05
    y0, y1 = y0 - pad, y1 + pad

    def sx(x: float) -> float:
        return round(left + (x - x0) / ((x1 - x0) or 1) * (right - left), 1)

    def sy(y: float) -> float:
        return round(bottom - (y - y0) / ((y1 - y0) or 1) * (bottom - top), 1)

    markers = []
    for run, t in tracks.items():
        resume = t["resume"]
        if resume.get("injected_at_step"):
            markers.append({"at": sx(resume["injected_at_step"]), "colour": "#d62728",
                            "label": f"{run}: fault after step {resume['injected_at_step']}"})
        if resume.get("resumed_from_step") is not None:
            what = "fallback resumed" if run == "gpu-fallback" else "retry resumed"
            markers.append({"at": sx(resume["resumed_from_step"]), "colour": COLOURS.get(run, "#555"),
                            "label": f"{run}: {what} from step {resume['resumed_from_step']}"})
    return {
        "width": width, "height": height, "left": left, "right": right, "top": top, "bottom": bottom,
        "series": [{"run": run, "colour": COLOURS.get(run, "#555"), "dash": DASHES.get(run, "3 3"),
                    "points": " ".join(f"{sx(x)},{sy(y)}" for x, y in pts),
                    "evals": [{"x": sx(x), "y": sy(y), "step": x, "loss": round(y, 4)} for x, y in evals[run]]}
                   for run, pts in series.items() if pts or evals[run]],
        "x_ticks": [{"at": sx(v), "label": f"{v:g}"} for v in _ticks(x0, x1) if x0 <= v <= x1],
        "y_ticks": [{"at": sy(v), "label": f"{v:.3g}"} for v in _ticks(y0, y1) if y0 <= v <= y1],
        "markers": markers,
    }


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


def _usd(value: Any, places: int = 2) -> str:
    """Money for people: to the cent in tables (full precision stays in report.json)."""
    if value in (None, ""):
        return "-"
    amount = Decimal(str(value))
    if places == 2 or abs(amount) >= 1:
        return f"${amount:,.2f}"
    return f"${amount:.{places}g}" if amount else "$0"


def _interval(view: Mapping[str, Any] | None, fmt: str) -> str:
    if not view:
        return "-"
    return (f"{view['estimate']:{fmt}} ({view['confidence']:.0%}: {view['low']:{fmt}}-{view['high']:{fmt}})")


def _context(report: Mapping[str, Any]) -> dict[str, Any]:
    tracks: Mapping[str, Any] = report["tracks"]
    runs = list(tracks)
    comparison = report["comparison"]
    cost_rows = [{"name": name.removesuffix("_usd").replace("_", " "),
                  "cells": [_usd(tracks[run]["cost"][name]) for run in runs] + [_usd(report["cost"]["trial"][name])]}
                 for name in (*COMPONENTS, "total_usd")]
    for name, places in (("cost_per_effective_step_usd", 4), ("cost_per_1m_tokens_usd", 2)):
        cost_rows.append({"name": name.removesuffix("_usd").replace("_", " "),
                          "cells": [_usd(tracks[run]["cost"][name], places) for run in runs] + ["-"]})
    prices = []
    estimates = []
    for run in runs:
        basis = str(tracks[run]["cost"].get("price_basis") or "")
        found = re.match(r"(?P<type>\S+) at (?P<rate>\S+) USD/h \((?P<conf>[^,]+), table (?P<table>[^)]+)\)", basis)
        price = found.groupdict() if found else {"type": "?", "rate": "?", "conf": "?", "table": "?"}
        prices.append({"run": run, "instance_type": price["type"], "rate": f"{price['rate']} USD/h",
                       "confidence": price["conf"], "table": price["table"]})
        if price["conf"] == "estimate":
            estimates.append(f"{run} ({price['type']})")
    uncertainty = []
    for run in runs:
        view = tracks[run].get("uncertainty") or {}
        uncertainty.append({"run": run, "steps": view.get("steady_steps", "-"),
                            "step_time": _interval(view.get("step_time_s"), ".4g"),
                            "tokens": _interval(view.get("tokens_per_s"), ",.0f"),
                            "cost": _interval(view.get("cost_per_effective_step_usd"), ".3g"),
                            "on": f"stand-in {tracks[run]['backend']}" if tracks[run]["stand_in"] else
                                  f"{tracks[run]['instance_type']}"})
    record_rows = [{"item": row["item"],
                    "cells": [[(name.replace("_", " ").removesuffix(" s") + (" (s)" if name.endswith("_s") else ""),
                                _cell(value) if not isinstance(value, list) else ", ".join(map(_cell, value)))
                               for name, value in row[run].items()] for run in runs]}
                   for row in report["record_table"]]
    attempts = []
    for run in runs:
        compile_view = tracks[run]["compile"]
        startup = {a["attempt"]: a["seconds"] for a in (tracks[run].get("startup") or {}).get("by_attempt", [])}
        seconds = compile_view.get("seconds_by_attempt") or []
        for i, cache in enumerate(compile_view.get("cache_by_attempt") or []):
            attempts.append({"run": run, "attempt": i + 1, "cache": cache,
                             "compile_s": _cell(seconds[i]) if i < len(seconds) else "-",
                             "startup_s": _cell(startup.get(i + 1))})
    compile_view = report.get("compile") or {}
    stage = compile_view.get("stage")
    if stage:
        startup = {a["attempt"]: a["seconds"] for a in (stage.get("startup") or {}).get("by_attempt", [])}
        seconds = stage.get("seconds_by_attempt") or []
        attempts[:0] = [{"run": stage["run"], "attempt": i + 1, "cache": cache,
                         "compile_s": _cell(seconds[i]) if i < len(seconds) else "-",
                         "startup_s": _cell(startup.get(i + 1))}
                        for i, cache in enumerate(stage.get("cache_by_attempt") or [])]
    hit_rates = [(run, "-" if tracks[run]["compile"].get("hit_rate") is None
                  else f"{tracks[run]['compile']['hit_rate']:.0%}") for run in runs]
    trial_rate = compile_view.get("hit_rate")
    hit_rates.insert(0, ("trial", "-" if trial_rate is None else
                         f"{trial_rate:.0%} ({compile_view.get('hits', 0)} of {compile_view.get('lookups', 0)} "
                         "lookups)"))
    versions = []
    for run in runs:
        env = dict(tracks[run].get("environment") or {})
        image, digest = env.pop("image", "-"), env.pop("image_digest", "-")
        for noise in ("hostname", "batch_job_id", "instance_type"):
            env.pop(noise, None)
        versions.append({"run": run, "image": image, "digest": digest,
                         "versions": ", ".join(f"{k} {v}" for k, v in env.items()) or "-"})
    recovery = [{"run": run, "cells": [_cell(tracks[run]["resume"].get(k)) for k in (
        "injected_at_step", "resumed_from_step", "rerun_steps", "rerun_share", "global_step_continuous",
        "loss_continuous", "max_rel_loss_delta")] + [
        "-" if not (at := tracks[run]["resume"].get("resume_eval")) else f"{at['loss']:.4f} at step {at['step']}"]}
        for run in runs]
    sample_runs = [run for run in runs if tracks[run]["final_samples"]]
    prompts: dict[str, dict[str, str]] = {}
    for run in sample_runs:
        for sample in tracks[run]["final_samples"]:
            prompts.setdefault(sample["prompt"], {})[run] = sample["completion"]
    samples = [{"prompt": prompt, "completions": [by_run.get(run, "-") for run in sample_runs],
                "same": "yes" if len(set(by_run.values())) == 1 and len(by_run) == len(sample_runs) else "no"}
               for prompt, by_run in prompts.items()]
    verdict = comparison["verdict"]
    return {
        "r": report, "c": comparison, "runs": runs, "cost_rows": cost_rows, "prices": prices,
        "estimates": estimates, "uncertainty": uncertainty, "record_rows": record_rows, "attempts": attempts,
        "hit_rates": hit_rates, "versions": versions,
        "bookings": [(run, tracks[run]["compile"]["booking"]) for run in runs
                     if (tracks[run]["compile"].get("booking") or {}).get("basis")]
        + ([(stage["run"], stage["booking"])] if stage and (stage.get("booking") or {}).get("basis") else []),
        "stage": stage, "cache_entries": compile_view.get("entries") or [],
        "recovery": recovery, "samples": samples,
        "sample_runs": sample_runs, "baseline_line": _baseline_line(report.get("baseline")),
        "loss": loss_chart(tracks), "cost_chart": Markup(_cost_chart(tracks)),
        "timeline_chart": Markup(_timeline_chart(report.get("timeline") or [])),
        "parallel": [(run, tracks[run]["parallel"]) for run in runs if tracks[run].get("parallel")],
        "fmt": _cell,
        "verdict_colour": {"trn2_viable_cheaper": "#1a7f37", "trn2_viable_not_cheaper": "#9a6700",
                           "stay_on_gpu": "#d62728"}.get(verdict, "#777"),
    }


@lru_cache(maxsize=1)
def _environment() -> Environment:
    return Environment(loader=PackageLoader("lambdas.domain", "templates"), autoescape=select_autoescape(["html"]),
                       trim_blocks=False, lstrip_blocks=False)


def render_html(report: Mapping[str, Any]) -> str:
    """One self-contained HTML file (inline SVG, no external assets) from ``templates/report.html``: the verdict
    sentence and the facts behind it first, then the loss curves, costs with their price basis, the record table
    and every other section of the Markdown rendering. Every value is escaped by the template engine."""
    return _environment().get_template("report.html").render(**_context(report))
