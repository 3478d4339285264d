"""Where the trial API lives and who signs for it.

Resolution order, first hit wins: ``--endpoint URL``; ``DUALTRACK_ENDPOINT``; the config file's ``endpoint``
(``DUALTRACK_CONFIG`` or ``~/.config/dualtrack/config.json``); the deployed control stack's CloudFormation output
(``DescribeStacks`` with the user's profile and region). Credentials come from boto3's usual chain.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dualtrack.client.errors import ConfigFailure

if TYPE_CHECKING:
    from boto3.session import Session

DEFAULT_STAGE = "dev"
DEFAULT_OUTPUT_KEY = "ApiUrl"  # infra/stacks/control.py: CfnOutput(self, "ApiUrl", ...)
_EXECUTE_API_HOST = re.compile(r"^[a-z0-9]+\.execute-api\.(?P<region>[a-z]{2}(-[a-z]+)+-\d)\.amazonaws\.com(\.cn)?$")


class ClientConfigFile(BaseModel):
    """`~/.config/dualtrack/config.json`: every key optional; command-line flags override it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    endpoint: str | None = Field(default=None, description="API base URL, e.g. https://<id>.execute-api.<region>"
                                 ".amazonaws.com/prod")
    region: str | None = Field(default=None, description="signing region (default: from the URL or the profile)")
    profile: str | None = Field(default=None, description="AWS profile for credentials and DescribeStacks")
    stage: str | None = Field(default=None, description="deployment stage; the control stack is "
                              "Dualtrack-<stage>-Control")
    stack_name: str | None = Field(default=None, description="control stack whose output holds the API URL")
    output_key: str | None = Field(default=None, description="that output's key")
    timeout_s: float | None = Field(default=None, gt=0, le=600, description="per-request timeout in seconds")
    max_attempts: int | None = Field(default=None, ge=1, le=10, description="attempts per request (1 = no retry)")


@dataclass(frozen=True)
class ClientOptions:
    """What the user asked for on the command line (None = not given)."""

    endpoint: str | None = None
    region: str | None = None
    profile: str | None = None
    stage: str | None = None
    stack_name: str | None = None
    output_key: str | None = None
    config_path: str | None = None


@dataclass(frozen=True)
class Endpoint:
    url: str  # base URL without a trailing slash
    region: str  # SigV4 signing region
    source: str  # where the URL came from, for messages
    profile: str | None = None
    timeout_s: float = 30.0
    max_attempts: int = 5


def config_path(explicit: str | None = None) -> Path:
    if explicit:
        return Path(explicit).expanduser()
    if os.environ.get("DUALTRACK_CONFIG"):
        return Path(os.environ["DUALTRACK_CONFIG"]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "dualtrack" / "config.json"


def load_config_file(path: Path, *, required: bool) -> ClientConfigFile:
    if not path.exists():
        if required:
            raise ConfigFailure(f"{path}: no such config file (set DUALTRACK_CONFIG or pass --config to a real file)")
        return ClientConfigFile()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigFailure(f"{path}: cannot read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ConfigFailure(f"{path}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    try:
        return ClientConfigFile.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '<file>'}: {e['msg'].lower()}" for e in exc.errors())
        allowed = ", ".join(ClientConfigFile.model_fields)
        raise ConfigFailure(f"{path}: {problems} (allowed keys: {allowed})") from None


def check_url(url: str, source: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.netloc:
        raise ConfigFailure(f"{source}: {url!r} is not an http(s) URL; expected e.g. "
                            "https://<id>.execute-api.<region>.amazonaws.com/prod")
    if parts.query or parts.fragment:
        raise ConfigFailure(f"{source}: {url!r} must not carry a query or fragment; give the API's base URL")
    return url.rstrip("/")


def region_from_url(url: str) -> str | None:
    match = _EXECUTE_API_HOST.match(urlsplit(url).hostname or "")
    return match.group("region") if match else None


def session(profile: str | None, region: str | None) -> Session:
    """A boto3 session for ``profile`` in ``region``. Without ``region``, ``AWS_REGION`` is honoured before
    ``AWS_DEFAULT_REGION`` and the profile's region, as the AWS CLI and the other SDKs do (AWS SDKs and Tools
    Reference Guide, "AWS Region"); boto3 alone reads only ``AWS_DEFAULT_REGION`` and the profile."""
    import boto3
    from botocore.exceptions import ProfileNotFound

    try:
        return boto3.Session(profile_name=profile, region_name=region or os.environ.get("AWS_REGION") or None)
    except ProfileNotFound:
        raise ConfigFailure(f"AWS profile {profile!r} not found in ~/.aws/config or ~/.aws/credentials "
                            "(use --profile NAME or set AWS_PROFILE)") from None


def stack_output(boto_session: Session, stack_name: str, output_key: str) -> str:
    """The API URL from the control stack's outputs; CDK may suffix output ids with a hash, so a prefix matches."""
    from botocore.exceptions import BotoCoreError, ClientError

    where = f"stack {stack_name} in {boto_session.region_name or '<no region>'}"
    if not boto_session.region_name:
        raise ConfigFailure("no AWS region: pass --region, set AWS_REGION or the profile's region, or pass --endpoint")
    try:
        got = boto_session.client("cloudformation").describe_stacks(StackName=stack_name)
    except ClientError as exc:
        text = exc.response.get("Error", {}).get("Message", str(exc))
        raise ConfigFailure(f"cannot read {where}: {text} (deploy it, pass --stack NAME, or pass --endpoint URL)"
                            ) from None
    except BotoCoreError as exc:
        raise ConfigFailure(f"cannot read {where}: {exc} (pass --endpoint URL to skip stack discovery)") from None
    stacks = got.get("Stacks") or []
    outputs = {o["OutputKey"]: o["OutputValue"] for o in (stacks[0].get("Outputs") or [])} if stacks else {}
    if output_key in outputs:
        return str(outputs[output_key])
    near = sorted(k for k in outputs if k.startswith(output_key))
    if len(near) == 1:
        return str(outputs[near[0]])
    keys = ", ".join(sorted(outputs)) or "none"
    raise ConfigFailure(f"{where} has no output {output_key!r} (outputs: {keys}); pass --output-key KEY")


def control_stack_name(stage: str | None) -> str:
    # infra/app.py names stacks f"Dualtrack-{stage}-Control".
    return f"Dualtrack-{stage or DEFAULT_STAGE}-Control"


def resolve_endpoint(options: ClientOptions) -> Endpoint:
    path = config_path(options.config_path)
    file = load_config_file(path, required=bool(options.config_path or os.environ.get("DUALTRACK_CONFIG")))
    profile = options.profile or file.profile or os.environ.get("AWS_PROFILE") or None
    region = options.region or file.region
    timeout_s = file.timeout_s if file.timeout_s is not None else 30.0
    max_attempts = file.max_attempts if file.max_attempts is not None else 5
    if options.endpoint:
        url, source = check_url(options.endpoint, "--endpoint"), "--endpoint"
    elif os.environ.get("DUALTRACK_ENDPOINT"):
        url, source = check_url(os.environ["DUALTRACK_ENDPOINT"], "DUALTRACK_ENDPOINT"), "DUALTRACK_ENDPOINT"
    elif file.endpoint:
        url, source = check_url(file.endpoint, f"{path}: endpoint"), str(path)
    else:
        stack = options.stack_name or file.stack_name or control_stack_name(options.stage or file.stage)
        key = options.output_key or file.output_key or DEFAULT_OUTPUT_KEY
        found = stack_output(session(profile, region), stack, key)
        url, source = check_url(found, f"stack {stack} output {key}"), f"stack {stack} output {key}"
    region = region or region_from_url(url) or session(profile, None).region_name
    if not region:
        raise ConfigFailure(f"no signing region for {url}: pass --region, or set AWS_REGION or the profile's region")
    return Endpoint(url=url, region=region, source=source, profile=profile, timeout_s=timeout_s,
                    max_attempts=max_attempts)
