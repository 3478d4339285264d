"""The custom CloudWatch metrics the functions publish, and which functions publish each.

The dashboard and the alarms (``infra/constructs/monitoring.py``) read exactly these names. Powertools Metrics adds
the dimension ``service=<POWERTOOLS_SERVICE_NAME>`` (``dualtrack-<function module>`` when deployed), so a metric
published by two functions is two CloudWatch series; the dashboard sums them.

Every count is published once per real-world fact: by whichever function records that fact in the ledger or the
registry first (a conditional write decides), so duplicated and reordered deliveries never double a count.
"""

from __future__ import annotations

NAMESPACE = "Dualtrack"

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
    JOB_CREDENTIALS_REFUSED: ("vend_job_credentials",),
}
RUN_OUTCOMES = {"SUCCEEDED": RUNS_SUCCEEDED, "FAILED": RUNS_FAILED}
CACHE_OUTCOMES = {"hit": CACHE_HITS, "miss": CACHE_MISSES, "failed": CACHE_FAILURES}
