"""What every remote command shares: connection flags, one error path, and JSON or text output."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from functools import wraps

from dualtrack.client.api import TrialApi, connect
from dualtrack.client.endpoint import ClientOptions, resolve_endpoint
from dualtrack.client.errors import EXIT_CODES_HELP, ClientFailure
from dualtrack.output_option import add_json_option
from lambdas.domain.json_types import JsonIn

ENDPOINT_HELP = """\
endpoint: --endpoint URL, else DUALTRACK_ENDPOINT, else "endpoint" in the config file (DUALTRACK_CONFIG or
  ~/.config/dualtrack/config.json), else the ApiUrl output of the stack Dualtrack-<stage>-Control read with
  DescribeStacks. Requests are signed with SigV4 using the usual AWS credentials (profile, env, SSO, role).
  Network failures, 429 and 5xx are retried with exponential backoff and jitter, then reported."""


def describe(summary: str, examples: str) -> str:
    return f"{summary}\n\n{EXIT_CODES_HELP}\n\n{ENDPOINT_HELP}\n\nexamples:\n{examples}"


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("connection")
    group.add_argument("--endpoint", metavar="URL", help="API base URL (skips stack discovery)")
    group.add_argument("--profile", help="AWS profile for credentials and stack discovery")
    group.add_argument("--region", help="AWS region (default: from the URL, the profile or AWS_REGION)")
    group.add_argument("--stage", help="deployment stage for stack discovery (default: dev)")
    group.add_argument("--stack", dest="stack_name", metavar="NAME", help="control stack name (overrides --stage)")
    group.add_argument("--output-key", metavar="KEY", help="stack output holding the API URL (default: ApiUrl)")
    group.add_argument("--config", dest="config_path", metavar="FILE", help="client config file")
    add_json_option(parser, help="machine-readable output on stdout")


def options(args: argparse.Namespace) -> ClientOptions:
    return ClientOptions(**{k: getattr(args, k, None) for k in ClientOptions.__dataclass_fields__})


def open_api(args: argparse.Namespace) -> TrialApi:
    return connect(resolve_endpoint(options(args)), on_retry=lambda note: print(f"note: {note}", file=sys.stderr))


def emit_json(value: JsonIn) -> None:
    print(json.dumps(value, indent=2, sort_keys=True, default=str))


def report_failure(failure: ClientFailure, *, as_json: bool) -> int:
    if as_json:
        emit_json(failure.as_json())
    else:
        if failure.errors:
            print(f"error: {failure.message}", file=sys.stderr)
        for line in failure.lines():
            print(f"error: {line}" if not failure.errors else f"  {line}", file=sys.stderr)
    return failure.exit_code


def remote_command(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Turn every client failure into its message and exit code; no traceback reaches the user."""

    @wraps(fn)
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except ClientFailure as failure:
            return report_failure(failure, as_json=bool(getattr(args, "json", False)))

    return run
