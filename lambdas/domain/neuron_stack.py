"""The host's part of the Trainium2 stack: the Neuron driver a Neuron SDK release was tested with.

Everything else of the stack (torch-neuronx, neuronx-cc, the Neuron runtime) comes in the image; the driver is a
kernel module on the host, and "The Neuron driver runs on the host, not inside the container. Update it separately
when moving to a new Neuron SDK release" (Neuron 2.33.0, "Update PyTorch in a Deep Learning Container"). A runtime
on an older driver stops at start-up ("This runtime requires Neuron Driver version ... or greater", Neuron runtime
FAQ). The hosts run the ECS-optimized Amazon Linux 2023 Neuron AMI, which installs the newest ``aws-neuronx-dkms``
when the AMI is built and then removes the Neuron repository (aws/amazon-ecs-ami,
``scripts/enable-ecs-agent-inferentia-support.sh``): an AMI carries whatever driver was current at its build, and
its release notes do not name it. So a host compares the driver it loaded (``/sys/module/neuron/version``, or
``modinfo -F version neuron``) with the one the image's release needs.
"""

from __future__ import annotations

import re
import shlex

# Neuron SDK release -> the aws-neuronx-dkms package it ships ("Release content" of each release). The runtime
# compatibility page states the driver line a release is tested with ("Neuron SDK 2.33.0 ... Neuron Driver 2.31");
# a driver of an older line fails that check, a newer one passes it. 2.34.0's driver is not on record here: a
# release missing from this table is not checked.
DRIVER_SHIPPED: dict[str, str] = {
    "2.30.0": "2.28.0.0",
    "2.31.0": "2.29.0.0",
    "2.32.0": "2.30.2.0",
    "2.33.0": "2.31.7.0",
}

_VERSION = re.compile(r"(\d+(?:\.\d+)+)")


def _numbers(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def minimum_driver(neuron_sdk: str) -> str | None:
    """The oldest driver (``major.minor``) the release's runtime was tested with, or None when not on record."""
    shipped = DRIVER_SHIPPED.get(neuron_sdk)
    return ".".join(shipped.split(".")[:2]) if shipped else None


def loaded_driver(text: str) -> str | None:
    """The driver version in ``/sys/module/neuron/version`` (``2.31.7.0``) or in ``modinfo neuron`` output
    (``version:        2.31.7.0``); None when the text names none (no driver loaded)."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        candidate = value if sep and key.strip() == "version" else line if not sep else ""
        found = _VERSION.fullmatch(candidate.strip())
        if found:
            return found.group(1)
    return None


def driver_problem(neuron_sdk: str, driver_text: str) -> str | None:
    """What is wrong with this host's driver for an image carrying ``neuron_sdk`` (None: nothing we know of)."""
    need = minimum_driver(neuron_sdk)
    if need is None:
        return None
    have = loaded_driver(driver_text)
    if have is None:
        return (f"no Neuron driver is loaded; Neuron SDK {neuron_sdk} needs aws-neuronx-dkms {need} or newer "
                f"({DRIVER_SHIPPED[neuron_sdk]} ships with it)")
    if _numbers(have)[:2] < _numbers(need):
        return (f"the Neuron driver is {have}, older than {need}, the line Neuron SDK {neuron_sdk} was tested with "
                f"(it ships aws-neuronx-dkms {DRIVER_SHIPPED[neuron_sdk]}): use a newer AMI, or pin an image of an "
                "older Neuron SDK release")
    return None


def host_driver_check(neuron_sdk: str, *, version_file: str = "/sys/module/neuron/version",
                      log_file: str = "/var/log/dualtrack-neuron-driver.log", console: str = "/dev/console") -> str:
    """The host set-up step (bash) that logs the loaded driver and exits 1 when it is older than the release needs;
    empty when the release's driver is not on record."""
    need = minimum_driver(neuron_sdk)
    if need is None:
        return ""
    q = shlex.quote
    return f"""\
set -u
log() {{ echo "dualtrack-neuron: $*" | tee -a {q(log_file)} > {q(console)}; }}
have=""
[ -r {q(version_file)} ] && have=$(tr -d '[:space:]' < {q(version_file)})
[ -n "$have" ] || have=$(modinfo -F version neuron 2>/dev/null || true)
if [ -z "$have" ]; then
  log "no Neuron driver loaded: Neuron SDK {neuron_sdk} needs aws-neuronx-dkms {need} or newer"
  exit 1
fi
if [ "$(printf '%s\\n%s\\n' {need} "$have" | sort -V | head -n 1)" != {need} ]; then
  log "Neuron driver $have is older than {need}, the line Neuron SDK {neuron_sdk} was tested with"
  exit 1
fi
log "Neuron driver $have (Neuron SDK {neuron_sdk} needs {need} or newer)"
"""
