"""What the ledger says about the runs: their outcomes, image pulls and starts, the attempt timeline, and the
compile stage with its cache entries and booking."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from lambdas.domain.evidence.run_summary import RunSummary
from lambdas.domain.money.cost import RunCost
from lambdas.domain.money.ledger import LedgerEntry, TransitionFact
from lambdas.domain.report.model import (
    NEVER_RAN,
    CacheEntryRecord,
    CacheEntryView,
    CompileSection,
    CompileStage,
    Outcome,
    RunOutcome,
    Startup,
    StartupAttempt,
    TimelineRow,
    TrackRecord,
)
from lambdas.domain.report.records import _cost_view, _unknown_outcome, compile_booking
from lambdas.domain.trial.spec import TrialSpec
from lambdas.domain.vocabulary import BATCH_TERMINAL, COMPILE_RUN

# What Batch writes when a queue's job state time limit cancels a job that waited RUNNABLE
# (https://docs.aws.amazon.com/batch/latest/userguide/job_stuck_in_runnable_time_limit_actions.html).
_TIME_LIMIT = re.compile(r"JobStateTimeLimit action due to reason: (?P<reason>(?P<kind>CAPACITY|MISCONFIGURATION):\S+)")


def run_outcomes(entries: Iterable[LedgerEntry]) -> dict[str, RunOutcome]:
    """Per run, how its Batch job ended: ``succeeded``, ``failed`` (it ran and failed), ``no_capacity`` or
    ``not_placed`` (cancelled while RUNNABLE by the queue's time limit: it never ran), with Batch's reason."""
    last: dict[str, TransitionFact] = {}
    for entry in entries:
        fact = entry.fact
        if not isinstance(fact, TransitionFact) or fact.status not in BATCH_TERMINAL:
            continue
        if entry.run not in last or fact.at >= last[entry.run].at:
            last[entry.run] = fact
    outcomes: dict[str, RunOutcome] = {}
    for run, fact in last.items():
        reason = fact.status_reason or ""
        limit = _TIME_LIMIT.search(reason)
        outcome: Outcome
        if fact.status == "SUCCEEDED":
            outcome = "succeeded"
        elif limit:
            outcome = "no_capacity" if limit.group("kind") == "CAPACITY" else "not_placed"
        else:
            outcome = "failed"
        outcomes[run] = RunOutcome(outcome=outcome, status_reason=reason or None, detail=NEVER_RAN.get(outcome))
    return outcomes


def image_pull_and_start(entries: Iterable[LedgerEntry]) -> dict[str, Startup]:
    """Per run, the seconds each attempt spent between Batch's STARTING (placed on an instance: the image is
    pulled and the container started) and RUNNING (the container runs), from the jobs' state-change facts."""
    marks: dict[tuple[str, int], dict[str, str]] = {}
    for entry in entries:
        fact = entry.fact
        if isinstance(fact, TransitionFact) and fact.status in ("STARTING", "RUNNING"):
            marks.setdefault((entry.run, fact.attempt), {}).setdefault(fact.status, fact.at)
    totals: dict[str, float] = {}
    attempts: dict[str, list[StartupAttempt]] = {}
    for (run, attempt), seen in sorted(marks.items()):
        if "STARTING" not in seen or "RUNNING" not in seen:
            continue
        seconds = max(0.0, (_instant(seen["RUNNING"]) - _instant(seen["STARTING"])).total_seconds())
        attempts.setdefault(run, []).append(StartupAttempt(attempt=attempt, seconds=round(seconds, 3)))
        totals[run] = round(totals.get(run, 0.0) + seconds, 3)
    return {run: Startup(image_pull_and_start_s=total, by_attempt=attempts[run]) for run, total in totals.items()}


def _instant(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def attempt_timeline(entries: Iterable[LedgerEntry]) -> list[TimelineRow]:
    """Each run's Batch transitions in time order (the report's attempt timeline)."""
    rows = [
        TimelineRow(run=e.run, attempt=e.fact.attempt, status=e.fact.status, at=e.fact.at,
                    status_reason=e.fact.status_reason, exit_code=e.fact.exit_code)
        for e in entries
        if isinstance(e.fact, TransitionFact)
    ]
    return sorted(rows, key=lambda r: (r.at, r.run, r.attempt))


def compile_stage(spec: TrialSpec, summaries: Sequence[RunSummary], cost: RunCost | None,
                  outcome: RunOutcome | None, cache: Mapping[str, CacheEntryRecord],
                  startup: Startup | None = None) -> CompileStage | None:
    """The warm-up compile stage (run ``trn2-compile``), when it ran: how it ended, the compiler's message when it
    failed, its compile seconds and cache outcome per attempt, its cost (all of it compile), how that cost is
    booked and its attempts' image pull and container start. None when the trial's key was warm (or it has no
    Trainium2 track)."""
    if not summaries and cost is None and outcome is None:
        return None
    last = summaries[-1] if summaries else None
    compiles = [s.compile for s in summaries]
    failed = next((c for c in reversed(compiles) if c.status == "failed"), None)
    status: str = last.status if last else "unknown"
    ended = outcome or _unknown_outcome()
    if ended.outcome in NEVER_RAN and status == "unknown":
        status = ended.outcome
    error = (failed.error if failed else None) or (last.error if last and last.status == "failed" else None)
    trn2 = spec.tracks.trn2
    outcomes: list[str] = [c.cache for c in compiles]
    key = compiles[-1].cache_key if compiles else None
    return CompileStage(
        run=COMPILE_RUN,
        status=status,
        outcome=ended.outcome,
        status_reason=ended.status_reason,
        detail=ended.detail,
        backend=last.backend if last else None,
        stand_in=bool(last and last.stand_in),
        instance_type=trn2.instance_type if trn2 else None,
        nodes=trn2.nodes if trn2 else None,
        attempts=len(summaries) or (cost.attempts if cost else 0),
        steps=last.steps_this_attempt if last else 0,
        compile_s=round(sum(c.seconds for c in compiles), 3),
        seconds_by_attempt=[c.seconds for c in compiles],
        cache_by_attempt=outcomes,
        cache_key=key,
        error=error,
        cost=_cost_view(cost, 0, 0),
        booking=compile_booking(spec.trial_id, key, outcomes, cache),
        startup=startup,
    )


def compile_section(tracks: Mapping[str, TrackRecord], stage: CompileStage | None,
                    cache: Mapping[str, CacheEntryRecord]) -> CompileSection:
    """The warm-up compile stage, the registry's entries the trial used, and the trial's compile-cache hit rate: of
    every attempt on the Trainium2 side that looked the key up (the warm-up compile stage's and the training
    run's), how many found it compiled."""
    trn2 = tracks.get("trn2")
    outcomes = [*(stage.cache_by_attempt if stage else []), *(trn2.compile.cache_by_attempt if trn2 else [])]
    looked = [o for o in outcomes if o in ("hit", "miss")]
    hits = sum(1 for o in looked if o == "hit")
    return CompileSection(
        stage=stage, lookups=len(looked), hits=hits, hit_rate=hits / len(looked) if looked else None,
        basis="attempts of the warm-up compile stage and the trn2 run that looked the cache key up",
        entries=cache_entry_views(cache))


def cache_entry_views(cache: Mapping[str, CacheEntryRecord]) -> list[CacheEntryView]:
    """The registry's record of each cache entry the trial's attempts used: lookups that hit, compiles, and failed
    compiles with the last compiler message (a failure is quarantined, so a later attempt compiles again)."""
    return [CacheEntryView(cache_key=key, status=entry.status, hits=entry.hits or 0, misses=entry.misses or 0,
                           failures=entry.failures or 0,
                           failure_reason=entry.failure_reason if entry.failures else None,
                           trials_served=len(entry.hit_trials or []))
            for key, entry in sorted(cache.items())]
