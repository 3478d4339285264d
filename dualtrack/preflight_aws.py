"""The AWS side of `dualtrack stage preflight`: the read-only calls, behind one small seam (:class:`Reads`).

:class:`Boto3Reads` asks AWS (or the local plane's moto server, which answers the same API) and :class:`Registry`
asks an OCI registry for a manifest; :func:`gather` puts every answer of the calls a stage's needs require into
:class:`dualtrack.preflight.Answers`, where a call that failed is an ``Unreadable`` naming its IAM action, and
:func:`preflight` turns them into the report's rows. Nothing here writes anything anywhere.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from dualtrack.preflight import (
    DOCKERFILES,
    PUBLIC_ECR,
    Ami,
    Answers,
    ImageRef,
    LambdaLimits,
    Manifest,
    Missing,
    Quota,
    Report,
    StageNeeds,
    Unreadable,
    checks,
    stage_needs,
)
from infra.config import StageConfig, Track
from lambdas.domain.money.prices import load_price_table

# Where the ECR Public registry is reached (a pull-through mirror, or a stand-in in tests).
PUBLIC_ECR_URL_ENV = "DUALTRACK_PUBLIC_ECR_URL"
_ACCEPT = ", ".join((
    "application/vnd.oci.image.index.v1+json", "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json"))
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')


class ReadFailed(Exception):
    """A read that got no answer; carries what the report says about it."""

    def __init__(self, unreadable: Unreadable) -> None:
        super().__init__(unreadable.text())
        self.unreadable = unreadable


class Reads(Protocol):
    """The preflight's whole view of AWS: each method answers, says the thing is :class:`Missing`, or raises
    :class:`ReadFailed`."""

    def account(self) -> str: ...
    def offerings(self, instance_types: list[str]) -> dict[str, tuple[str, ...]]: ...
    def quota(self, code: str) -> Quota: ...
    def lambda_limits(self) -> LambdaLimits: ...
    def parameter(self, name: str) -> str | Missing: ...
    def ami(self, ami_id: str) -> Ami | Missing: ...
    def manifest(self, image: ImageRef) -> Manifest | Missing: ...


_TAG = re.compile(r"<[^>]+>")


def _error(exc: Exception, action: str) -> ReadFailed:
    response = getattr(exc, "response", None)
    error = response.get("Error", {}) if isinstance(response, dict) else {}
    code = str(error.get("Code") or type(exc).__name__)
    # One line, without an HTML error page's markup (an endpoint that lacks the API answers with one).
    message = " ".join(_TAG.sub(" ", str(error.get("Message") or exc)).split())
    return ReadFailed(Unreadable(action, code, message[:240] + ("..." if len(message) > 240 else "")))


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    return str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""


class Registry:
    """Manifest reads from an OCI registry (the distribution spec's ``HEAD /v2/<name>/manifests/<reference>``), with
    the anonymous pull token a public registry hands out on its ``WWW-Authenticate`` challenge. ``endpoints`` maps a
    registry host to the URL it is reached at (default: ``https://<host>``)."""

    def __init__(self, endpoints: Mapping[str, str] | None = None, timeout_s: float = 15) -> None:
        self.endpoints = dict(endpoints or {})
        self.timeout_s = timeout_s

    @classmethod
    def from_environment(cls) -> Registry:
        mirror = os.environ.get(PUBLIC_ECR_URL_ENV)
        return cls({PUBLIC_ECR: mirror.rstrip("/")} if mirror else None)

    def manifest(self, image: ImageRef) -> Manifest | Missing:
        base = self.endpoints.get(image.registry, f"https://{image.registry}")
        url = f"{base}/v2/{image.repository}/manifests/{image.reference}"
        status, headers = self._head(url, None)
        if status == 401:
            token = self._token(base, headers.get("WWW-Authenticate", ""), image.repository)
            status, headers = self._head(url, token)
        if status == 200:
            return Manifest(headers.get("Docker-Content-Digest"), headers.get("Content-Type"))
        if status == 404:
            return Missing(f"the registry has no manifest {image.reference} in {image.repository}")
        raise ReadFailed(Unreadable("none (registry)", f"HTTP {status}", f"HEAD {url}"))

    def _head(self, url: str, token: str | None) -> tuple[int, Mapping[str, str]]:
        request = urllib.request.Request(url, method="HEAD", headers={
            "Accept": _ACCEPT, **({"Authorization": f"Bearer {token}"} if token else {})})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return response.status, dict(response.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers or {})
        except (urllib.error.URLError, OSError) as exc:
            raise ReadFailed(Unreadable("none (registry)", "unreachable", f"{url}: {exc}")) from None

    def _token(self, base: str, challenge: str, repository: str) -> str:
        params = dict(_CHALLENGE.findall(challenge))
        realm = params.get("realm", "")
        # Follow a token realm on the registry's own host only.
        if not challenge.lower().startswith("bearer") or urllib.parse.urlsplit(realm).netloc != \
                urllib.parse.urlsplit(base).netloc:
            raise ReadFailed(Unreadable("none (registry)", "unauthorized", f"{base}: challenge {challenge!r}"))
        query = urllib.parse.urlencode({"service": params.get("service", ""),
                                        "scope": f"repository:{repository}:pull"})
        try:
            with urllib.request.urlopen(f"{realm}?{query}", timeout=self.timeout_s) as response:
                token = json.loads(response.read()).get("token")
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise ReadFailed(Unreadable("none (registry)", "no pull token", f"{realm}: {exc}")) from None
        if not isinstance(token, str) or not token:
            raise ReadFailed(Unreadable("none (registry)", "no pull token", f"{realm} answered no token"))
        return token



def default_region() -> str | None:
    """The region the AWS CLI would use: AWS_REGION, AWS_DEFAULT_REGION, else the profile's (boto3 alone skips
    AWS_REGION)."""
    import boto3

    return os.environ.get("AWS_REGION") or boto3.Session().region_name


ClientFactory = Callable[[str, str], Any]  # (service, region) -> a boto3 client


class Boto3Reads:
    """:class:`Reads` through boto3 (in ``region``; a private ECR image in its own). ``clients`` makes a client per
    service and region (tests hand in stubbed ones); ``registry`` reads public manifests (None: not reachable from
    here, as in the local plane)."""

    def __init__(self, region: str, *, clients: ClientFactory | None = None, registry: Registry | None = None,
                 unreachable_registry: str = "") -> None:
        self.region = region
        self.registry = registry
        self.unreachable_registry = unreachable_registry
        if clients is None:
            import boto3
            from botocore.config import Config

            session = boto3.Session()
            # A preflight answers in seconds: a few retries, short timeouts (an unreachable endpoint is a warn row).
            config = Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=20)
            self._make: ClientFactory = lambda service, where: session.client(  # type: ignore[call-overload]
                service, region_name=where, config=config)
        else:
            self._make = clients
        self._clients: dict[tuple[str, str], Any] = {}

    def _client(self, service: str, region: str | None = None) -> Any:
        key = (service, region or self.region)
        if key not in self._clients:
            self._clients[key] = self._make(*key)
        return self._clients[key]

    def account(self) -> str:
        try:
            return str(self._client("sts").get_caller_identity()["Account"])
        except Exception as exc:
            raise _error(exc, "sts:GetCallerIdentity") from None

    def offerings(self, instance_types: list[str]) -> dict[str, tuple[str, ...]]:
        found: dict[str, set[str]] = {t: set() for t in instance_types}
        try:
            pages = self._client("ec2").get_paginator("describe_instance_type_offerings").paginate(
                LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": instance_types}])
            for page in pages:
                for offering in page.get("InstanceTypeOfferings", []):
                    found.setdefault(offering["InstanceType"], set()).add(offering["Location"])
        except Exception as exc:
            raise _error(exc, "ec2:DescribeInstanceTypeOfferings") from None
        return {t: tuple(sorted(zones)) for t, zones in found.items()}

    def quota(self, code: str) -> Quota:
        client = self._client("service-quotas")
        try:
            answer, applied = client.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"], True
        except Exception as exc:
            if _code(exc) != "NoSuchResourceException":  # no applied value: the default is the quota
                raise _error(exc, "servicequotas:GetServiceQuota") from None
            try:
                answer, applied = client.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"], \
                    False
            except Exception as exc2:
                raise _error(exc2, "servicequotas:GetAWSDefaultServiceQuota") from None
        return Quota(code=code, name=str(answer.get("QuotaName", "")), value=float(answer.get("Value", 0)),
                     applied=applied)

    def lambda_limits(self) -> LambdaLimits:
        try:
            limit = self._client("lambda").get_account_settings()["AccountLimit"]
        except Exception as exc:
            raise _error(exc, "lambda:GetAccountSettings") from None
        return LambdaLimits(concurrent=int(limit.get("ConcurrentExecutions", 0)),
                            unreserved=int(limit.get("UnreservedConcurrentExecutions", 0)))

    def parameter(self, name: str) -> str | Missing:
        try:
            return str(self._client("ssm").get_parameter(Name=name)["Parameter"]["Value"])
        except Exception as exc:
            if _code(exc) == "ParameterNotFound":
                return Missing("no such parameter")
            raise _error(exc, "ssm:GetParameter") from None

    def ami(self, ami_id: str) -> Ami | Missing:
        try:
            images = self._client("ec2").describe_images(ImageIds=[ami_id]).get("Images", [])
        except Exception as exc:
            if _code(exc).startswith("InvalidAMIID"):
                return Missing(f"{ami_id}: {_code(exc)}")
            raise _error(exc, "ec2:DescribeImages") from None
        if not images:
            return Missing(f"{ami_id}: not found")
        created = images[0].get("CreationDate")
        when = datetime.fromisoformat(created.replace("Z", "+00:00")) if isinstance(created, str) else None
        return Ami(ami_id=ami_id, name=str(images[0].get("Name", "")), created=when)

    def manifest(self, image: ImageRef) -> Manifest | Missing:
        if image.kind == "ecr":
            return self._ecr_manifest(image)
        if self.registry is None:
            raise ReadFailed(Unreadable("none (registry)", "not reachable", self.unreachable_registry or
                                        f"{image.registry} is not reachable from here"))
        return self.registry.manifest(image)

    def _ecr_manifest(self, image: ImageRef) -> Manifest | Missing:
        wanted = {"imageDigest": image.reference} if image.is_digest else {"imageTag": image.reference}
        try:
            details = self._client("ecr", image.ecr_region).describe_images(
                registryId=image.ecr_account, repositoryName=image.repository, imageIds=[wanted])["imageDetails"]
        except Exception as exc:
            if _code(exc) in ("ImageNotFoundException", "RepositoryNotFoundException"):
                return Missing(f"{_code(exc)}: {image.repository}:{image.reference} in {image.registry}")
            raise _error(exc, "ecr:DescribeImages") from None
        if not details:
            return Missing(f"no image {image.reference} in {image.repository}")
        return Manifest(details[0].get("imageDigest"), details[0].get("imageManifestMediaType"))


def _ask(answers: dict[str, Any], key: str, read: Callable[[], Any]) -> None:
    try:
        answers[key] = read()
    except ReadFailed as exc:
        answers[key] = exc.unreadable


def gather(needs: StageNeeds, reads: Reads) -> Answers:
    """Every answer the stage's checks need, each call once."""
    answers = Answers()
    try:
        answers.account = reads.account()
    except ReadFailed as exc:
        answers.account = exc.unreadable
    for need in needs.images:
        _ask(answers.manifests, need.image.uri, partial(reads.manifest, need.image))
    try:
        answers.offerings = reads.offerings(needs.instance_types)
    except ReadFailed as exc:
        answers.offerings = exc.unreadable
    for quota in needs.quotas:
        _ask(answers.quotas, quota.quota.code, partial(reads.quota, quota.quota.code))
    try:
        answers.lambda_limits = reads.lambda_limits()
    except ReadFailed as exc:
        answers.lambda_limits = exc.unreadable
    for ami in needs.amis:
        ami_id: object = ami.ami_id
        if ami.parameter:
            _ask(answers.parameters, ami.parameter, partial(reads.parameter, ami.parameter))
            ami_id = answers.parameters[ami.parameter]
        if isinstance(ami_id, str) and ami_id not in answers.amis:
            _ask(answers.amis, ami_id, partial(reads.ami, ami_id))
    return answers


def dockerfile_texts(root: Path) -> dict[Track, str]:
    out: dict[Track, str] = {}
    for track, relative in DOCKERFILES.items():
        path = root / relative
        out[track] = path.read_text() if path.exists() else ""
    return out


def preflight(config: StageConfig, reads: Reads, *, region: str, region_from: str, root: Path, plane: str = "AWS"
              ) -> Report:
    """The stage's preflight report: its needs from ``root`` (a checkout: cdk.json's stage, the Dockerfiles), the
    answers from ``reads``."""
    prices = load_price_table(config.priced_overrides())
    needs = stage_needs(config, region=region, dockerfiles=dockerfile_texts(root), prices=prices)
    answers = gather(needs, reads)
    account = answers.account if isinstance(answers.account, str) else None
    return Report(stage=config.name, region=region, region_from=region_from, plane=plane, account=account,
                  rows=tuple(checks(needs, answers)))
