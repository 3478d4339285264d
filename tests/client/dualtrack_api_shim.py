"""A local stand-in for API Gateway: http.server on 127.0.0.1 turning requests into REST proxy events.

It checks SigV4 the way API Gateway does for AWS_IAM routes (recomputes the signature with botocore from the
same credentials and answers 403 on a mismatch), then calls any ``handler(event, context)`` and writes its
proxy response back. ``fail_next`` injects transient failures before the handler is reached.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

STAGE = "prod"
ACCOUNT = "123456789012"
_AUTH = re.compile(r"^AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/"
                   r"(?P<service>[^/]+)/aws4_request, ?SignedHeaders=(?P<signed>[^,]+), ?"
                   r"Signature=(?P<sig>[0-9a-f]{64})$")
# API Gateway resource templates, most specific first: the proxy event carries the matched resource.
RESOURCES = ("/trials/{trial_id}/report", "/trials/{trial_id}/cancel", "/trials/{trial_id}/approve",
             "/trials/{trial_id}/reject", "/trials/{trial_id}", "/trials",
             "/compile-cache")


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    verdict: str  # "ok", "injected 503", "rejected: ..."


class LambdaContext:
    function_name = "dualtrack-api-local"
    function_version = "$LATEST"
    memory_limit_in_mb = 512
    invoked_function_arn = f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:dualtrack-api-local"
    log_group_name = "/aws/lambda/dualtrack-api-local"
    log_stream_name = "local"

    def __init__(self) -> None:
        self.aws_request_id = str(uuid.uuid4())

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


def verify_sigv4(method: str, url: str, headers: dict[str, str], body: bytes, credentials: Credentials,
                 region: str) -> str | None:
    """None when the request carries a valid signature by `credentials`, else why not."""
    lower = {k.lower(): v for k, v in headers.items()}
    match = _AUTH.match(lower.get("authorization", ""))
    if not match:
        return "missing or malformed Authorization header"
    if match["key"] != credentials.access_key:
        return f"unknown access key {match['key']}"
    if match["service"] != "execute-api" or match["region"] != region:
        return f"credential scope {match['region']}/{match['service']} is not {region}/execute-api"
    if credentials.token and lower.get("x-amz-security-token") != credentials.token:
        return "missing or wrong X-Amz-Security-Token"
    stamp = lower.get("x-amz-date", "")
    if not stamp.startswith(match["date"]):
        return "X-Amz-Date does not match the credential scope date"
    signed = match["signed"].split(";")
    if "host" not in signed:
        return "host header not signed"
    request = AWSRequest(method=method, url=url, data=body or None, headers={k: lower[k] for k in signed if k in lower})
    request.context["timestamp"] = stamp
    signer = SigV4Auth(credentials, "execute-api", region)
    canonical = signer.canonical_request(request)
    expected = signer.signature(signer.string_to_sign(request, canonical), request)
    return None if expected == match["sig"] else "signature mismatch"


TESTER = f"arn:aws:iam::{ACCOUNT}:user/tester"


def proxy_event(method: str, path: str, query: str, headers: dict[str, str], body: bytes,
                user_arn: str = TESTER) -> dict[str, Any]:
    resource, params = path, None
    for template in RESOURCES:
        pattern = "^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", template) + "$"
        found = re.match(pattern, path)
        if found:
            resource, params = template, found.groupdict() or None
            break
    multi = {k: v for k, v in parse_qs(query, keep_blank_values=True).items()}
    return {
        "resource": resource,
        "path": path,
        "httpMethod": method,
        "headers": dict(headers),
        "multiValueHeaders": {k: [v] for k, v in headers.items()},
        "queryStringParameters": {k: v[-1] for k, v in multi.items()} or None,
        "multiValueQueryStringParameters": multi or None,
        "pathParameters": params,
        "stageVariables": None,
        "requestContext": {
            "resourcePath": resource, "httpMethod": method, "path": f"/{STAGE}{path}", "stage": STAGE,
            "requestId": str(uuid.uuid4()), "accountId": ACCOUNT, "apiId": "local", "protocol": "HTTP/1.1",
            "identity": {"sourceIp": "127.0.0.1", "accessKey": "testing", "caller": "AIDATESTING",
                         "userArn": user_arn, "user": "AIDATESTING",
                         "userAgent": headers.get("User-Agent", "")},
        },
        # API Gateway passes a non-binary media type's body through as text: undecodable bytes arrive replaced.
        "body": body.decode("utf-8", errors="replace") if body else None,
        "isBase64Encoded": False,
    }


@dataclass
class ApiShim:
    handler: Callable[[dict[str, Any], Any], dict[str, Any]]
    credentials: Credentials = field(default_factory=lambda: Credentials("testing", "testing", "testing"))
    # The principal API Gateway reports for the signed requests (IAM maps the access key to it); a test switches it
    # to act as another member of a team.
    user_arn: str = TESTER
    region: str = "us-east-1"
    seen: list[Seen] = field(default_factory=list)
    _failures: list[int] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        assert isinstance(host, str)
        return f"http://{host}:{port}/{STAGE}"

    def fail_next(self, times: int, status: int = 503) -> None:
        self._failures.extend([status] * times)

    def start(self) -> ApiShim:
        shim = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                headers = {k: v for k, v in self.headers.items()}
                record = Seen(self.command, parts.path, headers, body, "ok")
                shim.seen.append(record)
                if shim._failures:
                    status = shim._failures.pop(0)
                    record.verdict = f"injected {status}"
                    return self._reply(status, {"Content-Type": "application/json", "Retry-After": "0"},
                                       b'{"message": "Service Unavailable"}')
                url = f"http://{headers.get('Host', '')}{self.path}"
                problem = verify_sigv4(self.command, url, headers, body, shim.credentials, shim.region)
                if problem:
                    record.verdict = f"rejected: {problem}"
                    return self._reply(403, {"Content-Type": "application/json",
                                             "x-amzn-ErrorType": "InvalidSignatureException"},
                                       b'{"message": "The request signature we calculated does not match"}')
                prefix = f"/{STAGE}"
                if not parts.path.startswith(prefix + "/"):
                    return self._reply(403, {"Content-Type": "application/json"},
                                       b'{"message": "Missing Authentication Token"}')
                event = proxy_event(self.command, parts.path[len(prefix):], parts.query, headers, body,
                                    shim.user_arn)
                result = shim.handler(event, LambdaContext())
                out_headers = dict(result.get("headers") or {})
                for name, values in (result.get("multiValueHeaders") or {}).items():
                    out_headers[name] = ", ".join(values)
                payload = result.get("body") or ""
                if result.get("isBase64Encoded"):
                    import base64

                    raw = base64.b64decode(payload)
                else:
                    raw = payload.encode()
                self._reply(int(result["statusCode"]), out_headers, raw)

            def _reply(self, status: int, headers: dict[str, str], raw: bytes) -> None:
                self.send_response(status)
                for name, value in headers.items():
                    if name.lower() not in ("content-length", "connection"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_POST = do_PUT = do_DELETE = _serve

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
