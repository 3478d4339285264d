"""The environment record: the versions and machine this attempt actually ran with."""

from __future__ import annotations

import os
import platform
import socket
from importlib import metadata
from typing import Any


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def environment_record(backend_versions: dict[str, str | None], neuron_sdk: str | None) -> dict[str, Any]:
    import torch

    record: dict[str, Any] = {
        "image_digest": os.environ.get("DUALTRACK_IMAGE_DIGEST") or None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": _version("transformers"),
        "peft": _version("peft"),
        "instance_type": os.environ.get("DUALTRACK_INSTANCE_TYPE") or None,
        "hostname": socket.gethostname(),
        "batch_job_id": os.environ.get("AWS_BATCH_JOB_ID") or None,
    }
    record.update({k: v for k, v in backend_versions.items() if v is not None})
    if backend_versions.get("torch_neuronx") or backend_versions.get("neuronx_cc"):
        record["neuron_sdk"] = os.environ.get("NEURON_SDK_VERSION") or neuron_sdk
    return record
