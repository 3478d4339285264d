"""The environment record: the versions and machine this attempt actually ran with."""

from __future__ import annotations

import os
import platform
import socket
import urllib.request
from importlib import metadata
from typing import Any

IMDS = "http://169.254.169.254"
IMDS_TIMEOUT_S = 1.0


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
    except (OSError, ValueError):
        return None
    return value if value and "." in value and len(value) < 64 else None


def instance_type() -> str | None:
    """Declared by the job (``DUALTRACK_INSTANCE_TYPE``), else asked of EC2 when running as a Batch job."""
    declared = os.environ.get("DUALTRACK_INSTANCE_TYPE")
    if declared:
        return declared
    return instance_type_from_imds() if os.environ.get("AWS_BATCH_JOB_ID") else None


def environment_record(backend_versions: dict[str, str | None], neuron_sdk: str | None) -> dict[str, Any]:
    import torch

    record: dict[str, Any] = {
        "image_digest": os.environ.get("DUALTRACK_IMAGE_DIGEST") or None,
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
