"""A training job writes only the compile-cache entry the plane sent it to build, nothing else under ``neuron/``.

The dev stage deployed onto moto, as in ``test_job_credentials``: a job gets its credentials from the plane's
credentials function, and the local runtime holds the tagged session to the writer role's synthesized policy (moto
checks none). The run the resolve step named to compile its trial's entry (``cache_writer``) gets a session tagged
with the entry's key; the role's policy names that tag in the entry's prefix. Session tags are ``aws:PrincipalTag``
values in the policy (https://docs.aws.amazon.com/IAM/latest/UserGuide/id_session-tags.html); a policy variable for
a tag the session lacks matches nothing
(https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_variables.html), so every other run writes no
entry at all; and a job role shared by every trial's jobs may not write the cache bucket.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from dualtrack.local.aws.moto_shims import MOTO_CONFIG, InProcessLambdas, ScriptedJobs, moto_shims
from dualtrack.local.aws.session_policies import SessionPolicies, enforce_session_policies, evaluate
from dualtrack.local.aws.template import deploy_locally
from infra.synth import Assembly
from lambdas.domain import job_access
from lambdas.runtime.composition import reset_environment
from tests.stacks.conftest import resources
from tests.stacks.test_job_credentials import REGION, Plane, _as_job, _denied, _one, _writer

KEY, OTHER = "a" * 64, "b" * 64
PREFIX, OTHER_PREFIX = f"neuron/m/c/{KEY}/", f"neuron/m/c/{OTHER}/"


@pytest.fixture
def plane(assembly: Assembly, monkeypatch: pytest.MonkeyPatch) -> Iterator[Plane]:
    """test_job_credentials' deployed plane, with every Trainium2 run kept RUNNING while the test acts as it."""
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "Dualtrack")
    from trainer import storage

    with mock_aws(config=MOTO_CONFIG):
        deployment = deploy_locally(assembly, region=REGION)
        policies = SessionPolicies()
        for role, statements in deployment.role_policies.items():
            policies.attach(role, statements)
        jobs = ScriptedJobs(exit_codes={run: None for run in ("gpu", "trn2", "gpu-fallback", "trn2-compile")})
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


def _trial(plane: Plane, trial_id: str, key: str, writer: str) -> None:
    """The trial item as the resolve step leaves it: its entry, and the run sent to compile it."""
    boto3.client("dynamodb", region_name=REGION).put_item(TableName=plane.trials_table, Item={
        "trial_id": {"S": trial_id}, "status": {"S": "SUBMITTED"}, "cache_key": {"S": key},
        "cache_prefix": {"S": f"neuron/m/c/{key}/"}, "cache_writer": {"S": writer}})


def test_the_run_sent_to_compile_writes_its_entry_and_no_other(plane: Plane, monkeypatch: pytest.MonkeyPatch) -> None:
    from trainer import storage
    from trainer.cache import CompileCache

    _trial(plane, "alpha", KEY, "trn2-compile")
    s3 = boto3.client("s3", region_name=REGION)
    s3.put_object(Bucket=plane.cache_bucket, Key=f"{OTHER_PREFIX}graph.neff", Body=b"theirs")
    _as_job(monkeypatch, plane.submit("alpha", "trn2-compile"))
    for foreign in (f"{OTHER_PREFIX}graph.neff", f"{OTHER_PREFIX}_dualtrack_complete.json", "neuron/x.neff"):
        assert _denied(lambda k=foreign: storage.write_bytes(f"s3://{plane.cache_bucket}/{k}", b"forged")), foreign
    assert s3.get_object(Bucket=plane.cache_bucket, Key=f"{OTHER_PREFIX}graph.neff")["Body"].read() == b"theirs"
    assert {r for _, a, r in plane.policies.denied if a == "s3:PutObject"} >= {
        f"arn:aws:s3:::{plane.cache_bucket}/{OTHER_PREFIX}graph.neff"}
    url = f"s3://{plane.cache_bucket}/{PREFIX}"
    assert storage.may_write(url) and not storage.may_write(f"s3://{plane.cache_bucket}/{OTHER_PREFIX}")
    cache = CompileCache.open(url, compiles=True, on_neuron=False)
    assert cache.directory is not None
    (cache.directory / "graph.neff").write_bytes(b"compiled")
    assert cache.publish() == 2  # the artefact, then the completion marker


@pytest.mark.parametrize(("trial", "run", "writer"), [
    ("alpha", "trn2", "trn2-compile"),  # the training run after the warm-up stage built the entry
    ("beta", "gpu", "trn2"),  # another trial's GPU job
    ("beta", "trn2", "trn2"),  # another trial's own compiling run: its entry is another one
])
def test_every_other_run_writes_no_entry(plane: Plane, monkeypatch: pytest.MonkeyPatch, trial: str, run: str,
                                         writer: str) -> None:
    from trainer import storage
    from trainer.cache import CompileCache

    _trial(plane, trial, KEY if trial == "alpha" else OTHER, writer)
    _as_job(monkeypatch, plane.submit(trial, run))
    url = f"s3://{plane.cache_bucket}/{PREFIX}"
    assert _denied(lambda: storage.write_bytes(f"{url}graph.neff", b"forged"))
    assert not storage.may_write(url)
    cache = CompileCache.open(url, compiles=True, on_neuron=False)
    assert cache.directory is not None
    (cache.directory / "graph.neff").write_bytes(b"compiled here")
    assert cache.publish() == 0  # not this run's entry: nothing is published, and nothing fails
    listed = boto3.client("s3", region_name=REGION).list_objects_v2(Bucket=plane.cache_bucket, Prefix=PREFIX)
    assert listed.get("KeyCount", 0) == 0


def test_the_writer_policy_reaches_one_entry_and_only_with_its_tag(control: dict[str, Any]) -> None:
    """Evaluated as IAM does (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html);
    ``*`` in a resource ARN matches across ``/``
    (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_resource.html)."""
    _, statements = _writer(copy.deepcopy(control))  # the template is the session's: evaluate a copy
    cache = "arn:aws:s3:::cache"

    def named(resource: Any) -> Any:  # the template's bucket ARNs are references: give them a name to evaluate
        if isinstance(resource, list):
            return [named(r) for r in resource]
        if isinstance(resource, dict) and "Fn::Join" in resource:
            return "".join(p if isinstance(p, str) else cache for p in resource["Fn::Join"][1])
        return resource if isinstance(resource, str) else "arn:aws:kms:::key/referenced"

    for statement in statements:
        statement["Resource"] = named(statement["Resource"])
    tags = {job_access.TRIAL_TAG: "alpha", job_access.RUN_TAG: "trn2-compile", job_access.CACHE_TAG: KEY}
    untagged = {job_access.TRIAL_TAG: "alpha", job_access.RUN_TAG: "trn2"}

    def put(key: str, session: dict[str, str]) -> bool:
        return evaluate(statements, "s3:PutObject", f"{cache}/{key}", session, {})

    assert put(f"{PREFIX}graph.neff", tags) and put(f"{PREFIX}_dualtrack_complete.json", tags)
    assert not put(f"{OTHER_PREFIX}graph.neff", tags)
    assert not put("neuron/graph.neff", tags)
    assert not put(f"{PREFIX}graph.neff", untagged)


def test_job_roles_cannot_write_the_compile_cache(compute: dict[str, Any]) -> None:
    """A job role is shared by every trial's jobs
    (https://docs.aws.amazon.com/batch/latest/APIReference/API_ContainerOverrides.html has no role override): a
    write it could make, any team's job could make to any team's entry."""
    roles = [k for k in resources(compute, "AWS::IAM::Role") if "JobRole" in k]
    assert roles
    for policy in resources(compute, "AWS::IAM::Policy").values():
        if not any({"Ref": r} in policy["Properties"]["Roles"] for r in roles):
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            writes = [a for a in actions if a.startswith(("s3:Put", "s3:Abort", "s3:*"))]
            assert not writes, json.dumps(statement)
