"""The custom CloudWatch metrics the functions publish, and which functions publish each.

The dashboard and the alarms (``infra/constructs/monitoring.py``) read exactly these names. Powertools Metrics adds
the dimension ``service=<POWERTOOLS_SERVICE_NAME>`` (``dualtrack-<function module>`` when deployed), so a metric
published by two functions is two CloudWatch series; the dashboard sums them.

Every count is published once per real-world fact: by whichever function records that fact in the ledger or the
registry first (a conditional write decides), so duplicated and reordered deliveries never double a count.
"""

from __future__ import annotations

NAMESPACE = "Dualtrack"

# A run's outcome, counted once when the run becomes terminal, by its folded status (a SUCCEEDED wins over a FAILED
# for the same job, so a late or forged FAILED after the job's SUCCEEDED counts nothing).
RUNS_SUCCEEDED = "RunsSucceeded"  # a run's Batch job reached SUCCEEDED (Count)
RUNS_FAILED = "RunsFailed"  # a run's Batch job reached FAILED after its retries (Count)
TRIAL_COST_USD = "TrialCostUSD"  # a trial's total cost when the workflow closes it (USD, unit None)
CACHE_HITS = "CompileCacheHits"  # a Trn2 attempt reported its compile-cache lookup hit (Count)
CACHE_MISSES = "CompileCacheMisses"  # ... missed and compiled (Count)
CACHE_FAILURES = "CompileCacheFailures"  # ... failed to compile (Count)
# An event acknowledged and dropped: about a trial or run the plane did not start, or an object under trials/ that
# is not a well-formed fact (a forged or malformed manifest or summary). Never a ledger fact, never retried (Count).
EVENTS_REJECTED = "EventsRejected"
# A running trial stopped by the plane because it crossed one of its limits (the log line names the limit: max_usd,
# failed_retries_per_run, write_bytes, write_requests); counted by the call whose conditional write stopped it.
TRIALS_STOPPED_AT_LIMIT = "TrialsStoppedAtLimit"
# A job asked for its trial's write credentials and was refused (unknown or finished job, wrong token, a trial the
# plane does not hold or that has ended); the log line gives the reason (Count).
JOB_CREDENTIALS_REFUSED = "JobCredentialsRefused"
# A run's summary reported a compile-cache outcome it may not: for an entry the plane did not resolve for its trial,
# or a ready/failed verdict from a run not sent to compile the entry. The registry is left as it was; the log line
# names the claim (Count).
CACHE_CLAIMS_REFUSED = "CompileCacheClaimsRefused"
# The resolver found an entry that disagrees with its completion marker (a listed artefact absent or of another
# size, a marker listing nothing): not served, marked rejected, built again; the log line gives the reason (Count).
CACHE_ENTRIES_REJECTED = "CompileCacheEntriesRejected"

# A job of a trial that is closed or being stopped (CANCELLED, REJECTED, SUCCEEDED, FAILED or STOPPING) reported
# it was queued or running: it was first seen after the trial's stop looked at its jobs, so the run-events function
# terminated it; the log line names the job and the trial (Count).
JOBS_OF_CLOSED_TRIALS = "JobsOfClosedTrialsTerminated"

# Trials whose stop (a cancel or a crossed limit) is still pending when the reconciler sweeps, and those pending past
# the reconciler's deadline: the StopsPending alarm fires on the latter (Count, published every sweep).
STOPS_PENDING = "StopsPending"
STOPS_OVERDUE = "StopsOverdue"

# Run outcomes are recorded by the run-events function, or first by the workflow's cost step when it reconciles a
# job whose terminal event has not arrived yet; compile-cache use by whichever event function first counts a
# run's summary in the registry.
EMITTERS: dict[str, tuple[str, ...]] = {
    RUNS_SUCCEEDED: ("on_batch_job_state", "close_trial_costs"),
    RUNS_FAILED: ("on_batch_job_state", "close_trial_costs"),
    TRIAL_COST_USD: ("close_trial_costs",),
    CACHE_HITS: ("on_batch_job_state", "on_artifact_created"),
    CACHE_MISSES: ("on_batch_job_state", "on_artifact_created"),
    CACHE_FAILURES: ("on_batch_job_state", "on_artifact_created"),
    EVENTS_REJECTED: ("on_batch_job_state", "on_artifact_created"),
    TRIALS_STOPPED_AT_LIMIT: ("on_batch_job_state", "on_artifact_created"),
    JOBS_OF_CLOSED_TRIALS: ("on_batch_job_state",),
    JOB_CREDENTIALS_REFUSED: ("vend_job_credentials",),
    CACHE_CLAIMS_REFUSED: ("on_batch_job_state", "on_artifact_created"),
    CACHE_ENTRIES_REJECTED: ("resolve_compile_cache",),
    STOPS_PENDING: ("reconcile_trials",),
    STOPS_OVERDUE: ("reconcile_trials",),
}
RUN_OUTCOMES = {"SUCCEEDED": RUNS_SUCCEEDED, "FAILED": RUNS_FAILED}
CACHE_OUTCOMES = {"hit": CACHE_HITS, "miss": CACHE_MISSES, "failed": CACHE_FAILURES}


def service_name(module: str) -> str:
    """A function's service name (its metrics' ``service`` dimension, POWERTOOLS_SERVICE_NAME when deployed):
    ``dualtrack-<handler module>``, e.g. ``dualtrack-on-batch-job-state``."""
    return f"dualtrack-{module.rsplit('.', 1)[-1].replace('_', '-')}"
