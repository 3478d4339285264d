"""The rehearsal's moto server serves DynamoDB one request at a time: moto's backends are not thread-safe
(getmoto/moto#372), and a Scan that iterates a table while another thread's PutItem adds to it fails with
"dictionary changed size during iteration" (a 500 to the caller)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

import boto3

from dualtrack.local.server import local_aws, one_dynamodb_request_at_a_time

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIEnvironment


def test_dynamodb_requests_never_overlap_and_others_are_not_held() -> None:
    inside = {"DynamoDB_20120810.Scan": 0, "other": 0}
    most = dict(inside)
    lock = threading.Lock()

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        kind = str(environ.get("HTTP_X_AMZ_TARGET") or "other")
        with lock:
            inside[kind] += 1
            most[kind] = max(most[kind], inside[kind])
        time.sleep(0.02)
        with lock:
            inside[kind] -= 1
        return [b"{}"]

    serve = one_dynamodb_request_at_a_time(app)

    def call(target: str | None) -> None:
        environ: WSGIEnvironment = {"HTTP_X_AMZ_TARGET": target} if target else {}
        assert list(serve(environ, lambda status, headers, exc_info=None: lambda data: None)) == [b"{}"]

    threads = [threading.Thread(target=call, args=("DynamoDB_20120810.Scan",)) for _ in range(6)]
    threads += [threading.Thread(target=call, args=(None,)) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most["DynamoDB_20120810.Scan"] == 1  # a DynamoDB request never ran beside another one
    assert most["other"] > 1  # the other services are served concurrently, as before


def test_scans_and_writes_from_many_threads_all_succeed_on_the_local_server() -> None:
    with local_aws():
        ddb = boto3.client("dynamodb")
        ddb.create_table(TableName="race", KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                         AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                         BillingMode="PAY_PER_REQUEST")
        errors: list[BaseException] = []

        def work(n: int) -> None:
            client = boto3.client("dynamodb")
            try:
                for i in range(40):
                    client.put_item(TableName="race", Item={"pk": {"S": f"{n}-{i}"}})
                    client.scan(TableName="race")
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert ddb.scan(TableName="race", Select="COUNT")["Count"] == 160
