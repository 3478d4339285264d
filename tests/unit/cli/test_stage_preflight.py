"""`dualtrack stage preflight`: the checks as pure functions, the reads against AWS's API shapes (moto where it
emulates the call, botocore's Stubber where it does not), a registry stand-in, and the command in its own process."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from dualtrack.cli import main
from dualtrack.local.preflight import PREFLIGHT_FILE, local_preflight
from dualtrack.preflight import (
    ON_DEMAND_G,
    ON_DEMAND_P,
    ON_DEMAND_TRN,
    SPOT_G,
    SPOT_P,
    SPOT_P5,
    SPOT_TRN,
    Ami,
    Answers,
    LambdaLimits,
    Manifest,
    Missing,
    Quota,
    Unreadable,
    checks,
    dockerfile_base,
    parse_image,
    quota_code,
    stage_needs,
)
from dualtrack.preflight_aws import Boto3Reads, Registry, dockerfile_texts, gather
from infra.config import StageConfig, stage_config
from lambdas.domain.money.prices import load_price_table
from lambdas.domain.trial.catalogue import load_catalogue

ROOT = Path(__file__).resolve().parents[3]
CONTEXT = json.loads((ROOT / "cdk.json").read_text())["context"]
NEURON_PARAMETER = "/aws/service/ecs/optimized-ami/amazon-linux-2023/neuron/recommended/image_id"
DIGEST = "sha256:" + "ab" * 32


def stage(name: str, **changes: Any) -> StageConfig:
    return stage_config({**CONTEXT, "dualtrack:stages": {name: {**CONTEXT["dualtrack:stages"][name], **changes}}},
                        name)


def needs_of(config: StageConfig, region: str | None = None) -> Any:
    return stage_needs(config, region=region or config.region or "us-east-1", dockerfiles=dockerfile_texts(ROOT),
                       prices=load_price_table(config.priced_overrides()))


def row(rows: list[Any], check: str) -> Any:
    found = [r for r in rows if r.check == check]
    assert len(found) == 1, [r.check for r in rows]
    return found[0]


# ---- pure: what the stage needs, and the rows over answers --------------------------------------------------------
def test_every_catalogue_type_has_an_on_demand_quota_and_spot_types_a_spot_one() -> None:
    """EC2 counts Running On-Demand instances against one vCPU quota per family (P; G and VT; Trn) and Spot requests
    against another: every instance type a stage may list maps to its family's codes."""
    for name, info in load_catalogue().instances.items():
        code = quota_code(name, "on-demand")
        assert code is not None, name
        assert code == {"gpu": ON_DEMAND_G if name.startswith("g") else ON_DEMAND_P, "trn2": ON_DEMAND_TRN}[info.family]
    assert quota_code("p5.48xlarge", "spot") == SPOT_P5 and quota_code("p4d.24xlarge", "spot") == SPOT_P
    assert quota_code("g6e.48xlarge", "spot") == SPOT_G and quota_code("trn2.48xlarge", "spot") == SPOT_TRN


def test_the_largest_job_counts_every_node_of_a_multi_node_job_and_one_host_on_spot() -> None:
    """AWS Batch, "Multi-node parallel jobs" (https://docs.aws.amazon.com/batch/latest/userguide/
    multi-node-parallel-jobs.html): a multi-node job launches all its nodes, so the quota must hold every node at
    once; multi-node jobs do not run on Spot, so a Spot environment's largest job is one host."""
    needs = needs_of(stage("prod"))
    by = {(q.quota.code, q.market): q for q in needs.quotas}
    trn = by[(ON_DEMAND_TRN.code, "on-demand")]
    assert trn.vcpus == 4 * 192 and "multi-node" in trn.job  # prod trn2: 4 nodes of trn2.48xlarge
    assert by[(ON_DEMAND_P.code, "on-demand")].vcpus == 192  # prod gpu is a Spot track: single-node jobs only
    assert by[(SPOT_P5.code, "spot")].vcpus == 192 and by[(SPOT_P.code, "spot")].vcpus == 96
    assert needs.credential_calls == 4 and "trn2.48xlarge" in needs.credential_job


def test_images_come_from_the_dockerfiles_unless_the_stage_pins_one() -> None:
    needs = needs_of(stage("dev"))
    neuron = dockerfile_base((ROOT / "containers/neuron/Dockerfile").read_text())
    assert {n.track: n.image.uri for n in needs.images}["trn2"] == neuron
    assert parse_image(neuron or "").registry == "public.ecr.aws"
    pinned = stage("dev", trn2={**CONTEXT["dualtrack:stages"]["dev"]["trn2"],
                                "image_uri": f"123456789012.dkr.ecr.us-east-2.amazonaws.com/trainer@{DIGEST}",
                                "image_versions": {"neuron_sdk": "2.33.1"}})
    image = {n.track: n for n in needs_of(pinned).images}["trn2"]
    assert image.source == "trn2.image_uri" and image.image.kind == "ecr" and image.image.is_digest
    assert {a.track: a.neuron_sdk for a in needs_of(pinned).amis}["trn2"] == "2.33.1"


def test_parse_image_splits_registry_repository_and_reference() -> None:
    ref = parse_image("public.ecr.aws/neuron/pytorch-training-neuronx:2.14.0-neuronx-py314-sdk2.34.0-ubuntu26.04")
    assert (ref.registry, ref.repository, ref.reference) == ("public.ecr.aws", "neuron/pytorch-training-neuronx",
                                                             "2.14.0-neuronx-py314-sdk2.34.0-ubuntu26.04")
    private = parse_image(f"111122223333.dkr.ecr.eu-west-1.amazonaws.com/team/trainer@{DIGEST}")
    assert (private.ecr_account, private.ecr_region, private.repository, private.reference) == (
        "111122223333", "eu-west-1", "team/trainer", DIGEST)
    assert parse_image("ubuntu").kind == "other"


def _answers(needs: Any, *, trn_quota: float = 1536, created: datetime = datetime(2026, 12, 1, tzinfo=UTC),
             zones: tuple[str, ...] = ("us-east-2a", "us-east-2b", "us-east-2c")) -> Answers:
    answers = Answers(account="123456789012")
    answers.manifests = {n.image.uri: Manifest(DIGEST, "application/vnd.oci.image.index.v1+json") for n in needs.images}
    answers.offerings = {t: zones for t in needs.instance_types}
    for q in needs.quotas:
        value = trn_quota if q.quota == ON_DEMAND_TRN else 4096
        answers.quotas[q.quota.code] = Quota(q.quota.code, q.quota.name, value, applied=True)
    answers.lambda_limits = LambdaLimits(concurrent=1000, unreserved=1000)
    for ami in needs.amis:
        answers.parameters[str(ami.parameter)] = f"ami-0{ami.track}0000000000"
        answers.amis[f"ami-0{ami.track}0000000000"] = Ami(f"ami-0{ami.track}0000000000", f"al2023-ecs-{ami.track}",
                                                         created)
    return answers


def test_a_stage_the_account_can_hold_is_all_ok_but_the_estimated_prices() -> None:
    needs = needs_of(stage("prod"))
    rows = checks(needs, _answers(needs))
    assert {r.check: r.status for r in rows if r.status != "ok"} == {"prices us-east-2": "warn"}
    assert f"@{DIGEST}" in row(rows, "image trn2").found  # how to pin the tag it found


def test_a_quota_below_the_largest_job_fails_and_says_how_much_to_request() -> None:
    needs = needs_of(stage("prod"))
    failed = row(checks(needs, _answers(needs, trn_quota=384)), f"quota {ON_DEMAND_TRN.code} on-demand")
    assert failed.status == "fail" and "768" in failed.action and ON_DEMAND_TRN.code in failed.action


def test_a_quota_named_otherwise_than_expected_warns() -> None:
    needs = needs_of(stage("dev"))
    answers = _answers(needs)
    answers.quotas[ON_DEMAND_TRN.code] = Quota(ON_DEMAND_TRN.code, "Running On-Demand Inf instances", 4096, True)
    assert row(checks(needs, answers), f"quota {ON_DEMAND_TRN.code} on-demand").status == "warn"


def test_a_zone_that_does_not_offer_the_type_fails_naming_the_zones_that_do() -> None:
    needs = needs_of(stage("dev"))
    failed = row(checks(needs, _answers(needs, zones=("us-east-2a", "us-east-2c"))), "zones trn2 trn2.48xlarge")
    assert failed.status == "fail" and "us-east-2a, us-east-2c" in failed.action


@pytest.mark.parametrize(("sdk", "built", "status"), [
    ("2.34.0", datetime(2026, 12, 1, tzinfo=UTC), "ok"),
    ("2.34.0", datetime(2026, 11, 20, tzinfo=UTC), "fail"),  # 2.34.0 needs the 2.32 driver line, first in 2.34.0
    ("2.33.1", datetime(2026, 10, 25, tzinfo=UTC), "warn"),  # before 2.33.1, after 2.33.0 shipped the 2.31 line
    ("2.33.1", datetime(2026, 10, 1, tzinfo=UTC), "fail"),
])
def test_the_neuron_ami_is_compared_with_the_release_of_the_images_sdk(sdk: str, built: datetime, status: str) -> None:
    """Amazon ECS, "Retrieving Amazon ECS-optimized Linux AMI metadata"
    (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/retrieve-ecs-optimized_AMI.html): the recommended
    AMI is an SSM parameter that moves; EC2 DescribeImages (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/
    API_DescribeImages.html) gives its CreationDate. The ECS Neuron AMI carries the driver current at its build."""
    config = stage("dev", trn2={**CONTEXT["dualtrack:stages"]["dev"]["trn2"],
                                "image_uri": f"123456789012.dkr.ecr.us-east-2.amazonaws.com/trainer@{DIGEST}",
                                "image_versions": {"neuron_sdk": sdk}})
    needs = needs_of(config)
    assert row(checks(needs, _answers(needs, created=built)), "AMI trn2").status == status


def test_an_unanswered_call_warns_naming_the_action_never_ok() -> None:
    needs = needs_of(stage("dev"))
    answers = _answers(needs)
    denied = Unreadable("lambda:GetAccountSettings", "AccessDeniedException", "not authorized")
    answers.lambda_limits = denied
    answers.offerings = Unreadable("ec2:DescribeInstanceTypeOfferings", "UnauthorizedOperation", "no")
    rows = checks(needs, answers)
    assert row(rows, "lambda concurrency").status == "warn" and "lambda:GetAccountSettings" in row(
        rows, "lambda concurrency").found
    assert all(r.status == "warn" and "describe-instance-type-offerings" in r.action
               for r in rows if r.check.startswith("zones"))


def test_too_little_lambda_concurrency_for_the_largest_job_fails() -> None:
    needs = needs_of(stage("prod"))
    answers = _answers(needs)
    answers.lambda_limits = LambdaLimits(concurrent=10, unreserved=3)
    failed = row(checks(needs, answers), "lambda concurrency")
    assert failed.status == "fail" and "L-B99A9384" in failed.action


def test_a_missing_image_fails() -> None:
    needs = needs_of(stage("dev"))
    answers = _answers(needs)
    gpu = next(n.image.uri for n in needs.images if n.track == "gpu")
    answers.manifests[gpu] = Missing("the registry has no manifest 2.14-cu133-amzn2023")
    assert row(checks(needs, answers), "image gpu").status == "fail"


# ---- the reads, against the APIs' shapes --------------------------------------------------------------------------
@mock_aws
def test_offerings_parameter_and_ami_read_from_the_ec2_and_ssm_apis() -> None:
    """EC2 DescribeInstanceTypeOfferings with LocationType availability-zone
    (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeInstanceTypeOfferings.html) lists the zones
    offering a type; SSM GetParameter (https://docs.aws.amazon.com/systems-manager/latest/APIReference/
    API_GetParameter.html) resolves the ECS-optimized AMI parameter (Amazon ECS, "Retrieving Amazon ECS-optimized
    Linux AMI metadata"); EC2 DescribeImages gives the AMI's CreationDate."""
    reads = Boto3Reads("us-east-2", registry=None)
    offered = reads.offerings(["trn2.48xlarge", "g6e.48xlarge"])
    assert "us-east-2b" in offered["trn2.48xlarge"] and offered["g6e.48xlarge"]
    ami_id = reads.parameter(NEURON_PARAMETER)
    assert isinstance(ami_id, str) and ami_id.startswith("ami-")
    ami = reads.ami(ami_id)
    assert isinstance(ami, Ami) and "neuron" in ami.name and ami.created is not None
    assert isinstance(reads.parameter("/aws/service/ecs/no/such/parameter"), Missing)
    assert isinstance(reads.ami("ami-0123456789abcdef0"), Missing)


@mock_aws
def test_a_private_ecr_image_is_read_with_describe_images() -> None:
    """Amazon ECR DescribeImages (https://docs.aws.amazon.com/AmazonECR/latest/APIReference/API_DescribeImages.html):
    imageIds by tag or digest; an unknown tag answers ImageNotFoundException, an unknown repository
    RepositoryNotFoundException."""
    ecr = boto3.client("ecr", region_name="us-east-2")
    ecr.create_repository(repositoryName="team/trainer")
    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                           "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "size": 1,
                                      "digest": DIGEST}, "layers": []})
    ecr.put_image(repositoryName="team/trainer", imageManifest=manifest, imageTag="sdk2.34.0")
    reads = Boto3Reads("us-east-1", registry=None)
    base = "123456789012.dkr.ecr.us-east-2.amazonaws.com"
    found = reads.manifest(parse_image(f"{base}/team/trainer:sdk2.34.0"))
    assert isinstance(found, Manifest) and (found.digest or "").startswith("sha256:")
    assert isinstance(reads.manifest(parse_image(f"{base}/team/trainer:nope")), Missing)
    assert isinstance(reads.manifest(parse_image(f"{base}/team/other:sdk2.34.0")), Missing)


def _stubbed(service: str, region: str = "us-east-2") -> tuple[Any, Stubber]:
    client = boto3.client(service, region_name=region)  # type: ignore[call-overload]
    return client, Stubber(client)


def _quota(code: str, name: str, value: float) -> dict[str, Any]:
    return {"Quota": {"ServiceCode": "ec2", "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
                      "QuotaArn": f"arn:aws:servicequotas:us-east-2:123456789012:ec2/{code}", "QuotaCode": code,
                      "QuotaName": name, "Value": value, "Unit": "None", "Adjustable": True, "GlobalQuota": False}}


def test_a_quota_is_its_applied_value_else_the_aws_default() -> None:
    """Service Quotas GetServiceQuota (https://docs.aws.amazon.com/servicequotas/2019-06-24/apireference/
    API_GetServiceQuota.html): "If the applied quota value is not available for a quota, the quota is not
    retrieved" (NoSuchResourceException); GetAWSDefaultServiceQuota (https://docs.aws.amazon.com/servicequotas/
    2019-06-24/apireference/API_GetAWSDefaultServiceQuota.html) then gives the default. moto emulates Service Quotas
    for VPC only, so these answers are stubbed against botocore's service model."""
    client, stub = _stubbed("service-quotas")
    code, name = ON_DEMAND_TRN.code, ON_DEMAND_TRN.name
    stub.add_response("get_service_quota", _quota(code, name, 384.0), {"ServiceCode": "ec2", "QuotaCode": code})
    stub.add_client_error("get_service_quota", "NoSuchResourceException", "no applied value",
                          expected_params={"ServiceCode": "ec2", "QuotaCode": ON_DEMAND_P.code})
    stub.add_response("get_aws_default_service_quota", _quota(ON_DEMAND_P.code, ON_DEMAND_P.name, 0.0),
                      {"ServiceCode": "ec2", "QuotaCode": ON_DEMAND_P.code})
    stub.add_client_error("get_service_quota", "AccessDeniedException", "not authorized to perform",
                          expected_params={"ServiceCode": "ec2", "QuotaCode": ON_DEMAND_G.code})
    reads = Boto3Reads("us-east-2", clients=lambda service, region: client)
    with stub:
        assert reads.quota(code) == Quota(code, name, 384.0, applied=True)
        assert reads.quota(ON_DEMAND_P.code) == Quota(ON_DEMAND_P.code, ON_DEMAND_P.name, 0.0, applied=False)
        with pytest.raises(Exception, match="AccessDeniedException") as denied:
            reads.quota(ON_DEMAND_G.code)
    assert denied.value.unreadable.action == "servicequotas:GetServiceQuota"  # type: ignore[attr-defined]


def test_lambda_concurrency_is_read_from_get_account_settings() -> None:
    """Lambda GetAccountSettings (https://docs.aws.amazon.com/lambda/latest/api/API_GetAccountSettings.html):
    AccountLimit.ConcurrentExecutions and UnreservedConcurrentExecutions. moto does not emulate it: stubbed."""
    client, stub = _stubbed("lambda")
    stub.add_response("get_account_settings", {
        "AccountLimit": {"TotalCodeSize": 80530636800, "CodeSizeUnzipped": 262144000, "CodeSizeZipped": 52428800,
                         "ConcurrentExecutions": 1000, "UnreservedConcurrentExecutions": 900},
        "AccountUsage": {"TotalCodeSize": 1024, "FunctionCount": 12}}, {})
    with stub:
        assert Boto3Reads("us-east-2", clients=lambda s, r: client).lambda_limits() == LambdaLimits(1000, 900)


# ---- the registry: an anonymous pull token, then HEAD on the manifest ---------------------------------------------
class _RegistryStandIn(BaseHTTPRequestHandler):
    """The distribution spec's manifest endpoint behind a bearer-token challenge, as public.ecr.aws answers it."""

    images: dict[tuple[str, str], str] = {}
    realm = ""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.startswith("/token/"):
            body = json.dumps({"token": "pull-token"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(404)
        self.end_headers()

    def do_HEAD(self) -> None:
        if self.headers.get("Authorization") != "Bearer pull-token":
            self.send_response(401)
            self.send_header("WWW-Authenticate", f'Bearer realm="{self.realm}",service="public.ecr.aws",scope="aws"')
            self.end_headers()
            return
        repository, _, reference = self.path.removeprefix("/v2/").partition("/manifests/")
        digest = self.images.get((repository, reference))
        self.send_response(200 if digest else 404)
        if digest:
            self.send_header("Docker-Content-Digest", digest)
            self.send_header("Content-Type", "application/vnd.oci.image.index.v1+json")
        self.end_headers()


@pytest.fixture
def registry() -> Iterator[tuple[str, dict[tuple[str, str], str]]]:
    images: dict[tuple[str, str], str] = {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), _RegistryStandIn)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    _RegistryStandIn.images, _RegistryStandIn.realm = images, f"{url}/token/"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield url, images
    server.shutdown()
    server.server_close()


def test_a_public_manifest_is_read_with_an_anonymous_pull_token(
        registry: tuple[str, dict[tuple[str, str], str]]) -> None:
    """Amazon ECR Public, "Pulling an image from the Amazon ECR Public Gallery"
    (https://docs.aws.amazon.com/AmazonECR/latest/public/docker-pull-ecr-image.html): public repositories allow
    unauthenticated pulls; the registry answers the OCI distribution spec's HEAD /v2/<name>/manifests/<reference>
    (200 and the digest, or 404) after a bearer-token challenge."""
    url, images = registry
    images[("neuron/pytorch-training-neuronx", "2.14.0-neuronx-py314-sdk2.34.0-ubuntu26.04")] = DIGEST
    client = Registry({"public.ecr.aws": url})
    found = client.manifest(parse_image("public.ecr.aws/neuron/pytorch-training-neuronx:"
                                        "2.14.0-neuronx-py314-sdk2.34.0-ubuntu26.04"))
    assert found == Manifest(DIGEST, "application/vnd.oci.image.index.v1+json")
    assert isinstance(client.manifest(parse_image("public.ecr.aws/neuron/pytorch-training-neuronx:9.9")), Missing)


def test_a_token_realm_on_another_host_is_not_followed(registry: tuple[str, dict[tuple[str, str], str]]) -> None:
    url, _ = registry
    _RegistryStandIn.realm = "http://elsewhere.invalid/token/"
    with pytest.raises(Exception, match="unauthorized"):
        Registry({"public.ecr.aws": url}).manifest(parse_image("public.ecr.aws/neuron/x:1"))


# ---- the command, as a user runs it -------------------------------------------------------------------------------
@pytest.fixture
def plane(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, dict[str, float]]]:
    """A moto server on loopback (the local plane's), answering EC2 quotas in GetServiceQuota's shape: moto
    emulates Service Quotas for VPC only, so its backend is given the EC2 answers here."""
    from moto.servicequotas.models import ServiceQuotasBackend

    from dualtrack.local.server import local_aws

    values: dict[str, float] = {}
    names = {q.code: q.name for q in (ON_DEMAND_P, ON_DEMAND_G, ON_DEMAND_TRN, SPOT_P, SPOT_P5, SPOT_G, SPOT_TRN)}
    original = ServiceQuotasBackend.get_service_quota

    def ec2_quotas(self: Any, service_code: str, quota_code: str) -> dict[str, Any]:
        if service_code == "ec2" and quota_code in values:
            return _quota(quota_code, names[quota_code], values[quota_code])["Quota"]  # type: ignore[no-any-return]
        return original(self, service_code, quota_code)

    monkeypatch.setattr(ServiceQuotasBackend, "get_service_quota", ec2_quotas)
    with local_aws() as aws:
        yield aws.endpoint_url, values


def _run(endpoint: str, registry_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AWS_ENDPOINT_URL": endpoint, "DUALTRACK_PUBLIC_ECR_URL": registry_url,
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing"}
    return subprocess.run([sys.executable, "-m", "dualtrack", "stage", "preflight", *args], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=180)


def test_the_command_in_its_own_process_against_moto_and_a_registry(
        plane: tuple[str, dict[str, float]], registry: tuple[str, dict[tuple[str, str], str]]) -> None:
    """The whole command against the API shapes: EC2 offerings, SSM and DescribeImages from moto's server, quotas
    in GetServiceQuota's shape, Lambda GetAccountSettings unanswered (moto does not emulate it: a warn), the base
    images from a registry stand-in. Exit 0 with warnings, 1 with --strict, 1 when a quota is short."""
    endpoint, quotas = plane
    url, images = registry
    texts = dockerfile_texts(ROOT)
    for track in ("gpu", "trn2"):
        ref = parse_image(dockerfile_base(texts[track]) or "")
        images[(ref.repository, ref.reference)] = DIGEST
    quotas.update({ON_DEMAND_G.code: 192, ON_DEMAND_TRN.code: 192})
    done = _run(endpoint, url, "--stage", "dev", "--json")
    assert done.returncode == 0, done.stderr + done.stdout
    report = json.loads(done.stdout)
    status = {r["check"]: r["status"] for r in report["rows"]}
    assert report["region"] == "us-east-2" and report["region_from"] == "cdk.json region"
    assert status["image gpu"] == status["image trn2"] == status["AMI trn2"] == "ok", report
    assert status[f"quota {ON_DEMAND_TRN.code} on-demand"] == "ok" and status["zones trn2 trn2.48xlarge"] == "ok"
    assert status["lambda concurrency"] == "warn" and status["prices us-east-2"] == "warn"
    assert _run(endpoint, url, "--stage", "dev", "--strict", "--output", "json").returncode == 1
    quotas[ON_DEMAND_TRN.code] = 96
    short = _run(endpoint, url, "--stage", "dev")
    assert short.returncode == 1 and "Traceback" not in short.stderr
    assert "fail" in short.stdout and ON_DEMAND_TRN.code in short.stdout


def test_an_unknown_stage_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stage", "preflight", "--stage", "nosuchstage"]) == 2
    assert "unknown stage 'nosuchstage'" in capsys.readouterr().err


def test_no_credentials_exits_6(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SECURITY_TOKEN", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert main(["stage", "preflight", "--stage", "dev"]) == 6
    assert "no usable AWS credentials" in capsys.readouterr().err


def test_the_help_teaches_the_checks_the_permissions_and_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["stage", "preflight", "--help"])
    text = capsys.readouterr().out
    for needle in ("servicequotas:GetServiceQuota", "ec2:DescribeInstanceTypeOfferings", "lambda:GetAccountSettings",
                   "ssm:GetParameter", "ec2:DescribeImages", "ecr:DescribeImages", "exit codes:", "examples:",
                   ON_DEMAND_TRN.code, SPOT_P5.code):
        assert needle in text, needle


# ---- the local plane ------------------------------------------------------------------------------------------------
def test_the_local_stage_is_checked_on_the_local_plane_and_says_what_it_does_not_emulate() -> None:
    report = local_preflight(stage("local"), ROOT)
    status = {r.check: r for r in report.rows}
    assert report.plane == "the local plane (moto)" and report.account == "123456789012"
    assert status["zones gpu p5.48xlarge"].status == "ok" and status["AMI trn2"].status == "ok"
    assert all("not emulated" in r.found for r in report.rows if r.check.startswith(("quota", "lambda")))
    assert all(r.status == "warn" for r in report.rows if r.check.startswith("image"))


def test_a_rehearsal_writes_preflight_json_and_one_console_line(tmp_path: Path) -> None:
    from dualtrack.local.progress import Progress
    from dualtrack.local.rehearsal import Rehearsal, RehearsalOptions
    from dualtrack.local.server import local_aws
    from lambdas.domain.trial.rules import parse_trial

    spec = parse_trial(json.loads((ROOT / "examples" / "trial-rehearsal.json").read_text()), allow_local_paths=True)
    console = io.StringIO()
    rehearsal = Rehearsal(spec, RehearsalOptions(out=tmp_path), progress=Progress(console))
    rehearsal.out.mkdir(parents=True)
    with local_aws() as aws:
        rehearsal._preflight(aws.region)
    written = json.loads((rehearsal.out / PREFLIGHT_FILE).read_text())
    assert written["stage"] == "local" and written["rows"]
    lines = console.getvalue().strip().splitlines()
    assert len(lines) == 1 and "preflight of stage local on the local plane" in lines[0], lines


def test_gather_asks_each_call_once() -> None:
    calls: list[str] = []

    class Counting:
        def account(self) -> str:
            calls.append("account")
            return "123456789012"

        def offerings(self, instance_types: list[str]) -> dict[str, tuple[str, ...]]:
            calls.append("offerings")
            return {t: ("us-east-2b",) for t in instance_types}

        def quota(self, code: str) -> Quota:
            calls.append(code)
            return Quota(code, "x", 1, True)

        def lambda_limits(self) -> LambdaLimits:
            calls.append("lambda")
            return LambdaLimits(10, 10)

        def parameter(self, name: str) -> str:
            calls.append(name)
            return "ami-0123456789abcdef0"

        def ami(self, ami_id: str) -> Ami:
            calls.append(ami_id)
            return Ami(ami_id, "x", None)

        def manifest(self, image: Any) -> Manifest:
            calls.append(image.uri)
            return Manifest(None, None)

    needs = needs_of(stage("prod"))
    gather(needs, Counting())
    # Both tracks' parameters resolve to one AMI here, and p5 and p4d share the P quota: each is asked once.
    assert calls.count("ami-0123456789abcdef0") == 1 and calls.count(ON_DEMAND_P.code) == 1
    assert calls.count("offerings") == calls.count("lambda") == 1
