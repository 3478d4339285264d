"""`dualtrack stage preflight`: what a deploy of a stage would run into, read from the account before the deploy.

Pure. A stage's needs (:func:`stage_needs`: from its config, the Dockerfiles' base images and the price table) and
AWS's answers (:class:`Answers`, gathered read-only through the seam in :mod:`dualtrack.preflight_aws`) go in; one
:class:`Row` per check comes out (:func:`checks`): the check, ok / warn / fail, what was found and what to do.

A check that AWS did not answer (no permission, a service the local plane does not emulate, no network) is a warn
that names the call and the IAM action, never an ok.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime
from typing import Literal

from infra.config import StageConfig, Track
from lambdas.domain.json_types import JsonObject
from lambdas.domain.money.prices import PriceMissing, PriceTable
from lambdas.domain.neuron_stack import NEURON_RELEASES, RELEASED, minimum_driver
from lambdas.domain.trial.catalogue import load_catalogue

Status = Literal["ok", "warn", "fail"]
Market = Literal["on-demand", "spot"]

DOCKERFILES: dict[Track, str] = {"gpu": "containers/gpu/Dockerfile", "trn2": "containers/neuron/Dockerfile"}
_BASE_IMAGE = re.compile(r"^ARG BASE_IMAGE=(\S+)$", re.MULTILINE)
_SDK_IN_TAG = re.compile(r"-sdk(?P<sdk>\d+\.\d+(?:\.\d+)?)-")  # infra.constructs.batch_compute reads it the same way
_PRIVATE_ECR = re.compile(r"^(?P<account>\d{12})\.dkr\.ecr(?:-fips)?\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?$")
PUBLIC_ECR = "public.ecr.aws"


# ---- quotas -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class QuotaCode:
    code: str
    name: str  # as Service Quotas names it (ListServiceQuotas, service code ec2)


# EC2 vCPU quotas per instance family and market (service code ec2). The codes are not on an AWS documentation page;
# they are the ones ListServiceQuotas answers for these names (as many public tools that read them record), and each
# row checks the name GetServiceQuota answers against the one here. L-7212CCBC was "All P Spot Instance Requests"
# before P5 got a Spot quota of its own.
ON_DEMAND_P = QuotaCode("L-417A185B", "Running On-Demand P instances")
ON_DEMAND_G = QuotaCode("L-DB2E81BA", "Running On-Demand G and VT instances")
ON_DEMAND_TRN = QuotaCode("L-2C3B7624", "Running On-Demand Trn instances")
SPOT_P = QuotaCode("L-7212CCBC", "All P4, P3 and P2 Spot Instance Requests")
SPOT_P5 = QuotaCode("L-C4BD4855", "All P5 Spot Instance Requests")
SPOT_G = QuotaCode("L-3819A6DF", "All G and VT Spot Instance Requests")
SPOT_TRN = QuotaCode("L-6B0D517C", "All Trn Spot Instance Requests")
# Lambda's regional concurrency (service code lambda); the preflight reads it from GetAccountSettings instead.
LAMBDA_CONCURRENCY = QuotaCode("L-B99A9384", "Concurrent executions")


def quota_code(instance_type: str, market: Market) -> QuotaCode | None:
    """The vCPU quota a host of ``instance_type`` counts against in ``market``; None when none is on record here."""
    family = instance_type.split(".", 1)[0]
    if family.startswith("trn"):
        return ON_DEMAND_TRN if market == "on-demand" else SPOT_TRN
    if family.startswith(("g", "vt")):
        return ON_DEMAND_G if market == "on-demand" else SPOT_G
    if family.startswith("p5"):
        return ON_DEMAND_P if market == "on-demand" else SPOT_P5
    if family in ("p2", "p3", "p3dn", "p4d", "p4de"):
        return ON_DEMAND_P if market == "on-demand" else SPOT_P
    if family.startswith("p") and market == "on-demand":
        return ON_DEMAND_P
    return None


# ---- images -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ImageRef:
    """A container image reference split as a registry sees it: ``registry/repository`` and a tag or digest."""

    uri: str
    registry: str
    repository: str
    reference: str

    @property
    def kind(self) -> Literal["ecr-public", "ecr", "other"]:
        if self.registry == PUBLIC_ECR:
            return "ecr-public"
        return "ecr" if _PRIVATE_ECR.match(self.registry) else "other"

    @property
    def ecr_account(self) -> str:
        found = _PRIVATE_ECR.match(self.registry)
        return found.group("account") if found else ""

    @property
    def ecr_region(self) -> str:
        found = _PRIVATE_ECR.match(self.registry)
        return found.group("region") if found else ""

    @property
    def is_digest(self) -> bool:
        return self.reference.startswith("sha256:")


def parse_image(uri: str) -> ImageRef:
    """``public.ecr.aws/neuron/x:tag`` -> registry ``public.ecr.aws``, repository ``neuron/x``, reference ``tag``."""
    rest, _, digest = uri.partition("@")
    first, _, path = rest.partition("/")
    if path and ("." in first or ":" in first or first == "localhost"):
        registry = first
    else:
        registry, path = "docker.io", rest
    name, tag = path, ""
    if ":" in path.rsplit("/", 1)[-1]:
        name, tag = path.rsplit(":", 1)
    return ImageRef(uri=uri, registry=registry, repository=name, reference=digest or tag or "latest")


def dockerfile_base(text: str) -> str | None:
    """The default of ``ARG BASE_IMAGE=...`` in a Dockerfile (what a build without --build-arg pulls)."""
    found = _BASE_IMAGE.search(text)
    return found.group(1) if found else None


# ---- what the stage needs -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ImageNeed:
    track: Track
    image: ImageRef
    source: str  # where the stage names it


@dataclass(frozen=True)
class ZoneNeed:
    track: Track
    instance_type: str
    zones: tuple[str, ...]  # empty: the stage names none (the VPC takes the region's first zones)
    source: str


@dataclass(frozen=True)
class QuotaNeed:
    quota: QuotaCode
    market: Market
    vcpus: int  # the largest job's
    job: str
    max_vcpus: int  # what the compute environments counting against it may ask for at most


@dataclass(frozen=True)
class UnknownQuota:
    track: Track
    instance_type: str
    market: Market


@dataclass(frozen=True)
class AmiNeed:
    track: Track
    parameter: str | None
    ami_id: str | None
    neuron_sdk: str | None


@dataclass(frozen=True)
class PriceNeed:
    region: str
    instance_types: tuple[str, ...]
    missing: tuple[str, ...]
    s3_missing: bool
    estimates: tuple[str, ...]
    table_version: str


@dataclass(frozen=True)
class StageNeeds:
    stage: str
    region: str
    images: tuple[ImageNeed, ...]
    zones: tuple[ZoneNeed, ...]
    quotas: tuple[QuotaNeed, ...]
    unknown_quotas: tuple[UnknownQuota, ...]
    credential_calls: int  # concurrent calls to the job-credentials function: one per node of the largest job
    credential_job: str
    amis: tuple[AmiNeed, ...]
    prices: PriceNeed

    @property
    def instance_types(self) -> list[str]:
        return sorted({z.instance_type for z in self.zones})


def _multi_node(config: StageConfig, track: Track, instance_type: str) -> bool:
    """Whether the stage has multi-node job definitions for ``instance_type``: a pinned zone, on-demand capacity and
    an EFA-capable type (infra.constructs.batch_compute decides it the same way)."""
    family = config.family(track)
    info = load_catalogue().get(instance_type)
    return bool(family.availability_zone) and not family.spot and info.efa_interfaces > 0


def _images(config: StageConfig, dockerfiles: Mapping[Track, str]) -> tuple[ImageNeed, ...]:
    out = []
    for track in config.tracks():
        family = config.family(track)
        if family.image_uri:
            out.append(ImageNeed(track, parse_image(family.image_uri), f"{track}.image_uri"))
            continue
        base = dockerfile_base(dockerfiles.get(track, ""))
        if base:
            out.append(ImageNeed(track, parse_image(base), f"{DOCKERFILES[track]} (ARG BASE_IMAGE)"))
    return tuple(out)


def _quotas(config: StageConfig) -> tuple[tuple[QuotaNeed, ...], tuple[UnknownQuota, ...]]:
    catalogue = load_catalogue()
    largest: dict[tuple[str, Market], tuple[int, str]] = {}
    ceiling: dict[tuple[str, Market], int] = {}
    codes: dict[str, QuotaCode] = {}
    unknown: list[UnknownQuota] = []
    for track in config.tracks():
        family = config.family(track)
        markets: tuple[Market, ...] = ("on-demand", "spot") if family.spot else ("on-demand",)
        counted: set[tuple[str, Market]] = set()
        for instance_type in family.instance_types:
            vcpus = catalogue.get(instance_type).vcpus
            nodes = max(family.multi_node_counts, default=1) if _multi_node(config, track, instance_type) else 1
            for market in markets:
                # Multi-node jobs never run on Spot (Batch): the largest Spot job is one host.
                n = nodes if market == "on-demand" else 1
                code = quota_code(instance_type, market)
                if code is None:
                    unknown.append(UnknownQuota(track, instance_type, market))
                    continue
                codes[code.code] = code
                key = (code.code, market)
                job = (f"{n} x {instance_type} ({track}, {'multi-node, ' if n > 1 else ''}{n * vcpus} vCPUs)")
                if n * vcpus > largest.get(key, (0, ""))[0]:
                    largest[key] = (n * vcpus, job)
                if key not in counted:  # each compute environment may scale to the track's max_vcpus
                    ceiling[key] = ceiling.get(key, 0) + family.max_vcpus * len(family.instance_types)
                    counted.add(key)
    needs = tuple(QuotaNeed(codes[code], market, vcpus, job, ceiling[(code, market)])
                  for (code, market), (vcpus, job) in sorted(largest.items()))
    return needs, tuple(unknown)


def _credential_calls(config: StageConfig) -> tuple[int, str]:
    """One call per node of the largest job (each node of a multi-node job fetches its job's credentials once)."""
    calls, job = 1, "a single-node job"
    for track in config.tracks():
        family = config.family(track)
        for instance_type in family.instance_types:
            if _multi_node(config, track, instance_type) and max(family.multi_node_counts, default=1) > calls:
                calls = max(family.multi_node_counts)
                job = f"{calls} x {instance_type} ({track})"
    return calls, job


def _prices(config: StageConfig, table: PriceTable, region: str) -> PriceNeed:
    types = tuple(sorted({t for track in config.tracks() for t in config.family(track).instance_types}))
    missing, estimates = [], []
    for instance_type in types:
        try:
            row = table.instance_price(instance_type, region)
        except PriceMissing:
            missing.append(instance_type)
            continue
        if row.confidence == "estimate":
            estimates.append(instance_type)
    try:
        table.s3_rates(region)
        s3_missing = False
    except PriceMissing:
        s3_missing = True
    return PriceNeed(region, types, tuple(missing), s3_missing, tuple(estimates), table.version)


def neuron_sdk(config: StageConfig, dockerfiles: Mapping[Track, str]) -> str | None:
    """The Neuron SDK release the Trainium2 image carries: the stage's image_versions, else its base image tag."""
    if config.trn2 is None:
        return None
    stated = config.trn2.image_versions.get("neuron_sdk")
    if stated or config.trn2.image_uri:
        return stated
    base = dockerfile_base(dockerfiles.get("trn2", ""))
    found = _SDK_IN_TAG.search(base or "")
    return found.group("sdk") if found else None


def stage_needs(config: StageConfig, *, region: str, dockerfiles: Mapping[Track, str], prices: PriceTable
                ) -> StageNeeds:
    """What a deploy of ``config`` into ``region`` needs from the account (``dockerfiles``: track -> its text;
    ``prices``: the price table with the stage's overrides applied)."""
    zones: list[ZoneNeed] = []
    for track in config.tracks():
        family = config.family(track)
        pinned = family.availability_zone
        chosen = (pinned,) if pinned else tuple(config.availability_zones or ())
        source = f"{track}.availability_zone" if pinned else "availability_zones" if chosen else "the stage names none"
        zones.extend(ZoneNeed(track, t, chosen, source) for t in family.instance_types)
    quotas, unknown = _quotas(config)
    calls, job = _credential_calls(config)
    amis = tuple(AmiNeed(track, config.family(track).ami_ssm_parameter, config.family(track).ami_id,
                         neuron_sdk(config, dockerfiles) if track == "trn2" else None)
                 for track in config.tracks())
    return StageNeeds(stage=config.name, region=region, images=_images(config, dockerfiles), zones=tuple(zones),
                      quotas=quotas, unknown_quotas=unknown, credential_calls=calls, credential_job=job,
                      amis=amis, prices=_prices(config, prices, region))


# ---- AWS's answers ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Unreadable:
    """A call that gave no answer: the IAM action it needs, the error code and message."""

    action: str
    code: str
    message: str

    def text(self) -> str:
        return f"{self.message} [{self.action}: {self.code}]"


@dataclass(frozen=True)
class Missing:
    """AWS answered that the thing does not exist."""

    what: str


@dataclass(frozen=True)
class Quota:
    code: str
    name: str
    value: float
    applied: bool  # False: the AWS default (GetServiceQuota had no applied value)


@dataclass(frozen=True)
class LambdaLimits:
    concurrent: int
    unreserved: int


@dataclass(frozen=True)
class Ami:
    ami_id: str
    name: str
    created: datetime | None


@dataclass(frozen=True)
class Manifest:
    digest: str | None
    media_type: str | None


@dataclass
class Answers:
    """What the account answered, keyed as asked; each answer may be :class:`Unreadable` (or :class:`Missing`)."""

    account: str | Unreadable | None = None
    offerings: dict[str, tuple[str, ...]] | Unreadable = field(default_factory=dict)  # type -> zones offering it
    quotas: dict[str, Quota | Unreadable] = field(default_factory=dict)
    lambda_limits: LambdaLimits | Unreadable | None = None
    parameters: dict[str, str | Missing | Unreadable] = field(default_factory=dict)  # SSM name -> AMI id
    amis: dict[str, Ami | Missing | Unreadable] = field(default_factory=dict)
    manifests: dict[str, Manifest | Missing | Unreadable] = field(default_factory=dict)  # image URI -> answer


# ---- the checks ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    check: str
    status: Status
    found: str
    action: str  # what to do; empty when nothing is
    reads: str  # the IAM action(s) the check is based on

    def to_dict(self) -> JsonObject:
        return dict(asdict(self))


def _unreadable(check: str, answer: Unreadable, what_to_do: str) -> Row:
    return Row(check, "warn", f"not checked: {answer.text()}", what_to_do, answer.action)


def image_rows(needs: StageNeeds, answers: Answers) -> list[Row]:
    rows = []
    for need in needs.images:
        check, image = f"image {need.track}", need.image
        answer = answers.manifests.get(image.uri)
        source = f"{image.uri} ({need.source})"
        reads = {"ecr-public": "none (public.ecr.aws: an anonymous pull token)",
                 "ecr": "ecr:DescribeImages"}.get(image.kind, "none")
        fix = (f"pin an image that exists: change {need.source} (a tag from the registry, or a digest), or set "
               f"{need.track}.image_uri to an image you host")
        if image.kind == "other":
            rows.append(Row(check, "warn", f"{source}: not checked (only ECR and ECR Public registries are read)",
                            f"check by hand: docker manifest inspect {image.uri}", reads))
        elif isinstance(answer, Manifest):
            digest = f", digest {answer.digest}" if answer.digest else ""
            pin = "" if image.is_digest else f"; pin it with {image.registry}/{image.repository}@{answer.digest}" \
                if answer.digest else ""
            rows.append(Row(check, "ok", f"{source}: manifest found{digest}{pin}", "", reads))
        elif isinstance(answer, Missing):
            rows.append(Row(check, "fail", f"{source}: {answer.what}", fix, reads))
        elif isinstance(answer, Unreadable):
            rows.append(_unreadable(check, answer, f"check by hand: docker manifest inspect {image.uri}"))
    return rows


def zone_rows(needs: StageNeeds, answers: Answers) -> list[Row]:
    reads = "ec2:DescribeInstanceTypeOfferings"
    offerings = answers.offerings
    rows = []
    for need in needs.zones:
        check = f"zones {need.track} {need.instance_type}"
        if isinstance(offerings, Unreadable):
            rows.append(_unreadable(check, offerings, _offerings_command(needs.region, need.instance_type)))
            continue
        offered = sorted(offerings.get(need.instance_type, ()))
        where = ", ".join(offered) or "none of its zones"
        if not need.zones:
            status: Status = "warn" if offered else "fail"
            rows.append(Row(check, status, f"{needs.region} offers it in {where}; the stage names no zones, so "
                            "the VPC takes the region's first ones", f"set availability_zones (and "
                            f"{need.track}.availability_zone) to zones that offer it: {where}", reads))
            continue
        lacking = [z for z in need.zones if z not in offered]
        if not lacking:
            rows.append(Row(check, "ok", f"offered in {', '.join(need.zones)} ({need.source}); {needs.region} "
                            f"offers it in {where}", "", reads))
        else:
            usable = ", ".join(offered) or f"none of {needs.region}'s zones"
            rows.append(Row(check, "fail", f"not offered in {', '.join(lacking)} ({need.source}); "
                            f"{needs.region} offers it in {where}",
                            f"move {need.source} to a zone that offers it ({usable}), or drop "
                            f"{need.instance_type} from {need.track}.instance_types", reads))
    return rows


def _offerings_command(region: str, instance_type: str) -> str:
    return (f"aws ec2 describe-instance-type-offerings --region {region} --location-type availability-zone "
            f"--filters Name=instance-type,Values={instance_type}")


def _console(region: str, code: str) -> str:
    return f"https://{region}.console.aws.amazon.com/servicequotas/home/services/ec2/quotas/{code}"


def quota_rows(needs: StageNeeds, answers: Answers) -> list[Row]:
    reads = "servicequotas:GetServiceQuota, servicequotas:GetAWSDefaultServiceQuota"
    rows = []
    for need in needs.quotas:
        check = f"quota {need.quota.code} {need.market}"
        answer = answers.quotas.get(need.quota.code)
        where = _console(needs.region, need.quota.code)
        if answer is None:
            continue
        if isinstance(answer, Unreadable):
            rows.append(_unreadable(check, answer, f"check \"{need.quota.name}\" >= {need.vcpus} vCPUs in the "
                                    f"Service Quotas console: {where}"))
            continue
        value = int(answer.value)
        kind = "applied" if answer.applied else "the AWS default (no applied value)"
        found = (f"\"{answer.name}\" = {value} vCPUs ({kind}); the largest {need.market} job needs {need.vcpus}: "
                 f"{need.job}")
        if answer.name != need.quota.name:
            rows.append(Row(check, "warn", f"{found}; expected this code to be \"{need.quota.name}\"",
                            "compare the quota names in the Service Quotas console (EC2) and correct "
                            "dualtrack.preflight's quota codes", reads))
        elif value < need.vcpus:
            rows.append(Row(check, "fail", found, f"request {need.vcpus} vCPUs or more for \"{need.quota.name}\" "
                            f"({need.quota.code}) in {needs.region}: {where}; until then the job waits RUNNABLE "
                            "until the queue cancels it", reads))
        else:
            more = (f"; its compute environments may ask for up to {need.max_vcpus}: beyond {value}, jobs wait "
                    "RUNNABLE" if value < need.max_vcpus else "")
            rows.append(Row(check, "ok", found + more, "", reads))
    for unknown in needs.unknown_quotas:
        rows.append(Row(f"quota {unknown.instance_type} {unknown.market}", "warn",
                        f"no {unknown.market} vCPU quota code on record for {unknown.instance_type}'s family",
                        "find it with aws service-quotas list-service-quotas --service-code ec2 and check it by "
                        "hand", reads))
    return rows


def lambda_rows(needs: StageNeeds, answers: Answers) -> list[Row]:
    check, reads = "lambda concurrency", "lambda:GetAccountSettings"
    answer = answers.lambda_limits
    calls = needs.credential_calls
    what = (f"{calls} concurrent call{'s' if calls != 1 else ''} to the job-credentials function for the largest job "
            f"({needs.credential_job}: one per node)")
    if answer is None:
        return []
    if isinstance(answer, Unreadable):
        return [_unreadable(check, answer, f"check the Lambda concurrency quota ({LAMBDA_CONCURRENCY.code}) covers "
                            f"{what}")]
    found = (f"unreserved concurrency {answer.unreserved} of {answer.concurrent}; the stage needs {what}, beside its "
             "event functions")
    if answer.unreserved < calls:
        return [Row(check, "fail", found, f"request a higher \"{LAMBDA_CONCURRENCY.name}\" quota (Lambda, "
                    f"{LAMBDA_CONCURRENCY.code}) in {needs.region}, or release reserved concurrency of other "
                    "functions", reads)]
    return [Row(check, "ok", found, "", reads)]


def _first_release_of_line(line: str) -> tuple[str, date] | None:
    """The earliest release (with a date on record) whose driver is of ``line`` (``2.31``) or newer."""
    want = tuple(int(p) for p in line.split("."))
    dated = [(RELEASED[sdk], sdk) for sdk, row in NEURON_RELEASES.items()
             if sdk in RELEASED and tuple(int(p) for p in row.driver.split(".")[:2]) >= want]
    if not dated:
        return None
    day, sdk = min(dated)
    return sdk, day


def _neuron_verdict(sdk: str, created: datetime) -> tuple[Status, str, str]:
    """How an AMI built at ``created`` stands against Neuron SDK ``sdk``: (status, finding, what to do)."""
    built = created.astimezone(UTC).date()
    released = RELEASED.get(sdk)
    move = ("pin trn2.ami_id to an ECS-optimized Neuron AMI built after that day (or wait for the parameter to "
            "move), then check a host: cat /sys/module/neuron/version")
    if released is None:
        return ("warn", f"Neuron SDK {sdk} has no release date on record (lambdas/domain/neuron_stack.py RELEASED)",
                "add its release date from its release notes")
    if built >= released:
        return "ok", f"built {built}, on or after Neuron SDK {sdk}'s release ({released})", ""
    need = minimum_driver(sdk) if sdk in NEURON_RELEASES else None
    first = _first_release_of_line(need) if need else None
    if need and first and built >= first[1]:
        return ("warn", f"built {built}, before Neuron SDK {sdk}'s release ({released}) but after {first[0]} "
                f"({first[1]}) shipped the {need} driver line it needs", move)
    if need and first:
        return ("fail", f"built {built}, before the {need} driver line Neuron SDK {sdk} needs existed ({first[0]}, "
                f"{first[1]}): its driver is older, and the runtime stops at start-up", move)
    return ("warn", f"built {built}, before Neuron SDK {sdk}'s release ({released}): it may carry a driver too old "
            "for it", move)


def ami_rows(needs: StageNeeds, answers: Answers) -> list[Row]:
    rows = []
    for need in needs.amis:
        check = f"AMI {need.track}"
        reads = "ssm:GetParameter, ec2:DescribeImages" if need.parameter else "ec2:DescribeImages"
        ami_id: str | Missing | Unreadable | None = need.ami_id
        origin = f"{need.track}.ami_id"
        if need.parameter:
            ami_id = answers.parameters.get(need.parameter)
            origin = f"{need.parameter} (today)"
            if isinstance(ami_id, Missing):
                rows.append(Row(check, "fail", f"{need.parameter}: {ami_id.what} in {needs.region}",
                                f"set {need.track}.ami_ssm_parameter to a parameter of {needs.region}, or "
                                f"{need.track}.ami_id", reads))
                continue
            if isinstance(ami_id, Unreadable):
                rows.append(_unreadable(check, ami_id, f"aws ssm get-parameter --region {needs.region} --name "
                                        f"{need.parameter}"))
                continue
        if not isinstance(ami_id, str):
            continue
        image = answers.amis.get(ami_id)
        if isinstance(image, Unreadable):
            rows.append(_unreadable(check, image, f"aws ec2 describe-images --region {needs.region} "
                                    f"--image-ids {ami_id}"))
        elif isinstance(image, Missing) or image is None:
            rows.append(Row(check, "fail", f"{ami_id} from {origin}: not found in {needs.region}",
                            f"set {need.track}.ami_id to an AMI of {needs.region}", reads))
        else:
            rows.append(_ami_row(check, need, image, origin, reads))
    return rows


def _ami_row(check: str, need: AmiNeed, image: Ami, origin: str, reads: str) -> Row:
    found = f"{image.ami_id} ({image.name}) from {origin}"
    if need.track != "trn2":
        created = f", created {image.created.date()}" if image.created else ""
        return Row(check, "ok", found + created, "", reads)
    if need.neuron_sdk is None:
        return Row(check, "warn", f"{found}: the stage's Neuron SDK is unknown, so its driver was not compared",
                   "state trn2.image_versions.neuron_sdk", reads)
    if image.created is None:
        return Row(check, "warn", f"{found}: no CreationDate", "check a host: cat /sys/module/neuron/version",
                   reads)
    status, verdict, what_to_do = _neuron_verdict(need.neuron_sdk, image.created)
    return Row(check, status, f"{found}: {verdict}", what_to_do, reads)


def price_rows(needs: StageNeeds) -> list[Row]:
    p = needs.prices
    check, reads = f"prices {p.region}", "none (the price table and the stage's price_overrides)"
    fix = (f"add price_overrides.instances.{p.region}.<type>.hourly_usd (and price_overrides.s3.{p.region}) to the "
           f"stage in cdk.json, or a {p.region} table from `dualtrack prices refresh --region {p.region}`")
    lacking = list(p.missing) + (["S3 rates"] if p.s3_missing else [])
    if lacking:
        return [Row(check, "fail", f"price table {p.table_version} has no {p.region} price for "
                    f"{', '.join(lacking)}: the API would refuse trials, and no run could be costed", fix, reads)]
    if p.estimates:
        return [Row(check, "warn", f"price table {p.table_version} prices {', '.join(p.instance_types)} in "
                    f"{p.region}; {', '.join(p.estimates)} marked estimate (not read from AWS)",
                    f"confirm them: `dualtrack prices refresh --region {p.region}`, or state your rates in "
                    "price_overrides", reads)]
    return [Row(check, "ok", f"price table {p.table_version} prices {', '.join(p.instance_types)} in {p.region}",
                "", reads)]


def checks(needs: StageNeeds, answers: Answers) -> list[Row]:
    """Every row, in the order a deploy meets them: images (built at deploy), zones, quotas, Lambda, AMIs, prices."""
    return [*image_rows(needs, answers), *zone_rows(needs, answers), *quota_rows(needs, answers),
            *lambda_rows(needs, answers), *ami_rows(needs, answers), *price_rows(needs)]


@dataclass(frozen=True)
class Report:
    stage: str
    region: str
    region_from: str
    plane: str  # where the answers came from: "AWS" or the local plane
    account: str | None
    rows: tuple[Row, ...]

    def counts(self) -> dict[Status, int]:
        out: dict[Status, int] = {"ok": 0, "warn": 0, "fail": 0}
        for row in self.rows:
            out[row.status] += 1
        return out

    def summary(self) -> str:
        c = self.counts()
        return f"{c['ok']} ok, {c['warn']} warn, {c['fail']} fail"

    def to_dict(self) -> JsonObject:
        counts: JsonObject = {status: n for status, n in self.counts().items()}
        return {"stage": self.stage, "region": self.region, "region_from": self.region_from, "plane": self.plane,
                "account": self.account, "counts": counts, "rows": [row.to_dict() for row in self.rows]}

