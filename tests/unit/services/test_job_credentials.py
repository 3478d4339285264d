"""Who a job is, from what Batch says about it and who signed its identity proof
(``lambdas.services.job_credentials``), for both job shapes."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from lambdas.adapters.caller_identity import sts_endpoints
from lambdas.domain.job_access import IdentityUnproven, assumed_role, identity_request
from lambdas.domain.trial.trial_record import TrialRecord
from lambdas.services.job_credentials import CredentialsRefused, CredentialsRequest, identify, job_settings, vend
from tests.fakes import InMemoryTrials

JOB = "3f2b8c1e-5d4a-4b6f-9e7d-1a2b3c4d5e6f"
ACCOUNT = "123456789012"
ROLE = "Dualtrack-dev-Compute-Trn2JobsJobRoleA1B2C3"
TASKS = {JOB: "a1b2c3d4e5f60718293a4b5c6d7e8f90", f"{JOB}#0": "0f0e0d0c0b0a09080706050403020100",
         f"{JOB}#1": "11111111222222223333333344444444"}
PROOF = ("https://sts.us-east-1.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15"
         "&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=ASIAEXAMPLE%2F20261208%2Fus-east-1%2Fsts%2Faws4_request"
         "&X-Amz-Date=20261208T010000Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host&X-Amz-Signature=abc123")


def session(job_id: str, role: str = ROLE) -> str:
    """The ARN STS names for a session of ``role`` in ``job_id``'s task (ECS names the session after the task)."""
    return f"arn:aws:sts::{ACCOUNT}:assumed-role/{role}/{TASKS[job_id]}"


class Signed:
    """The ``CallerIdentity`` port: every proof was signed by ``arn``."""

    def __init__(self, arn: str) -> None:
        self.arn = arn

    def caller(self, presigned_url: str) -> str:
        return self.arn


def request(job_id: str = JOB) -> CredentialsRequest:
    return CredentialsRequest(job_id=job_id, identity=PROOF)


class Jobs:
    """DescribeJobs by id: the job, and (multi-node) each node as ``<job id>#<index>``."""

    def __init__(self, job: dict[str, Any] | None, nodes: int = 0) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}
        if job is not None:
            self.jobs[JOB] = job
            for index in range(nodes):
                self.jobs[f"{JOB}#{index}"] = {"jobId": f"{JOB}#{index}", "status": job["status"],
                                               "container": _container(f"{JOB}#{index}")}
        self.asked: list[str] = []

    def describe_job(self, job_id: str) -> dict[str, Any] | None:
        self.asked.append(job_id)
        return self.jobs.get(job_id)


class Writer:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def assume(self, *, session_name: str, tags: dict[str, str], duration_s: int) -> dict[str, str]:
        self.calls.append({"session_name": session_name, "tags": tags, "duration_s": duration_s})
        return {"AccessKeyId": "ASIA", "SecretAccessKey": "s", "SessionToken": "t",
                "Expiration": "2026-12-05T20:00:00+00:00"}


def _container(job_id: str, **extra: Any) -> dict[str, Any]:
    """A job's (or node's) container as DescribeJobs reports it once STARTING: its role and its ECS task
    (https://docs.aws.amazon.com/batch/latest/APIReference/API_ContainerDetail.html, ``jobRoleArn``, ``taskArn``:
    "Each container attempt receives a task ARN when they reach the STARTING status")."""
    return {"jobRoleArn": f"arn:aws:iam::{ACCOUNT}:role/{ROLE}",
            "taskArn": f"arn:aws:ecs:us-east-1:{ACCOUNT}:task/AWSBatch-trn2-abc/{TASKS[job_id]}", **extra}


def single_node(status: str = "RUNNING", run: str = "trn2", **env: str) -> dict[str, Any]:
    """DescribeJobs of a single-node job: the submission's environment overrides merged into the container's
    (https://docs.aws.amazon.com/batch/latest/APIReference/API_ContainerDetail.html, ``environment``)."""
    variables = {"DUALTRACK_TRIAL_ID": "alpha", "DUALTRACK_RUN": run, **env}
    return {"jobId": JOB, "status": status, "tags": {"dualtrack:trial": "alpha", "dualtrack:run": run},
            "container": _container(JOB, environment=[{"name": k, "value": v} for k, v in variables.items()]),
            "parameters": {}}


def multi_node(status: str = "RUNNING") -> dict[str, Any]:
    """DescribeJobs of a multi-node job: the run's settings are job parameters, the submission's over the
    definition's defaults (https://docs.aws.amazon.com/batch/latest/APIReference/API_JobDetail.html, ``parameters``);
    its top-level container carries no environment, each node is described as ``<job id>#<node index>``."""
    return {"jobId": JOB, "status": status, "tags": {"dualtrack:trial": "alpha", "dualtrack:run": "trn2"},
            "nodeProperties": {"numNodes": 2}, "container": {},
            "parameters": {"trial_id": "alpha", "run": "trn2", "resume_from": "none"}}


def trials(status: str = "SUBMITTED") -> InMemoryTrials:
    table = InMemoryTrials()
    table.create(TrialRecord.from_item({"trial_id": "alpha", "status": status}))
    return table


def test_a_single_node_job_signed_by_its_own_task_gets_its_own_prefix() -> None:
    assert job_settings(single_node()) == {"trial_id": "alpha", "run": "trn2"}
    writer = Writer()
    answer = vend(request(), jobs=Jobs(single_node()), trials=trials(), writer=writer,
                  identity=Signed(session(JOB)), bucket="artifacts", duration_s=3600)
    assert answer["write_prefix"] == "trials/alpha/trn2/" and answer["read_prefix"] == "trials/alpha/"
    assert answer["bucket"] == "artifacts" and answer["credentials"]["AccessKeyId"] == "ASIA"
    assert writer.calls == [{"session_name": "alpha.trn2", "tags": {"dualtrack-trial": "alpha",
                                                                    "dualtrack-run": "trn2"}, "duration_s": 3600}]


def test_every_node_of_a_multi_node_job_is_known_by_its_own_task_and_the_job_parameters() -> None:
    """A node's AWS_BATCH_JOB_ID is ``<job id>#<node index>``; its task is the node's, its settings its job's."""
    jobs = Jobs(multi_node(), nodes=2)
    for node in (f"{JOB}#0", f"{JOB}#1"):
        who = identify(request(node), jobs, trials(), Signed(session(node)))
        assert (who.job_id, who.trial_id, who.run) == (JOB, "alpha", "trn2")
    assert jobs.asked == [JOB, f"{JOB}#0", JOB, f"{JOB}#1"]
    with pytest.raises(CredentialsRefused, match="not by this job's role"):  # node 1's proof for node 0
        identify(request(f"{JOB}#0"), jobs, trials(), Signed(session(f"{JOB}#1")))


@pytest.mark.parametrize("signer", [
    f"arn:aws:iam::{ACCOUNT}:user/curious-reader",  # batch:DescribeJobs and lambda:InvokeFunction, no job role
    f"arn:aws:sts::{ACCOUNT}:assumed-role/{ROLE}/someone-else",  # the job's role, another session
    f"arn:aws:sts::{ACCOUNT}:assumed-role/OtherRole/{TASKS[JOB]}",  # another role named like the task
    f"arn:aws:sts::999999999999:assumed-role/{ROLE}/{TASKS[JOB]}",  # another account's role of that name
])
def test_a_proof_not_signed_by_the_jobs_own_task_gets_nothing(signer: str) -> None:
    """Reading a job's whole description (everything ``batch:DescribeJobs`` shows) and invoking the function gives
    nothing: the only proof accepted is a signature by a session of the job's own role named after its own task."""
    writer = Writer()
    with pytest.raises(CredentialsRefused, match="signed by"):
        vend(request(), jobs=Jobs(single_node()), trials=trials(), writer=writer, identity=Signed(signer),
             bucket="artifacts", duration_s=3600)
    assert writer.calls == []


def test_a_job_batch_reports_no_task_for_yet_is_refused() -> None:
    job = single_node()
    del job["container"]["taskArn"]
    with pytest.raises(CredentialsRefused, match="no role and task"):
        identify(request(), Jobs(job), trials(), Signed(session(JOB)))


@pytest.mark.parametrize("status", ["SUBMITTED", "PENDING", "RUNNABLE", "SUCCEEDED", "FAILED"])
def test_only_a_starting_or_running_job_is_answered(status: str) -> None:
    with pytest.raises(CredentialsRefused, match=f"is {status}"):
        identify(request(), Jobs(single_node(status)), trials(), Signed(session(JOB)))


@pytest.mark.parametrize("status", ["SUCCEEDED", "FAILED", "CANCELLED", "REJECTED"])
def test_a_finished_trial_gets_nothing(status: str) -> None:
    with pytest.raises(CredentialsRefused, match=f"is {status}"):
        identify(request(), Jobs(single_node()), trials(status), Signed(session(JOB)))


def test_settings_that_name_no_run_of_this_plane_are_refused() -> None:
    job = single_node(DUALTRACK_RUN="evil", DUALTRACK_TRIAL_ID="../beta")
    with pytest.raises(CredentialsRefused, match="name no trial and run of this plane"):
        identify(request(), Jobs(job), trials(), Signed(session(JOB)))


@pytest.mark.parametrize("request_body", [{"job_id": JOB}, {"job_id": "a b", "identity": PROOF},
                                          {"job_id": JOB, "identity": "short"},
                                          {"job_id": JOB, "identity": PROOF, "trial_id": "beta"},
                                          {"job_id": JOB, "token": "6f1c2a7e-0b7d-4e59-9a51-3c2f5d8e9b10"}])
def test_requests_carry_exactly_a_job_id_and_an_identity_proof(request_body: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        CredentialsRequest.model_validate(request_body)


# The proof's shape: only one read of STS may be asked of the function ----------------------------------------------

ENDPOINTS = sts_endpoints("us-east-1")


def test_a_presigned_get_caller_identity_to_the_regions_sts_is_accepted() -> None:
    """SigV4 query-string authentication carries the signature in ``X-Amz-*`` query parameters (IAM user guide,
    "Signing AWS API requests", "Authentication methods": query string parameters), and GetCallerIdentity is an STS
    Query action (STS API reference, "GetCallerIdentity"; version 2011-06-15)."""
    assert identity_request(PROOF, ENDPOINTS) == PROOF
    assert identity_request(PROOF.replace("sts.us-east-1.", "sts."), ENDPOINTS)


@pytest.mark.parametrize("url", [
    PROOF.replace("sts.us-east-1.amazonaws.com", "169.254.169.254"),  # the function's own metadata service
    PROOF.replace("sts.us-east-1.amazonaws.com", "sts.us-east-1.amazonaws.com.evil.example"),
    PROOF.replace("https://", "http://"),
    PROOF.replace("Action=GetCallerIdentity", "Action=AssumeRole"),
    PROOF + "&RoleArn=arn:aws:iam::123456789012:role/x",
    PROOF.replace("X-Amz-Expires=60", "X-Amz-Expires=3600"),
    PROOF.replace("&X-Amz-Signature=abc123", ""),
    PROOF.replace("/?", "/path?"),
    PROOF + "&Action=GetCallerIdentity",
])
def test_any_other_request_is_refused_before_it_is_made(url: str) -> None:
    with pytest.raises(IdentityUnproven):
        identity_request(url, ENDPOINTS)


def test_an_assumed_role_session_arn_names_its_account_role_and_session() -> None:
    """The ARN of temporary credentials from AssumeRole is ``arn:aws:sts::<account>:assumed-role/<role name>/<role
    session name>`` (STS API reference, "GetCallerIdentity", example response; IAM user guide, "IAM identifiers",
    "Role session ARNs"); no other principal is an assumed-role session."""
    arn = "arn:aws:sts::123456789012:assumed-role/my-role-name/my-role-session-name"
    assert assumed_role(arn) == ("123456789012", "my-role-name", "my-role-session-name")
    for other in ("arn:aws:iam::123456789012:user/alice", "arn:aws:sts::123456789012:federated-user/bob",
                  "arn:aws:sts::123456789012:assumed-role/my-role-name", "not an arn"):
        assert assumed_role(other) is None
