"""The scheduled cost report: every run's closed cost in a period, by owner, by track, with rerun and compile
shares and the compile-cache hit rate. One pass over the ledger's cost entries and one over the trials table."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from lambdas.domain.cost import COMPONENTS
from lambdas.domain.governance import month_start
from lambdas.domain.periods import label, last_whole, previous
from lambdas.services.cache_retention import group_stats
from lambdas.services.ports import CacheRegistry, Ledger, Notifier, Objects, Trials


def _zero() -> dict[str, Decimal]:
    return dict.fromkeys((*COMPONENTS, "total_usd"), Decimal(0))


def _team_section() -> dict[str, Any]:
    return {"total": _zero(), "by_track": defaultdict(_zero), "previous_total_usd": Decimal(0),
            "month_to_date_usd": Decimal(0), "compile_shared_usd": Decimal(0)}


def cost_report(
    costs: Iterable[dict[str, Any]], trials: Iterable[dict[str, Any]], *, start: datetime, end: datetime, period: str,
    previous_start: datetime | None = None, budgets: Mapping[str, Decimal | None] | None = None,
) -> dict[str, Any]:
    """Every run closed in [start, end), by owner, by track and by team, in one pass over the ledger's cost and
    summary entries. Per team: spend by track and component, the previous period's total (the trend), the month to
    date against the team's ``usd_per_month`` (budget burn), the failed-rerun share, and compile spend split the
    document's way: a compile whose cache entry another trial has since hit is shared infrastructure, not the
    compiling job's."""
    items = {t["trial_id"]: t for t in trials}
    owners = {k: t.get("owner", "unknown") for k, t in items.items()}
    team_of = {k: str(t.get("team") or t.get("owner") or "unknown") for k, t in items.items()}
    month_from = month_start(end - timedelta(microseconds=1))
    by_owner: dict[str, dict[str, Decimal]] = defaultdict(_zero)
    by_track: dict[str, dict[str, Decimal]] = defaultdict(_zero)
    teams: dict[str, dict[str, Any]] = defaultdict(_team_section)
    total = _zero()
    hits_by_day: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    hit_by: dict[str, set[str]] = defaultdict(set)  # cache key -> trials whose attempts hit it
    compiled: dict[str, set[str]] = defaultdict(set)  # run key -> cache keys its attempts compiled (missed)
    in_period: list[tuple[str, dict[str, Any]]] = []
    runs = 0
    for entry in costs:
        if entry.get("kind") == "summary":
            _tally_compile(entry, start=start, end=end, hits_by_day=hits_by_day, hit_by=hit_by, compiled=compiled)
            continue
        ended = entry.get("ended_at")
        if not ended:
            continue
        at = datetime.fromisoformat(ended.replace("Z", "+00:00"))
        trial_id, run = entry["run_key"].rsplit("#", 1)
        if not (min(previous_start or start, month_from) <= at < end):
            continue
        team = teams[team_of.get(trial_id, "unknown")]
        cost = entry["cost"]
        usd = Decimal(str(cost["total_usd"]))
        if at >= month_from:
            team["month_to_date_usd"] += usd
        if previous_start is not None and previous_start <= at < start:
            team["previous_total_usd"] += usd
        if at < start:
            continue
        runs += 1
        in_period.append((entry["run_key"], cost))
        for bucket in (by_owner[owners.get(trial_id, "unknown")], by_track[run], total, team["total"],
                       team["by_track"][run]):
            for name in bucket:
                bucket[name] += Decimal(str(cost[name]))
    shared_total = Decimal(0)
    for run_key, cost in in_period:
        trial_id = run_key.rsplit("#", 1)[0]
        if any(hit_by[key] - {trial_id} for key in compiled.get(run_key, ())):
            shared = Decimal(str(cost["compile_usd"]))
            teams[team_of.get(trial_id, "unknown")]["compile_shared_usd"] += shared
            shared_total += shared
    team_view = {name: _team_view(team, (budgets or {}).get(name)) for name, team in sorted(teams.items())}
    return {
        "period": period,
        "start": start.isoformat(),
        "end": end.isoformat(),
        "previous_start": previous_start.isoformat() if previous_start else None,
        "runs": runs,
        "total": _as_text(total),
        "by_owner": {k: _as_text(v) for k, v in sorted(by_owner.items())},
        "by_track": {k: _as_text(v) for k, v in sorted(by_track.items())},
        "teams": team_view,
        "compile": {"booked_usd": str(total["compile_usd"] - shared_total), "shared_usd": str(shared_total),
                    "rule": "a compile whose cache entry another trial has hit is shared infrastructure"},
        "rerun_share": _share(total["failed_reruns_usd"], total["total_usd"]),
        "compile_share": _share(total["compile_usd"], total["total_usd"]),
        "cache_hit_rate_by_day": {d: (h / (h + m) if h + m else None) for d, (h, m) in sorted(hits_by_day.items())},
    }


def _tally_compile(
    entry: Mapping[str, Any], *, start: datetime, end: datetime, hits_by_day: dict[str, list[int]],
    hit_by: dict[str, set[str]], compiled: dict[str, set[str]],
) -> None:
    """Count a summary entry's compile-cache outcome: by day within the period, and by cache key."""
    compile_record = entry.get("compile") or {}
    outcome, key = compile_record.get("cache"), compile_record.get("cache_key")
    day = str(entry.get("ended_at") or "")[:10]
    if outcome in ("hit", "miss") and day and start.date().isoformat() <= day <= end.date().isoformat():
        hits_by_day[day][0 if outcome == "hit" else 1] += 1
    if key and outcome == "hit":
        hit_by[key].add(entry["run_key"].rsplit("#", 1)[0])
    elif key and outcome == "miss":
        compiled[entry["run_key"]].add(key)


def _share(part: Decimal, whole: Decimal) -> float | None:
    return float(part / whole) if whole else None


def _as_text(amounts: Mapping[str, Decimal]) -> dict[str, str]:
    return {k: str(v) for k, v in amounts.items()}


def _team_view(team: Mapping[str, Any], budget: Decimal | None) -> dict[str, Any]:
    """One team's section of the report: spend, trend, budget burn, rerun share and compile split."""
    spent, before = team["total"]["total_usd"], team["previous_total_usd"]
    return {
        "total": _as_text(team["total"]),
        "by_track": {k: _as_text(v) for k, v in sorted(team["by_track"].items())},
        "previous_total_usd": str(before),
        "trend": _share(spent - before, before),
        "month_to_date_usd": str(team["month_to_date_usd"]),
        "usd_per_month": None if budget is None else str(budget),
        "budget_burn": None if budget is None else _share(team["month_to_date_usd"], Decimal(budget)),
        "rerun_share": _share(team["total"]["failed_reruns_usd"], spent),
        "compile_booked_usd": str(team["total"]["compile_usd"] - team["compile_shared_usd"]),
        "compile_shared_usd": str(team["compile_shared_usd"]),
    }


def cache_trend(registry_items: Iterable[dict[str, Any]]) -> dict[str, Any]:
    return {"groups": group_stats(registry_items)}


def team_row(name: str, team: Mapping[str, Any]) -> str:
    """One team's line of the cost report's team table."""
    tracks = ", ".join(f"{run} {cost['total_usd']}" for run, cost in team["by_track"].items()) or "none"
    trend = "n/a (nothing before)" if team["trend"] is None else f"{team['trend']:+.0%}"
    budget = (f"{team['month_to_date_usd']} / {team['usd_per_month']} ({team['budget_burn']:.0%})"
              if team.get("usd_per_month") else f"{team['month_to_date_usd']} (no budget)")
    rerun = "n/a" if team["rerun_share"] is None else f"{team['rerun_share']:.0%}"
    return (f"| {name} | {team['total']['total_usd']} | {tracks} | {trend} | {budget} | {rerun} | "
            f"{team['compile_booked_usd']} / {team['compile_shared_usd']} |")


def render_cost_markdown(report: dict[str, Any]) -> str:
    lines = [
        f"# Cost report {report['period']}",
        "",
        f"{report['runs']} runs closed between {report['start']} "
        f"and {report['end']}; total {report['total']['total_usd']} USD.",
        "",
        f"Rerun share: {report['rerun_share']}; compile share: {report['compile_share']}",
        "",
        "| owner | total_usd | failed_reruns_usd | compile_usd |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {o} | {c['total_usd']} | {c['failed_reruns_usd']} | {c['compile_usd']} |"
        for o, c in report["by_owner"].items()
    ]
    teams = report.get("teams") or {}
    if teams:
        lines += ["", "| team | total_usd | by track | vs previous | month to date / budget | rerun share | "
                  "compile booked / shared |", "|---|---|---|---|---|---|---|"]
        lines += [team_row(name, team) for name, team in teams.items()]
    lines += ["", "| track | total_usd |", "|---|---|"]
    lines += [f"| {t} | {c['total_usd']} |" for t, c in report["by_track"].items()]
    lines += ["", "| model | compiler | hit rate | saved compile s |", "|---|---|---|---|"]
    lines += [
        f"| {g['model']} | {g['compiler_version']} | {g['hit_rate']} | {g['saved_compile_s']} |"
        for g in report.get("compile_cache", {}).get("groups", [])
    ]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Published:
    report_uri: str
    period: str
    runs: int
    total_usd: str
    message_id: str | None


LATEST = "reports/cost/latest.json"  # the newest scheduled report, as written (what GET /reports/costs serves)


def publish_cost_report(*, ledger: Ledger, trials: Trials, registry: CacheRegistry, artifacts: Objects,
                        notifier: Notifier | None, at: datetime, period: str,
                        budgets: Mapping[str, Decimal | None] | None = None) -> Published:
    """The report over the last whole ``period`` before ``at`` (``lambdas.domain.periods``), compared with the one
    before it: JSON and Markdown under reports/cost/<label>/ (and the JSON as reports/cost/latest.json), and a
    one-line summary to the notifier when there is one."""
    start, end = last_whole(period, at)
    before, _ = previous(period, start)
    name = label(period, start)
    report = cost_report(ledger.iter_kinds(("cost", "summary")), trials.iter_all(), start=start, end=end,
                         period=name, previous_start=before, budgets=budgets)
    report["compile_cache"] = cache_trend(registry.iter_all())
    artifacts.put_json(f"reports/cost/{name}/report.json", report)
    artifacts.put_text(f"reports/cost/{name}/report.md", render_cost_markdown(report), "text/markdown")
    artifacts.put_json(LATEST, report)
    uri = artifacts.uri(f"reports/cost/{name}/report.json")
    message_id = None
    if notifier is not None:
        summary = (f"dualtrack cost {name}: {report['runs']} runs, {report['total']['total_usd']} USD; "
                   f"rerun share {report['rerun_share']}, compile share {report['compile_share']}. {uri}")
        message_id = notifier.publish(f"dualtrack cost report {name}", summary)
    return Published(uri, name, report["runs"], report["total"]["total_usd"], message_id)
