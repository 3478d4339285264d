"""What a Batch job ran on: instance type from its queue's compute environments (cached per container)."""

from __future__ import annotations

from functools import cache

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
