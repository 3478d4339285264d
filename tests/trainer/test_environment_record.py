"""The environment record names the image the attempt actually ran, read from the ECS task metadata endpoint v4.

Inside an ECS task (AWS Batch on EC2 included) the agent sets ``ECS_CONTAINER_METADATA_URI_V4``; a GET on it answers
the container's own metadata, whose ``Image`` is the image reference and ``ImageID`` the sha256 digest of the image
manifest: https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-metadata-endpoint-v4.html
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from trainer import environment
from trainer.environment import environment_record, image_from_ecs_metadata

from lambdas.domain.evidence.run_summary import EnvironmentRecord

DIGEST = "sha256:" + "d6" * 32
IMAGE = "111122223333.dkr.ecr.us-east-1.amazonaws.com/cdk-hnb659fds-container-assets-111122223333-us-east-1:abc123"
CONTAINER_PATH = "/v4/0123456789abcdef-1111111111"
# The shape of the v4 container metadata response (trimmed), as documented.
CONTAINER_METADATA = {
    "DockerId": "0123456789abcdef-1111111111",
    "Name": "trainer",
    "DockerName": "ecs-dualtrack-trn2-1-trainer-cca48e8dcadd97805600",
    "Image": IMAGE,
    "ImageID": DIGEST,
    "Labels": {"com.amazonaws.ecs.cluster": "batch-trn2", "com.amazonaws.ecs.container-name": "trainer"},
    "DesiredStatus": "RUNNING",
    "KnownStatus": "RUNNING",
    "Limits": {"CPU": 0, "Memory": 0},
    "Type": "NORMAL",
    "LogDriver": "awslogs",
}
BODIES: dict[str, bytes] = {
    CONTAINER_PATH: json.dumps(CONTAINER_METADATA).encode(),
    "/not-json": b"<html>no</html>",
    "/a-list": b"[1, 2]",
    "/bad-digest": json.dumps({"Image": IMAGE, "ImageID": "d691691e"}).encode(),
}


class TaskMetadata(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = BODIES.get(self.path)
        self.send_response(200 if body is not None else 404)
        payload = body if body is not None else b"{}"
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def metadata_endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), TaskMetadata)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_running_image_and_its_digest_come_from_the_task_metadata_endpoint(
        metadata_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert image_from_ecs_metadata(metadata_endpoint + CONTAINER_PATH) == {"image": IMAGE, "image_digest": DIGEST}

    monkeypatch.setenv("ECS_CONTAINER_METADATA_URI_V4", metadata_endpoint + CONTAINER_PATH)
    monkeypatch.setenv("DUALTRACK_IMAGE_DIGEST", "declared-at-build")
    monkeypatch.setenv("DUALTRACK_IMDS_ENDPOINT", "off")
    monkeypatch.delenv("DUALTRACK_INSTANCE_TYPE", raising=False)
    record = environment_record({}, None)
    assert record["image_digest"] == DIGEST  # what ran beats what the build declared
    if "image" in EnvironmentRecord.model_fields:
        assert record["image"] == IMAGE
    EnvironmentRecord.model_validate(record)  # the summary schema accepts it

    class WithImage(EnvironmentRecord):
        image: str | None = None

    monkeypatch.setattr(environment, "EnvironmentRecord", WithImage)  # once the schema declares the reference
    record = environment_record({}, None)
    assert record["image"] == IMAGE and record["image_digest"] == DIGEST
    WithImage.model_validate(record)


def test_outside_ecs_the_image_is_not_recorded_and_the_declared_digest_stands(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The local rehearsal: no task metadata endpoint, and IMDS switched off.
    monkeypatch.delenv("ECS_CONTAINER_METADATA_URI_V4", raising=False)
    monkeypatch.setenv("DUALTRACK_IMDS_ENDPOINT", "off")
    monkeypatch.delenv("DUALTRACK_INSTANCE_TYPE", raising=False)
    assert image_from_ecs_metadata() == {}

    monkeypatch.setenv("DUALTRACK_IMAGE_DIGEST", "declared-at-build")
    record = environment_record({}, None)
    assert record["image_digest"] == "declared-at-build"
    assert record.get("image") is None
    EnvironmentRecord.model_validate(record)

    monkeypatch.delenv("DUALTRACK_IMAGE_DIGEST")
    assert environment_record({}, None)["image_digest"] is None
    monkeypatch.setenv("ECS_CONTAINER_METADATA_URI_V4", "")
    assert image_from_ecs_metadata() == {}


def test_an_unreachable_or_odd_endpoint_records_nothing_quickly(metadata_endpoint: str) -> None:
    started = time.monotonic()
    assert image_from_ecs_metadata(f"http://127.0.0.1:{_closed_port()}/v4/x", timeout=0.5) == {}
    assert time.monotonic() - started < 5
    assert image_from_ecs_metadata(metadata_endpoint + "/missing") == {}  # 404
    assert image_from_ecs_metadata(metadata_endpoint + "/not-json") == {}
    assert image_from_ecs_metadata(metadata_endpoint + "/a-list") == {}
    assert image_from_ecs_metadata(metadata_endpoint + "/bad-digest") == {"image": IMAGE}  # no malformed digest
    assert image_from_ecs_metadata("file:///etc/hostname") == {}  # only an http endpoint is asked
    assert image_from_ecs_metadata("off") == {}
