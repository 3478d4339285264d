"""The environment record: the versions and machine this attempt actually ran with."""

from __future__ import annotations

import http.client
import json
import os
import platform
import re
import socket
import urllib.request
from importlib import metadata

from lambdas.domain.evidence.run_summary import EnvironmentRecord

IMDS = "http://169.254.169.254"
IMDS_TIMEOUT_S = 1.0
# Set by the ECS agent in every task container (AWS Batch on EC2 included): the task metadata endpoint v4.
ECS_METADATA_ENV = "ECS_CONTAINER_METADATA_URI_V4"
ECS_METADATA_TIMEOUT_S = 1.0
ECS_METADATA_MAX_BYTES = 1 << 20
IMAGE_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def instance_type_from_imds(endpoint: str | None = None, timeout: float = IMDS_TIMEOUT_S) -> str | None:
    """The EC2 instance type from the instance metadata service (IMDSv2: token, then the value); None off EC2, where
    the instance's metadata hop limit does not reach the container, or with ``DUALTRACK_IMDS_ENDPOINT=off``.
    Never raises, never waits long."""
    base = (endpoint or os.environ.get("DUALTRACK_IMDS_ENDPOINT") or IMDS).rstrip("/")
    if base == "off":
        return None
    try:
        token_request = urllib.request.Request(f"{base}/latest/api/token", method="PUT",
                                               headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
        with urllib.request.urlopen(token_request, timeout=timeout) as response:
            token = response.read().decode()
        value_request = urllib.request.Request(f"{base}/latest/meta-data/instance-type",
                                               headers={"X-aws-ec2-metadata-token": token})
        with urllib.request.urlopen(value_request, timeout=timeout) as response:
            value = response.read().decode().strip()
    except (OSError, ValueError, http.client.HTTPException):
        return None
    return value if value and "." in value and len(value) < 64 else None


def instance_type() -> str | None:
    """Declared by the job (``DUALTRACK_INSTANCE_TYPE``), else asked of EC2 when running as a Batch job."""
    declared = os.environ.get("DUALTRACK_INSTANCE_TYPE")
    if declared:
        return declared
    return instance_type_from_imds() if os.environ.get("AWS_BATCH_JOB_ID") else None


def image_from_ecs_metadata(endpoint: str | None = None, timeout: float = ECS_METADATA_TIMEOUT_S) -> dict[str, str]:
    """The image this container actually runs, from the ECS task metadata endpoint v4: ``GET
    ${ECS_CONTAINER_METADATA_URI_V4}`` answers the container's own metadata, whose ``Image`` is the image reference
    and ``ImageID`` the sha256 digest of the image manifest (the one ``repository@sha256:...`` pulls). Returns
    ``image`` and ``image_digest`` for the values that are present and well formed; empty when the variable is unset
    (not an ECS task: the local rehearsal, a laptop), when the endpoint is unreachable or answers anything else.
    Never raises, never waits long."""
    base = endpoint if endpoint is not None else os.environ.get(ECS_METADATA_ENV, "")
    base = base.strip().rstrip("/")
    if not base.startswith(("http://", "https://")):
        return {}
    try:
        with urllib.request.urlopen(urllib.request.Request(base), timeout=timeout) as response:
            body = json.loads(response.read(ECS_METADATA_MAX_BYTES))
    except (OSError, ValueError, http.client.HTTPException):
        return {}
    if not isinstance(body, dict):
        return {}
    found: dict[str, str] = {}
    image = body.get("Image")
    if isinstance(image, str) and 0 < len(image.strip()) <= 512:
        found["image"] = image.strip()
    digest = body.get("ImageID")
    if isinstance(digest, str) and IMAGE_DIGEST.match(digest.strip().lower()):
        found["image_digest"] = digest.strip().lower()
    return found


def image_record() -> dict[str, str | None]:
    """``image_digest``: the running image's digest from ECS, else the one declared at build time
    (``DUALTRACK_IMAGE_DIGEST``, the image's build argument); ``image``: the reference ECS started, when known.
    ``image`` is left out while the RunSummary schema does not declare it (its models forbid unknown fields)."""
    running = image_from_ecs_metadata()
    record: dict[str, str | None] = {
        "image_digest": running.get("image_digest") or os.environ.get("DUALTRACK_IMAGE_DIGEST") or None}
    if "image" in EnvironmentRecord.model_fields:
        record["image"] = running.get("image")
    return record


def environment_record(backend_versions: dict[str, str | None], neuron_sdk: str | None) -> dict[str, str | None]:
    import torch

    record: dict[str, str | None] = {
        **image_record(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": _version("transformers"),
        "peft": _version("peft"),
        "instance_type": instance_type(),
        "hostname": socket.gethostname(),
        "batch_job_id": os.environ.get("AWS_BATCH_JOB_ID") or None,
    }
    record.update({k: v for k, v in backend_versions.items() if v is not None})
    if backend_versions.get("torch_neuronx") or backend_versions.get("neuronx_cc"):
        record["neuron_sdk"] = os.environ.get("NEURON_SDK_VERSION") or neuron_sdk
    return record
