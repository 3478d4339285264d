"""Powertools Logger, Tracer and Metrics shared by every function (service from POWERTOOLS_SERVICE_NAME), and the
helpers that publish the custom metrics named in ``lambdas.domain.telemetry``."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit

from lambdas.domain import telemetry

if TYPE_CHECKING:  # every function imports this module; only the event functions observe cache claims
    from lambdas.services.cache_observation import RefusedClaim

logger = Logger()
metrics = Metrics(namespace=telemetry.NAMESPACE)
tracer = Tracer()

# Powertools warns on every request that publishes no application metric. Most requests of some functions count
# nothing (a duplicate Batch event, a status read, a credentials call), so the warning would be every such request's
# only log line; Powertools documents filtering it by its message
# (https://docs.powertools.aws.dev/lambda/python/latest/core/metrics/#raising-schemavalidationerror-on-empty-metrics).
EMPTY_METRICS_WARNING = "No application metrics to publish"


def quiet_empty_metrics() -> None:
    """Ignore Powertools' empty-metrics warning, and only it (every other warning still shows)."""
    warnings.filterwarnings("ignore", message=EMPTY_METRICS_WARNING, category=UserWarning)


quiet_empty_metrics()


def count_run_outcomes(new_statuses: Iterable[str]) -> None:
    """RunsSucceeded / RunsFailed, one per run this invocation's facts made terminal, by the run's folded terminal
    status (``RunSettlement.outcome``): a late FAILED for a job already SUCCEEDED counts nothing."""
    for status in new_statuses:
        name = telemetry.RUN_OUTCOMES.get(status)
        if name is not None:
            metrics.add_metric(name=name, unit=MetricUnit.Count, value=1)


def count_cache_outcomes(outcomes: Mapping[str, int]) -> None:
    """CompileCacheHits / Misses / Failures for the attempts this invocation was first to count in the registry."""
    for outcome, value in sorted(outcomes.items()):
        name = telemetry.CACHE_OUTCOMES.get(outcome)
        if name is not None and value:
            metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)


def count_refused_cache_claims(refused: Iterable[RefusedClaim]) -> None:
    """Summaries' compile-cache claims the registry did not take (each counted once): logged with why, and counted."""
    for claim in refused:
        logger.warning("compile-cache claim refused", extra={"reason": claim.reason, "observation": claim.observation,
                                                             "claimed_key": claim.claimed_key})
        metrics.add_metric(name=telemetry.CACHE_CLAIMS_REFUSED, unit=MetricUnit.Count, value=1)


def count_rejected_cache_entry(reason: str, **context: str | None) -> None:
    """A compile-cache entry not served because it disagrees with its completion marker: logged, and counted."""
    logger.warning("compile-cache entry rejected", extra={"reason": reason, **context})
    metrics.add_metric(name=telemetry.CACHE_ENTRIES_REJECTED, unit=MetricUnit.Count, value=1)


def record_trial_cost(total_usd: float) -> None:
    metrics.add_metric(name=telemetry.TRIAL_COST_USD, unit=MetricUnit.NoUnit, value=total_usd)


def record_reconciled(*, pending: int, overdue: int) -> None:
    """Every sweep publishes both counts, zeros included, so the StopsPending alarm sees a value each period."""
    if overdue:
        logger.error("stops pending past their deadline", extra={"overdue": overdue})
    metrics.add_metric(name=telemetry.STOPS_PENDING, unit=MetricUnit.Count, value=pending)
    metrics.add_metric(name=telemetry.STOPS_OVERDUE, unit=MetricUnit.Count, value=overdue)


def count_rejected_event(reason: str, **context: str | None) -> None:
    """An event acknowledged and dropped (never a ledger fact, not retried): logged with why, and counted."""
    logger.warning("event rejected", extra={"reason": reason, **context})
    metrics.add_metric(name=telemetry.EVENTS_REJECTED, unit=MetricUnit.Count, value=1)


def count_limit_stop(limit: str, **context: str | None) -> None:
    """A running trial stopped at one of its limits: logged with the limit, and counted."""
    logger.warning("trial stopped at a limit", extra={"limit": limit, **context})
    metrics.add_metric(name=telemetry.TRIALS_STOPPED_AT_LIMIT, unit=MetricUnit.Count, value=1)


def count_closed_trial_job(job_id: str, **context: str | None) -> None:
    """A job of a closed (or stopping) trial that was queued or running, terminated: logged, and counted."""
    logger.warning("job of a closed trial terminated", extra={"job_id": job_id, **context})
    metrics.add_metric(name=telemetry.JOBS_OF_CLOSED_TRIALS, unit=MetricUnit.Count, value=1)


def count_refused_credentials(reason: str, **context: str | None) -> None:
    logger.warning("job credentials refused", extra={"reason": reason, **context})
    metrics.add_metric(name=telemetry.JOB_CREDENTIALS_REFUSED, unit=MetricUnit.Count, value=1)


class PowertoolsTelemetry:
    """The run-events service's ``Telemetry`` port: the metrics and log lines above."""

    def run_outcomes(self, statuses: Iterable[str]) -> None:
        count_run_outcomes(statuses)

    def cache_outcomes(self, counted: Mapping[str, int]) -> None:
        count_cache_outcomes(counted)

    def refused_claims(self, refused: Iterable[RefusedClaim]) -> None:
        count_refused_cache_claims(refused)

    def rejected_event(self, reason: str, **context: str | None) -> None:
        count_rejected_event(reason, **context)

    def limit_stop(self, limit: str, **context: str | None) -> None:
        count_limit_stop(limit, **context)

    def closed_trial_job(self, job_id: str, **context: str | None) -> None:
        count_closed_trial_job(job_id, **context)

    def recorded(self, message: str, **context: str | int | bool | None) -> None:
        logger.info(message, extra=context)
