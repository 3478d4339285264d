"""Gathering a trial's evidence from S3 and the ledger, building its report and writing it next to the trial."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pydantic import ValidationError

from lambdas.domain.evidence.baseline import MAX_BASELINE_BYTES, Baseline, BaselineInvalid, parse_baseline
from lambdas.domain.evidence.run_summary import RunSummary, parse_summary
from lambdas.domain.json_types import JsonObject
from lambdas.domain.money.cost import RunCost
from lambdas.domain.money.ledger import LedgerEntry, run_key
from lambdas.domain.money.prices import PriceTable
from lambdas.domain.report.build import build_trial_report
from lambdas.domain.report.model import UnreadableSummary
from lambdas.domain.trial.spec import TrialSpec
from lambdas.domain.vocabulary import RUNS
from lambdas.rendering.report_html import render_html
from lambdas.rendering.report_markdown import render_markdown
from lambdas.services.baseline_sources import baseline_refused
from lambdas.services.frozen_specs import load_spec
from lambdas.services.ports import CacheRegistry, Ledger, Objects, Sources, Trials

if TYPE_CHECKING:  # the report function builds reports from the spec; only the API passes a trial item
    from lambdas.domain.trial.trial_record import TrialRecord

_SUMMARY = re.compile(r"/attempt-(\d+)/summary\.json$")


@dataclass
class Evidence:
    """A trial's evidence as the report reads it: each run's attempt summaries (in attempt order) and stored cost,
    the ledger's entries, and the summaries that could not be read (kept by key, never silently dropped)."""

    summaries: dict[str, list[RunSummary]] = field(default_factory=dict)
    costs: dict[str, RunCost] = field(default_factory=dict)
    entries: list[LedgerEntry] = field(default_factory=list)
    unreadable: list[dict[str, str]] = field(default_factory=list)


def run_names(spec: TrialSpec) -> list[str]:
    """Every run the trial may have: the fixed ones, then each scaling run its tracks declare (``gpu-n1``)."""
    return [*RUNS, *spec.scaling_runs()]


def gather(trial_id: str, artifacts: Objects, ledger: Ledger, runs: Sequence[str]) -> Evidence:
    """The evidence of each of ``runs`` (``run_names`` of the trial's spec, or ``TrialRecord.run_names``)."""
    evidence = Evidence()
    for run in runs:
        keys = [k for k in artifacts.list_keys(f"trials/{trial_id}/{run}/attempt-") if _SUMMARY.search(k)]
        for key in sorted(keys, key=lambda k: int(_SUMMARY.search(k).group(1))):  # type: ignore[union-attr]
            try:
                evidence.summaries.setdefault(run, []).append(parse_summary(artifacts.get_json(key) or {}))
            except (ValidationError, TypeError, ValueError) as exc:
                evidence.unreadable.append({"key": key, "error": str(exc).splitlines()[0]})
        stored = ledger.cost(run_key(trial_id, run))
        if stored is not None:
            evidence.costs[run] = stored.cost
        evidence.entries += ledger.entries(run_key(trial_id, run))
    return evidence


def read_baseline(spec: TrialSpec, sources: Sources | None, *, artifacts_root: str | None = None,
                  trials: Trials | None = None) -> Baseline | str | None:
    """The trial's GPU baseline, or why it could not be read (the report says so; it never fails on it). A baseline
    in the artifacts bucket (``artifacts_root``) is read only from a trial of the trial's own team, as ``trials``
    books it; the trial's team is its owner (the API books a trial to the team its owner names)."""
    uri = spec.baseline_logs_uri
    if uri is None:
        return None
    if sources is None:
        return "this function reads no baseline"
    refused = (baseline_refused(spec, spec.owner, trials, artifacts_root=artifacts_root)
               if artifacts_root is not None else None)
    if refused is not None:
        return f"not read: {refused}"
    try:
        return parse_baseline(sources.read(uri, MAX_BASELINE_BYTES), name=uri)
    except BaselineInvalid as exc:
        return str(exc)
    except Exception as exc:  # missing object, no permission, too large: the report names it
        return f"could not be read ({type(exc).__name__}: {str(exc)[:200]})"


def cache_entries_of(summaries: Mapping[str, Sequence[RunSummary]], registry: CacheRegistry | None
                     ) -> dict[str, JsonObject]:
    """The registry entries of the cache keys the runs' attempts used (the compile accounting rule reads them)."""
    if registry is None:
        return {}
    keys = {s.compile.cache_key for attempts in summaries.values() for s in attempts if s.compile.cache_key}
    return {key: entry.model_dump(mode="json") for key in sorted(keys) if (entry := registry.get(key)) is not None}


@dataclass(frozen=True)
class WrittenReport:
    """Where a trial's report was written, and its verdict."""

    report_uri: str
    verdict: str | None  # None for a rehearsal on stand-ins, which gives none
    markdown_uri: str
    html_uri: str
    rehearsal: str | None = None

    def as_json(self) -> JsonObject:
        out: JsonObject = {"report_uri": self.report_uri, "verdict": self.verdict, "markdown_uri": self.markdown_uri,
                           "html_uri": self.html_uri}
        if self.rehearsal is not None:
            out["rehearsal"] = self.rehearsal
        return out


def write_report(trial_id: str, spec: TrialSpec, artifacts: Objects, ledger: Ledger, generated_at: str,
                 stopped_by: JsonObject | None = None, sources: Sources | None = None,
                 registry: CacheRegistry | None = None, prices: PriceTable | None = None,
                 trials: Trials | None = None) -> WrittenReport:
    """Build the trial's report from its evidence and write it (JSON, Markdown, HTML) under its report/ prefix;
    ``stopped_by`` is the trial item's record of the limit the plane stopped it at; ``sources`` reads the trial's
    GPU baseline, and ``trials`` tells whose trial a baseline in the artifacts bucket belongs to (without it, none
    there is read); ``prices`` is the deployment's price table (overrides applied), whose bases the decision prices
    the trial at."""
    evidence = gather(trial_id, artifacts, ledger, run_names(spec))
    baseline = read_baseline(spec, sources, artifacts_root=artifacts.uri(""), trials=trials)
    report = build_trial_report(spec, evidence.summaries, evidence.costs, evidence.entries, generated_at=generated_at,
                                stopped_by=stopped_by, baseline=baseline,
                                cache_entries=cache_entries_of(evidence.summaries, registry),
                                unreadable=[UnreadableSummary.model_validate(u) for u in evidence.unreadable],
                                prices=prices)
    base = f"trials/{trial_id}/report/"
    artifacts.put_json(base + "report.json", report.model_dump(mode="json"))
    artifacts.put_text(base + "report.md", render_markdown(report), "text/markdown; charset=utf-8")
    artifacts.put_text(base + "report.html", render_html(report), "text/html; charset=utf-8")
    return WrittenReport(report_uri=artifacts.uri(base + "report.json"), verdict=report.comparison.verdict,
                         rehearsal=report.comparison.rehearsal,
                         markdown_uri=artifacts.uri(base + "report.md"), html_uri=artifacts.uri(base + "report.html"))


def report_stopped_trial(record: TrialRecord, artifacts: Objects, ledger: Ledger, generated_at: str,
                         sources: Sources | None = None, registry: CacheRegistry | None = None,
                         prices: PriceTable | None = None, trials: Trials | None = None) -> WrittenReport | None:
    """The report of a trial the cancel path stopped after it started (a person, or a limit), whose workflow never
    reached its report step: written once every run that started has a settled cost. None for a trial that was not
    stopped after it started, while a run is still stopping, or when no job ever ran."""
    if not record.stopped_after_start or record.spec_uri is None:
        return None
    trial_id = record.trial_id
    started = [run for run in record.run_names() if ledger.entries(run_key(trial_id, run))]
    if not started:
        return None  # stopped before any job ran: there is nothing to report
    for run in started:
        stored = ledger.cost(run_key(trial_id, run))
        if stored is None or not stored.terminal_status:
            return None
    spec = load_spec(artifacts, record.spec_uri)
    stopped_by = record.stopped_by.model_dump(mode="json") if record.stopped_by else None
    return write_report(trial_id, spec, artifacts, ledger, generated_at, stopped_by=stopped_by, sources=sources,
                        registry=registry, prices=prices, trials=trials)
