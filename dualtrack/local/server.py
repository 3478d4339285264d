"""In-process AWS for the rehearsal: a moto server on loopback that the trainer subprocesses reach too.

The rehearsal's Lambdas run in this process and its Batch jobs run as subprocesses, so AWS has to be reachable
from both: a threaded moto server on 127.0.0.1 with an OS-assigned port, and ``AWS_ENDPOINT_URL`` pointing every
boto3 client (ours, the handlers', the trainer's) at it. moto's Step Functions interpreter calls other services
through ``localhost:$MOTO_PORT``, so that is set as well.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

from dualtrack.local.aws.moto_shims import moto_settings, reset_moto
from dualtrack.local.environment import overlay

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

    from moto.moto_server.threaded_moto_server import ThreadedMotoServer

REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's default account

MOTO_CONFIG = {
    "batch": {"use_docker": False},
    "lambda": {"use_docker": False},
    "stepfunctions": {"execute_state_machine": True},
}


@dataclass(frozen=True)
class LocalAws:
    endpoint_url: str
    region: str = REGION
    account: str = ACCOUNT

    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": "rehearsal",
            "AWS_SECRET_ACCESS_KEY": "rehearsal",
            "AWS_SESSION_TOKEN": "rehearsal",
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
        }


_DYNAMODB = threading.Lock()


def one_dynamodb_request_at_a_time(app: WSGIApplication) -> WSGIApplication:
    """moto's in-memory backends are not thread-safe (getmoto/moto#372): a Scan or Query iterating a table while
    another thread's PutItem adds to it fails with "dictionary changed size during iteration", a 500 that the SDK
    retries or, on a write, may lose. The rehearsal's threads (the functions, the workflow, the jobs' reporters) all
    reach DynamoDB through this server, so its DynamoDB requests are served one at a time. A DynamoDB request calls
    no other service, so holding the lock never waits on another request."""

    def serve(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if str(environ.get("HTTP_X_AMZ_TARGET", "")).startswith("DynamoDB_"):
            with _DYNAMODB:
                return list(app(environ, start_response))  # the body is produced inside the lock
        return app(environ, start_response)

    return serve


def presigned_requests_reach_their_service(app: WSGIApplication) -> WSGIApplication:
    """moto's server picks the service of a request from its ``Authorization`` header, and sends one without it to
    S3; AWS accepts the same SigV4 signature in the query string (a presigned request: IAM user guide, "Signing AWS
    API requests", query string parameters). A presigned request is routed by its ``X-Amz-Credential`` scope: the
    header moto reads is derived from it (its signature is checked by the STS shim, from the query)."""

    def serve(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if "HTTP_AUTHORIZATION" not in environ:
            query = dict(parse_qsl(str(environ.get("QUERY_STRING", ""))))
            credential = query.get("X-Amz-Credential", "")
            if credential.count("/") == 4 and "X-Amz-Signature" in query:
                environ["HTTP_AUTHORIZATION"] = (f"AWS4-HMAC-SHA256 Credential={credential}, SignedHeaders=host, "
                                                 f"Signature={query['X-Amz-Signature']}")
        return app(environ, start_response)

    return serve


_SERVER: list[tuple[ThreadedMotoServer, str]] = []  # one loopback server per process: cached boto3 clients stay valid
_LOCK = threading.Lock()


def _server() -> tuple[ThreadedMotoServer, str]:
    from moto.moto_server.threaded_moto_server import ThreadedMotoServer

    with _LOCK:
        if not _SERVER:
            server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
            server.start()
            wsgi = server._server  # moto's werkzeug server: its app is replaced before the first request
            assert wsgi is not None
            wsgi.app = presigned_requests_reach_their_service(one_dynamodb_request_at_a_time(wsgi.app))
            host, port = server.get_host_and_port()
            _SERVER.append((server, f"http://{host}:{port}"))
        return _SERVER[0]


@contextlib.contextmanager
def local_aws(region: str = REGION) -> Iterator[LocalAws]:
    """Point this process's environment at a loopback moto server (started once, emptied on entry) and restore the
    environment afterwards. Handlers cache their clients, so the server outlives one rehearsal."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no per-request access log on the console
    with moto_settings(MOTO_CONFIG):
        _, endpoint = _server()
        reset_moto()
        aws = LocalAws(endpoint_url=endpoint, region=region)
        with overlay({**aws.env(), "MOTO_PORT": endpoint.rsplit(":", 1)[1]}, remove=["AWS_PROFILE"]):
            yield aws
