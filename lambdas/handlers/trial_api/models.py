"""Request and response bodies of the trial API, as the OpenAPI document describes them."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from lambdas.domain.json_types import JsonObject


class _Body(BaseModel):
    # Built on first use: a cold request validates only the bodies of the route it serves.
    model_config = ConfigDict(defer_build=True)


class Problem(_Body):
    path: str = Field(description="where in the request: a dotted field path, a header, or empty for the whole")
    message: str = Field(description="what is wrong and how to fix it")


class ErrorBody(_Body):
    """Every error the API answers: a sentence, and the problems one by one."""

    message: str
    errors: list[Problem] = Field(default_factory=list)


class CancelBody(_Body):
    reason: str = Field(default="cancelled through the API", max_length=1000)


class DecisionBody(_Body):
    comment: str = Field(min_length=3, max_length=1000, description="why: recorded with the decision")


class Approval(_Body):
    status: str = Field(description="PENDING, APPROVED or REJECTED")
    reasons: list[str] = Field(default_factory=list, description="why the trial needs an approver")
    requested_by: str | None = None
    requested_at: str | None = None
    decided_by: str | None = Field(default=None, description="the approver's IAM principal (a role session as its "
                                   "role)")
    decided_as: str | None = Field(default=None, description="the approver as API Gateway authenticated it")
    decided_at: str | None = None
    comment: str | None = None


class TrialView(_Body):
    trial_id: str = Field(description="name-hash: the same trial submitted twice has the same id")
    name: str | None = None
    owner: str | None = None
    status: str | None = Field(default=None, description="PENDING_APPROVAL, SUBMITTING, SUBMITTED, then a terminal "
                               "status (SUCCEEDED, FAILED, CANCELLED, REJECTED)")
    team: str | None = Field(default=None, description="the team the trial is booked to (its owner)")
    submitted_by: str | None = Field(default=None, description="the IAM principal that submitted it")
    approval: Approval | None = None
    spec_hash: str | None = None
    spec_uri: str | None = Field(default=None, description="the frozen spec in the artifacts bucket")
    execution_arn: str | None = None
    created_at: str | None = None
    triage: JsonObject | None = Field(default=None, description="route, scenario, scores, reasons and risks")
    worst_case_usd: dict[str, str] | None = Field(default=None, description="worst case per track, USD")
    follows: JsonObject | None = Field(
        default=None, description="the team's newest earlier trial of the same model and the change class between "
        "them (reuse its compiled graphs, or recompile): trial_id, same_key, change_classes, components, summary")
    status_url: str


class Submission(TrialView):
    already_submitted: bool = Field(default=False, description="true when this body had been submitted before")


class TrialSummary(_Body):
    trial_id: str
    name: str | None = None
    owner: str | None = None
    team: str | None = None
    status: str | None = None
    created_at: str | None = None


class TrialPage(_Body):
    trials: list[TrialSummary]
    next_token: str | None = Field(default=None, description="pass as next_token for the next page; null at the end")


class RunStatus(_Body):
    status: str = Field(description="the run's Batch status, or its terminal status once it has one")
    step: int | None = Field(default=None, description="global step reached")
    loss: float | None = None
    attempt: int | None = None
    progress_source: str | None = Field(default=None, description="summary, metrics or checkpoint")
    progress_error: str | None = None
    attempts: list[JsonObject] = Field(description="per attempt: instance, nodes, seconds by phase, outcome")
    cost: JsonObject = Field(description="USD by component (strings), with total_usd")
    cost_final: bool = Field(description="true once the run's cost is closed over all its facts")


class TrialStatus(TrialView):
    max_steps: int | None = None
    status_cause: str | None = None
    stopped_by: JsonObject | None = Field(
        default=None, description="the limit the plane stopped the trial at: limit, source, value, observed, run, at")
    runs: dict[str, RunStatus] = Field(description="per run: gpu, trn2, trn2-compile, gpu-fallback, and each scaling "
                                                   "run (gpu-n1: a track at another node count)")
    total_usd: str


class ReportLinks(_Body):
    report_uri: str
    url: str = Field(description="presigned GET of report.json")
    html_url: str = Field(description="presigned GET of report.html")
    expires_in_s: int
    verdict: str | None = None


class Cancelled(_Body):
    trial_id: str
    status: str
    execution_status: str | None = Field(default=None, description="the workflow execution's status after stopping")
    changed: bool = Field(description="false when the trial had already finished")
    pending: list[str] = Field(default_factory=list, description="while STOPPING: what still runs (the execution, "
                               "jobs not yet ended); the stop is retried until it is empty")


class CacheEntry(_Body):
    cache_key: str
    prefix: str | None = None
    model: str | None = None
    compiler_version: str | None = None
    status: str = Field(description="new, ready, failed or retry_requested")
    hits: int
    misses: int
    failures: int
    hit_rate: float | None = None
    first_compile_s: float | None = None
    saved_compile_s: float = Field(description="compile seconds hits saved against the first compile")
    size_bytes: int
    objects: int
    failure_reason: str | None = None
    retry_requested: bool
    last_used_at: str | None = None
    created_at: str | None = None
    components: JsonObject | None = Field(default=None, description="what the cache key was computed from")


class CompileCacheView(_Body):
    entries: list[CacheEntry]
    groups: list[JsonObject] = Field(description="per model and compiler version: entries, hit rate, savings")
