"""Submitting, reading and cancelling trials (the API's use cases).

Before anything is stored, a submission is checked against its stage: every s3:// input must be readable by the
job role (the stage's data buckets, or the artifacts bucket under trials/), so a trial never starts only to fail
inside its job.

Write order for a submission: the frozen spec to S3, then the trials item (conditional on absence), then
StartExecution with the trial id as execution name. A failure after the item is written removes it again, so a
retry of the same body starts from a clean slate; a repeated submission finds the item and never starts a second
execution.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from lambdas.domain import ledger as L
from lambdas.domain.cost import compute_run_cost
from lambdas.domain.prices import PriceMissing, PriceTable, worst_case_usd
from lambdas.domain.triage import submission_refusal, triage
from lambdas.domain.trial import MIN_ATTEMPT_TIMEOUT_S, TrialSpec, unreadable_inputs
from lambdas.domain.vocabulary import TRIAL_TERMINAL
from lambdas.services.ports import Ledger, Objects, RunMetrics, Trials, Workflow
from lambdas.services.run_progress import run_progress
from lambdas.services.run_settlement import RunSettlement


class SubmissionRefused(Exception):
    def __init__(self, reason: str, detail: dict[str, Any]) -> None:
        super().__init__(reason)
        self.reason, self.detail = reason, detail


class TrialNotFound(LookupError):
    pass


@dataclass
class Submitted:
    body: dict[str, Any]
    created: bool


def job_targets(spec: TrialSpec, targets: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Queue and job definition (by name) for every run of ``spec``, from the stage's targets
    (``{track: {instance_type: {queue, single_node, multi_node}}}``, the JOB_TARGETS setting).

    Refuses a trial the stage cannot place: a track it does not offer, an instance type it has no queue for (a job
    sent there would wait RUNNABLE until cancelled), or a node count the stage has no multi-node job definition for.
    A multi-node run carries ``nodes``; the workflow then passes the run's settings as job parameters.
    """
    problems: list[dict[str, str]] = []
    jobs: dict[str, dict[str, Any]] = {}
    for track in spec.track_names():
        config = spec.track(track)
        offered = targets.get(track) or {}
        if not offered:
            problems.append({"path": f"tracks.{track}", "message": f"this stage has no {track} capacity; remove "
                             f"the track or deploy a stage with dualtrack:stages.<stage>.{track} set"})
            continue
        target = offered.get(config.instance_type)
        if target is None:
            problems.append({"path": f"tracks.{track}.instance_type", "message": (
                f"this stage runs {track} jobs on {', '.join(sorted(offered))}, not {config.instance_type}; use one "
                f"of those or add it to dualtrack:stages.<stage>.{track}.instance_types")})
            continue
        if config.nodes > 1:
            multi = {int(n): str(name) for n, name in (target.get("multi_node") or {}).items()}
            if config.nodes not in multi:
                counts = (f"it runs {', '.join(str(n) for n in sorted(multi))} nodes of {config.instance_type}"
                           if multi else
                           f"it has no multi-node capacity for {config.instance_type} (that needs "
                           f"dualtrack:stages.<stage>.{track}.availability_zone, on-demand capacity and an EFA type)")
                problems.append({"path": f"tracks.{track}.nodes", "message": (
                    f"{config.nodes} nodes: this stage cannot run that, {counts}; use one of those counts (or 1), "
                    f"or add it to dualtrack:stages.<stage>.{track}.multi_node_counts")})
                continue
            # One multi-node job definition per node count: Step Functions cannot override a job's node count.
            jobs[track] = {"queue": str(target["queue"]), "definition": multi[config.nodes], "nodes": config.nodes}
            continue
        jobs[track] = {"queue": str(target["queue"]), "definition": str(target["single_node"])}
    if problems:
        raise SubmissionRefused("placement", {"errors": problems})
    if "gpu" in jobs and "trn2" in jobs:
        jobs["fallback"] = dict(jobs["gpu"])  # the GPU fallback runs the trial's GPU track configuration
    return jobs


def execution_input(spec: TrialSpec, artifacts: Objects, *, attempt_timeout_s: int,
                    jobs: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The workflow's input. ``attempt_timeout_s`` is the stage's Batch attempt timeout; the trial's
    ``limits.max_hours`` can only shorten it, and it never goes below Batch's 60 s minimum. Retries are the job
    definitions' own (their retry strategy), so the input carries no attempt count. ``run_dirs`` has a
    ``gpu-fallback`` entry only when the trial has both a gpu and a trn2 track."""
    base = f"trials/{spec.trial_id}"
    tracks = spec.track_names()
    run_dirs: dict[str, str] = {t: artifacts.uri(f"{base}/{t}") for t in tracks}
    if "trn2" in tracks and "gpu" in tracks:
        run_dirs["gpu-fallback"] = artifacts.uri(f"{base}/gpu-fallback")
    timeout = int(attempt_timeout_s)
    if spec.limits and spec.limits.max_hours:
        timeout = min(timeout, int(spec.limits.max_hours * 3600))
    return {
        "trial_id": spec.trial_id,
        "spec_uri": artifacts.uri(f"{base}/spec.json"),
        "tracks": tracks,
        "run_dirs": run_dirs,
        "jobs": {run: dict(target) for run, target in (jobs or {}).items()},
        "attempt_timeout_s": max(MIN_ATTEMPT_TIMEOUT_S, timeout),
    }


def check_readable(spec: TrialSpec, data_buckets: Sequence[str], artifacts_bucket: str) -> None:
    """Raises SubmissionRefused naming each s3:// input the stage's job role cannot read."""
    problems = unreadable_inputs(spec, data_buckets, artifacts_bucket=artifacts_bucket)
    if problems:
        raise SubmissionRefused("unreadable inputs",
                                {"errors": [{"path": p.path, "message": p.message} for p in problems]})


def preflight(spec: TrialSpec, prices: PriceTable, region: str) -> tuple[Any, dict[str, str]]:
    """Triage and the worst-case ceiling; raises SubmissionRefused when the trial must not start."""

    result = triage(spec)
    refusal = submission_refusal(spec, result)
    if refusal:
        raise SubmissionRefused("triage", {"message": refusal, "triage": result.model_dump(mode="json")})
    try:
        worst = worst_case_usd(spec, prices, region)
    except PriceMissing as exc:
        raise SubmissionRefused("price", {"errors": [{"path": "tracks", "message": str(exc)}]}) from None
    limits = spec.limits
    if limits and limits.max_usd is not None:
        if not worst:
            raise SubmissionRefused(
                "limits",
                {
                    "errors": [
                        {
                            "path": "limits.max_hours",
                            "message": "required when limits.max_usd is set, so the worst case "
                            "(price x nodes x max_hours) can be checked",
                        }
                    ]
                },
            )
        if worst["total"] > Decimal(str(limits.max_usd)):
            raise SubmissionRefused(
                "limits",
                {
                    "errors": [
                        {
                            "path": "limits.max_usd",
                            "message": f"worst case {worst['total']:.2f} USD (price x nodes x max_hours per run, "
                            f"fallback included) exceeds "
                            f"limits.max_usd {limits.max_usd}; raise max_usd, lower max_hours, or use fewer nodes",
                        }
                    ],
                    "worst_case_usd": {k: str(v) for k, v in worst.items()},
                },
            )
    return result, {k: str(v.quantize(Decimal("0.01"))) for k, v in worst.items()}


def submit(
    spec: TrialSpec, *, trials: Trials, artifacts: Objects, workflow: Workflow, prices: PriceTable, region: str,
    now: str,
    attempt_timeout_s: int, data_buckets: Sequence[str], artifacts_bucket: str,
    targets: Mapping[str, Mapping[str, Mapping[str, Any]]],
) -> Submitted:
    """``attempt_timeout_s``, ``data_buckets`` and ``artifacts_bucket`` are the stage's (ApiSettings)."""
    check_readable(spec, data_buckets, artifacts_bucket)
    jobs = job_targets(spec, targets)
    triage_result, worst = preflight(spec, prices, region)
    trial_id = spec.trial_id
    existing = trials.get(trial_id)
    if existing is not None and existing.get("execution_arn"):
        return Submitted(_view(existing, already_submitted=True), created=False)
    payload = execution_input(spec, artifacts, attempt_timeout_s=attempt_timeout_s, jobs=jobs)
    artifacts.put_json(f"trials/{trial_id}/spec.json", spec.model_dump(mode="json", exclude_none=True))
    item = {
        "trial_id": trial_id,
        "name": spec.name,
        "owner": spec.owner,
        "spec_hash": spec.spec_hash(),
        "spec_uri": payload["spec_uri"],
        "status": "SUBMITTING",
        "created_at": now,
        "updated_at": now,
        "tracks": {t: spec.track(t).model_dump(mode="json") for t in spec.track_names()},
        "max_steps": spec.max_steps,
        "triage": {
            "route": triage_result.route,
            "scenario": triage_result.scenario,
            "scores": triage_result.scores.model_dump(),
            "conclusion": triage_result.conclusion,
            "reasons": triage_result.reasons,
            "risks": triage_result.risks,
        },
        "worst_case_usd": worst,
    }
    created = trials.create(item)
    if not created:
        current = trials.get(trial_id) or item
        if current.get("execution_arn"):
            return Submitted(_view(current, already_submitted=True), created=False)
    try:
        started = workflow.start(trial_id, payload)
    except Exception:
        if created:
            trials.delete(trial_id)  # leave nothing half-submitted; the same body can simply be sent again
        raise
    trials.update(trial_id, execution_arn=started.execution_arn, status="SUBMITTED", updated_at=now)
    item.update(execution_arn=started.execution_arn, status="SUBMITTED")
    return Submitted(_view(item, already_submitted=started.already_submitted), created=not started.already_submitted)


def _view(item: dict[str, Any], already_submitted: bool = False) -> dict[str, Any]:
    out = {
        k: item.get(k)
        for k in (
            "trial_id",
            "name",
            "owner",
            "status",
            "spec_hash",
            "spec_uri",
            "execution_arn",
            "created_at",
            "triage",
            "worst_case_usd",
        )
    }
    out["status_url"] = f"/trials/{item['trial_id']}"
    if already_submitted:
        out["already_submitted"] = True
    return out


def trial_status(
    trial_id: str, *, trials: Trials, ledger: Ledger, settlement: RunSettlement, metrics: RunMetrics | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Status per run: attempts, current cost, and progress (global step and loss) against the trial's max_steps."""
    item = trials.get(trial_id)
    if item is None:
        raise TrialNotFound(trial_id)

    runs: dict[str, Any] = {}
    total = Decimal(0)
    for run in L.RUNS:
        entries = ledger.entries(L.run_key(trial_id, run))
        if not entries:
            continue
        fold = settlement.fold(trial_id, run, entries, item)
        stored = ledger.cost(L.run_key(trial_id, run))
        cost = stored["cost"] if stored else compute_run_cost(fold.usage, settlement.prices).model_dump(mode="json")
        latest = max(L.facts_of(entries, L.TransitionFact), key=lambda t: t.at, default=None)
        progress = run_progress(entries, trial_id=trial_id, run=run, terminal=fold.terminal_status is not None,
                                metrics=metrics, now=now or datetime.now(UTC))
        runs[run] = {
            "status": fold.terminal_status or (latest.status if latest else "PENDING"),
            **progress,
            "attempts": [a.model_dump(mode="json") for a in fold.usage.attempts],
            "cost": cost,
            "cost_final": bool(stored and stored.get("complete")),
        }
        total += Decimal(str(cost["total_usd"]))
    max_steps = item.get("max_steps")
    if max_steps is None:  # trials submitted before max_steps was kept on the item: read the frozen spec
        spec = settlement.artifacts.get_json(f"trials/{trial_id}/spec.json")
        max_steps = spec.get("max_steps") if isinstance(spec, dict) else None
    return {
        **_view(item),
        "max_steps": int(max_steps) if max_steps is not None else None,
        "status_cause": item.get("status_cause"),
        "runs": runs,
        "total_usd": str(total),
    }


def cancel(trial_id: str, *, trials: Trials, workflow: Workflow, now: str, reason: str) -> dict[str, Any]:
    item = trials.get(trial_id)
    if item is None:
        raise TrialNotFound(trial_id)
    if item.get("status") in TRIAL_TERMINAL:
        return {"trial_id": trial_id, "status": item["status"], "changed": False}
    execution = workflow.stop(item["execution_arn"], reason) if item.get("execution_arn") else "NOT_STARTED"
    trials.update(trial_id, status="CANCELLED", status_cause=reason, updated_at=now)
    return {"trial_id": trial_id, "status": "CANCELLED", "execution_status": execution, "changed": True}
