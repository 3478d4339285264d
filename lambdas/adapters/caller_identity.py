"""STS: who signed a presigned GetCallerIdentity request, found by making it.

The request is made only if it is exactly GetCallerIdentity addressed to this region's STS endpoint
(``lambdas.domain.job_access.identity_request``), and it is sent through this function's own STS client, unsigned
by the function: the job's query-string signature is the only one it carries (SigV4 query-string authentication,
IAM user guide, "Authentication methods"). So the client's endpoint, retries and timeouts are botocore's, the same
in AWS (the regional endpoint the job signed for) as in the rehearsal (the local plane's). GetCallerIdentity needs no
permission ("No permissions are required to perform this operation", STS API reference, "GetCallerIdentity"), so
what it answers is the signer, whatever the signer may do; STS refuses a tampered or expired signature."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from lambdas.adapters.aws import error_code, unsigned_client
from lambdas.domain.job_access import IdentityUnproven, identity_request


def sts_endpoints(region: str) -> frozenset[str]:
    """The origins a proof may be addressed to: the region's STS endpoint, and STS's global one."""
    return frozenset({f"https://sts.{region}.amazonaws.com", "https://sts.amazonaws.com"})


class StsCallerIdentity:
    """The ``CallerIdentity`` port: send the job's presigned GetCallerIdentity (GET, its query string) through this
    function's STS client and read the ARN STS answers."""

    def __init__(self, region: str) -> None:
        self.region = region

    def caller(self, presigned_url: str) -> str:
        query = urlsplit(identity_request(presigned_url, sts_endpoints(self.region))).query
        sts = unsigned_client("sts", self.region)
        handler_id = f"dualtrack-identity-proof-{uuid.uuid4()}"

        def use_the_proof(request: Any, **_: Any) -> None:
            # The query protocol would POST a form; the proof was signed as a GET of exactly this query.
            parts = urlsplit(request.url)
            request.url = urlunsplit((parts.scheme, parts.netloc, "/", query, ""))
            request.method, request.data = "GET", b""
            for header in ("Content-Type", "Content-Length"):
                if header in request.headers:
                    del request.headers[header]

        sts.meta.events.register_first("request-created.sts.GetCallerIdentity", use_the_proof,
                                       unique_id=handler_id)
        try:
            answer = sts.get_caller_identity()
        except Exception as exc:
            code = error_code(exc)
            if not code:
                raise
            raise IdentityUnproven(f"STS refused the identity proof ({code}): sign a fresh GetCallerIdentity "
                                   "request with the job's own credentials") from None
        finally:
            sts.meta.events.unregister("request-created.sts.GetCallerIdentity", unique_id=handler_id)
        arn = str(answer.get("Arn") or "")
        if not arn:
            raise IdentityUnproven("STS's answer to the identity proof names no caller")
        return arn

