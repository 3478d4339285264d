"""S3 access of tagged role sessions, held to the role's policy as IAM would: moto checks no policy at all.

A training job writes its artifacts with credentials of the trial writer role, issued with its trial and run as
session tags (``lambdas/domain/job_access.py``); the role's policy names its resources with those tags. moto accepts
any credentials for any object, so in the rehearsal a job could write another trial's prefix and nothing would say
so. :func:`enforce_session_policies` closes that gap for exactly this pattern: STS ``AssumeRole`` calls that carry
session tags are remembered (access key id -> role and tags), and every S3 object read, write and listing signed
with such a key is evaluated against the identity policies the stage attaches to that role: every way of writing
an object is ``s3:PutObject`` on it, as S3 authorizes them (PutObject; CreateMultipartUpload, UploadPart and
CompleteMultipartUpload, https://docs.aws.amazon.com/AmazonS3/latest/userguide/mpuoverview.html#mpuAndPermissions;
CopyObject and UploadPartCopy, which also read their source with ``s3:GetObject``,
https://docs.aws.amazon.com/AmazonS3/latest/API/API_CopyObject.html). Anything else (the rehearsal's own
credentials, the functions', the job role's) is left to moto as before.

The evaluation follows the IAM policy evaluation logic for one identity policy set, no resource policy and no
boundary (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html): an explicit
Deny wins, otherwise an Allow whose Action, Resource and Condition all match is needed, otherwise the request is
denied. ``Action`` and ``Resource`` match with ``*`` and ``?`` wildcards; ``${aws:PrincipalTag/key}`` is replaced
by the session's tag and a statement naming a tag the session lacks does not match
(https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_variables.html). Conditions: ``StringLike``
and ``StringEquals`` on ``s3:prefix`` (ListBucket's request prefix); any other condition makes the statement not
match, so an unknown condition denies rather than allows.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dualtrack.local.json_shapes import mapping, sequence, text
from lambdas.domain.json_types import JsonIn, JsonMapping

if TYPE_CHECKING:
    from moto.core.common_types import TYPE_RESPONSE
    from moto.core.responses import ActionResult, BaseResponse
    from moto.s3.responses import S3Response
    from moto.sts.responses import TokenResponse

_TAG = re.compile(r"\$\{aws:PrincipalTag/([^}]+)\}")
_CREDENTIAL = re.compile(r"Credential=([A-Z0-9]+)/")


class PolicyUnsupported(ValueError):
    """A statement uses a policy element this evaluator does not model."""


@dataclass
class Session:
    role_arn: str
    tags: dict[str, str]


@dataclass
class SessionPolicies:
    """The identity policies of the roles a tagged session may be issued for, and the sessions issued."""

    statements: dict[str, list[JsonMapping]] = field(default_factory=dict)  # role name -> statements
    sessions: dict[str, Session] = field(default_factory=dict)  # access key id -> session
    denied: list[tuple[str, str, str]] = field(default_factory=list)  # (role, action, resource) refused
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def attach(self, role_name: str, statements: Iterable[JsonMapping]) -> None:
        with self._lock:
            self.statements.setdefault(role_name, []).extend(statements)

    def remember(self, access_key_id: str, role_arn: str, tags: dict[str, str]) -> None:
        with self._lock:
            self.sessions[access_key_id] = Session(role_arn, dict(tags))

    def decide(self, access_key_id: str | None, action: str, resource: str,
               context: dict[str, str] | None = None) -> bool | None:
        """True (allowed), False (denied) for a tagged session of a role with attached policies; None when the key
        is not such a session (moto's own answer stands)."""
        session = self.sessions.get(access_key_id or "")
        if session is None:
            return None
        role = session.role_arn.rsplit("/", 1)[-1]
        statements = self.statements.get(role)
        if statements is None:
            return None
        allowed = evaluate(statements, action, resource, session.tags, context or {})
        if not allowed:
            with self._lock:
                self.denied.append((role, action, resource))
        return allowed


def evaluate(statements: Iterable[JsonMapping], action: str, resource: str, tags: dict[str, str],
             context: dict[str, str]) -> bool:
    allowed = False
    for statement in statements:
        if not _matches(statement, action, resource, tags, context):
            continue
        if statement.get("Effect") == "Deny":
            return False
        allowed = True
    return allowed


def _listed(value: JsonIn) -> list[str]:
    """A policy element that is one string or a list of them, as a list."""
    return [value] if isinstance(value, str) else [text(item) for item in sequence(value or [])]


def _substitute(pattern: str, tags: dict[str, str]) -> str | None:
    missing = [key for key in _TAG.findall(pattern) if key not in tags]
    if missing:
        return None
    return _TAG.sub(lambda m: tags[m.group(1)], pattern)


def _glob(pattern: str, value: str, *, case: bool = True) -> bool:
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, 0 if case else re.IGNORECASE) is not None


def _matches(statement: JsonMapping, action: str, resource: str, tags: dict[str, str],
             context: dict[str, str]) -> bool:
    for unsupported in ("NotAction", "NotResource", "NotPrincipal"):
        if unsupported in statement:
            raise PolicyUnsupported(f"{unsupported} is not modelled; add it to dualtrack/local/aws/session_policies.py")
    if not any(_glob(pattern, action, case=False) for pattern in _listed(statement.get("Action"))):
        return False
    resources = [_substitute(p, tags) for p in _listed(statement.get("Resource"))]
    if not any(p is not None and _glob(p, resource) for p in resources):
        return False
    for operator, tests in mapping(statement.get("Condition") or {}).items():
        for key, values in mapping(tests).items():
            given = context.get(key)
            wanted = [v for v in (_substitute(x, tags) for x in _listed(values)) if v is not None]
            if given is None or operator not in ("StringLike", "StringEquals"):
                return False
            if operator == "StringLike" and not any(_glob(w, given) for w in wanted):
                return False
            if operator == "StringEquals" and given not in wanted:
                return False
    return True


# ---- moto seams -------------------------------------------------------------------------------------------------
def _access_key(response: BaseResponse) -> str | None:
    header = response.headers.get("Authorization") or ""
    found = _CREDENTIAL.search(header)
    if found:
        return found.group(1)
    credential = (response.querystring.get("X-Amz-Credential") or [""])[0]  # a presigned URL
    return credential.split("/", 1)[0] or None


# An S3 request handler of moto's: most take no arguments, a few the request's parts (passed on untouched).
_S3Handler = Callable[..., "TYPE_RESPONSE"]


def _guard(policies: SessionPolicies, action: str, original: _S3Handler, *, bucket_level: bool = False) -> _S3Handler:
    from moto.s3.exceptions import S3AccessDeniedError

    def guarded(self: S3Response, *args: Any, **kwargs: Any) -> TYPE_RESPONSE:
        bucket = self.bucket_name
        if bucket_level:
            resource = f"arn:aws:s3:::{bucket}"
            context = {"s3:prefix": (self.querystring.get("prefix") or [""])[0]}
        else:
            key = kwargs.get("key_name") or (args[2] if len(args) >= 3 else self.parse_key_name())
            resource = f"arn:aws:s3:::{bucket}/{key}"
            context = {}
        if policies.decide(_access_key(self), action, resource, context) is False:
            raise S3AccessDeniedError()
        return original(self, *args, **kwargs)

    return guarded


def _guard_copy(policies: SessionPolicies, original: _S3Handler) -> _S3Handler:
    """CopyObject and UploadPartCopy: a write of the destination and a read of the source."""
    from urllib.parse import unquote, urlparse

    from moto.s3.exceptions import S3AccessDeniedError

    def guarded(self: S3Response, *args: Any, **kwargs: Any) -> TYPE_RESPONSE:
        source = self.headers.get("x-amz-copy-source") or ""
        source = source.decode() if isinstance(source, bytes) else source
        resources = [("s3:PutObject", f"arn:aws:s3:::{self.bucket_name}/{self.parse_key_name()}"),
                     ("s3:GetObject", f"arn:aws:s3:::{unquote(urlparse(source).path).lstrip('/')}")]
        if any(policies.decide(_access_key(self), action, arn) is False for action, arn in resources):
            raise S3AccessDeniedError()
        return original(self, *args, **kwargs)

    return guarded


def _guard_multipart(policies: SessionPolicies, original: _S3Handler) -> _S3Handler:
    """A POST on an object that starts (``?uploads``) or completes (``?uploadId``) a multipart upload."""
    from moto.s3.exceptions import S3AccessDeniedError

    def guarded(self: S3Response, request: Any, body: bytes, bucket_name: str, query: dict[str, Any], key_name: str,
                *args: Any, **kwargs: Any) -> TYPE_RESPONSE:
        if ("uploads" in query or "uploadId" in query) and policies.decide(
                _access_key(self), "s3:PutObject", f"arn:aws:s3:::{bucket_name}/{key_name}") is False:
            raise S3AccessDeniedError()
        return original(self, request, body, bucket_name, query, key_name, *args, **kwargs)

    return guarded


def _remember_sessions(policies: SessionPolicies,
                       original: Callable[[TokenResponse], ActionResult]) -> Callable[[TokenResponse], ActionResult]:
    def assume_role(self: TokenResponse) -> ActionResult:
        result = original(self)
        tags = {str(tag["Key"]): str(tag["Value"]) for tag in self._get_param("Tags") or []}
        if tags:
            role = self.backend.assumed_roles[-1]
            policies.remember(role.access_key_id, role.role_arn, tags)
        return result

    return assume_role


@contextmanager
def enforce_session_policies(policies: SessionPolicies) -> Iterator[SessionPolicies]:
    """Hold tagged sessions' S3 object access to their role's policies for the duration of the block."""
    from moto.s3.responses import S3Response
    from moto.sts.responses import TokenResponse

    from dualtrack.local.aws.moto_shims import _patched as patched

    with ExitStack() as stack:
        stack.enter_context(patched(TokenResponse, "assume_role",
                                    _remember_sessions(policies, TokenResponse.assume_role)))
        for method, action in (("put_object", "s3:PutObject"), ("upload_part", "s3:PutObject"),
                               ("get_object", "s3:GetObject"), ("head_object", "s3:GetObject")):
            stack.enter_context(patched(S3Response, method, _guard(policies, action, getattr(S3Response, method))))
        for method in ("copy_object", "upload_part_copy"):
            stack.enter_context(patched(S3Response, method, _guard_copy(policies, getattr(S3Response, method))))
        stack.enter_context(patched(S3Response, "_key_response_post",
                                    _guard_multipart(policies, S3Response._key_response_post)))
        stack.enter_context(patched(S3Response, "list_objects_v2",
                                    _guard(policies, "s3:ListBucket", S3Response.list_objects_v2,
                                           bucket_level=True)))
        yield policies
