"""`dualtrack report`: the trial report as aligned Markdown, JSON or self-contained HTML; --open shows it."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import webbrowser
from pathlib import Path
from typing import Any

from dualtrack.client.cli_support import add_connection_arguments, describe, emit_json, open_api, remote_command
from dualtrack.client.display import RUN_ORDER, align_markdown_tables
from dualtrack.client.errors import EXIT_INVALID, EXIT_OK, ClientFailure
from lambdas.domain.canonical import json_text
from lambdas.domain.report_render import render_html, render_markdown
from lambdas.services.cost_reporting import render_cost_markdown, team_row

HELP = describe(
    """\
Fetch a settled trial's report (verdict, record table, acceptance checks, five-component cost, resume evidence)
and render it: md (default; tables aligned for a terminal, still valid Markdown), json (as stored), or html (one
file, inline SVG charts of loss by step, cost by component and the attempt timeline). --out writes a file (format
from its suffix unless --format is given); --open writes the HTML and opens it in the default browser.
Exit code 3 means the trial is unknown or its report is not written yet (it is written when the trial settles).
TRIAL_ID may also be a local report.json or a rehearsal's directory. --compare OTHER shows two reports side by side
(verdicts, cost ratios with their intervals, each run's step time, cost, loss and checks): two trials, two
rehearsals, or one of each.

`dualtrack report costs` shows the newest scheduled cost report for your team instead: the period (the stage's
cost_report_period), spend by track and component, the trend against the period before, the month to date against
the team's usd_per_month budget, the failed-rerun share, and compile spend booked to jobs vs shared (a compile whose
cache entry another trial has hit). A platform admin names a team with --team, or sees every team without it.""",
    """\
  dualtrack report llama31-8b-lora-pilot-3f9c2a1b | less -S
  dualtrack report costs
  dualtrack report costs --team team-nlp --format json
  dualtrack report ID --format html --out report.html
  dualtrack report ID --open
  dualtrack report ID --format json | jq .comparison.verdict
  dualtrack report out/rehearsal/latest --compare out/rehearsal/20261205T101500Z-llama-pilot
  dualtrack report TRIAL_A --compare TRIAL_B --format json""",
)
FORMATS = ("md", "json", "html")
SUFFIXES = {".md": "md", ".markdown": "md", ".json": "json", ".html": "html", ".htm": "html"}


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("report", help="a trial's report (md, json or html)", description=HELP,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trial_id", metavar="TRIAL_ID", help="a trial id, or `costs` for the team cost report")
    parser.add_argument("--team", help="with `costs`: the team (default: yours; a platform admin may name any)")
    parser.add_argument("--format", choices=FORMATS, help="md (default), json or html")
    parser.add_argument("--out", metavar="FILE", help="write to FILE instead of standard output")
    parser.add_argument("--open", action="store_true", help="write the HTML report and open it in a browser")
    parser.add_argument("--compare", metavar="OTHER", help="a second trial id, report.json or rehearsal directory "
                                                           "to show side by side (md or json)")
    add_connection_arguments(parser)
    parser.set_defaults(func=run)


def choose_format(args: argparse.Namespace) -> str:
    if args.open:
        if args.format not in (None, "html"):
            raise ClientFailure(f"--open shows the HTML report; drop --format {args.format} or --open", EXIT_INVALID)
        return "html"
    if args.format:
        return str(args.format)
    if args.out:
        return SUFFIXES.get(Path(args.out).suffix.lower(), "md")
    return "json" if args.json else "md"


def render(report: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json_text(report, indent=2, sort_keys=True, default=str) + "\n"
    try:
        return render_html(report) if fmt == "html" else align_markdown_tables(render_markdown(report)) + "\n"
    except (KeyError, TypeError, ValueError) as exc:
        version = report.get("report_version", "unknown")
        raise ClientFailure(f"cannot render report version {version} as {fmt} (missing or odd field {exc}); "
                            "use --format json, or upgrade dualtrack", EXIT_INVALID) from None


def write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ClientFailure(f"{path}: cannot write ({exc.strerror or exc})", EXIT_INVALID) from None


def render_costs(report: dict[str, Any], fmt: str) -> str:
    """The cost report (every team's) or one team's section, as Markdown or JSON."""

    if fmt == "json":
        return json_text(report, indent=2, sort_keys=True) + "\n"
    if fmt == "html":
        raise ClientFailure("the cost report renders as md or json; drop --format html / --open", EXIT_INVALID)
    if "team" not in report:
        return align_markdown_tables(render_cost_markdown(report)) + "\n"
    head = f"# Cost report {report['period']} for team {report['team']}\n\n{report['start']} to {report['end']}"
    if not report.get("runs_closed"):
        return head + ": no run of the team closed in this period.\n"
    lines = [head + ".", "", "| team | total_usd | by track | vs previous | month to date / budget | rerun share | "
             "compile booked / shared |", "|---|---|---|---|---|---|---|", team_row(report["team"], report), "",
             "| track | " + " | ".join(report["total"]) + " |", "|---|" + "---|" * len(report["total"])]
    lines += [f"| {run} | " + " | ".join(cost.get(k, "0") for k in report["total"]) + " |"
              for run, cost in report["by_track"].items()]
    return align_markdown_tables("\n".join(lines)) + "\n"


def local_report(which: str) -> Path | None:
    """A report on disk: a report.json, or a rehearsal directory holding one (or its ``latest`` run)."""
    path = Path(which).expanduser()
    for candidate in (path, path / "report.json", path / "latest" / "report.json"):
        if candidate.is_file():
            return candidate
    return None


def load_report(args: argparse.Namespace, which: str) -> dict[str, Any]:
    found = local_report(which)
    if found is None:
        if "/" in which or which.endswith(".json"):
            raise ClientFailure(f"{which}: no report.json there (a rehearsal directory or a report.json file, or a "
                                "trial id)", EXIT_INVALID)
        return open_api(args).report(which)  # type: ignore[no-any-return]
    try:
        loaded = json.loads(found.read_text())
    except (OSError, ValueError) as exc:
        raise ClientFailure(f"{found}: not a readable report ({exc})", EXIT_INVALID) from None
    if not isinstance(loaded, dict) or "tracks" not in loaded:
        raise ClientFailure(f"{found}: not a trial report (no tracks)", EXIT_INVALID)
    return loaded


def _interval(view: dict[str, Any] | None, digits: int = 3) -> str:
    if not view:
        return "-"
    return f"{view['estimate']:.{digits}g} [{view['low']:.{digits}g}, {view['high']:.{digits}g}]"


def comparison_view(report: dict[str, Any]) -> dict[str, Any]:
    """The figures --compare puts side by side, as JSON."""
    comparison = report.get("comparison") or {}
    runs = {}
    for run, track in (report.get("tracks") or {}).items():
        uncertainty = track.get("uncertainty") or {}
        runs[run] = {"status": track.get("status"), "steps": track.get("steps_completed"),
                     "backend": track.get("backend"), "stand_in": track.get("stand_in"),
                     "step_time_s": uncertainty.get("step_time_s"), "total_usd": (track.get("cost") or {}).get(
                         "total_usd"), "validation_loss": (track.get("loss") or {}).get("validation"),
                     "first_compile_s": (track.get("compile") or {}).get("first_compile_s"),
                     "cache_by_attempt": (track.get("compile") or {}).get("cache_by_attempt")}
    stage = (report.get("compile") or {}).get("stage")
    if stage:
        runs[stage["run"]] = {"status": stage.get("status"), "backend": stage.get("backend"),
                              "stand_in": stage.get("stand_in"),
                              "total_usd": (stage.get("cost") or {}).get("total_usd"),
                              "first_compile_s": stage.get("compile_s"),
                              "cache_by_attempt": stage.get("cache_by_attempt")}
    return {"trial_id": report.get("trial_id"), "generated_at": report.get("generated_at"),
            "verdict": comparison.get("verdict"), "headline": comparison.get("headline"),
            "hit_rate": (report.get("compile") or {}).get("hit_rate"),
            "steady_cost_ratio": comparison.get("steady_cost_ratio"), "cost_ratio": comparison.get("cost_ratio"),
            "checks": {c["check"]: c["status"] for c in report.get("acceptance") or []}, "runs": runs}


def render_comparison(a: dict[str, Any], b: dict[str, Any]) -> str:
    """Two reports side by side as one aligned Markdown table."""
    left, right = comparison_view(a), comparison_view(b)

    def cell(value: Any) -> str:
        text = "-" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)
        return text.replace("|", "/")

    rows = [("trial", left["trial_id"], right["trial_id"]), ("generated", left["generated_at"], right["generated_at"]),
            ("verdict", left["verdict"], right["verdict"]),
            ("steady cost ratio trn2/gpu [95%]", _interval(left["steady_cost_ratio"]),
             _interval(right["steady_cost_ratio"])),
            ("whole-trial cost ratio", left["cost_ratio"], right["cost_ratio"])]
    rows.append(("compile cache hit rate", left["hit_rate"], right["hit_rate"]))
    for run in sorted(set(left["runs"]) | set(right["runs"]), key=RUN_ORDER.index):
        one, two = left["runs"].get(run, {}), right["runs"].get(run, {})
        for label, key in (("status", "status"), ("steps", "steps"), ("backend", "backend"),
                           ("total USD", "total_usd"), ("validation loss", "validation_loss"),
                           ("first compile s", "first_compile_s")):
            rows.append((f"{run}: {label}", one.get(key), two.get(key)))
        rows.append((f"{run}: step time s [95%]", _interval(one.get("step_time_s")), _interval(two.get("step_time_s"))))
        rows.append((f"{run}: cache by attempt", ", ".join(one.get("cache_by_attempt") or []) or None,
                     ", ".join(two.get("cache_by_attempt") or []) or None))
    for check in dict.fromkeys([*left["checks"], *right["checks"]]):
        rows.append((f"check: {check}", left["checks"].get(check), right["checks"].get(check)))
    lines = [f"# {cell(left['trial_id'])} vs {cell(right['trial_id'])}", "",
             f"- A: {left['headline'] or left['verdict']}", f"- B: {right['headline'] or right['verdict']}", "",
             "| figure | A | B |", "|---|---|---|"]
    lines += [f"| {cell(name)} | {cell(x)} | {cell(y)} |" for name, x, y in rows]
    return align_markdown_tables("\n".join(lines)) + "\n"


@remote_command
def run(args: argparse.Namespace) -> int:
    fmt = choose_format(args)
    if args.trial_id == "costs":
        text = render_costs(open_api(args).cost_report(args.team), fmt)
        if args.out:
            write(Path(args.out).expanduser().resolve(), text)
        else:
            sys.stdout.write(text)
        return EXIT_OK
    if args.team:
        raise ClientFailure("--team goes with `dualtrack report costs`, not a trial report", EXIT_INVALID)
    if args.compare:
        if fmt == "html":
            raise ClientFailure("--compare renders as md or json; drop --format html / --open", EXIT_INVALID)
        pair = [load_report(args, which) for which in (args.trial_id, args.compare)]
        text = (json.dumps({"a": comparison_view(pair[0]), "b": comparison_view(pair[1])}, indent=2) + "\n"
                if fmt == "json" else render_comparison(*pair))
        if args.out:
            write(Path(args.out).expanduser().resolve(), text)
        else:
            sys.stdout.write(text)
        return EXIT_OK
    report = load_report(args, args.trial_id)
    text = render(report, fmt)
    if args.open and not args.out:
        args.out = str(Path(tempfile.gettempdir()) / f"dualtrack-report-{args.trial_id}.html")
    if not args.out:
        sys.stdout.write(text)
        return EXIT_OK
    path = Path(args.out).expanduser().resolve()
    write(path, text)
    opened = bool(args.open) and webbrowser.open(path.as_uri())
    if args.json:
        emit_json({"ok": True, "trial_id": args.trial_id, "format": fmt, "written": str(path), "opened": opened,
                   "verdict": (report.get("comparison") or {}).get("verdict")})
    else:
        print(f"wrote {fmt} report for {args.trial_id} to {path}"
              + (" and opened it" if opened else " (no browser found: open it yourself)" if args.open else ""))
    return EXIT_OK
