"""What a Batch job ran on: instance type from its queue's compute environments (cached per container)."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import cache
from typing import Any

from lambdas.adapters.aws import client


@cache
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


def job_state_event(job_id: str) -> dict[str, Any] | None:
    """The job as DescribeJobs reports it, shaped as the "Batch Job State Change" event EventBridge would deliver.

    The workflow settles a trial right after its .sync tasks return, which can be before the terminal state-change
    event has been delivered; reading the job itself makes the ledger complete without waiting for it.
    """
    jobs = client("batch").describe_jobs(jobs=[job_id]).get("jobs", [])
    if not jobs:
        return None
    job = jobs[0]
    _, _, _, region, account, _ = job["jobArn"].split(":", 5)
    at = job.get("stoppedAt") or job.get("startedAt") or job.get("createdAt")
    when = datetime.fromtimestamp(at / 1000, UTC) if at else datetime.now(UTC)
    return {"version": "0", "id": f"describe-{job_id}-{job['status']}", "detail-type": "Batch Job State Change",
            "source": "aws.batch", "account": account, "time": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": region, "resources": [job["jobArn"]], "detail": job}
