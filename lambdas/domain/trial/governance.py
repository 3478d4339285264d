"""Who may do what on a stage shared by several teams: which team a caller belongs to, who approves, who administers
the platform, and each team's quotas.

The caller is the IAM principal API Gateway authenticated (AWS_IAM authorisation fills
``requestContext.identity.userArn`` with "the Amazon Resource Name (ARN) of the effective user identified after
authentication": API Gateway developer guide, "Variables for data transformations"). A role session arrives as
``arn:aws:sts::<account>:assumed-role/<role>/<session>`` (IAM user guide, "IAM identifiers") and is matched as its
role, ``arn:aws:iam::<account>:role/<role>`` (the role's path is not in a session ARN, so patterns match by name).

A member entry is either an ARN pattern (``arn:aws:iam::123456789012:role/llm-*``, glob syntax) or a bare role or
user name pattern, which matches only callers in the API's own account. ``member_roles`` / ``approver_roles`` match
only roles and their sessions: an IAM user that carries a matching name is not a member. ``{team}`` in the stage-wide
``member_roles`` / ``approver_roles`` stands for each team's name, so a naming convention maps fifty teams without
listing fifty roles.
"""

from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal
from fnmatch import fnmatchcase
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from lambdas.domain.vocabulary import COMPILE_QUEUE_SUFFIX

TEAM_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"  # the trial spec's `owner`
_SESSION = re.compile(r"^arn:(?P<partition>aws[a-z-]*):sts::(?P<account>\d{12}):assumed-role/(?P<role>[^/]+)/.+$")
_IAM = re.compile(
    r"^arn:(?P<partition>aws[a-z-]*):iam::(?P<account>\d{12}):(?P<kind>role|user)/(?:.*/)?(?P<name>[^/]+)$")

Usd = Annotated[Decimal, Field(gt=0, allow_inf_nan=False, max_digits=14, decimal_places=2)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class Quotas(_Model):
    """A team's limits: checked when a trial is submitted, and those a running trial can cross (dollars, failed
    retries, writes) checked again as its facts arrive (``lambdas.domain.money.run_limits``). None: no limit."""

    concurrent_trials: Annotated[int, Field(ge=1, le=10_000)] | None = Field(
        default=None, description="trials of the team waiting for approval, submitting or running at once")
    max_usd_per_trial: Usd | None = Field(
        default=None, description="a trial's worst case (every attempt Batch may make, at the declared rates)")
    max_hours_per_trial: Annotated[float, Field(gt=0, le=24 * 14, allow_inf_nan=False)] | None = Field(
        default=None, description="a trial's limits.max_hours")
    usd_per_month: Usd | None = Field(
        default=None, description="the team's spend in a calendar month (UTC): settled trials at their cost, the "
        "others at their worst case, plus the new trial's worst case")
    concurrent_jobs_per_queue: Annotated[int, Field(ge=1, le=100_000)] | None = Field(
        default=None, description="Batch jobs of the team's submitted and running trials per job queue (each run "
        "of a trial is one job; a trial with a trn2 and a gpu track also holds the GPU fallback's place)")
    concurrent_compile_jobs: Annotated[int, Field(ge=1, le=100_000)] | None = Field(
        default=None, description="warm-up compile jobs (the compile queues) of the team's submitted and running "
        "trials at once: the compile quota. Each trial with a trn2 track holds one place, whether or not its cache "
        "turns out cold")
    failed_retries_per_run: Annotated[int, Field(ge=0, le=10)] | None = Field(
        default=None, description="failed attempts a run's job may retry; the worst case counts at most this many "
        "retries, and a run whose job fails once more while Batch would retry it again is stopped")
    write_bytes_per_trial: Annotated[int, Field(ge=1, le=10**15)] | None = Field(
        default=None, description="bytes a trial's jobs write under its runs' prefixes; crossing it stops the trial")
    write_requests_per_trial: Annotated[int, Field(ge=1, le=10**12)] | None = Field(
        default=None, description="objects a trial's jobs write under its runs' prefixes (one PUT each); crossing "
        "it stops the trial")

    def merged(self, override: Quotas) -> Quotas:
        """These limits with the fields ``override`` sets replacing them."""
        return self.model_copy(update=override.model_dump(exclude_unset=True))


class Team(_Model):
    members: list[Annotated[str, Field(min_length=1, max_length=256)]] = Field(
        default_factory=list, description="principals who submit, read and cancel the team's trials")
    approvers: list[Annotated[str, Field(min_length=1, max_length=256)]] = Field(
        default_factory=list, description="principals who approve the team's pending trials (and are members)")
    approval_threshold_usd: Usd | None = Field(
        default=None, description="a trial whose worst case is above this waits for an approver")
    quotas: Quotas = Field(default_factory=Quotas, description="over the stage's default_quotas")


class Governance(_Model):
    platform_admins: list[Annotated[str, Field(min_length=1, max_length=256)]] = Field(
        default_factory=list, description="principals who see and cancel every team's trials and approve any")
    member_roles: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(
        default_factory=list, description="role-name patterns with {team}: a caller whose role (or role "
        "session) matches is a member of that team; IAM users never match")
    approver_roles: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(
        default_factory=list, description="role-name patterns with {team}: a caller whose role (or role "
        "session) matches approves for that team; IAM users never match")
    default_quotas: Quotas = Field(default_factory=Quotas)
    teams: dict[Annotated[str, Field(pattern=TEAM_NAME)], Team] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _patterns_name_a_team(self) -> Governance:
        for field in ("member_roles", "approver_roles"):
            for pattern in getattr(self, field):
                if "{team}" not in pattern:
                    raise ValueError(f"{field} entry {pattern!r} must contain {{team}} (it maps a role to the team "
                                     "it names); list a single principal under teams.<team>.members instead")
        return self

    def quotas(self, team: str) -> Quotas:
        policy = self.teams.get(team)
        return self.default_quotas.merged(policy.quotas) if policy else self.default_quotas

    def identify(self, principal_arn: str, api_account: str | None) -> Caller:
        """The caller as the stage sees it. Raises ``NotPermitted`` when the principal maps to more than one team."""
        principal = Principal.parse(principal_arn)
        admin = any(principal.matches(p, api_account) for p in self.platform_admins)
        teams: set[str] = set()
        approves: set[str] = set()
        for name, team in self.teams.items():
            if any(principal.matches(p, api_account) for p in team.members) or any(
                    principal.matches(p.replace("{team}", name), api_account, roles_only=True)
                    for p in self.member_roles):
                teams.add(name)
            if any(principal.matches(p, api_account) for p in team.approvers) or any(
                    principal.matches(p.replace("{team}", name), api_account, roles_only=True)
                    for p in self.approver_roles):
                approves.add(name)
                teams.add(name)  # an approver of a team is one of its members
        if len(teams) > 1:
            raise NotPermitted(f"principal {principal.arn} is a member of teams {', '.join(sorted(teams))}; a "
                               "principal belongs to one team: narrow the stage's governance.teams.<team>.members "
                               "or member_roles patterns", role="team")
        return Caller(principal=principal.arn, authenticated_as=principal_arn, team=next(iter(teams), None),
                      approves=frozenset(approves), admin=admin)


class Principal(_Model):
    arn: str  # canonical: a role session as its role
    account: str | None
    name: str | None  # the role or user name
    kind: Literal["role", "user"] | None = None  # a role session is its role

    @classmethod
    def parse(cls, arn: str) -> Principal:
        session = _SESSION.match(arn)
        if session:
            role = session["role"]
            return cls(arn=f"arn:{session['partition']}:iam::{session['account']}:role/{role}",
                       account=session["account"], name=role, kind="role")
        iam = _IAM.match(arn)
        if iam:
            return cls(arn=arn, account=iam["account"], name=iam["name"],
                       kind="role" if iam["kind"] == "role" else "user")
        return cls(arn=arn, account=None, name=None)

    def matches(self, pattern: str, api_account: str | None, *, roles_only: bool = False) -> bool:
        """``roles_only``: the pattern maps roles (``member_roles``), so a user of a matching name is not matched."""
        if roles_only and self.kind != "role":
            return False
        if pattern.startswith("arn:"):
            return fnmatchcase(self.arn, pattern)
        return (self.name is not None and self.account is not None and self.account == api_account
                and fnmatchcase(self.name, pattern))


class Caller(_Model):
    principal: str  # canonical: two sessions of one role are one principal (it cannot approve its own trial)
    authenticated_as: str  # the ARN as API Gateway reported it (a session names who assumed the role), for audit
    team: str | None
    approves: frozenset[str] = frozenset()
    admin: bool = False

    def sees(self, team: str | None) -> bool:
        """Whether this caller may read, list and cancel a trial of ``team``."""
        return self.admin or (self.team is not None and team == self.team)

    def may_approve(self, team: str | None) -> bool:
        return self.admin or (team is not None and team in self.approves)


class NotPermitted(Exception):
    """The caller's principal may not do this; ``role`` names what it lacks (team, approver, admin)."""

    def __init__(self, message: str, *, role: Literal["team", "approver", "admin", "submitter"]) -> None:
        super().__init__(message)
        self.role = role


class QuotaBreach(_Model):
    """One quota a submission would exceed: which, its limit, what is in use, what the trial asks, when it frees."""

    quota: str
    limit: str
    current: str
    requested: str
    frees: str
    retry_after_s: int | None = None  # for quotas that free with time (the next month)

    @property
    def message(self) -> str:
        return (f"quota {self.quota}: limit {self.limit}, in use {self.current}, this trial asks {self.requested}; "
                f"{self.frees}")


def month_start(now: datetime) -> datetime:
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def next_month_start(now: datetime) -> datetime:
    start = month_start(now)
    return start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)


def quota_breaches(quotas: Quotas, *, worst_case_usd: Decimal | None, max_hours: float | None, active_trials: int,
                   month_spend_usd: Decimal, now: datetime, queue_jobs: dict[str, int] | None = None,
                   requested_jobs: dict[str, int] | None = None) -> list[QuotaBreach]:
    """Every quota the submission would exceed (empty: it may proceed). ``queue_jobs`` counts the team's jobs per
    job queue already placed; ``requested_jobs`` the new trial's."""
    out: list[QuotaBreach] = []
    if quotas.concurrent_trials is not None and active_trials + 1 > quotas.concurrent_trials:
        out.append(QuotaBreach(quota="concurrent_trials", limit=str(quotas.concurrent_trials),
                               current=str(active_trials), requested="1",
                               frees="frees when one of the team's trials finishes, is cancelled or is rejected"))
    if quotas.concurrent_jobs_per_queue is not None:
        for queue, asked in sorted((requested_jobs or {}).items()):
            held = (queue_jobs or {}).get(queue, 0)
            if held + asked > quotas.concurrent_jobs_per_queue:
                out.append(QuotaBreach(
                    quota=f"concurrent_jobs_per_queue[{queue}]", limit=str(quotas.concurrent_jobs_per_queue),
                    current=str(held), requested=str(asked),
                    frees=f"frees when the team's trials with jobs on {queue} finish or are cancelled"))
    if quotas.concurrent_compile_jobs is not None:
        asked = sum(n for queue, n in (requested_jobs or {}).items() if queue.endswith(COMPILE_QUEUE_SUFFIX))
        held = sum(n for queue, n in (queue_jobs or {}).items() if queue.endswith(COMPILE_QUEUE_SUFFIX))
        if asked and held + asked > quotas.concurrent_compile_jobs:
            out.append(QuotaBreach(
                quota="concurrent_compile_jobs", limit=str(quotas.concurrent_compile_jobs), current=str(held),
                requested=str(asked), frees="frees when the team's trials with a Trainium2 track finish or are "
                "cancelled"))
    if quotas.max_hours_per_trial is not None and (max_hours is None or max_hours > quotas.max_hours_per_trial):
        out.append(QuotaBreach(quota="max_hours_per_trial", limit=f"{quotas.max_hours_per_trial} h", current="0 h",
                               requested="no limits.max_hours" if max_hours is None else f"{max_hours} h",
                               frees=f"never: set limits.max_hours to at most {quotas.max_hours_per_trial}"))
    if quotas.max_usd_per_trial is not None and (worst_case_usd is None or worst_case_usd > quotas.max_usd_per_trial):
        out.append(QuotaBreach(
            quota="max_usd_per_trial", limit=f"{quotas.max_usd_per_trial} USD", current="0 USD",
            requested="unbounded (no limits.max_hours)" if worst_case_usd is None else f"{worst_case_usd} USD",
            frees="never: lower limits.max_hours, nodes or tracks until the worst case fits"))
    if quotas.usd_per_month is not None and (
            worst_case_usd is None or month_spend_usd + worst_case_usd > quotas.usd_per_month):
        frees_at = next_month_start(now)
        out.append(QuotaBreach(
            quota="usd_per_month", limit=f"{quotas.usd_per_month} USD", current=f"{month_spend_usd} USD",
            requested="unbounded (no limits.max_hours)" if worst_case_usd is None else f"{worst_case_usd} USD",
            frees=f"frees at {frees_at.isoformat().replace('+00:00', 'Z')} (the next month), or as the team's "
                  "running trials settle below their worst case",
            retry_after_s=max(1, int((frees_at - now).total_seconds()))))
    return out


def approval_reasons(*, triage_override: bool, override_route: str | None, worst_case_usd: Decimal | None,
                     threshold_usd: Decimal | None) -> list[str]:
    """Why a trial must wait for an approver (empty: it starts at once)."""
    reasons = []
    if triage_override:
        reasons.append(f"triage_override routes the trial to {override_route} against the triage's route")
    if threshold_usd is not None and (worst_case_usd is None or worst_case_usd > threshold_usd):
        shown = "unbounded" if worst_case_usd is None else f"{worst_case_usd} USD"
        reasons.append(f"worst case {shown} is above the team's approval_threshold_usd {threshold_usd} USD")
    return reasons
