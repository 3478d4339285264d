"""A training job reads its own trial and writes its own run, nothing else (``lambdas/domain/job_access.py``).

The dev stage is deployed onto moto; a job is submitted to its GPU queue as the workflow submits one (its settings
as container environment, its trial and run as tags) and kept RUNNING as an ECS task whose role session is named
after the task; the trainer's storage layer then runs in this process with the job's environment and that session's
credentials, so every request goes the deployed way: ``lambda:Invoke`` of the credentials function (its own handler,
in-process) with a presigned GetCallerIdentity, which the function makes through STS (its signature checked by the
local runtime, as STS does), ``batch:DescribeJobs``, ``sts:AssumeRole`` with session tags, then S3 with the issued
credentials, held to the writer role's synthesized policy by the local runtime's session policies (moto checks none).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from dualtrack.local.aws.moto_shims import MOTO_CONFIG, InProcessLambdas, ScriptedJobs, moto_shims
from dualtrack.local.aws.session_policies import SessionPolicies, enforce_session_policies, evaluate
from dualtrack.local.aws.template import LocalDeployment, deploy_locally
from infra.synth import Assembly
from lambdas.domain import job_access
from lambdas.runtime.composition import reset_environment
from tests.stacks.conftest import resources

REGION = "us-east-1"


@dataclass
class Plane:
    deployment: LocalDeployment
    policies: SessionPolicies
    jobs: ScriptedJobs
    bucket: str
    cache_bucket: str
    trials_table: str
    queue: str
    definition: str

    def trial(self, trial_id: str, status: str = "SUBMITTED") -> None:
        boto3.client("dynamodb", region_name=REGION).put_item(
            TableName=self.trials_table, Item={"trial_id": {"S": trial_id}, "status": {"S": status}})

    def submit(self, trial_id: str, run: str, *, tag_trial: str | None = None) -> str:
        environment = {"DUALTRACK_TRIAL_ID": trial_id, "DUALTRACK_RUN": run}
        return boto3.client("batch", region_name=REGION).submit_job(  # type: ignore[no-any-return]
            jobName=f"{trial_id}-{run}", jobQueue=self.queue, jobDefinition=self.definition,
            containerOverrides={"environment": [{"name": k, "value": v} for k, v in environment.items()]},
            tags={"dualtrack:trial": tag_trial or trial_id, "dualtrack:run": run})["jobId"]


def _one(found: dict[str, str], part: str) -> str:
    (value,) = [v for k, v in found.items() if part in k]
    return value


@pytest.fixture
def plane(assembly: Assembly, monkeypatch: pytest.MonkeyPatch) -> Iterator[Plane]:
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "Dualtrack")
    from trainer import storage

    with mock_aws(config=MOTO_CONFIG):
        deployment = deploy_locally(assembly, region=REGION)
        policies = SessionPolicies()
        for role, statements in deployment.role_policies.items():
            policies.attach(role, statements)
        jobs = ScriptedJobs(exit_codes={"gpu": None, "trn2": None, "gpu-fallback": None})
        queue = next(arn for lid, arn in deployment.job_queues.items() if lid.startswith("GpuCapacity"))
        definition = next(arn for lid, arn in deployment.job_definitions.items()
                          if lid.startswith("GpuJobsSingleNode"))
        with moto_shims(lambdas=InProcessLambdas(), batch=jobs), enforce_session_policies(policies):
            reset_environment()
            storage.reset_clients()
            yield Plane(deployment, policies, jobs, bucket=_one(deployment.buckets, "Artifacts"),
                        cache_bucket=_one(deployment.buckets, "CompileCache"),
                        trials_table=_one(deployment.tables, "Trials"), queue=queue, definition=definition)
            storage.reset_clients()
            reset_environment()


def task_session(job_id: str, session: str | None = None) -> dict[str, str]:
    """The job's task's role credentials as ECS hands them to the task: a session of the job's role (DescribeJobs'
    ``container.jobRoleArn``) named after its task (``container.taskArn``); ``session`` names another session of the
    same role instead."""
    (job,) = boto3.client("batch", region_name=REGION).describe_jobs(jobs=[job_id])["jobs"]
    container = job["container"]
    credentials = boto3.client("sts", region_name=REGION).assume_role(
        RoleArn=container["jobRoleArn"], RoleSessionName=session or container["taskArn"].rsplit("/", 1)[-1])
    found = credentials["Credentials"]
    return {"AWS_ACCESS_KEY_ID": found["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": found["SecretAccessKey"],
            "AWS_SESSION_TOKEN": found["SessionToken"], "AWS_SECURITY_TOKEN": found["SessionToken"]}


def _as_job(monkeypatch: pytest.MonkeyPatch, job_id: str, credentials: dict[str, str] | None = None) -> None:
    """This process becomes the job's container: its id, the credentials function, and its task's credentials
    (``credentials`` instead, for a caller that is not the job)."""
    from trainer import storage

    monkeypatch.setenv("AWS_BATCH_JOB_ID", job_id)
    monkeypatch.setenv(job_access.FUNCTION_ENV, job_access.function_name("dev"))
    for name, value in (credentials if credentials is not None else task_session(job_id)).items():
        monkeypatch.setenv(name, value)
    storage.reset_clients()


def _denied(call: Any) -> bool:
    try:
        call()
    except ClientError as exc:
        return exc.response["Error"]["Code"] in ("AccessDenied", "403")
    return False


def test_a_job_writes_its_own_run_and_reads_its_own_trial_only(plane: Plane,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Session tags become ``aws:PrincipalTag`` values in the role's policy
    (https://docs.aws.amazon.com/IAM/latest/UserGuide/id_session-tags.html, "Using session tags") and a policy
    variable in ``Resource`` is replaced by that tag's value
    (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_variables.html); ListObjectsV2 is
    authorized by s3:ListBucket with the request's prefix in ``s3:prefix``
    (https://docs.aws.amazon.com/AmazonS3/latest/userguide/amazon-s3-policy-keys.html)."""
    from trainer import storage

    plane.trial("alpha")
    plane.trial("beta")
    s3 = boto3.client("s3", region_name=REGION)
    s3.put_object(Bucket=plane.bucket, Key="trials/alpha/spec.json", Body=b"{}")  # the API's write
    s3.put_object(Bucket=plane.bucket, Key="trials/beta/spec.json", Body=b"{}")
    _as_job(monkeypatch, plane.submit("alpha", "gpu"))

    own = f"s3://{plane.bucket}/trials/alpha/gpu/attempt-1/summary.json"
    storage.write_bytes(own, b"{}")
    assert storage.read_bytes(own) == b"{}"
    assert storage.read_text(f"s3://{plane.bucket}/trials/alpha/spec.json") == "{}"
    assert "gpu" in storage.list_prefixes(f"s3://{plane.bucket}/trials/alpha")
    # The issued credentials are not the job role's: they are a tagged session of the writer role.
    scoped = storage._s3(plane.bucket)
    key = scoped._request_signer._credentials.access_key
    assert plane.policies.sessions[key].tags == {job_access.TRIAL_TAG: "alpha", job_access.RUN_TAG: "gpu"}
    assert storage._s3(plane.cache_bucket) is not scoped  # the compile cache is read with the job role

    for foreign in ("trials/beta/gpu/attempt-1/summary.json",  # another trial
                    "trials/alpha/trn2/attempt-1/summary.json",  # another run of its own trial
                    "trials/alpha/spec.json",  # its frozen spec: read-only
                    "reports/cost/latest.json"):  # outside trials/
        assert _denied(lambda k=foreign: storage.write_bytes(f"s3://{plane.bucket}/{k}", b"forged")), foreign
    assert _denied(lambda: storage.read_bytes(f"s3://{plane.bucket}/trials/beta/spec.json"))
    assert _denied(lambda: storage.list_files(f"s3://{plane.bucket}/trials/beta"))
    assert not storage.exists(f"s3://{plane.bucket}/trials/beta/spec.json")
    assert s3.get_object(Bucket=plane.bucket, Key="trials/beta/spec.json")["Body"].read() == b"{}"
    assert {resource for _, _, resource in plane.policies.denied} >= {
        f"arn:aws:s3:::{plane.bucket}/trials/beta/gpu/attempt-1/summary.json"}


def test_the_gpu_fallback_reads_the_trainium_run_it_resumes(plane: Plane, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fallback resumes the newest Trainium2 checkpoint of the same trial: a read under its trial's prefix."""
    from trainer import storage

    plane.trial("alpha")
    boto3.client("s3", region_name=REGION).put_object(Bucket=plane.bucket, Key="trials/alpha/trn2/ckpt/step-4/x",
                                                      Body=b"w")
    _as_job(monkeypatch, plane.submit("alpha", "gpu-fallback"))
    assert storage.list_files(f"s3://{plane.bucket}/trials/alpha/trn2/ckpt") == {"step-4/x": 1}
    storage.write_bytes(f"s3://{plane.bucket}/trials/alpha/gpu-fallback/resumed.json", b"{}")
    assert _denied(lambda: storage.write_bytes(f"s3://{plane.bucket}/trials/alpha/trn2/ckpt/step-5/x", b"w"))


@pytest.mark.parametrize(("case", "reason"), [
    ("finished job", "credentials go only to STARTING or RUNNING jobs"),
    ("cancelled trial", "is CANCELLED; its jobs write nothing more"),
    ("unknown trial", "is not one this plane holds"),
    ("tags disagree", "its tags do not match its settings"),
    ("unknown job", "Batch does not know it"),
])
def test_a_job_that_cannot_prove_who_it_is_gets_nothing(plane: Plane, monkeypatch: pytest.MonkeyPatch, case: str,
                                                        reason: str) -> None:
    """Refused with the reason (the trainer stops with it); no session is issued, so nothing can be written."""
    from trainer import storage

    plane.trial("alpha", status="CANCELLED" if case == "cancelled trial" else "SUBMITTED")
    trial = "ghost" if case == "unknown trial" else "alpha"
    job_id = plane.submit(trial, "gpu", tag_trial="beta" if case == "tags disagree" else None)
    credentials = task_session(job_id)
    if case == "finished job":
        boto3.client("batch", region_name=REGION).terminate_job(jobId=job_id, reason="done")
    if case == "unknown job":
        job_id = "00000000-0000-4000-8000-000000000000"
    _as_job(monkeypatch, job_id, credentials)
    with pytest.raises(storage.CredentialsRefused, match=reason):
        storage.write_bytes(f"s3://{plane.bucket}/trials/alpha/gpu/x", b"x")
    assert plane.policies.sessions == {}


def _reader(name: str = "curious-reader") -> dict[str, str]:
    """An IAM user allowed batch:DescribeJobs and lambda:InvokeFunction, and holding no job role."""
    iam = boto3.client("iam", region_name=REGION)
    iam.create_user(UserName=name)
    iam.put_user_policy(UserName=name, PolicyName="describe-and-invoke", PolicyDocument=json.dumps({
        "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Resource": "*",
                                               "Action": ["batch:DescribeJobs", "lambda:InvokeFunction"]}]}))
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return {"AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
            "AWS_SESSION_TOKEN": "", "AWS_SECURITY_TOKEN": ""}


def test_reading_a_jobs_description_and_invoking_the_function_grants_nothing(
        plane: Plane, monkeypatch: pytest.MonkeyPatch) -> None:
    """A principal with ``batch:DescribeJobs`` and ``lambda:InvokeFunction`` and no job role reads everything the
    job's description holds (no setting of it is a secret any more) and asks for the job's credentials: the proof
    it can sign is its own (STS's GetCallerIdentity names the signer: STS API reference, "GetCallerIdentity"), so
    it gets nothing; nor does another session of the job's own role, nor a proof whose signature was altered (STS
    refuses it: "SignatureDoesNotMatch")."""
    from trainer import storage

    plane.trial("alpha")
    job_id = plane.submit("alpha", "gpu")
    described = json.dumps(boto3.client("batch", region_name=REGION).describe_jobs(jobs=[job_id])["jobs"])
    assert "TOKEN" not in described.upper()
    for credentials, reason in ((_reader(), "signed by arn:aws:iam::123456789012:user/curious-reader"),
                                (task_session(job_id, session="not-its-task"), "not by this job's role")):
        _as_job(monkeypatch, job_id, credentials)
        with pytest.raises(storage.CredentialsRefused, match=reason):
            storage.write_bytes(f"s3://{plane.bucket}/trials/alpha/gpu/x", b"x")
    _as_job(monkeypatch, job_id)
    from trainer.credentials import identity_proof

    forged = identity_proof(REGION)[:-4] + "0000"
    answer = json.loads(boto3.client("lambda", region_name=REGION).invoke(
        FunctionName=job_access.function_name("dev"),
        Payload=json.dumps({"job_id": job_id, "identity": forged}))["Payload"].read())
    assert "SignatureDoesNotMatch" in answer["error"]
    assert plane.policies.sessions == {}


def test_a_malformed_request_is_refused_naming_what_to_send(plane: Plane) -> None:
    answer = boto3.client("lambda", region_name=REGION).invoke(
        FunctionName=job_access.function_name("dev"), Payload=json.dumps({"job_id": "x; rm -rf", "token": 1}))
    body = json.loads(answer["Payload"].read())
    assert "FunctionError" not in answer
    assert body["error"].startswith("malformed request (identity, job_id, token)")
    assert "presigned STS GetCallerIdentity" in body["error"]


# ---- the synthesized policies ------------------------------------------------------------------------------
def _writer(control: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    (role_id, role), = [(k, v) for k, v in resources(control, "AWS::IAM::Role").items()
                        if k.startswith("TrialWriterRole")]
    statements = [s for p in resources(control, "AWS::IAM::Policy").values()
                  if {"Ref": role_id} in p["Properties"]["Roles"]
                  for s in p["Properties"]["PolicyDocument"]["Statement"]]
    return role["Properties"], statements


def test_only_the_credentials_function_assumes_the_writer_role_and_only_with_both_tags(
        control: dict[str, Any]) -> None:
    """A role session can carry tags only if the role's trust policy allows sts:TagSession
    (https://docs.aws.amazon.com/IAM/latest/UserGuide/id_session-tags.html#id_session-tags_permissions-required);
    a Null condition on ``aws:RequestTag/<key>`` refuses a request without that tag
    (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_condition_operators.html#Conditions_Null).
    Role chaining limits the session to one hour
    (https://docs.aws.amazon.com/IAM/latest/UserGuide/id_roles_terms-and-concepts.html#iam-term-role-chaining)."""
    role, _ = _writer(control)
    trust = role["AssumeRolePolicyDocument"]["Statement"]
    functions = resources(control, "AWS::Lambda::Function")
    (vend_id,) = [k for k, v in functions.items()
                  if v["Properties"]["Handler"] == "lambdas.handlers.vend_job_credentials.handler"]
    vend_role = functions[vend_id]["Properties"]["Role"]["Fn::GetAtt"][0]
    for statement in trust:
        assert statement["Principal"] == {"AWS": {"Fn::GetAtt": [vend_role, "Arn"]}}
    allow = [s for s in trust if s["Effect"] == "Allow"]
    deny = [s for s in trust if s["Effect"] == "Deny"]
    assert {a for s in allow for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])} == {
        "sts:AssumeRole", "sts:TagSession"}
    assert deny and deny[0]["Condition"] == {"Null": {f"aws:RequestTag/{job_access.TRIAL_TAG}": "true",
                                                      f"aws:RequestTag/{job_access.RUN_TAG}": "true"}}
    assert role["MaxSessionDuration"] == job_access.MAX_SESSION_S


def test_the_writer_policy_reaches_one_run_for_writes_and_one_trial_for_reads(control: dict[str, Any]) -> None:
    """Evaluated statement by statement for two sessions as IAM does (an Allow must match Action, Resource and
    Condition; https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html)."""
    _, statements = _writer(copy.deepcopy(control))  # the template is the session's: evaluate a copy
    bucket = "arn:aws:s3:::artifacts"
    def named(resource: Any) -> Any:  # the template's bucket ARN is a reference: give it a name to evaluate
        if isinstance(resource, list):  # statements of one action are merged into one with several resources
            return [named(r) for r in resource]
        if isinstance(resource, dict) and "Fn::Join" in resource:
            return "".join(p if isinstance(p, str) else bucket for p in resource["Fn::Join"][1])
        if isinstance(resource, dict) and "Fn::ImportValue" in resource:
            return bucket
        return resource

    for statement in statements:
        statement["Resource"] = named(statement["Resource"])
    alpha = {job_access.TRIAL_TAG: "alpha", job_access.RUN_TAG: "gpu"}

    def allowed(action: str, key: str = "", prefix: str | None = None, tags: dict[str, str] = alpha) -> bool:
        resource = f"{bucket}/{key}" if key else bucket
        return evaluate(statements, action, resource, tags, {"s3:prefix": prefix} if prefix is not None else {})

    assert allowed("s3:PutObject", "trials/alpha/gpu/ckpt/step-2/model.safetensors")
    assert not allowed("s3:PutObject", "trials/alpha/trn2/x")
    assert not allowed("s3:PutObject", "trials/alphabet/gpu/x")
    assert not allowed("s3:PutObject", "trials/beta/gpu/x")
    assert not allowed("s3:PutObject", "trials/alpha/spec.json")
    assert allowed("s3:GetObject", "trials/alpha/trn2/ckpt/x")
    assert not allowed("s3:GetObject", "trials/beta/spec.json")
    assert allowed("s3:ListBucket", prefix="trials/alpha/trn2/")
    assert not allowed("s3:ListBucket", prefix="trials/")
    assert not allowed("s3:DeleteObject", "trials/alpha/gpu/x")
    assert not allowed("s3:PutObject", "trials/alpha/gpu/x", tags={job_access.TRIAL_TAG: "alpha"})  # no run tag


def test_job_roles_have_no_access_to_trials_of_their_own(compute: dict[str, Any]) -> None:
    """A job definition's role is fixed (SubmitJob has no role override:
    https://docs.aws.amazon.com/batch/latest/APIReference/API_ContainerOverrides.html), so it is shared by every
    trial's jobs: it must reach no trial's objects, only the credentials function."""
    roles = [k for k in resources(compute, "AWS::IAM::Role") if "JobRole" in k]
    assert roles
    for policy in resources(compute, "AWS::IAM::Policy").values():
        if not any({"Ref": r} in policy["Properties"]["Roles"] for r in roles):
            continue
        text = json.dumps(policy["Properties"]["PolicyDocument"])
        assert "trials/" not in text
        assert f"function:{job_access.function_name('dev')}" in text
