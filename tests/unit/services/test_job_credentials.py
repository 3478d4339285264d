"""Who a job is, from what Batch says about it (``lambdas.services.job_credentials``), for both job shapes."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from lambdas.domain.trial_record import TrialRecord
from lambdas.services.job_credentials import CredentialsRefused, CredentialsRequest, identify, job_settings, vend
from tests.fakes import InMemoryTrials

TOKEN = "6f1c2a7e-0b7d-4e59-9a51-3c2f5d8e9b10"
JOB = "3f2b8c1e-5d4a-4b6f-9e7d-1a2b3c4d5e6f"


class Jobs:
    def __init__(self, job: dict[str, Any] | None) -> None:
        self.job = job
        self.asked: list[str] = []

    def describe_job(self, job_id: str) -> dict[str, Any] | None:
        self.asked.append(job_id)
        return self.job


class Writer:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def assume(self, *, session_name: str, tags: dict[str, str], duration_s: int) -> dict[str, str]:
        self.calls.append({"session_name": session_name, "tags": tags, "duration_s": duration_s})
        return {"AccessKeyId": "ASIA", "SecretAccessKey": "s", "SessionToken": "t",
                "Expiration": "2026-12-05T20:00:00+00:00"}


def single_node(status: str = "RUNNING", **env: str) -> dict[str, Any]:
    """DescribeJobs of a single-node job: the submission's environment overrides merged into the container's
    (https://docs.aws.amazon.com/batch/latest/APIReference/API_ContainerDetail.html, ``environment``)."""
    variables = {"DUALTRACK_TRIAL_ID": "alpha", "DUALTRACK_RUN": "trn2", "DUALTRACK_RUN_TOKEN": TOKEN, **env}
    return {"jobId": JOB, "status": status, "tags": {"dualtrack:trial": "alpha", "dualtrack:run": "trn2"},
            "container": {"environment": [{"name": k, "value": v} for k, v in variables.items()]},
            "parameters": {}}


def multi_node(status: str = "RUNNING") -> dict[str, Any]:
    """DescribeJobs of a multi-node job: the run's settings are job parameters, the submission's over the
    definition's defaults (https://docs.aws.amazon.com/batch/latest/APIReference/API_JobDetail.html, ``parameters``);
    its top-level container carries no environment."""
    return {"jobId": JOB, "status": status, "tags": {"dualtrack:trial": "alpha", "dualtrack:run": "trn2"},
            "nodeProperties": {"numNodes": 2}, "container": {},
            "parameters": {"trial_id": "alpha", "run": "trn2", "run_token": TOKEN, "resume_from": "none"}}


def trials(status: str = "SUBMITTED") -> InMemoryTrials:
    table = InMemoryTrials()
    table.create(TrialRecord.from_item({"trial_id": "alpha", "status": status}))
    return table


def test_a_single_node_job_is_known_by_its_environment() -> None:
    assert job_settings(single_node()) == {"trial_id": "alpha", "run": "trn2", "token": TOKEN}
    writer = Writer()
    answer = vend(CredentialsRequest(job_id=JOB, token=TOKEN), jobs=Jobs(single_node()), trials=trials(),
                  writer=writer, bucket="artifacts", duration_s=3600)
    assert answer["write_prefix"] == "trials/alpha/trn2/" and answer["read_prefix"] == "trials/alpha/"
    assert answer["bucket"] == "artifacts" and answer["credentials"]["AccessKeyId"] == "ASIA"
    assert writer.calls == [{"session_name": "alpha.trn2", "tags": {"dualtrack-trial": "alpha",
                                                                    "dualtrack-run": "trn2"}, "duration_s": 3600}]


def test_every_node_of_a_multi_node_job_is_known_by_the_job_parameters() -> None:
    """A node's AWS_BATCH_JOB_ID is ``<job id>#<node index>``; the node's credentials are its job's."""
    jobs = Jobs(multi_node())
    for node in (f"{JOB}#0", f"{JOB}#1"):
        who = identify(CredentialsRequest(job_id=node, token=TOKEN), jobs, trials())
        assert (who.job_id, who.trial_id, who.run) == (JOB, "alpha", "trn2")
    assert jobs.asked == [JOB, JOB]


@pytest.mark.parametrize("status", ["SUBMITTED", "PENDING", "RUNNABLE", "SUCCEEDED", "FAILED"])
def test_only_a_starting_or_running_job_is_answered(status: str) -> None:
    with pytest.raises(CredentialsRefused, match=f"is {status}"):
        identify(CredentialsRequest(job_id=JOB, token=TOKEN), Jobs(single_node(status)), trials())


@pytest.mark.parametrize("status", ["SUCCEEDED", "FAILED", "CANCELLED", "REJECTED"])
def test_a_finished_trial_gets_nothing(status: str) -> None:
    with pytest.raises(CredentialsRefused, match=f"is {status}"):
        identify(CredentialsRequest(job_id=JOB, token=TOKEN), Jobs(single_node()), trials(status))


def test_settings_that_name_no_run_of_this_plane_are_refused() -> None:
    job = single_node(DUALTRACK_RUN="evil", DUALTRACK_TRIAL_ID="../beta")
    with pytest.raises(CredentialsRefused, match="name no trial and run of this plane"):
        identify(CredentialsRequest(job_id=JOB, token=TOKEN), Jobs(job), trials())


def test_a_job_without_a_token_is_refused_even_with_an_empty_one() -> None:
    job = single_node()
    job["container"]["environment"] = [e for e in job["container"]["environment"]
                                       if e["name"] != "DUALTRACK_RUN_TOKEN"]
    with pytest.raises(CredentialsRefused, match="token is not the one"):
        identify(CredentialsRequest(job_id=JOB, token=TOKEN), Jobs(job), trials())


@pytest.mark.parametrize("request_body", [{"job_id": JOB}, {"job_id": "a b", "token": TOKEN},
                                          {"job_id": JOB, "token": "short"},
                                          {"job_id": JOB, "token": TOKEN, "trial_id": "beta"}])
def test_requests_carry_exactly_a_job_id_and_a_token(request_body: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        CredentialsRequest.model_validate(request_body)
