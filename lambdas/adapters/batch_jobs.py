"""AWS Batch: what a job ran on (its queue's instance type, kept for the life of the adapter, which a function
builds once per execution environment) and the job as DescribeJobs reports it."""

from __future__ import annotations

from typing import Any

from lambdas.adapters.aws import client
from lambdas.domain.events import BatchJobStateChangeDetail


class BatchJobsApi:
    """The ``BatchJobs`` port over the Batch API."""

    def __init__(self) -> None:
        self._instance_types: dict[str, str | None] = {}

    def queue_instance_type(self, job_queue: str) -> str | None:
        """A queue's compute environments do not change under a deployed function, so the answer is kept."""
        if job_queue not in self._instance_types:
            self._instance_types[job_queue] = queue_instance_type(job_queue)
        return self._instance_types[job_queue]

    def describe(self, job_id: str) -> BatchJobStateChangeDetail | None:
        """The workflow settles a trial right after its .sync tasks return, which can be before the terminal
        state-change event has been delivered; reading the job itself makes the ledger complete without waiting."""
        jobs = client("batch").describe_jobs(jobs=[job_id]).get("jobs", [])
        return BatchJobStateChangeDetail.model_validate(jobs[0]) if jobs else None

    def describe_job(self, job_id: str) -> dict[str, Any] | None:
        """The ``JobDescriptions`` port: the job as DescribeJobs returns it (status, container, parameters, tags)."""
        jobs = client("batch").describe_jobs(jobs=[job_id]).get("jobs", [])
        return dict(jobs[0]) if jobs else None


def queue_instance_type(job_queue_arn: str) -> str | None:
    """The single instance type the queue's compute environments allow, or None when it is not pinned to one."""
    queues = client("batch").describe_job_queues(jobQueues=[job_queue_arn]).get("jobQueues", [])
    if not queues:
        return None
    envs = [e["computeEnvironment"] for e in queues[0].get("computeEnvironmentOrder", [])]
    if not envs:
        return None
    types: set[str] = set()
    for env in client("batch").describe_compute_environments(computeEnvironments=envs)["computeEnvironments"]:
        types.update(t for t in env.get("computeResources", {}).get("instanceTypes", []) if "." in t)
    return types.pop() if len(types) == 1 else None


class BatchJobTerminator:
    """The ``JobTerminator`` port: the reconciler (a stopped trial's jobs still running) and the run-events function
    (a job first seen after its trial closed) compose it; only their roles may call TerminateJob."""

    def describe(self, job_id: str) -> BatchJobStateChangeDetail | None:
        jobs = client("batch").describe_jobs(jobs=[job_id]).get("jobs", [])
        return BatchJobStateChangeDetail.model_validate(jobs[0]) if jobs else None

    def terminate(self, job_id: str, reason: str) -> None:
        """TerminateJob moves a job that has not started to FAILED and stops a running one (its containers get
        SIGTERM, then SIGKILL): AWS Batch API reference, "TerminateJob". Terminating a job that has already ended
        changes nothing."""
        client("batch").terminate_job(jobId=job_id, reason=reason[:1024])
