"""Submitting, reading and cancelling trials (the API's use cases).

Before anything is stored, a submission is checked against its stage: every s3:// input must be readable by the
job role (the stage's data buckets, or the artifacts bucket under trials/), so a trial never starts only to fail
inside its job.

Write order for a submission: the frozen spec to S3, then the trials item and its booking on the team's usage item
in one transaction (conditional on the trial being new and on the team's quotas having room), then StartExecution
with the trial id as execution name. A failure of the start withdraws the item and its booking in one transaction,
so a retry of the same body starts from a clean slate. A repeated submission finds the item and never starts a
second execution; one that finds it SUBMITTING with no execution finishes the start with the stored input (the
execution name makes StartExecution idempotent), and one that finds it REJECTED or CANCELLED is refused: terminal
means terminal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from lambdas.domain.cache.compile_cache import compare_components, key_components
from lambdas.domain.json_types import JsonObject, JsonValue
from lambdas.domain.money import ledger as L
from lambdas.domain.money.booking import Booking, UsageCounts, month_attribute, room
from lambdas.domain.money.cost import compute_run_cost
from lambdas.domain.money.prices import PriceMissing, PriceTable, worst_case_usd
from lambdas.domain.money.run_limits import RunLimits, tighter
from lambdas.domain.trial.budget import budget_problem
from lambdas.domain.trial.governance import (
    Caller,
    Governance,
    NotPermitted,
    QuotaBreach,
    Quotas,
    approval_reasons,
    quota_breaches,
)
from lambdas.domain.trial.job_targets import JobTarget
from lambdas.domain.trial.rules import TrialInvalid, check_rules, unreadable_inputs
from lambdas.domain.trial.spec import MIN_ATTEMPT_TIMEOUT_S, TrialSpec
from lambdas.domain.trial.triage import TriageResult, effective_route, planned_tracks, submission_refusal, triage
from lambdas.domain.trial.trial_record import (
    RUN_OF_TARGET,
    Approval,
    ExecutionInput,
    Follows,
    JobPlacement,
    RunTarget,
    ScalingRun,
    TriageRecord,
    TrialRecord,
)
from lambdas.domain.vocabulary import (
    COMPILE_RUN,
    COMPILE_TARGET,
    FALLBACK_RUN,
    TRIAL_ACTIVE,
    TRIAL_TERMINAL,
    scaling_nodes,
    scaling_run,
    track_of,
)
from lambdas.services.ports import Ledger, Objects, RunMetrics, Started, Trials, Workflow
from lambdas.services.run_folds import RunFolds
from lambdas.services.run_progress import run_progress
from lambdas.services.trial_status import (
    START_CUT_SHORT_S,
    Stopper,
    StopState,
    age_s,
    finish_stop,
    record_start,
    request_stop,
)


class SubmissionRefused(Exception):
    def __init__(self, reason: str, detail: JsonObject) -> None:
        super().__init__(reason)
        self.reason, self.detail = reason, detail


class TrialNotFound(LookupError):
    pass


@dataclass
class Submitted:
    body: JsonObject
    created: bool


def job_targets(spec: TrialSpec, targets: Mapping[str, Mapping[str, JobTarget]]) -> dict[str, JobPlacement]:
    """Queue and job definition (by name) for every run of ``spec``, from the stage's targets
    (``{track: {instance_type: {queue, single_node, multi_node}}}``, the JOB_TARGETS setting).

    Refuses a trial the stage cannot place: a track it does not offer, an instance type it has no queue for (a job
    sent there would wait RUNNABLE until cancelled), or a node count the stage has no multi-node job definition for
    (a scaling run's count included). A multi-node run carries ``nodes``; the workflow then passes the run's
    settings as job parameters. A scaling run's target is its run name (``gpu-n1``).
    """
    problems: list[JsonValue] = []
    jobs: dict[str, JobPlacement] = {}
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
        counts = {track: config.nodes} | {scaling_run(track, n): n for n in config.scaling_nodes or []}
        for name, nodes in counts.items():
            placed = _placement(name, track, config.instance_type, nodes, target)
            if isinstance(placed, str):
                problems.append({"path": f"tracks.{track}.nodes", "message": placed})
            else:
                jobs[name] = placed
        if track == "trn2" and target.compile_queue and track in jobs:
            # The warm-up compile stage: the training job's definition and node count, on the compile queue.
            jobs[COMPILE_TARGET] = jobs[track].model_copy(update={"queue": target.compile_queue})
    if problems:
        raise SubmissionRefused("placement", {"errors": problems})
    if falls_back(spec) and "gpu" in jobs and "trn2" in jobs:
        # The GPU fallback runs the trial's GPU track configuration. Without this entry the workflow's
        # HasGpuFallback choice ends a failed Trainium2 run there: failure_recovery none runs no fallback.
        jobs["fallback"] = jobs["gpu"]
    return jobs


def _placement(run: str, track: str, instance_type: str, nodes: int, target: JobTarget) -> JobPlacement | str:
    """Where ``run``, of ``nodes`` nodes, goes on ``target``, or why the stage cannot run it."""
    if nodes == 1:
        return JobPlacement(queue=target.queue, definition=target.single_node)
    multi = target.multi_node
    if nodes not in multi:
        counts = (f"it runs {', '.join(str(n) for n in sorted(multi))} nodes of {instance_type}" if multi else
                  f"it has no multi-node capacity for {instance_type} (that needs "
                  f"dualtrack:stages.<stage>.{track}.availability_zone, on-demand capacity and an EFA type)")
        which = "" if run == track else f" (the scaling run {run})"
        return (f"{nodes} nodes{which}: this stage cannot run that, {counts}; use one of those counts (or 1), or "
                f"add it to dualtrack:stages.<stage>.{track}.multi_node_counts")
    # One multi-node job definition per node count: Step Functions cannot override a job's node count.
    return JobPlacement(queue=target.queue, definition=multi[nodes], nodes=nodes)


def falls_back(spec: TrialSpec) -> bool:
    """Whether a failed Trainium2 run falls back to the GPU track: for a trial with both tracks, unless it declares
    failure_recovery none."""
    return spec.failure_recovery != "none" and spec.tracks.gpu is not None and spec.tracks.trn2 is not None


def run_targets(spec: TrialSpec, jobs: Mapping[str, JobPlacement]) -> dict[str, RunTarget]:
    """Each run's placement with the instance type its jobs are submitted for (its track's)."""
    runs: dict[str, RunTarget] = {}
    for target, job in jobs.items():
        run = RUN_OF_TARGET.get(target, target)
        runs[run] = RunTarget(queue=job.queue, definition=job.definition, nodes=job.nodes or 1,
                              instance_type=spec.track(track_of(run)).instance_type)
    return runs


def execution_input(spec: TrialSpec, artifacts: Objects, *, attempt_timeout_s: int,
                    jobs: Mapping[str, JobPlacement] | None = None,
                    compile_timeout_s: int | None = None) -> ExecutionInput:
    """The workflow's input. ``attempt_timeout_s`` is the stage's Batch attempt timeout; the trial's
    ``limits.max_hours`` can only shorten it, and it never goes below Batch's 60 s minimum. The warm-up compile
    stage's timeout is the stage's ``compile_timeout_s`` within that. Retries are the job definitions' own (their
    retry strategy), so the input carries no attempt count. ``run_dirs`` has a ``trn2-compile`` entry when the
    trial has a trn2 track, and a ``gpu-fallback`` entry only when it runs both a gpu and a trn2 track and falls
    back (``falls_back``). Scaling runs (``gpu-n1``) are not in ``jobs``: ``scaling`` lists each with its run
    directory and placement, which the workflow's Map state submits."""
    base = f"trials/{spec.trial_id}"
    tracks = planned_tracks(spec, effective_route(spec, triage(spec)))
    run_dirs: dict[str, str] = {t: artifacts.uri(f"{base}/{t}") for t in tracks}
    if "trn2" in tracks:
        run_dirs[COMPILE_RUN] = artifacts.uri(f"{base}/{COMPILE_RUN}")
    if "trn2" in tracks and "gpu" in tracks and falls_back(spec):
        run_dirs[FALLBACK_RUN] = artifacts.uri(f"{base}/{FALLBACK_RUN}")
    scaling: list[ScalingRun] = []
    for run, (track, _nodes) in spec.scaling_runs().items():
        if track in tracks and jobs and run in jobs:
            run_dirs[run] = artifacts.uri(f"{base}/{run}")
            scaling.append(ScalingRun(run=run, track=track, run_dir=run_dirs[run], job=jobs[run]))
    timeout = int(attempt_timeout_s)
    if spec.limits and spec.limits.max_hours:
        timeout = min(timeout, int(spec.limits.max_hours * 3600))
    timeout = max(MIN_ATTEMPT_TIMEOUT_S, timeout)
    return ExecutionInput(
        trial_id=spec.trial_id,
        spec_uri=artifacts.uri(f"{base}/spec.json"),
        tracks=list(tracks),
        run_dirs=run_dirs,
        jobs={target: job for target, job in (jobs or {}).items() if scaling_nodes(target) is None},
        scaling=scaling,
        attempt_timeout_s=timeout,
        compile_timeout_s=max(MIN_ATTEMPT_TIMEOUT_S, min(int(compile_timeout_s or timeout), timeout)),
    )


def follows_earlier(trials: Trials, team: str, spec: TrialSpec, components: JsonObject) -> Follows | None:
    """The team's newest earlier trial of the same model with a Trainium2 track, and the change class that
    separates the two (the source document's graph-change classes): whether this trial can reuse its compiled graphs
    or needs a recompile, said at submission."""
    earlier = [(record, record.cache_components) for record in trials.of_team(team)
               if record.trial_id != spec.trial_id and record.model_id == spec.model.id
               and record.cache_components is not None]
    if not earlier:
        return None
    previous, previous_components = max(earlier, key=lambda found: found[0].created_at or "")
    explained = compare_components(previous_components, components)
    return Follows(trial_id=previous.trial_id, same_key=explained.same_key,
                   change_classes=list(explained.change_classes),
                   components=[d.component for d in explained.differences], summary=explained.summary)


def check_image(spec: TrialSpec, image_versions: Mapping[str, Mapping[str, str]]) -> None:
    """A trial's declared Neuron SDK must be the one the stage's Trainium2 image pins: compiled graphs, the cache
    key and the report's versions are the image's, so a mismatch would measure something the trial did not ask for."""
    track = spec.tracks.trn2
    pinned = (image_versions.get("trn2") or {}).get("neuron_sdk")
    if track is None or not pinned or track.neuron_sdk == pinned:
        return
    raise SubmissionRefused("image", {"errors": [{"path": "tracks.trn2.neuron_sdk", "message": (
        f"declares Neuron SDK {track.neuron_sdk}, but this stage's Trainium2 image pins {pinned}: set "
        f"tracks.trn2.neuron_sdk to {pinned}, or deploy a stage whose trn2.image_uri and image_versions pin "
        f"{track.neuron_sdk}")}]})


def check_readable(spec: TrialSpec, data_buckets: Sequence[str], artifacts_bucket: str) -> None:
    """Raises SubmissionRefused naming each s3:// input the stage's job role cannot read."""
    problems = unreadable_inputs(spec, data_buckets, artifacts_bucket=artifacts_bucket)
    if problems:
        raise SubmissionRefused("unreadable inputs",
                                {"errors": [{"path": p.path, "message": p.message} for p in problems]})


def preflight(spec: TrialSpec, prices: PriceTable, region: str,
              attempts: int = 1, compile_hours: float | None = None) -> tuple[TriageResult, dict[str, str]]:
    """Triage and the worst-case ceiling (every attempt Batch may make); raises SubmissionRefused when the trial
    must not start."""

    result = triage(spec)
    refusal = submission_refusal(spec, result)
    if refusal:
        raise SubmissionRefused("triage", {"message": refusal, "triage": result.model_dump(mode="json")})
    try:
        worst = worst_case_usd(spec, prices, region, attempts, compile_hours)
    except PriceMissing as exc:
        raise SubmissionRefused("price", {"errors": [{"path": "tracks", "message": str(exc)}]}) from None
    over = budget_problem(spec, worst, attempts)
    if over is not None:
        raise SubmissionRefused("limits", {"errors": [{"path": over.path, "message": over.message}], **(
            {"worst_case_usd": {k: str(v) for k, v in worst.items()}} if worst else {})})
    return result, {k: str(v.quantize(Decimal("0.01"))) for k, v in worst.items()}


@dataclass(frozen=True)
class Stage:
    """What a submission is checked against: the stage's settings (ApiSettings) and its governance."""

    region: str
    attempt_timeout_s: int
    data_buckets: Sequence[str]
    artifacts_bucket: str
    targets: Mapping[str, Mapping[str, JobTarget]]
    governance: Governance
    max_attempts: int = 1
    image_versions: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # per track: what its image pins
    compile_timeout_s: int = 7200  # the warm-up compile stage's attempt timeout

    @property
    def compile_hours(self) -> float:
        return min(self.compile_timeout_s, self.attempt_timeout_s) / 3600


@dataclass(frozen=True)
class Plane:
    """The ports a submission writes through."""

    trials: Trials
    artifacts: Objects
    workflow: Workflow
    prices: PriceTable


class QuotaExceeded(Exception):
    def __init__(self, breaches: list[QuotaBreach]) -> None:
        super().__init__("; ".join(b.message for b in breaches))
        self.breaches = breaches


class DecisionConflict(Exception):
    """An approval or rejection of a trial that is no longer pending (someone else decided, or it was cancelled)."""

    def __init__(self, trial_id: str, status: str | None) -> None:
        super().__init__(f"trial {trial_id} is {status}, not PENDING_APPROVAL; nothing was changed")
        self.trial_id, self.status = trial_id, status


class TrialClosed(Exception):
    """A submission of a trial that was rejected or cancelled: it is never started again under the same id."""

    def __init__(self, trial_id: str, status: str, cause: str | None) -> None:
        super().__init__(f"trial {trial_id} is {status}{f' ({cause})' if cause else ''}; a rejected or cancelled "
                         "trial is never started again: change its name or spec to submit a new trial")
        self.trial_id, self.status, self.cause = trial_id, status, cause


def submitting_team(spec: TrialSpec, caller: Caller, governance: Governance) -> str:
    """The team the trial is booked to: the caller's own (``owner`` must name it); a platform admin submits for
    any team the stage defines."""
    if caller.admin:
        if governance.teams and spec.owner not in governance.teams:
            raise NotPermitted(f"owner {spec.owner!r} is not a team of this stage (teams: "
                               f"{', '.join(sorted(governance.teams))}); set owner to one of them", role="team")
        return spec.owner
    if caller.team is None:
        raise NotPermitted(f"principal {caller.principal} is a member of no team on this stage; ask a platform "
                           "admin to add it to governance.teams.<team>.members (or a member_roles pattern)",
                           role="team")
    if spec.owner != caller.team:
        raise NotPermitted(f"owner {spec.owner!r} is not your team: principal {caller.principal} submits for "
                           f"team {caller.team!r}; set owner to {caller.team!r}", role="team")
    return caller.team


def _month(at: datetime | str) -> str:
    return (at.astimezone(UTC).strftime("%Y-%m") if isinstance(at, datetime) else str(at)[:7])


def booking_for(team: str, now: datetime, worst_total: Decimal | None, queues: Mapping[str, str]) -> Booking:
    counts: dict[str, int] = {}
    for queue in queues.values():
        counts[queue] = counts.get(queue, 0) + 1
    return Booking(team=team, month=_month(now), usd=worst_total or Decimal(0), queues=counts)


def seed_usage(trials: Trials, team: str, now: datetime) -> None:
    """The team's usage item, made once from its trials when the team has none (trials stored before bookings): its
    active trials' places and jobs, and the dollars of every trial booked this month that started or may start, as
    ``Quotas.usd_per_month`` counts them: a settled trial at its settled cost, any other at its worst case. Each
    active trial is given the booking counted for it, so its end releases exactly that."""
    if trials.usage(team) is not None:
        return
    month = _month(now)
    values: dict[str, Decimal] = {}
    bookings: dict[str, Booking] = {}

    def add(name: str, amount: Decimal) -> None:
        values[name] = values.get(name, Decimal(0)) + amount

    for record in trials.of_team(team):
        never_started = record.status == "REJECTED" or (record.status == "CANCELLED" and not record.started)
        worst = Decimal(record.worst_case_usd.get("total") or 0)
        booked_month = _month(record.created_at or "")
        if booked_month == month and not never_started:
            settled = record.status in TRIAL_TERMINAL and record.total_usd is not None
            add(month_attribute(month), Decimal(str(record.total_usd)) if settled else worst)
        if record.status in TRIAL_ACTIVE:
            booking = booking_for(team, now, worst, record.queues)
            booking = booking.model_copy(update={"month": booked_month if len(booked_month) == 7 else month,
                                                 "usd": worst if booked_month == month else Decimal(0)})
            for name, amount in booking.additions().items():
                if name != month_attribute(booking.month):
                    add(name, amount)
            bookings[record.trial_id] = booking
    trials.seed_usage(team, values, bookings)


def quota_state(trials: Trials, team: str, now: datetime) -> UsageCounts:
    return UsageCounts.of(trials.usage(team) or {}, _month(now))


def run_limits(spec: TrialSpec, quotas: Quotas, team: str) -> RunLimits:
    """The limits the trial's runs are held to while they run: the tighter of the trial's own and its team's."""
    quota = f"team {team} quota"
    return RunLimits(
        max_usd=tighter((spec.limits.max_usd if spec.limits else None, "trial limits.max_usd"),
                        (quotas.max_usd_per_trial, f"{quota} max_usd_per_trial")),
        failed_retries_per_run=tighter((quotas.failed_retries_per_run, f"{quota} failed_retries_per_run")),
        write_bytes=tighter((quotas.write_bytes_per_trial, f"{quota} write_bytes_per_trial")),
        write_requests=tighter((quotas.write_requests_per_trial, f"{quota} write_requests_per_trial")),
    )


def attempts_allowed(stage_attempts: int, quotas: Quotas) -> int:
    """Attempts Batch may make per run: the stage's, fewer when the team's failed_retries_per_run quota stops a
    run sooner (the ledger stops a run whose job would retry past it)."""
    if quotas.failed_retries_per_run is None:
        return stage_attempts
    return max(1, min(stage_attempts, quotas.failed_retries_per_run + 1))


def _existing(plane: Plane, caller: Caller, record: TrialRecord, now: datetime) -> Submitted | None:
    """A submission that finds its trial stored: the same answer as the first time (no second execution), a
    conflict for a terminal rejection or cancellation, and the start finished for a trial whose first submission
    stored it but never saw its execution start. None when the trial was withdrawn while this looked at it: the
    submission is then admitted as a new one."""
    if not caller.sees(record.team):
        raise TrialNotFound(record.trial_id)  # another team's trial: never say it exists
    if record.status in ("REJECTED", "CANCELLED", "STOPPING"):
        raise TrialClosed(record.trial_id, record.status, record.status_cause)
    if (record.status == "SUBMITTING" and not record.started and record.execution_input
            and age_s(record.updated_at, now) >= START_CUT_SHORT_S):
        # Claim the start on the state read, so the reconciler cannot withdraw the trial under this start (its
        # withdrawal is conditional on the same read): of the two, one wins.
        stamp = _iso(now)
        if plane.trials.transition(record.trial_id, ("SUBMITTING",), if_updated_at=record.updated_at,
                                   updated_at=stamp):
            return Submitted(_start(plane, record.model_copy(update={"updated_at": stamp}), stamp), created=False)
        current = plane.trials.get(record.trial_id)
        if current is None:
            return None  # withdrawn meanwhile: this submission is a new one
        return _existing(plane, caller, current, now)
    # Recent: the submission that stored it is starting it now; this one answers without a second start.
    return Submitted(_view(record, already_submitted=True), created=False)


@dataclass(frozen=True)
class Admission:
    """A trial this stage can run, as checked before anything is stored: where each target's jobs go, the triage,
    and the worst case of every attempt Batch may make, for the team it is booked to."""

    team: str
    quotas: Quotas
    jobs: dict[str, JobPlacement]
    triage: TriageResult
    worst_case_usd: dict[str, str]


def admit(spec: TrialSpec, stage: Stage, prices: PriceTable, caller: Caller) -> Admission:
    """Every check a submission passes before it is stored, in one place: the catalogue's rules (instance types,
    layouts, limits: ``TrialInvalid``), the team it is booked to (``NotPermitted``), then what the stage can do
    (inputs its job role reads, the image's Neuron SDK, queues and node counts, triage, the worst case against
    ``limits.max_usd``: ``SubmissionRefused``). Quotas, which depend on the team's other trials, are checked when
    the trial is booked."""
    problems = check_rules(spec)
    if problems:
        raise TrialInvalid(problems)
    team = submitting_team(spec, caller, stage.governance)
    quotas = stage.governance.quotas(team)
    check_readable(spec, stage.data_buckets, stage.artifacts_bucket)
    check_image(spec, stage.image_versions)
    jobs = job_targets(spec, stage.targets)
    triage_result, worst = preflight(spec, prices, stage.region, attempts_allowed(stage.max_attempts, quotas),
                                     stage.compile_hours if COMPILE_TARGET in jobs else None)
    return Admission(team, quotas, jobs, triage_result, worst)


def submit(spec: TrialSpec, *, caller: Caller, stage: Stage, plane: Plane, now: datetime) -> Submitted:
    """Store the trial and start its workflow, or store it PENDING_APPROVAL when an approver must agree first."""
    admission = admit(spec, stage, plane.prices, caller)
    team, quotas, jobs = admission.team, admission.quotas, admission.jobs
    triage_result, worst = admission.triage, admission.worst_case_usd
    trial_id = spec.trial_id
    existing = plane.trials.get(trial_id)
    answered = _existing(plane, caller, existing, now) if existing is not None else None
    if answered is not None:
        return answered
    worst_total = Decimal(worst["total"]) if "total" in worst else None
    queues = {RUN_OF_TARGET.get(target, target): job.queue for target, job in jobs.items()}
    booking = booking_for(team, now, worst_total, queues)
    seed_usage(plane.trials, team, now)
    _check_quotas(quotas, spec, booking, worst_total, quota_state(plane.trials, team, now), now)
    policy = stage.governance.teams.get(team)
    reasons = approval_reasons(
        triage_override=spec.triage_override is not None,
        override_route=spec.triage_override.route if spec.triage_override else None,
        worst_case_usd=worst_total, threshold_usd=policy.approval_threshold_usd if policy else None)
    payload = execution_input(spec, plane.artifacts, attempt_timeout_s=stage.attempt_timeout_s, jobs=jobs,
                              compile_timeout_s=stage.compile_timeout_s)
    components = (key_components(spec, dict(stage.image_versions.get("trn2") or {}))
                  if spec.tracks.trn2 is not None else None)
    plane.artifacts.put_json(f"trials/{trial_id}/spec.json", spec.model_dump(mode="json", exclude_none=True))
    stamp = _iso(now)
    limits = run_limits(spec, quotas, team)
    record = TrialRecord(
        trial_id=trial_id,
        model_id=spec.model.id,
        name=spec.name,
        owner=spec.owner,
        team=team,
        submitted_by=caller.principal,
        submitted_as=caller.authenticated_as,
        spec_hash=spec.spec_hash(),
        spec_uri=payload.spec_uri,
        status="PENDING_APPROVAL" if reasons else "SUBMITTING",
        created_at=stamp,
        updated_at=stamp,
        tracks={t: spec.track(t).model_dump(mode="json") for t in spec.track_names()},
        runs=run_targets(spec, jobs),
        max_steps=spec.max_steps,
        triage=TriageRecord(route=triage_result.route, scenario=triage_result.scenario,
                            scores=triage_result.scores.model_dump(), conclusion=triage_result.conclusion,
                            reasons=triage_result.reasons, risks=triage_result.risks),
        worst_case_usd=worst,
        queues=queues,
        booking=booking,
        # Kept so that a start that failed half-way (or an approval) is finished with the input checked here.
        execution_input=payload,
        cache_components=components,
        follows=follows_earlier(plane.trials, team, spec, components) if components is not None else None,
        run_limits=None if limits.empty else limits,
        approval=Approval(status="PENDING", reasons=reasons, requested_by=caller.principal,
                          requested_at=stamp) if reasons else None,
    )
    for _ in range(3):  # the room read above may be taken by an interleaved submission: read it again
        admitted = plane.trials.admit(record, booking.additions(), room(quotas, booking))
        if admitted == "exists":  # an interleaved submission of the same trial stored it first
            found = plane.trials.get(trial_id)
            answered = _existing(plane, caller, found, now) if found is not None else None
            if answered is not None:
                return answered
            continue  # withdrawn since: admit this one
        if admitted == "created":
            break
        _check_quotas(quotas, spec, booking, worst_total, quota_state(plane.trials, team, now), now)
    else:
        raise QuotaExceeded([QuotaBreach(
            quota="concurrent_trials", limit=str(quotas.concurrent_trials), current="changing",
            requested="1", frees="send it again: the team's other submissions were being booked at the same time")])
    if reasons:
        return Submitted(_view(record), created=True)
    try:
        started = plane.workflow.start(trial_id, payload)
    except Exception:
        # Leave nothing half-submitted; the same body can simply be sent again. A start whose answer was lost may
        # still have made the execution: then it is recorded, never orphaned (its events need the trial item).
        if plane.workflow.status(plane.workflow.execution_arn(trial_id)) is None:
            plane.trials.withdraw(trial_id, ("SUBMITTING",), team=team, release=booking.release(started=False),
                                  if_updated_at=stamp)
            raise
        started = Started(plane.workflow.execution_arn(trial_id), already_submitted=False)
    return Submitted(_started(plane, record, started, stamp), created=not started.already_submitted)


def _check_quotas(quotas: Quotas, spec: TrialSpec, booking: Booking, worst_total: Decimal | None,
                  usage: UsageCounts, now: datetime) -> None:
    """Every quota the booking would cross, from the team's usage item, with what frees it (QuotaExceeded)."""
    breaches = quota_breaches(quotas, worst_case_usd=worst_total,
                              max_hours=spec.limits.max_hours if spec.limits else None, active_trials=usage.active,
                              month_spend_usd=usage.month_usd, now=now, queue_jobs=usage.queue_jobs,
                              requested_jobs=booking.queues)
    if breaches:
        raise QuotaExceeded(breaches)


def _start(plane: Plane, record: TrialRecord, stamp: str) -> JsonObject:
    """Start the trial's execution (its name is the trial id, so a second start of the same trial returns the first
    execution) and record it."""
    if record.execution_input is None:
        raise ValueError(f"trial {record.trial_id} has no execution input to start")
    started = plane.workflow.start(record.trial_id, record.execution_input)
    return _started(plane, record, started, stamp)


def _started(plane: Plane, record: TrialRecord, started: Started, stamp: str) -> JsonObject:
    """Move the trial from SUBMITTING to SUBMITTED with its execution; a stop requested meanwhile is finished by
    ``record_start`` (the execution is recorded on the STOPPING trial and stopped)."""
    current = record_start(plane.trials, plane.workflow, record, started, stamp)
    return _view(current, already_submitted=started.already_submitted and current.status == "SUBMITTED")


def decide(trial_id: str, *, approve: bool, comment: str, caller: Caller, plane: Plane,
           now: datetime) -> JsonObject:
    """An approver's decision on a pending trial. The first decision wins (a conditional write); a trial that is no
    longer pending is a conflict. Approval starts the execution with the input checked at submission: if the start
    fails, the trial goes back to PENDING_APPROVAL (the approval can be sent again), and an approval sent again for
    a trial whose start was cut short finishes that start."""
    record = plane.trials.get(trial_id)
    if record is None or (not caller.sees(record.team) and not caller.may_approve(record.team)):
        raise TrialNotFound(trial_id)
    approved_unstarted = (record.status == "SUBMITTING" and not record.started
                          and record.approval is not None and record.approval.status == "APPROVED")
    if record.status != "PENDING_APPROVAL" and not (approve and approved_unstarted):
        raise DecisionConflict(trial_id, record.status)
    if not caller.may_approve(record.team):
        raise NotPermitted(f"principal {caller.principal} is not an approver of team {record.team!r}; an "
                           "approver listed in governance.teams.<team>.approvers (or approver_roles) decides",
                           role="approver")
    if caller.principal == record.submitted_by:
        raise NotPermitted(f"principal {caller.principal} submitted trial {trial_id} and cannot approve or reject it; "
                           "another approver of the team must decide", role="approver")
    stamp = _iso(now)
    if approved_unstarted:
        return _start(plane, record, stamp)
    pending = record.approval or Approval(status="PENDING")
    decision = pending.model_copy(update={
        "status": "APPROVED" if approve else "REJECTED", "decided_by": caller.principal,
        "decided_as": caller.authenticated_as, "decided_at": stamp, "comment": comment})
    stored_decision = decision.model_dump(mode="json", exclude_none=True)
    if approve:
        moved = plane.trials.transition(trial_id, ("PENDING_APPROVAL",), status="SUBMITTING",
                                        approval=stored_decision, updated_at=stamp)
    else:
        late = _late_start(plane, record, stored_decision, comment, stamp)
        if late is not None:
            return late
        release = record.booking.release(started=False) if record.booking is not None else {}
        moved = plane.trials.close(trial_id, ("PENDING_APPROVAL",), team=str(record.team), release=release,
                                   status="REJECTED", approval=stored_decision, updated_at=stamp,
                                   status_cause=f"rejected: {comment}")
    if not moved:
        current = plane.trials.get(trial_id)
        raise DecisionConflict(trial_id, current.status if current else None)
    record = record.model_copy(update={"status": "SUBMITTING" if approve else "REJECTED", "approval": decision})
    if not approve:
        return _view(record)
    try:
        return _start(plane, record, stamp)
    except Exception as exc:
        return _start_failed(plane, record, pending, stamp, exc)


def _late_start(plane: Plane, record: TrialRecord, decision: JsonObject, comment: str,
                stamp: str) -> JsonObject | None:
    """A rejection of a trial whose earlier approval's start landed after all (its answer was lost and the look-up
    found nothing yet): the execution runs, so the trial is not closed as never started. It is stopped instead,
    recorded STOPPING with the execution, and the stop finished as any other (the reconciler terminates its jobs).
    None when no execution of the trial exists."""
    arn = plane.workflow.execution_arn(record.trial_id)
    if plane.workflow.status(arn) is None:
        return None
    cause = f"rejected: {comment}"
    if not plane.trials.transition(record.trial_id, ("PENDING_APPROVAL",), status="STOPPING", execution_arn=arn,
                                   approval=decision, status_cause=cause, stop_requested_at=stamp,
                                   stop_requested_from="PENDING_APPROVAL", updated_at=stamp):
        current = plane.trials.get(record.trial_id)
        raise DecisionConflict(record.trial_id, current.status if current else None)
    plane.workflow.stop(arn, cause)
    return _view(plane.trials.get(record.trial_id) or record)


def _start_failed(plane: Plane, record: TrialRecord, pending: Approval, stamp: str, error: Exception) -> JsonObject:
    """An approval's StartExecution raised. Its answer may have been lost after the execution was made: the
    execution is looked up by its name (the trial id) and, if it exists, recorded as the start. Only a start that
    made nothing puts the trial back to PENDING_APPROVAL (the approval can be sent again); one that cannot be told
    leaves it SUBMITTING and approved, which approving again or the reconciler finishes. Re-raises otherwise."""
    trial_id = record.trial_id
    arn = plane.workflow.execution_arn(trial_id)
    try:
        found = plane.workflow.status(arn)
    except Exception:  # unknown: left SUBMITTING and approved for the approval sent again or the reconciler
        raise error from None
    if found is not None:
        return _started(plane, record, Started(arn, already_submitted=False), stamp)
    # Back to pending, so the trial neither holds a place forever nor refuses the approval sent again.
    plane.trials.transition(trial_id, ("SUBMITTING",), status="PENDING_APPROVAL",
                            approval=pending.model_dump(mode="json", exclude_none=True), updated_at=stamp)
    raise error


# What the API shows of a trial record (GET /trials/{id}, a submission's answer, a listing's rows).
VIEW_FIELDS = ("trial_id", "name", "owner", "status", "spec_hash", "spec_uri", "execution_arn", "created_at",
               "triage", "worst_case_usd", "team", "submitted_by", "approval", "follows")


def _view(record: TrialRecord, already_submitted: bool = False) -> JsonObject:
    stored = record.model_dump(mode="json", include=set(VIEW_FIELDS), exclude_none=True)
    out: JsonObject = {name: stored.get(name) for name in VIEW_FIELDS}
    out["status_url"] = f"/trials/{record.trial_id}"
    if already_submitted:
        out["already_submitted"] = True
    return out


def visible(trials: Trials, trial_id: str, caller: Caller) -> TrialRecord:
    """The trial record, if the caller's team may see it; another team's trial is reported missing, so trial ids
    do not leak across teams."""
    record = trials.get(trial_id)
    if record is None or not caller.sees(record.team):
        raise TrialNotFound(trial_id)
    return record


def trial_status(
    trial_id: str, *, caller: Caller, trials: Trials, ledger: Ledger, settlement: RunFolds,
    metrics: RunMetrics | None = None, now: datetime | None = None,
) -> JsonObject:
    """Status per run: attempts, current cost, and progress (global step and loss) against the trial's max_steps."""
    record = visible(trials, trial_id, caller)

    runs: dict[str, Any] = {}
    total = Decimal(0)
    for run in record.run_names():  # the scaling runs too: each is its own run, with its own cost
        entries = ledger.entries(L.run_key(trial_id, run))
        if not entries:
            continue
        fold = settlement.fold(trial_id, run, entries, record)
        stored = ledger.cost(L.run_key(trial_id, run))
        cost = (stored.cost if stored else compute_run_cost(fold.usage, settlement.prices)).model_dump(mode="json")
        latest = max(L.facts_of(entries, L.TransitionFact), key=lambda t: t.at, default=None)
        progress = run_progress(entries, trial_id=trial_id, run=run, terminal=fold.terminal_status is not None,
                                metrics=metrics, now=now or datetime.now(UTC))
        runs[run] = {
            "status": fold.terminal_status or (latest.status if latest else "PENDING"),
            **progress,
            "attempts": [a.model_dump(mode="json") for a in fold.usage.attempts],
            "cost": cost,
            "cost_final": bool(stored and stored.complete),
        }
        total += Decimal(str(cost["total_usd"]))
    max_steps = record.max_steps
    if max_steps is None:  # trials submitted before max_steps was kept on the item: read the frozen spec
        spec = settlement.artifacts.get_json(f"trials/{trial_id}/spec.json")
        found = spec.get("max_steps") if isinstance(spec, dict) else None
        max_steps = int(found) if isinstance(found, int | float | str) else None
    return {
        **_view(record),
        "max_steps": max_steps,
        "status_cause": record.status_cause,
        "stopped_by": record.stopped_by.model_dump(mode="json") if record.stopped_by else None,
        "runs": runs,
        "total_usd": str(total),
    }


def cancel(trial_id: str, *, caller: Caller, stopper: Stopper, now: str, reason: str) -> JsonObject:
    """Cancel a trial of the caller's team: record the stop (STOPPING) and finish it (execution stopped, jobs
    ended, then CANCELLED). Sending it again retries a stop that did not finish; a trial still being submitted is
    stopped by its submission as soon as its execution exists (``_started``)."""
    record = stopper.trials.get(trial_id)
    if record is None or not caller.sees(record.team):
        raise TrialNotFound(trial_id)
    if record.status in TRIAL_TERMINAL:
        return StopState(trial_id, record.status, changed=False).view()
    if record.status == "STOPPING":
        return _retried(record, stopper, now)
    return request_stop(record, stopper, cause=reason, now=now, cancelled_by=caller.authenticated_as).view()


def _retried(record: TrialRecord, stopper: Stopper, now: str) -> JsonObject:
    done = finish_stop(record, stopper, now=now)
    return StopState(done.trial_id, done.status, changed=done.status == "CANCELLED",
                     execution_status=done.execution_status, pending=done.pending).view()


def _iso(now: datetime) -> str:
    return now.astimezone(UTC).isoformat().replace("+00:00", "Z")
