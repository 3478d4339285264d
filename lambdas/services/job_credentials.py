"""Credentials for one training job, scoped to its own trial and run (see :mod:`lambdas.domain.job_access`).

A job proves who it is with its Batch job id and a presigned STS GetCallerIdentity request, which this function
makes itself (``CallerIdentity``): the signer must be a session of the job's own role named after the job's own ECS
task, as Batch describes them (``container.jobRoleArn``, ``container.taskArn``; a multi-node job's node is described
as ``<job id>#<node index>``). The job is described from Batch, never taken at its word: it must be STARTING or
RUNNING and name a trial and run consistent with the tags the workflow gave it; the trial must be one this plane
holds and still active. Only then is the writer role assumed with the trial and run as session tags. Nothing in a
job's description is a secret, so reading job descriptions grants nothing. Every refusal names its reason; the
caller gets the reason, never anything about another job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from lambdas.domain.job_access import (
    CACHE_TAG,
    RUN_TAG,
    TRIAL_TAG,
    IdentityUnproven,
    assumed_role,
    read_prefix,
    role_name,
    task_id,
    write_prefix,
)
from lambdas.domain.trial.spec import BATCH_SAFE_NAME
from lambdas.domain.trial.trial_record import TrialRecord
from lambdas.domain.vocabulary import TRIAL_TERMINAL, is_run
from lambdas.services.ports import CallerIdentity, JobDescriptions, Trials, WriterRole

ACTIVE_JOB = ("STARTING", "RUNNING")
# Batch job ids are UUIDs; a node of a multi-node job is "<id>#<node index>" (its AWS_BATCH_JOB_ID).
JOB_ID = r"^[0-9A-Za-z-]{1,64}(#[0-9]{1,5})?$"
_SAFE = re.compile(BATCH_SAFE_NAME)


class CredentialsRequest(BaseModel):
    """What a job sends: its AWS_BATCH_JOB_ID and a presigned STS GetCallerIdentity URL signed with its job role's
    credentials (``lambdas.domain.job_access.identity_request`` says what is accepted)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    job_id: str = Field(pattern=JOB_ID)
    identity: str = Field(min_length=16, max_length=4096)


class CredentialsRefused(Exception):
    """The job does not get credentials; ``reason`` says why (logged, counted and returned to the caller)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class JobIdentity:
    job_id: str
    trial_id: str
    run: str
    cache_key: str | None = None  # the compile-cache entry this run was sent to build, if any
    cache_prefix: str | None = None


_CACHE_KEY = re.compile(r"^[0-9a-f]{64}$")


def cache_entry(record: TrialRecord, run: str) -> tuple[str | None, str | None]:
    """(key, prefix) of the entry ``run`` may write: the one the resolve step recorded, for the run it named to compile
    it; (None, None) for every other run."""
    key, prefix = record.cache_key or "", record.cache_prefix or ""
    if run != record.cache_writer or not _CACHE_KEY.match(key) or not prefix.endswith(f"/{key}/"):
        return None, None
    return key, prefix


def job_settings(job: dict[str, Any]) -> dict[str, str]:
    """The run's settings as the workflow gave them: a single-node job's container environment, else (multi-node)
    its job parameters, under one set of names: trial_id, run."""
    environment = {item.get("name"): item.get("value") for item in (job.get("container") or {}).get("environment")
                   or [] if isinstance(item, dict)}
    if "DUALTRACK_TRIAL_ID" in environment:
        return {"trial_id": str(environment.get("DUALTRACK_TRIAL_ID") or ""),
                "run": str(environment.get("DUALTRACK_RUN") or "")}
    parameters = job.get("parameters") or {}
    return {"trial_id": str(parameters.get("trial_id") or ""), "run": str(parameters.get("run") or "")}


def check_caller(job_id: str, job: dict[str, Any], caller_arn: str) -> None:
    """CredentialsRefused unless ``caller_arn`` is a session of ``job``'s own role named after ``job``'s own task
    (``job`` as DescribeJobs returns the job, or the multi-node job's node, that ``job_id`` names)."""
    container = job.get("container") or {}
    caller = assumed_role(caller_arn)
    role = role_name(str(container.get("jobRoleArn") or ""))
    task = task_id(str(container.get("taskArn") or ""))
    if caller is None:
        raise CredentialsRefused(f"job {job_id}: the identity proof was signed by {caller_arn}, not by a job's role "
                                 "session: only the job's own container can prove it is the job")
    if role is None or not task:
        raise CredentialsRefused(f"job {job_id}: Batch reports no role and task for it yet (it has not reached "
                                 "STARTING)")
    account, name, session = caller
    if (account, name) != role or session != task:
        raise CredentialsRefused(f"job {job_id}: the identity proof was signed by {caller_arn}, not by this job's "
                                 f"role {role[1]} in its task {task}")


def identify(request: CredentialsRequest, jobs: JobDescriptions, trials: Trials,
             identity: CallerIdentity) -> JobIdentity:
    """The trial and run the calling job belongs to, or CredentialsRefused."""
    parent = request.job_id.split("#", 1)[0]  # a node's credentials are its multi-node job's
    try:
        caller_arn = identity.caller(request.identity)
    except IdentityUnproven as exc:
        raise CredentialsRefused(f"job {request.job_id}: {exc}") from None
    job = jobs.describe_job(parent)
    if job is None:
        raise CredentialsRefused(f"job {parent}: Batch does not know it")
    status = job.get("status")
    if status not in ACTIVE_JOB:
        raise CredentialsRefused(f"job {parent} is {status}: credentials go only to STARTING or RUNNING jobs")
    node = job if request.job_id == parent else jobs.describe_job(request.job_id)
    if node is None:
        raise CredentialsRefused(f"job {request.job_id}: Batch does not know this node")
    check_caller(request.job_id, node, caller_arn)
    settings = job_settings(job)
    trial_id, run = settings["trial_id"], settings["run"]
    if not _SAFE.match(trial_id) or not is_run(run):
        raise CredentialsRefused(f"job {parent}: its settings name no trial and run of this plane "
                                 f"(trial_id {trial_id!r}, run {run!r})")
    tags = job.get("tags") or {}
    if tags.get("dualtrack:trial") != trial_id or tags.get("dualtrack:run") != run:
        raise CredentialsRefused(f"job {parent}: its tags do not match its settings (the workflow sets both)")
    record = trials.get(trial_id)
    if record is None:
        raise CredentialsRefused(f"job {parent}: trial {trial_id} is not one this plane holds")
    if record.status in TRIAL_TERMINAL:
        raise CredentialsRefused(f"job {parent}: trial {trial_id} is {record.status}; its jobs write nothing more")
    if run not in record.run_names():  # a scaling run (gpu-n1) only if the trial was placed with it
        raise CredentialsRefused(f"job {parent}: trial {trial_id} has no run {run} (its runs: "
                                 f"{', '.join(record.run_names())})")
    return JobIdentity(parent, trial_id, run, *cache_entry(record, run))


def vend(request: CredentialsRequest, *, jobs: JobDescriptions, trials: Trials, writer: WriterRole,
         identity: CallerIdentity, bucket: str, duration_s: int) -> dict[str, Any]:
    """The writer role's credentials for the calling job's own trial and run, and where they may write."""
    who = identify(request, jobs, trials, identity)
    tags = {TRIAL_TAG: who.trial_id, RUN_TAG: who.run, **({CACHE_TAG: who.cache_key} if who.cache_key else {})}
    credentials = writer.assume(session_name=f"{who.trial_id}.{who.run}"[:64], tags=tags, duration_s=duration_s)
    return {"trial_id": who.trial_id, "run": who.run, "bucket": bucket,
            "write_prefix": write_prefix(who.trial_id, who.run), "read_prefix": read_prefix(who.trial_id),
            "cache_write_prefix": who.cache_prefix, "credentials": credentials}
