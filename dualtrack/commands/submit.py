"""`dualtrack submit`: validate locally, show triage and the worst case, confirm when needed, then launch."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from decimal import Decimal

from dualtrack.client.cli_support import add_connection_arguments, describe, emit_json, open_api, remote_command
from dualtrack.client.errors import EXIT_INVALID, EXIT_OK, EXIT_REFUSED, EXIT_TRIAL_FAILED
from dualtrack.commands._common import CommandError, load_trial, print_problems, read_trial_text, usd
from lambdas.domain.json_types import JsonObject
from lambdas.domain.money.prices import PriceMissing, load_price_table, worst_case_usd
from lambdas.domain.trial.spec import TrialSpec
from lambdas.domain.trial.triage import TriageResult, submission_refusal, triage
from lambdas.domain.vocabulary import DEFAULT_MAX_ATTEMPTS

HELP = describe(
    """\
Submit a trial to the deployed API. The file is first checked locally with the same model and messages as the API
(`dualtrack validate`), then triaged and priced (worst case = hourly price x nodes x limits.max_hours per run,
GPU fallback included). You are asked to confirm when the route is not dual_track or the worst case exceeds
limits.max_usd; --yes confirms for scripts (without a terminal and without --yes nothing is launched).
Submitting the same trial again answers with the existing trial and starts nothing new.""",
    """\
  dualtrack submit examples/trial-llama31-8b-lora.json
  dualtrack submit --yes --json trial.json | jq -r .trial.trial_id
  dualtrack submit --endpoint https://abc123.execute-api.us-east-1.amazonaws.com/prod/ trial.json""",
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("submit", help="launch a trial on the deployed API", description=HELP,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trial", metavar="TRIAL.json", help="trial file ('-' reads standard input)")
    parser.add_argument("--yes", "-y", action="store_true", help="launch without asking")
    add_connection_arguments(parser)
    parser.set_defaults(func=run)


@dataclass(frozen=True)
class Preflight:
    """What the API will decide about a trial, worked out locally before anything is spent."""

    triage: TriageResult
    refusal: str | None
    price_table: str
    worst_case_usd: dict[str, Decimal]  # per run and "total"; empty when unknown
    price_note: str | None  # why the worst case is unknown, when a price is missing
    max_usd: float | None
    over_limit: bool
    confirm_because: list[str]

    def local(self) -> JsonObject:
        """The local check as ``--json`` shows it next to the API's answer."""
        return {"triage": self.triage.model_dump(mode="json"), "price_table": self.price_table,
                "max_usd": self.max_usd, "over_limit": self.over_limit,
                "confirm_because": [*self.confirm_because],
                "worst_case_usd": {k: str(v) for k, v in self.worst_case_usd.items()}}


def preflight(spec: TrialSpec) -> Preflight:
    """Local triage and worst case: what the API will decide, shown before anything is spent."""

    result = triage(spec)
    table = load_price_table()
    refusal = submission_refusal(spec, result)
    worst_case: dict[str, Decimal] = {}
    price_note: str | None = None
    try:
        worst_case = worst_case_usd(spec, table, attempts=DEFAULT_MAX_ATTEMPTS)
    except PriceMissing as exc:
        price_note = str(exc)
    limit = spec.limits.max_usd if spec.limits else None
    worst = worst_case.get("total")
    reasons = []
    if result.route != "dual_track":
        reasons.append(f"triage routes this trial to {result.route}, not dual_track ({result.scenario}: "
                       f"{result.conclusion})")
    over_limit = worst is not None and limit is not None and worst > Decimal(str(limit))
    if worst is not None and over_limit:
        reasons.append(f"worst case {usd(worst)} exceeds limits.max_usd {usd(Decimal(str(limit)))}")
    return Preflight(triage=result, refusal=refusal, price_table=table.version, worst_case_usd=worst_case,
                     price_note=price_note, max_usd=limit, over_limit=over_limit, confirm_because=reasons)


def show_preflight(spec: TrialSpec, check: Preflight) -> None:
    triage = check.triage
    print(f"trial {spec.trial_id}: valid", file=sys.stderr)
    print(f"  route {triage.route} ({triage.scenario}): {triage.conclusion}", file=sys.stderr)
    for reason in triage.reasons:
        print(f"    because {reason}", file=sys.stderr)
    if triage.risks:
        print(f"    risks: {', '.join(triage.risks)}", file=sys.stderr)
    worst = check.worst_case_usd
    if worst:
        parts = ", ".join(f"{k} {usd(v)}" for k, v in worst.items() if k != "total")
        limit = f" vs limits.max_usd {usd(Decimal(str(check.max_usd)))}" if check.max_usd is not None else ""
        print(f"  worst case {usd(worst['total'])} ({parts}){limit}; local price table {check.price_table}, "
              "the API checks with the deployment's prices", file=sys.stderr)
    elif check.price_note:
        print(f"  worst case unknown: {check.price_note}", file=sys.stderr)
    else:
        print("  worst case unknown: no limits.max_hours (add limits {max_hours, max_usd})", file=sys.stderr)


def confirmed(reasons: list[str]) -> bool | None:
    """True/False from the prompt; None when there is no terminal to ask on."""
    if not sys.stdin.isatty():
        return None
    for reason in reasons:
        print(f"  attention: {reason}", file=sys.stderr)
    try:
        answer = input("launch this trial? [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


@remote_command
def run(args: argparse.Namespace) -> int:
    try:
        spec = load_trial(args.trial, local=False)
    except CommandError as exc:
        print_problems(args.trial, exc.problems, as_json=args.json)
        return EXIT_INVALID
    raw = json.loads(read_trial_text(args.trial)) if args.trial != "-" else spec.model_dump(mode="json",
                                                                                             exclude_none=True)
    check = preflight(spec)
    if not args.json:
        show_preflight(spec, check)
    local = check.local()
    if check.refusal:
        if args.json:
            emit_json({"ok": False, "exit_code": EXIT_REFUSED, "message": check.refusal, "local": local})
        else:
            print(f"error: {check.refusal}", file=sys.stderr)
        return EXIT_REFUSED
    if check.confirm_because and not args.yes:
        answer = confirmed(check.confirm_because)
        if answer is not True:
            message = ("not launched: confirmation needed (" + "; ".join(check.confirm_because) + ")"
                       + ("; no terminal to ask on, pass --yes to launch from a script" if answer is None else ""))
            if args.json:
                emit_json({"ok": False, "exit_code": EXIT_TRIAL_FAILED, "message": message, "local": local})
            else:
                print(message, file=sys.stderr)
            return EXIT_TRIAL_FAILED
    done = open_api(args).submit(raw)
    body = done.body
    if args.json:
        emit_json({"ok": True, "created": done.created, "trial": body, "local": local})
        return EXIT_OK
    if done.created and body.get("status") == "PENDING_APPROVAL":
        reasons = "; ".join((body.get("approval") or {}).get("reasons") or [])
        print(f"submitted {body.get('trial_id')}: waiting for an approver of team {body.get('team')} ({reasons}); "
              f"nothing runs until one approves: dualtrack approve {body.get('trial_id')} --comment ...")
    elif done.created:
        print(f"submitted {body.get('trial_id')}: workflow started ({body.get('execution_arn')})")
    else:
        print(f"already submitted {body.get('trial_id')} (status {body.get('status')}): no second run started")
    follows = body.get("follows")
    if follows:
        print(f"after {follows.get('trial_id')} (same model): {follows.get('summary')}")
    print(f"follow it with: dualtrack watch {body.get('trial_id')}")
    return EXIT_OK
