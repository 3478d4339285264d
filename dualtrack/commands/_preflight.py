"""`dualtrack stage preflight`: before a deploy, read-only, what would fail and what to do."""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dualtrack.client.errors import EXIT_CONFIG
from dualtrack.commands._stage_config import StageUnusable, load_stage
from dualtrack.extras import EXIT_MISSING_EXTRA, extra_missing
from dualtrack.local.preflight import LOCAL_PLANE, PREFLIGHT_FILE, local_preflight
from dualtrack.local.staging import REHEARSAL_STAGE
from dualtrack.output_option import add_json_option
from dualtrack.preflight import (
    LAMBDA_CONCURRENCY,
    ON_DEMAND_G,
    ON_DEMAND_P,
    ON_DEMAND_TRN,
    SPOT_G,
    SPOT_P,
    SPOT_P5,
    SPOT_TRN,
    Report,
)
from dualtrack.preflight_aws import (
    PUBLIC_ECR_URL_ENV,
    Boto3Reads,
    ReadFailed,
    Registry,
    default_region,
    preflight,
)
from infra.synth import REPO_ROOT

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
# What a credentials problem looks like: the command stops before asking anything else.
CREDENTIAL_ERRORS = ("NoCredentialsError", "PartialCredentialsError", "InvalidClientTokenId", "ExpiredToken",
                     "ExpiredTokenException", "SignatureDoesNotMatch", "UnrecognizedClientException",
                     "TokenRetrievalError", "SSOTokenLoadError", "UnauthorizedSSOTokenError")

_QUOTAS = "\n".join(f"    {q.code}  {q.name}" for q in (ON_DEMAND_P, ON_DEMAND_G, ON_DEMAND_TRN, SPOT_P5, SPOT_P,
                                                          SPOT_G, SPOT_TRN))

HELP = f"""\
Before `cdk deploy`, with the deployer's credentials and read-only: what a deploy of the stage would run into, one
row per check (ok / warn / fail), what was found and what to do. Nothing is created or changed.

  image <track>          the base image each track's Dockerfile pins (ARG BASE_IMAGE; the deploy builds on it),
                         or the stage's <track>.image_uri: its manifest exists. public.ecr.aws: the registry's
                         manifest endpoint (HEAD /v2/<repository>/manifests/<tag>) with an anonymous pull token;
                         a private ECR image: ecr:DescribeImages
  zones <track> <type>   each instance type is offered in the zones the stage names (<track>.availability_zone,
                         else availability_zones): ec2:DescribeInstanceTypeOfferings, location type
                         availability-zone (zone names differ between accounts)
  quota <code> <market>  the account's On-Demand (and, for a Spot track, Spot) vCPU quota of each instance family
                         covers the stage's largest job (a multi-node job counts every node; Spot jobs are single
                         node): servicequotas:GetServiceQuota, else its AWS default. Quotas read:
{_QUOTAS}
  lambda concurrency     the unreserved Lambda concurrency covers the job-credentials calls of the largest job (one
                         per node): lambda:GetAccountSettings (the quota is {LAMBDA_CONCURRENCY.code},
                         "{LAMBDA_CONCURRENCY.name}")
  AMI <track>            the AMI the stage's SSM parameter resolves to today (or its pinned ami_id) exists; for
                         Trainium2, its CreationDate against the release date of the image's Neuron SDK: an ECS
                         Neuron AMI carries the driver current when it was built, so one built before the driver
                         line the SDK needs cannot run it: ssm:GetParameter, ec2:DescribeImages
  prices <region>        the price table (with the stage's price_overrides) prices the stage's instance types and
                         S3 in the stage's own region; rows marked estimate warn (no AWS call)

A check AWS did not answer (a permission missing, no network) is a warn naming the call, never an ok.

IAM permissions (read-only; sts:GetCallerIdentity needs none):
  ec2:DescribeInstanceTypeOfferings, ec2:DescribeImages, servicequotas:GetServiceQuota,
  servicequotas:GetAWSDefaultServiceQuota, lambda:GetAccountSettings, ssm:GetParameter (on
  arn:aws:ssm:<region>::parameter/aws/service/ecs/*), ecr:DescribeImages (only for an image_uri in private ECR).
  The ECR Public registry needs no credentials. ${PUBLIC_ECR_URL_ENV} reaches it at another URL (a mirror).

The region is --region, else the stage's region in cdk.json, else AWS_REGION / the profile's, as the AWS CLI reads
them. The stage `{REHEARSAL_STAGE}` is never deployed: its preflight reads {LOCAL_PLANE}, as `dualtrack local run`
does before each rehearsal (writing {PREFLIGHT_FILE} into the run's directory); there EC2 quotas, Lambda's account
settings and the image registry are not emulated, so those rows warn.

exit codes: 0 no check failed (read the warnings), 1 a check failed (with --strict: or warned), 2 unknown or
invalid stage, or no region, 6 no AWS credentials, or credentials AWS rejected, 9 --stage {REHEARSAL_STAGE} without
the rehearsal extra (pip install 'dualtrack[rehearsal]')

examples:
  dualtrack stage preflight --stage prod                    # before: npx --no-install cdk deploy --all -c stage=prod
  AWS_PROFILE=deployer dualtrack stage preflight --stage dev
  dualtrack stage preflight --stage prod --json | jq '.rows[] | select(.status != "ok")'
  dualtrack stage preflight --stage prod --strict && npx --no-install cdk deploy --all -c stage=prod
  dualtrack stage preflight --stage {REHEARSAL_STAGE}                   # the rehearsal's stage, on {LOCAL_PLANE}
"""


def register(actions: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = actions.add_parser("preflight", help="before a deploy: what would fail, and what to do (read-only)",
                                description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", help="a stage of cdk.json's dualtrack:stages (default: dualtrack:default-stage)")
    parser.add_argument("--region", help="read this region (default: the stage's region, else AWS_REGION or the "
                                         "profile's)")
    parser.add_argument("--strict", action="store_true", help="a warning fails the preflight too (exit 1)")
    add_json_option(parser, help="machine-readable result on stdout")
    parser.set_defaults(func=run)


def _region(args: argparse.Namespace, configured: str | None) -> tuple[str | None, str]:
    if args.region:
        return args.region, "--region"
    if configured:
        return configured, "cdk.json region"
    return default_region(), "AWS_REGION, AWS_DEFAULT_REGION or the profile's; the stage sets no region"


def run(args: argparse.Namespace) -> int:
    try:
        config = load_stage(args.stage, "dualtrack stage preflight")
    except StageUnusable as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    if config.name == REHEARSAL_STAGE:
        if extra_missing("rehearsal", f"dualtrack stage preflight --stage {REHEARSAL_STAGE}"):
            return EXIT_MISSING_EXTRA
        report = local_preflight(config, REPO_ROOT)
    else:
        region, region_from = _region(args, config.region)
        if not region:
            print(f"stage {config.name} sets no region: pass --region, or set AWS_REGION", file=sys.stderr)
            return EXIT_USAGE
        reads = Boto3Reads(region, registry=Registry.from_environment())
        try:
            reads.account()
        except ReadFailed as exc:
            if exc.unreadable.code in CREDENTIAL_ERRORS:
                print(f"no usable AWS credentials: {exc.unreadable.code}: {exc.unreadable.message} (set "
                      "AWS_PROFILE, or run `aws sso login`)", file=sys.stderr)
                return EXIT_CONFIG
        if not args.json:
            print(f"reading {region} for stage {config.name} ({region_from}) ...", file=sys.stderr)
        report = preflight(config, reads, region=region, region_from=region_from, root=REPO_ROOT)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        show(report)
    counts = report.counts()
    return EXIT_FAILED if counts["fail"] or (args.strict and counts["warn"]) else EXIT_OK


_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red"}


def show(report: Report) -> None:
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=160)
    account = f", account {report.account}" if report.account else ""
    console.print(f"[bold]stage {report.stage}[/bold]: preflight in {report.region} ({report.region_from}"
                  f"{account}), read from {report.plane}")
    table = Table(show_lines=True)
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    # Fold, never elide: a parameter name, an AMI name or a command to run must be read whole.
    table.add_column("found", ratio=3, overflow="fold")
    table.add_column("what to do", ratio=2, overflow="fold")
    for row in report.rows:
        table.add_row(escape(row.check), f"[{_STYLE[row.status]}]{row.status}[/]", escape(row.found),
                      escape(row.action or "-"))
    console.print(table)
    counts = report.counts()
    style = "bold red" if counts["fail"] else "yellow" if counts["warn"] else "green"
    console.print(f"[{style}]{report.summary()}[/]: "
                  + ("a deploy would run into the failed rows" if counts["fail"] else
                     "nothing failed; read the warnings" if counts["warn"] else "nothing in the way"))
