"""A Batch "Job State Change" event through the run-events service (``lambdas.services.run_events``) over in-memory
ports: what it records for a job of a trial the plane started."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from lambdas.domain.money import ledger as L
from lambdas.domain.money.prices import load_price_table
from lambdas.domain.trial.trial_record import TrialRecord
from lambdas.runtime.events import BatchJobStateChangeEvent
from lambdas.services.cache_observation import RefusedClaim
from lambdas.services.limit_guard import LimitGuard
from lambdas.services.run_events import RunEvents
from lambdas.services.run_settlement import RunSettlement
from tests import fakes

SAMPLE = Path(__file__).resolve().parents[2] / "events" / "batch_job_state_change.json"
TRIAL, JOB = "pilot-1", "4c7599ae-0a82-49aa-ba5a-4727fcce14a8"


class Telemetry:
    """What the service counted, kept for the test to read."""

    def __init__(self) -> None:
        self.rejected: list[str] = []
        self.outcomes: list[str] = []

    def run_outcomes(self, statuses: Iterable[str]) -> None:
        self.outcomes += list(statuses)

    def cache_outcomes(self, counted: Mapping[str, int]) -> None:
        pass

    def refused_claims(self, refused: Iterable[RefusedClaim]) -> None:
        pass

    def rejected_event(self, reason: str, **context: str | None) -> None:
        self.rejected.append(reason)

    def limit_stop(self, limit: str, **context: str | None) -> None:
        pass

    def closed_trial_job(self, job_id: str, **context: str | None) -> None:
        pass

    def recorded(self, message: str, **context: str | int | bool | None) -> None:
        pass


def _event(status: str, **detail: Any) -> dict[str, Any]:
    event: dict[str, Any] = copy.deepcopy(json.loads(SAMPLE.read_text()))
    event["detail"].update(status=status, jobName=f"{TRIAL}-gpu", **detail)
    event["detail"]["container"]["environment"] = [{"name": "DUALTRACK_TRIAL_ID", "value": TRIAL},
                                                   {"name": "DUALTRACK_RUN", "value": "gpu"}]
    return event


def test_a_job_state_change_without_a_job_arn_is_parsed_and_recorded_by_its_job_id() -> None:
    """AWS Batch user guide, "Job state change events"
    (https://docs.aws.amazon.com/batch/latest/userguide/batch_job_events.html): "The detail section resembles the
    JobDetail object that's returned from a DescribeJobs API operation", and the JobDetail shape
    (https://docs.aws.amazon.com/batch/latest/APIReference/API_JobDetail.html; the Batch API model,
    batch-2016-08-10) requires jobId, jobName, jobQueue, status, startedAt and jobDefinition, not jobArn, which
    older samples of the event leave out. Such an event is parsed, its facts are recorded under the job's id, and
    a redelivery adds nothing."""
    trials = fakes.InMemoryTrials()
    trials.create(TrialRecord.from_item({"trial_id": TRIAL, "status": "SUBMITTED",
                                         "tracks": {"gpu": {"instance_type": "p5.48xlarge", "nodes": 1}}}))
    settlement = RunSettlement(fakes.InMemoryLedger(), trials, fakes.InMemoryObjects(), load_price_table(),
                               "us-east-1")
    telemetry = Telemetry()
    events = RunEvents(settlement, LimitGuard(settlement, fakes.InMemoryWorkflow()), fakes.InMemoryCacheRegistry(),
                       telemetry)
    raw = _event("RUNNABLE")
    del raw["detail"]["jobArn"]
    parsed = BatchJobStateChangeEvent.model_validate(raw)
    assert parsed.detail.job_id == JOB and parsed.detail.job_arn is None

    result = events.on_job_state(parsed.detail, parsed.time)
    assert (result.trial_id, result.run, result.ignored, result.new_facts) == (TRIAL, "gpu", None, 1)
    transitions = L.facts_of(settlement.ledger.entries(f"{TRIAL}#gpu"), L.TransitionFact)
    assert [(t.job_id, t.status) for t in transitions] == [(JOB, "RUNNABLE")]
    assert events.on_job_state(parsed.detail, parsed.time).new_facts == 0
    assert telemetry.rejected == []
