"""One stage's ports in memory (``tests/fakes.py``) and the calls a money test makes on them: submit, decide,
cancel, job events, the reconciler. Shared by the money-state tests and the interleaving property test."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from lambdas.domain.money import ledger as L
from lambdas.domain.money.prices import load_price_table
from lambdas.domain.trial.governance import Governance
from lambdas.domain.trial.job_targets import parse_job_targets
from lambdas.domain.trial.spec import TrialSpec
from lambdas.services.trial_status import Stopper
from lambdas.services.trial_submission import Plane, Stage, Submitted, submit
from tests import fakes
from tests.stage import ACCOUNT, GOVERNANCE, job_targets, principal

NOW = datetime(2026, 12, 4, 12, tzinfo=UTC)
STAMP = "2026-12-04T12:00:00Z"
NLP = f"arn:aws:iam::{ACCOUNT}:user/model-team"
NLP_LEAD = principal("dualtrack-team-nlp-approver")


def governance(**team_nlp: Any) -> Governance:
    """The test stage's governance with team-nlp's policy overridden by ``team_nlp`` (quotas, thresholds)."""
    return Governance.model_validate({**GOVERNANCE, "teams": {**GOVERNANCE["teams"], "team-nlp": {
        **GOVERNANCE["teams"]["team-nlp"], **team_nlp}}})


def stage(rules: Governance | None = None) -> Stage:
    return Stage(region="us-east-1", attempt_timeout_s=86400, data_buckets=["example-datasets"],
                 artifacts_bucket="artifacts", targets=parse_job_targets(job_targets()),
                 governance=rules or governance(), max_attempts=2)


class Ports:
    """The ports of one stage, shared by every call of a test."""

    def __init__(self, workflow: fakes.InMemoryWorkflow | None = None) -> None:
        self.trials = fakes.InMemoryTrials()
        self.artifacts = fakes.InMemoryObjects()
        self.workflow = workflow or fakes.InMemoryWorkflow()
        self.ledger = fakes.InMemoryLedger()
        self.jobs = fakes.InMemoryBatchJobs()

    def plane(self, trials: Any = None, workflow: Any = None) -> Plane:
        return Plane(trials=trials or self.trials, artifacts=self.artifacts, workflow=workflow or self.workflow,
                     prices=load_price_table())

    def stopper(self, workflow: Any = None, jobs: bool = False) -> Stopper:
        return Stopper(self.trials, workflow or self.workflow, self.ledger, self.jobs if jobs else None)


def submit_trial(ports: Ports, spec: TrialSpec, caller: str = NLP, rules: Governance | None = None,
                 now: datetime = NOW, **plane: Any) -> Submitted:
    settings = stage(rules)
    return submit(spec, caller=settings.governance.identify(caller, ACCOUNT), stage=settings,
                  plane=ports.plane(**plane), now=now)


def who(arn: str, rules: Governance | None = None) -> Any:
    return (rules or governance()).identify(arn, ACCOUNT)


def usage(ports: Ports, team: str = "team-nlp") -> dict[str, int | float]:
    """The team's usage item, which its first booking created."""
    found = ports.trials.usage(team)
    assert found is not None, f"{team} has no usage item"
    return found


def job(ports: Ports, trial_id: str, run: str, job_id: str, status: str, minutes: int = 0) -> None:
    """A job state change of ``run`` recorded in the ledger, and the job's status in Batch."""
    ports.ledger.append(L.transition_entry(trial_id, run, job_id=job_id, attempt=1, status=status,
                                           at=NOW + timedelta(minutes=minutes)))
    ports.jobs.statuses[job_id] = status
