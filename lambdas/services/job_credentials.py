"""Credentials for one training job, scoped to its own trial and run (see :mod:`lambdas.domain.job_access`).

A job proves who it is with its Batch job id and the one-off token the workflow put into its settings. The job is
described from Batch, never taken at its word: it must be STARTING or RUNNING, carry that token, and name a trial
and run consistent with the tags the workflow gave it; the trial must be one this plane holds and still active.
Only then is the writer role assumed with the trial and run as session tags. Every refusal names its reason; the
caller gets the reason, never anything about another job.
"""

from __future__ import annotations

import hmac
import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from lambdas.domain.job_access import (
    CACHE_TAG,
    RUN_TAG,
    TOKEN_ENV,
    TOKEN_PARAMETER,
    TRIAL_TAG,
    read_prefix,
    write_prefix,
)
from lambdas.domain.trial import BATCH_SAFE_NAME
from lambdas.domain.trial_record import TrialRecord
from lambdas.domain.vocabulary import TRIAL_TERMINAL, is_run
from lambdas.services.ports import JobDescriptions, Trials, WriterRole

ACTIVE_JOB = ("STARTING", "RUNNING")
# Batch job ids are UUIDs; a node of a multi-node job is "<id>#<node index>" (its AWS_BATCH_JOB_ID).
JOB_ID = r"^[0-9A-Za-z-]{1,64}(#[0-9]{1,5})?$"
TOKEN = r"^[0-9A-Za-z-]{16,64}$"
_SAFE = re.compile(BATCH_SAFE_NAME)


class CredentialsRequest(BaseModel):
    """What a job sends: its AWS_BATCH_JOB_ID and its DUALTRACK_RUN_TOKEN."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    job_id: str = Field(pattern=JOB_ID)
    token: str = Field(pattern=TOKEN)


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
    its job parameters, under one set of names: trial_id, run, token."""
    environment = {item.get("name"): item.get("value") for item in (job.get("container") or {}).get("environment")
                   or [] if isinstance(item, dict)}
    if TOKEN_ENV in environment:
        return {"trial_id": str(environment.get("DUALTRACK_TRIAL_ID") or ""),
                "run": str(environment.get("DUALTRACK_RUN") or ""), "token": str(environment[TOKEN_ENV])}
    parameters = job.get("parameters") or {}
    return {"trial_id": str(parameters.get("trial_id") or ""), "run": str(parameters.get("run") or ""),
            "token": str(parameters.get(TOKEN_PARAMETER) or "")}


def identify(request: CredentialsRequest, jobs: JobDescriptions, trials: Trials) -> JobIdentity:
    """The trial and run the calling job belongs to, or CredentialsRefused."""
    parent = request.job_id.split("#", 1)[0]  # a node's credentials are its multi-node job's
    job = jobs.describe_job(parent)
    if job is None:
        raise CredentialsRefused(f"job {parent}: Batch does not know it")
    status = job.get("status")
    if status not in ACTIVE_JOB:
        raise CredentialsRefused(f"job {parent} is {status}: credentials go only to STARTING or RUNNING jobs")
    settings = job_settings(job)
    if not settings["token"] or not hmac.compare_digest(settings["token"].encode(), request.token.encode()):
        raise CredentialsRefused(f"job {parent}: the token is not the one the workflow gave this job")
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


def vend(request: CredentialsRequest, *, jobs: JobDescriptions, trials: Trials, writer: WriterRole, bucket: str,
         duration_s: int) -> dict[str, Any]:
    """The writer role's credentials for the calling job's own trial and run, and where they may write."""
    who = identify(request, jobs, trials)
    tags = {TRIAL_TAG: who.trial_id, RUN_TAG: who.run, **({CACHE_TAG: who.cache_key} if who.cache_key else {})}
    credentials = writer.assume(session_name=f"{who.trial_id}.{who.run}"[:64], tags=tags, duration_s=duration_s)
    return {"trial_id": who.trial_id, "run": who.run, "bucket": bucket,
            "write_prefix": write_prefix(who.trial_id, who.run), "read_prefix": read_prefix(who.trial_id),
            "cache_write_prefix": who.cache_prefix, "credentials": credentials}
