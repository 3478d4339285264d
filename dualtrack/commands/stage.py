"""`dualtrack stage cost`: what a deployed stage costs per month while no trial runs."""

from __future__ import annotations

import argparse
import json
import sys
from decimal import Decimal, InvalidOperation

from rich.console import Console
from rich.table import Table

from dualtrack.client.display import align_markdown_tables
from dualtrack.commands import _preflight as preflight
from dualtrack.extras import EXIT_MISSING_EXTRA, extra_missing
from dualtrack.output_option import add_json_option
from dualtrack.stage_cost import (
    ENDPOINT_GB,
    FLOW_LOG_GB,
    HOURS_PER_MONTH,
    LOG_GB,
    SHIPPED_TABLE,
    CostLine,
    StageCost,
    StageCostError,
    UsageLine,
    idle_cost,
    load_platform_prices,
    money,
)
from infra.config import ConfigInvalid, stage_config
from infra.synth import REPO_ROOT, SynthFailed, synthesize
from lambdas.domain.json_types import JsonObject
from lambdas.domain.money.prices import load_price_table

EXIT_OK, EXIT_SYNTH_FAILED, EXIT_USAGE = 0, 1, 2

HELP = f"""\
What a deployed stage costs per month while no trial runs. Its Batch queues cost nothing idle (min vCPUs 0), and
neither do Step Functions, Lambda, API Gateway, EventBridge, SNS, SQS or on-demand DynamoDB, which bill per use; but
the stage keeps resources that bill by the hour or the month regardless. The command synthesizes the stage offline
(no AWS calls, no credentials; the assembly is cached by source hash) and counts, in its CloudFormation templates:

  interface VPC endpoints     per endpoint per Availability Zone per hour: one zone per subnet it lists, and
                              a partial hour bills as a full hour (gateway endpoints, S3's here, are free)
  NAT gateways, Elastic IPs   per hour
  warm Batch capacity         per instance-hour: the instances a compute environment's min vCPUs keep running
                              (the stage's <track>.warm_vcpus), at the instance rates its runs are billed at
  KMS customer managed keys   per key-month (a key with rotation adds a key-month per rotation)
  CloudWatch alarms           per alarm metric per month (a metric-math alarm counts each metric in it)
  CloudWatch dashboards       per dashboard-month

Each fixed line is quantity x unit price x {HOURS_PER_MONTH} hours (or x 1 month) = USD per month. What bills per GB
(log ingestion, VPC flow logs, log storage, data through the endpoints) is listed with its rate, and gets a monthly
figure only from a volume you state: --log-gb-per-month, --flow-log-gb-per-month, --endpoint-gb-per-month.

Not counted: the account-wide free tiers (3 dashboards, 10 alarm metrics, 5 GB of logs a month), what the stage
stores (S3 objects, DynamoDB items, archived logs, the trainer images in the CDK asset repository), KMS requests,
data transfer, and anything outside the stage's templates (the CDK bootstrap stack, CloudTrail). Anything in the
templates the model cannot price (a provisioned DynamoDB table, min vCPUs on Spot capacity, a composite alarm) is
listed under "not priced" rather than left out silently.

The region is the stage's `region` in cdk.json, else its `price_region` (one that sets neither needs --region:
no other region's rates stand in); --region overrides it. Prices come
from the versioned table dualtrack/data/{SHIPPED_TABLE} (source and confidence per row): rows marked
estimate were not confirmed from AWS's own text, so check them in the AWS Pricing Calculator or pass your rates
with --prices.

exit codes: 0 priced, 1 the stage did not synthesize, 2 unknown or invalid stage, or no prices for its region,
9 the deploy extra (the CDK app's libraries) is not installed: pip install 'dualtrack[deploy]'

examples:
  dualtrack stage cost                                      # the default stage (cdk.json dualtrack:default-stage)
  dualtrack stage cost --stage prod
  dualtrack stage cost --stage prod --log-gb-per-month 20   # and 20 GB of logs ingested a month
  dualtrack stage cost --stage dev --json | jq .fixed_monthly_usd
  dualtrack stage cost --stage prod --markdown              # the table docs/deploying.md shows
  dualtrack stage cost --prices my-rates.json               # negotiated rates, in the shipped table's format
"""


STAGE_HELP = """\
A stage of cdk.json (dualtrack:stages), before and after its deploy:

  preflight   before `cdk deploy`, read-only with the deployer's credentials: images, zones, quotas, Lambda
              concurrency, the Neuron AMI and prices, one row each with what to do (dualtrack stage preflight -h)
  cost        what the deployed stage costs per month while no trial runs, from its synthesized templates
              (dualtrack stage cost -h)
"""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("stage", help="a stage's pre-deploy checks and idle cost", description=STAGE_HELP,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="stage_command", metavar="ACTION", required=True)
    preflight.register(actions)
    cost = actions.add_parser("cost", help="the stage's monthly cost while no trial runs", description=HELP,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    cost.add_argument("--stage", help="a stage of cdk.json's dualtrack:stages (default: dualtrack:default-stage)")
    cost.add_argument("--region", help="price in this region's rates (default: the stage's region, else its "
                                       "price_region)")
    cost.add_argument("--prices", metavar="FILE", help=f"platform price table (default: the shipped {SHIPPED_TABLE})")
    cost.add_argument("--log-gb-per-month", type=_gb, metavar="N",
                      help="assume N GB a month ingested into the stage's log groups (Lambda, API, workflow, jobs)")
    cost.add_argument("--flow-log-gb-per-month", type=_gb, metavar="N",
                      help="assume N GB a month of VPC flow log records")
    cost.add_argument("--endpoint-gb-per-month", type=_gb, metavar="N",
                      help="assume N GB a month through the interface endpoints")
    output = cost.add_mutually_exclusive_group()
    add_json_option(output, help="machine-readable result on stdout")
    output.add_argument("--markdown", action="store_true", help="Markdown tables (for docs) on stdout")
    cost.set_defaults(func=run_cost)


def _gb(text: str) -> Decimal:
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of GB") from None
    if not value.is_finite() or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of GB, 0 or more")
    return value


def run_cost(args: argparse.Namespace) -> int:
    cdk_json = REPO_ROOT / "cdk.json"
    if not cdk_json.exists():
        print(f"no cdk.json at {REPO_ROOT}: `dualtrack stage cost` prices a stage of a dualtrack checkout",
              file=sys.stderr)
        return EXIT_USAGE
    context: JsonObject = json.loads(cdk_json.read_text())["context"]
    defined = context.get("dualtrack:stages")
    stages = defined if isinstance(defined, dict) else {}
    default = context.get("dualtrack:default-stage")
    stage: str = args.stage or (default if isinstance(default, str) else None) or "dev"
    if stage not in stages:
        print(f"unknown stage {stage!r}: cdk.json defines {', '.join(sorted(stages)) or 'no stages'} "
              "(context dualtrack:stages)", file=sys.stderr)
        return EXIT_USAGE
    try:
        config = stage_config(context, stage)
    except ConfigInvalid as exc:
        print(f"stage {stage!r} is invalid: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.region:
        region, region_from = args.region, "--region"
    elif config.region:
        region, region_from = config.region, "cdk.json region"
    elif config.price_region:
        region, region_from = config.price_region, "cdk.json price_region; the stage sets no region"
    else:
        print(f"stage {stage} sets no region (nor price_region): pass --region, the region it deploys to; no other "
              "region's rates stand in", file=sys.stderr)
        return EXIT_USAGE
    try:
        table = load_platform_prices(args.prices)
        table.rates(region)
    except (OSError, ValueError) as exc:
        print(f"price table: {str(exc).splitlines()[0] if str(exc) else exc}", file=sys.stderr)
        return EXIT_USAGE
    if extra_missing("deploy", "dualtrack stage cost"):
        return EXIT_MISSING_EXTRA
    if not args.json:
        print(f"synthesizing stage {stage} (offline; reused while infra/, lambdas/, containers/ and cdk.json are "
              "unchanged) ...", file=sys.stderr)
    try:
        templates = synthesize(stage).templates()
    except SynthFailed as exc:
        print(f"stage {stage} did not synthesize: {exc}", file=sys.stderr)
        return EXIT_SYNTH_FAILED
    assumptions = {LOG_GB: args.log_gb_per_month, FLOW_LOG_GB: args.flow_log_gb_per_month,
                   ENDPOINT_GB: args.endpoint_gb_per_month}
    try:
        # Warm capacity bills at the rates the plane bills the stage's runs with: its price table and overrides, in
        # the stage's own region.
        cost = idle_cost(templates, table, region,
                         assumptions={k: v for k, v in assumptions.items() if v is not None},
                         instance_prices=load_price_table(config.priced_overrides()),
                         instance_region=config.pricing_region)
    except StageCostError as exc:
        print(f"stage {stage}: {exc}", file=sys.stderr)
        return EXIT_SYNTH_FAILED
    if args.json:
        print(json.dumps({"stage": stage, "region_from": region_from, **cost.to_dict()}, indent=2))
    elif args.markdown:
        print(markdown(stage, region_from, cost))
    else:
        show(stage, region_from, cost)
    return EXIT_OK


def _unit_price(line: CostLine | UsageLine) -> str:
    return f"${line.rate.usd}/{line.rate.unit}"


def _periods(line: CostLine) -> str:
    return f"x {line.periods} h" if line.period_unit == "hours" else "x 1 month"


def _quantity(line: CostLine) -> str:
    return f"{line.quantity} {line.quantity_unit}"


def _estimates(cost: StageCost) -> int:
    rates = [line.rate for line in cost.fixed] + [line.rate for line in cost.usage]
    return sum(1 for rate in rates if rate.confidence == "estimate")


def _footer(cost: StageCost) -> list[str]:
    lines = [f"Prices: platform price table {cost.table_version} ({SHIPPED_TABLE} or --prices), "
             f"{cost.hours_per_month} hours a month; {_estimates(cost)} of the "
             f"{len(cost.fixed) + len(cost.usage)} rates above are marked estimate (see the table's source per row).",
             "Free tiers are per account and not subtracted."]
    return lines


def show(stage: str, region_from: str, cost: StageCost) -> None:
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=120)
    console.print(f"[bold]stage {stage}[/bold]: idle monthly cost in {cost.region} ({region_from})")
    fixed = Table(title="Billed every month, whether or not a trial runs", title_justify="left", show_footer=True)
    fixed.add_column("item", footer="total fixed")
    fixed.add_column("quantity x unit price (x hours a month)")
    fixed.add_column("USD/month", justify="right", footer=money(cost.fixed_total_usd))
    fixed.add_column("confidence")
    for line in cost.fixed:
        hours = f" {_periods(line)}" if line.period_unit == "hours" else ""
        fixed.add_row(line.item, f"{_quantity(line)} x {_unit_price(line)}{hours}",
                      money(line.monthly_usd), line.rate.confidence)
    console.print(fixed)
    for line in cost.fixed:
        console.print(f"  [dim]{line.item}: {line.detail}[/dim]", soft_wrap=True)
    usage = Table(title="Billed per GB (a figure only for a volume you state)", title_justify="left")
    usage.add_column("item")
    usage.add_column("unit price")
    usage.add_column("USD/month", justify="right")
    usage.add_column("confidence")
    for u in cost.usage:
        usage.add_row(u.item, _unit_price(u),
                      "-" if u.monthly_usd is None else f"{money(u.monthly_usd)} at {u.assumed_gb} GB",
                      u.rate.confidence)
    console.print(usage)
    for u in cost.usage:
        console.print(f"  [dim]{u.item}: {u.detail}[/dim]", soft_wrap=True)
    if cost.assumed_usage_usd:
        console.print(f"Total with the stated volumes: [bold]{money(cost.total_usd)}[/bold] a month")
    console.print("Nothing while idle:")
    for f in cost.free:
        console.print(f"  {f.service} ({f.count}): {f.why}")
    for item in cost.unpriced:
        console.print(f"[yellow]not priced[/yellow]: {item}", soft_wrap=True)
    for note in _footer(cost):
        console.print(f"[dim]{note}[/dim]", soft_wrap=True)


def markdown(stage: str, region_from: str, cost: StageCost) -> str:
    out = [f"Stage `{stage}`, {cost.region} ({region_from}):", "",
           "| Billed every month | Quantity | Unit price | Periods | USD/month |",
           "|---|---|---|---|---:|"]
    out += [f"| {line.item} | {_quantity(line)} | {_unit_price(line)} | {_periods(line)} | "
            f"{money(line.monthly_usd)} |" for line in cost.fixed]
    out += [f"| **Total fixed** | | | | **{money(cost.fixed_total_usd)}** |", "",
            "| Billed per GB | Unit price | USD/month |", "|---|---|---:|"]
    out += [f"| {u.item} | {_unit_price(u)} | "
            f"{'-' if u.monthly_usd is None else f'{money(u.monthly_usd)} at {u.assumed_gb} GB'} |"
            for u in cost.usage]
    for note in [*(f"Not priced: {item}" for item in cost.unpriced), *_footer(cost)]:
        out += ["", note]
    return align_markdown_tables("\n".join(out) + "\n").rstrip("\n")
