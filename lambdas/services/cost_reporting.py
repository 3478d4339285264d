"""The scheduled cost report: every run's closed cost in a period, by owner, by track, with rerun and compile
shares and the compile-cache hit rate. One pass over the ledger's cost entries and one over the trials table."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from pydantic import BaseModel, ConfigDict, Field

from lambdas.domain.cache.cache_entries import RegistryEntry
from lambdas.domain.money.cost import COMPONENTS, RunCost
from lambdas.domain.money.ledger import LedgerRow, StoredCost, SummaryFact
from lambdas.domain.money.periods import LATEST, label, last_whole, previous
from lambdas.domain.trial.governance import month_start
from lambdas.domain.trial.trial_record import TrialRecord
from lambdas.services.cache_retention import CacheGroup, group_stats
from lambdas.services.ports import CacheRegistry, Ledger, Notifier, Objects, Trials

SHARED_RULE = "a compile whose cache entry another trial has hit is shared infrastructure"


# ---- the report as written (JSON under reports/cost/, and what GET /reports/costs serves) ------------------------
# Amounts are USD as text, by component then ``total_usd`` (``CostBreakdown.amounts``); shares are fractions.


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)


class TeamSection(_Section):
    """One team's part of the report: spend, trend, budget burn, rerun share and compile split."""

    total: dict[str, str]
    by_track: dict[str, dict[str, str]]
    previous_total_usd: str
    trend: float | None = Field(description="against the previous period; None when nothing was spent then")
    month_to_date_usd: str
    usd_per_month: str | None
    budget_burn: float | None
    rerun_share: float | None
    compile_booked_usd: str
    compile_shared_usd: str


class CompileSplit(_Section):
    booked_usd: str
    shared_usd: str
    rule: str


class CacheTrend(_Section):
    groups: list[CacheGroup]


class CostReport(_Section):
    period: str
    start: str
    end: str
    previous_start: str | None
    runs: int
    total: dict[str, str]
    by_owner: dict[str, dict[str, str]]
    by_track: dict[str, dict[str, str]]
    teams: dict[str, TeamSection] = Field(default_factory=dict)
    compile: CompileSplit
    rerun_share: float | None
    compile_share: float | None
    cache_hit_rate_by_day: dict[str, float | None]
    compile_cache: CacheTrend | None = Field(default=None, exclude_if=lambda value: value is None)


# ---- the pass over the ledger ----------------------------------------------------------------------------------


def _zero() -> dict[str, Decimal]:
    return dict.fromkeys((*COMPONENTS, "total_usd"), Decimal(0))


@dataclass
class _TeamTally:
    total: dict[str, Decimal] = field(default_factory=_zero)
    by_track: defaultdict[str, dict[str, Decimal]] = field(default_factory=lambda: defaultdict(_zero))
    previous_total_usd: Decimal = Decimal(0)
    month_to_date_usd: Decimal = Decimal(0)
    compile_shared_usd: Decimal = Decimal(0)


@dataclass
class _CompileUses:
    """The compile-cache outcomes the pass's summary entries report."""

    hits_by_day: defaultdict[str, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    hit_by: defaultdict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # key -> trials that hit it
    compiled: defaultdict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # run key -> keys it built

    def tally(self, run_key: str, summary: SummaryFact, *, start: datetime, end: datetime) -> None:
        """Count a summary entry's compile-cache outcome: by day within the period, and by cache key."""
        use = summary.compile_use()
        outcome, key = use.cache, use.cache_key
        day = (summary.ended_at or "")[:10]
        if outcome in ("hit", "miss") and day and start.date().isoformat() <= day <= end.date().isoformat():
            self.hits_by_day[day][0 if outcome == "hit" else 1] += 1
        if key and outcome == "hit":
            self.hit_by[key].add(run_key.rsplit("#", 1)[0])
        elif key and outcome == "miss":
            self.compiled[run_key].add(key)

    def shared(self, run_key: str) -> bool:
        """Whether another trial has hit an entry this run compiled."""
        trial_id = run_key.rsplit("#", 1)[0]
        return any(self.hit_by[key] - {trial_id} for key in self.compiled.get(run_key, ()))

    def hit_rate_by_day(self) -> dict[str, float | None]:
        return {d: (h / (h + m) if h + m else None) for d, (h, m) in sorted(self.hits_by_day.items())}


@dataclass
class _Tally:
    """The report's sums over the runs closed in the period (and, per team, before it)."""

    start: datetime
    end: datetime
    previous_start: datetime | None
    month_from: datetime
    owners: dict[str, str]
    team_of: dict[str, str]
    by_owner: defaultdict[str, dict[str, Decimal]] = field(default_factory=lambda: defaultdict(_zero))
    by_track: defaultdict[str, dict[str, Decimal]] = field(default_factory=lambda: defaultdict(_zero))
    teams: defaultdict[str, _TeamTally] = field(default_factory=lambda: defaultdict(_TeamTally))
    total: dict[str, Decimal] = field(default_factory=_zero)
    in_period: list[tuple[str, RunCost]] = field(default_factory=list)

    def add(self, row: LedgerRow, stored: StoredCost) -> None:
        """Count a run's cost entry: in the period's sums when it closed in the period, and in its team's previous
        period and month to date."""
        month_from = self.month_from
        if not stored.ended_at:
            return
        at = datetime.fromisoformat(stored.ended_at.replace("Z", "+00:00"))
        if not (min(self.previous_start or self.start, month_from) <= at < self.end):
            return
        team = self.teams[self.team_of.get(row.trial_id, "unknown")]
        cost = stored.cost
        if at >= month_from:
            team.month_to_date_usd += cost.total_usd
        if self.previous_start is not None and self.previous_start <= at < self.start:
            team.previous_total_usd += cost.total_usd
        if at < self.start:
            return
        self.in_period.append((row.run_key, cost))
        amounts = cost.amounts()
        for bucket in (self.by_owner[self.owners.get(row.trial_id, "unknown")], self.by_track[row.run], self.total,
                       team.total, team.by_track[row.run]):
            for name in bucket:
                bucket[name] += amounts[name]


def cost_report(
    rows: Iterable[LedgerRow], trials: Iterable[TrialRecord], *, start: datetime, end: datetime, period: str,
    previous_start: datetime | None = None, budgets: Mapping[str, Decimal | None] | None = None,
) -> CostReport:
    """Every run closed in [start, end), by owner, by track and by team, in one pass over the ledger's cost and
    summary entries. Per team: spend by track and component, the previous period's total (the trend), the month to
    date against the team's ``usd_per_month`` (budget burn), the failed-rerun share, and compile spend split the
    document's way: a compile whose cache entry another trial has since hit is shared infrastructure, not the
    compiling job's."""
    items = {t.trial_id: t for t in trials}
    owners = {k: t.owner or "unknown" for k, t in items.items()}
    team_of = {k: t.team or t.owner or "unknown" for k, t in items.items()}
    tally = _Tally(start=start, end=end, previous_start=previous_start,
                   month_from=month_start(end - timedelta(microseconds=1)), owners=owners, team_of=team_of)
    uses = _CompileUses()
    for row in rows:
        if isinstance(row.body, SummaryFact):
            uses.tally(row.run_key, row.body, start=start, end=end)
        elif isinstance(row.body, StoredCost):
            tally.add(row, row.body)
    shared_total = Decimal(0)
    for run_key, cost in tally.in_period:
        if uses.shared(run_key):
            tally.teams[team_of.get(run_key.rsplit("#", 1)[0], "unknown")].compile_shared_usd += cost.compile_usd
            shared_total += cost.compile_usd
    total = tally.total
    return CostReport(
        period=period,
        start=start.isoformat(),
        end=end.isoformat(),
        previous_start=previous_start.isoformat() if previous_start else None,
        runs=len(tally.in_period),
        total=_as_text(total),
        by_owner={k: _as_text(v) for k, v in sorted(tally.by_owner.items())},
        by_track={k: _as_text(v) for k, v in sorted(tally.by_track.items())},
        teams={name: _team_view(team, (budgets or {}).get(name)) for name, team in sorted(tally.teams.items())},
        compile=CompileSplit(booked_usd=str(total["compile_usd"] - shared_total), shared_usd=str(shared_total),
                             rule=SHARED_RULE),
        rerun_share=_share(total["failed_reruns_usd"], total["total_usd"]),
        compile_share=_share(total["compile_usd"], total["total_usd"]),
        cache_hit_rate_by_day=uses.hit_rate_by_day(),
    )


def _share(part: Decimal, whole: Decimal) -> float | None:
    return float(part / whole) if whole else None


def _as_text(amounts: Mapping[str, Decimal]) -> dict[str, str]:
    return {k: str(v) for k, v in amounts.items()}


def _team_view(team: _TeamTally, budget: Decimal | None) -> TeamSection:
    """One team's section of the report: spend, trend, budget burn, rerun share and compile split."""
    spent, before = team.total["total_usd"], team.previous_total_usd
    return TeamSection(
        total=_as_text(team.total),
        by_track={k: _as_text(v) for k, v in sorted(team.by_track.items())},
        previous_total_usd=str(before),
        trend=_share(spent - before, before),
        month_to_date_usd=str(team.month_to_date_usd),
        usd_per_month=None if budget is None else str(budget),
        budget_burn=None if budget is None else _share(team.month_to_date_usd, Decimal(budget)),
        rerun_share=_share(team.total["failed_reruns_usd"], spent),
        compile_booked_usd=str(team.total["compile_usd"] - team.compile_shared_usd),
        compile_shared_usd=str(team.compile_shared_usd),
    )


def cache_trend(registry_items: Iterable[RegistryEntry]) -> CacheTrend:
    return CacheTrend(groups=group_stats(registry_items))


def team_row(name: str, team: TeamSection) -> str:
    """One team's line of the cost report's team table."""
    tracks = ", ".join(f"{run} {cost['total_usd']}" for run, cost in team.by_track.items()) or "none"
    trend = "n/a (nothing before)" if team.trend is None else f"{team.trend:+.0%}"
    budget = (f"{team.month_to_date_usd} / {team.usd_per_month} ({team.budget_burn:.0%})"
              if team.usd_per_month else f"{team.month_to_date_usd} (no budget)")
    rerun = "n/a" if team.rerun_share is None else f"{team.rerun_share:.0%}"
    return (f"| {name} | {team.total['total_usd']} | {tracks} | {trend} | {budget} | {rerun} | "
            f"{team.compile_booked_usd} / {team.compile_shared_usd} |")


def render_cost_markdown(report: CostReport) -> str:
    lines = [
        f"# Cost report {report.period}",
        "",
        f"{report.runs} runs closed between {report.start} "
        f"and {report.end}; total {report.total['total_usd']} USD.",
        "",
        f"Rerun share: {report.rerun_share}; compile share: {report.compile_share}",
        "",
        "| owner | total_usd | failed_reruns_usd | compile_usd |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {o} | {c['total_usd']} | {c['failed_reruns_usd']} | {c['compile_usd']} |"
        for o, c in report.by_owner.items()
    ]
    if report.teams:
        lines += ["", "| team | total_usd | by track | vs previous | month to date / budget | rerun share | "
                  "compile booked / shared |", "|---|---|---|---|---|---|---|"]
        lines += [team_row(name, team) for name, team in report.teams.items()]
    lines += ["", "| track | total_usd |", "|---|---|"]
    lines += [f"| {t} | {c['total_usd']} |" for t, c in report.by_track.items()]
    lines += ["", "| model | compiler | hit rate | saved compile s |", "|---|---|---|---|"]
    lines += [
        f"| {g.model} | {g.compiler_version} | {g.hit_rate} | {g.saved_compile_s} |"
        for g in (report.compile_cache.groups if report.compile_cache else [])
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
                        notifier: Notifier | None, at: datetime, period: str,
                        budgets: Mapping[str, Decimal | None] | None = None) -> Published:
    """The report over the last whole ``period`` before ``at`` (``lambdas.domain.money.periods``), compared with the one
    before it: JSON and Markdown under reports/cost/<label>/ (and the JSON as reports/cost/latest.json), and a
    one-line summary to the notifier when there is one."""
    start, end = last_whole(period, at)
    before, _ = previous(period, start)
    name = label(period, start)
    report = cost_report(ledger.iter_kinds(("cost", "summary")), trials.iter_all(), start=start, end=end,
                         period=name, previous_start=before, budgets=budgets)
    report = report.model_copy(update={"compile_cache": cache_trend(registry.iter_all())})
    document = report.model_dump(mode="json")
    artifacts.put_json(f"reports/cost/{name}/report.json", document)
    artifacts.put_text(f"reports/cost/{name}/report.md", render_cost_markdown(report), "text/markdown")
    artifacts.put_json(LATEST, document)
    uri = artifacts.uri(f"reports/cost/{name}/report.json")
    message_id = None
    if notifier is not None:
        summary = (f"dualtrack cost {name}: {report.runs} runs, {report.total['total_usd']} USD; "
                   f"rerun share {report.rerun_share}, compile share {report.compile_share}. {uri}")
        message_id = notifier.publish(f"dualtrack cost report {name}", summary)
    return Published(uri, name, report.runs, report.total["total_usd"], message_id)
