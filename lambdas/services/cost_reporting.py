"""The scheduled cost report: every run's closed cost in a period, by owner, by track, with rerun and compile
shares and the compile-cache hit rate. One pass over the ledger's cost entries and one over the trials table."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from lambdas.domain.cost import COMPONENTS
from lambdas.services.cache_retention import group_stats
from lambdas.services.ports import CacheRegistry, Ledger, Notifier, Objects, Trials


def _zero() -> dict[str, Decimal]:
    return dict.fromkeys((*COMPONENTS, "total_usd"), Decimal(0))


def cost_report(
    costs: Iterable[dict[str, Any]], trials: Iterable[dict[str, Any]], *, start: datetime, end: datetime, period: str
) -> dict[str, Any]:
    owners = {t["trial_id"]: t.get("owner", "unknown") for t in trials}
    by_owner: dict[str, dict[str, Decimal]] = defaultdict(_zero)
    by_track: dict[str, dict[str, Decimal]] = defaultdict(_zero)
    total = _zero()
    hits_by_day: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    runs = 0
    for entry in costs:
        if entry.get("kind") == "summary":
            outcome = (entry.get("compile") or {}).get("cache")
            day = str(entry.get("ended_at") or "")[:10]
            if outcome in ("hit", "miss") and day and start.date().isoformat() <= day <= end.date().isoformat():
                hits_by_day[day][0 if outcome == "hit" else 1] += 1
            continue
        ended = entry.get("ended_at")
        if not ended:
            continue
        at = datetime.fromisoformat(ended.replace("Z", "+00:00"))
        if not (start <= at < end):
            continue
        runs += 1
        trial_id, run = entry["run_key"].rsplit("#", 1)
        cost = entry["cost"]
        for bucket in (by_owner[owners.get(trial_id, "unknown")], by_track[run], total):
            for name in bucket:
                bucket[name] += Decimal(str(cost[name]))
    share = lambda part, whole: float(part / whole) if whole else None  # noqa: E731
    as_text = lambda d: {k: str(v) for k, v in d.items()}  # noqa: E731
    return {
        "period": period,
        "start": start.isoformat(),
        "end": end.isoformat(),
        "runs": runs,
        "total": as_text(total),
        "by_owner": {k: as_text(v) for k, v in sorted(by_owner.items())},
        "by_track": {k: as_text(v) for k, v in sorted(by_track.items())},
        "rerun_share": share(total["failed_reruns_usd"], total["total_usd"]),
        "compile_share": share(total["compile_usd"], total["total_usd"]),
        "cache_hit_rate_by_day": {d: (h / (h + m) if h + m else None) for d, (h, m) in sorted(hits_by_day.items())},
    }


def cache_trend(registry_items: Iterable[dict[str, Any]]) -> dict[str, Any]:
    return {"groups": group_stats(registry_items)}


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


def publish_cost_report(*, ledger: Ledger, trials: Trials, registry: CacheRegistry, artifacts: Objects,
                        notifier: Notifier | None, end: datetime, days: int) -> Published:
    """The report over the ``days`` before ``end``: JSON and Markdown under reports/cost/<period>/, and a one-line
    summary to the notifier when there is one."""
    start = end - timedelta(days=days)
    period = f"{start:%Y-%m-%d}_{end:%Y-%m-%d}"
    report = cost_report(ledger.iter_kinds(("cost", "summary")), trials.iter_all(), start=start, end=end,
                         period=period)
    report["compile_cache"] = cache_trend(registry.iter_all())
    artifacts.put_json(f"reports/cost/{period}/report.json", report)
    artifacts.put_text(f"reports/cost/{period}/report.md", render_cost_markdown(report), "text/markdown")
    uri = artifacts.uri(f"reports/cost/{period}/report.json")
    message_id = None
    if notifier is not None:
        summary = (f"dualtrack cost {period}: {report['runs']} runs, {report['total']['total_usd']} USD; "
                   f"rerun share {report['rerun_share']}, compile share {report['compile_share']}. {uri}")
        message_id = notifier.publish(f"dualtrack cost report {period}", summary)
    return Published(uri, period, report["runs"], report["total"]["total_usd"], message_id)
