"""`dualtrack report`: the trial report as aligned Markdown, JSON or self-contained HTML; --open shows it."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import webbrowser
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dualtrack.client.cli_support import add_connection_arguments, describe, emit_json, open_api, remote_command
from dualtrack.client.display import align_markdown_tables
from dualtrack.client.errors import EXIT_INVALID, EXIT_OK, ClientFailure
from dualtrack.commands._compare import compared, comparison_json, render_comparison, render_comparison_html
from lambdas.domain.canonical import json_text
from lambdas.domain.json_types import JsonObject
from lambdas.domain.report.model import TrialReport
from lambdas.rendering.report_html import render_html
from lambdas.rendering.report_markdown import render_markdown
from lambdas.services.cost_reporting import CostReport, TeamSection, render_cost_markdown, team_row

HELP = describe(
    """\
Fetch a settled trial's report (verdict, record table, acceptance checks, five-component cost, resume evidence)
and render it: md (default; tables aligned for a terminal, still valid Markdown), json (as stored), or html (one
file, inline SVG charts of loss by step, cost by component and the attempt timeline). --out writes a file (format
from its suffix unless --format is given); --open writes the HTML and opens it in the default browser.
Exit code 3 means the trial is unknown or its report is not written yet (it is written when the trial settles).
TRIAL_ID may also be a local report.json or a rehearsal's directory. --compare OTHER shows two reports side by side
(verdicts, or a rehearsal's outcome where it ran on stand-ins, cost ratios with their intervals, each run's step
time, cost, loss and checks): two trials, two rehearsals, or one of each, a column per run titled by its trial id
and the time its report was generated; as md, json or html (one file, differing figures highlighted; --out
FILE.html, --format html or --open).

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
  dualtrack report out/rehearsal/latest --compare out/rehearsal/20261205T101500Z-llama-pilot --out compare.html
  dualtrack report TRIAL_A --compare TRIAL_B --format json | jq '.compared[] | .verdict // .rehearsal'""",
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
                                                           "to show side by side (md, json or html)")
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


def parse_report(report: JsonObject, how: str, remedy: str = "use --format json, or upgrade dualtrack"
                 ) -> TrialReport:
    """The report as stored, read as the model the renderings take; ``how`` says what it is read for."""
    try:
        return TrialReport.model_validate(report)
    except ValidationError as exc:
        fields = ", ".join(".".join(map(str, error["loc"])) or "(top level)" for error in exc.errors()[:3])
        version = report.get("report_version", "unknown")
        raise ClientFailure(f"cannot render report version {version} {how} (missing or odd field: {fields}"
                            f"{', ...' if exc.error_count() > 3 else ''}); {remedy}", EXIT_INVALID) from None


def render(report: JsonObject, fmt: str) -> str:
    """A report as stored (the API's JSON, or a report.json) in ``fmt``: json as is, md or html from the model."""
    if fmt == "json":
        return json_text(report, indent=2, sort_keys=True, default=str) + "\n"
    parsed = parse_report(report, f"as {fmt}")
    return render_html(parsed) if fmt == "html" else align_markdown_tables(render_markdown(parsed)) + "\n"


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
        return align_markdown_tables(render_cost_markdown(CostReport.model_validate(report))) + "\n"
    head = f"# Cost report {report['period']} for team {report['team']}\n\n{report['start']} to {report['end']}"
    if not report.get("runs_closed"):
        return head + ": no run of the team closed in this period.\n"
    section = TeamSection.model_validate(report)
    lines = [head + ".", "", "| team | total_usd | by track | vs previous | month to date / budget | rerun share | "
             "compile booked / shared |", "|---|---|---|---|---|---|---|", team_row(report["team"], section), "",
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


def load_report(args: argparse.Namespace, which: str) -> JsonObject:
    """A report as stored: fetched from the API by trial id, or read from a report.json or rehearsal directory."""
    found = local_report(which)
    if found is None:
        if "/" in which or which.endswith(".json"):
            raise ClientFailure(f"{which}: no report.json there (a rehearsal directory or a report.json file, or a "
                                "trial id)", EXIT_INVALID)
        return open_api(args).report(which)
    try:
        loaded = json.loads(found.read_text())
    except (OSError, ValueError) as exc:
        raise ClientFailure(f"{found}: not a readable report ({exc})", EXIT_INVALID) from None
    if not isinstance(loaded, dict) or "tracks" not in loaded:
        raise ClientFailure(f"{found}: not a trial report (no tracks)", EXIT_INVALID)
    return loaded


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
        return run_compare(args, fmt)
    report = load_report(args, args.trial_id)
    comparison = report.get("comparison")
    trial_id = report.get("trial_id")
    name = trial_id if isinstance(trial_id, str) else Path(args.trial_id).name  # args.trial_id may be a path
    return deliver(args, fmt, render(report, fmt), what=f"report for {args.trial_id}",
                   temp_name=f"dualtrack-report-{name}.html",
                   answer={"trial_id": args.trial_id,
                           "verdict": comparison.get("verdict") if isinstance(comparison, dict) else None})


def run_compare(args: argparse.Namespace, fmt: str) -> int:
    """TRIAL_ID beside --compare OTHER, a column each, titled by run: md, json or html."""
    views = compared([(which, parse_report(load_report(args, which), "side by side", "upgrade dualtrack"))
                      for which in (args.trial_id, args.compare)])
    text = (json.dumps(comparison_json(views), indent=2) + "\n" if fmt == "json"
            else render_comparison_html(views) if fmt == "html" else render_comparison(views))
    return deliver(args, fmt, text, what="comparison of " + " and ".join(v.title for v in views),
                   temp_name="dualtrack-compare-" + "-vs-".join(v.trial_id for v in views) + ".html",
                   answer={"compared": [v.title for v in views]})


def deliver(args: argparse.Namespace, fmt: str, text: str, *, what: str, temp_name: str, answer: JsonObject) -> int:
    """``text`` to standard output, or to --out (with --open: written, a temporary file if no --out, and shown)."""
    if args.open and not args.out:
        args.out = str(Path(tempfile.gettempdir()) / temp_name)
    if not args.out:
        sys.stdout.write(text)
        return EXIT_OK
    path = Path(args.out).expanduser().resolve()
    write(path, text)
    opened = bool(args.open) and webbrowser.open(path.as_uri())
    if args.json:
        emit_json({"ok": True, **answer, "format": fmt, "written": str(path), "opened": opened})
    else:
        print(f"wrote {fmt} {what} to {path}"
              + (" and opened it" if opened else " (no browser found: open it yourself)" if args.open else ""))
    return EXIT_OK
