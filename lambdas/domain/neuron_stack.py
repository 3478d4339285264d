"""The Neuron SDK releases this deployment knows: the driver each ships (the host's part of the Trainium2 stack) and
the training stack its images carry.

Everything else of the stack (torch-neuronx, neuronx-cc, the Neuron runtime) comes in the image; the driver is a
kernel module on the host, and "The Neuron driver runs on the host, not inside the container. Update it separately
when moving to a new Neuron SDK release" (Neuron 2.33.0, "Update PyTorch in a Deep Learning Container"). A runtime
on an older driver stops at start-up ("This runtime requires Neuron Driver version ... or greater", Neuron runtime
FAQ). The hosts run the ECS-optimized Amazon Linux 2023 Neuron AMI, which installs the newest ``aws-neuronx-dkms``
when the AMI is built and then removes the Neuron repository (aws/amazon-ecs-ami,
``scripts/enable-ecs-agent-inferentia-support.sh``): an AMI carries whatever driver was current at its build, and
its release notes do not name it. So a host compares the driver it loaded (``/sys/module/neuron/version``, or
``modinfo -F version neuron``) with the one the image's release needs, and a host that fails shuts itself down
(:data:`HOST_SHUTDOWN`) so that its compute environment replaces it.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from datetime import date
from typing import Literal

TrainingStack = Literal["neuron", "xla"]


@dataclass(frozen=True)
class NeuronRelease:
    """One Neuron SDK release: the ``aws-neuronx-dkms`` it ships and the training stack its images carry (TorchNeuron,
    the retired PyTorch/XLA path, or None: neither), each with the AWS page that states it."""

    driver: str
    driver_source: str
    training: TrainingStack | None
    training_source: str


_CONTENT = "Release content (Neuron {v}), https://awsdocs-neuron.readthedocs-hosted.com/en/v{v}/release-notes/releasecontent.html"
_XLA_LAST = ("Update a manual PyTorch installation (Neuron 2.33.0): \"the earlier PyTorch/XLA-based torch-neuronx for "
             "PyTorch 2.9, which last shipped in Neuron 2.31\", "
             "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/setup/pytorch/update-manual.html")
_TORCHNEURON = ("Release Notes for Neuron Component: TorchNeuron: \"Neuron 2.33.0 introduces the native torch-neuronx "
                "backend\", https://awsdocs-neuron.readthedocs-hosted.com/en/latest/release-notes/components/"
                "torchneuron.html")

# The one table of Neuron SDK releases. A stage whose Trainium2 image carries a release missing here is refused at
# synth (infra.config, infra.constructs.batch_compute): its driver and its training stack would be guesses. The
# runtime compatibility page states the driver line a release is tested with ("Neuron SDK 2.33.0 ... Neuron Driver
# 2.31", https://awsdocs-neuron.readthedocs-hosted.com/en/latest/neuron-runtime/compatibility.html): a driver of an
# older line fails the host check, a newer one passes it.
NEURON_RELEASES: dict[str, NeuronRelease] = {
    "2.30.0": NeuronRelease("2.28.0.0", _CONTENT.format(v="2.30.0"), "xla", _XLA_LAST),
    "2.31.0": NeuronRelease("2.29.0.0", _CONTENT.format(v="2.31.0"), "xla", _XLA_LAST),
    # Neither stack: "torch-neuronx (PyTorch/XLA) is not included in Neuron 2.32.0. To update to torch-neuronx, use
    # the latest Neuron release that ships it, Neuron 2.31", and TorchNeuron's first release is 2.33.0.
    "2.32.0": NeuronRelease("2.30.2.0", _CONTENT.format(v="2.32.0"), None,
                            "Update a manual PyTorch installation (Neuron 2.32.0), https://awsdocs-neuron.readthedocs-"
                            "hosted.com/en/v2.32.0/setup/pytorch/update-manual.html; " + _TORCHNEURON),
    "2.33.0": NeuronRelease("2.31.7.0", _CONTENT.format(v="2.33.0"), "neuron", _TORCHNEURON),
    # 2026-11-11: fixes a DMA race between HWDGE and collective DMA "that can hang the TPB AXI fabric".
    "2.33.1": NeuronRelease("2.31.8.0", "AWS Neuron SDK Release Notes - v2.33.1, "
                            "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/release-notes/2.33.1.html",
                            "neuron", _TORCHNEURON),
    # 2026-11-30, current: neuronx-cc 2.29.16866.0, aws-neuronx-runtime-lib 2.36.8.0 (same page).
    "2.34.0": NeuronRelease("2.32.6.0", _CONTENT.format(v="2.34.0"), "neuron", _TORCHNEURON),
}
# The Neuron SDK release -> the aws-neuronx-dkms it ships (read from the table above).
DRIVER_SHIPPED: dict[str, str] = {sdk: release.driver for sdk, release in NEURON_RELEASES.items()}
# The day each release came out (its release notes), for what no host reports: an ECS-optimized Neuron AMI built
# before a release's day was built before that release's driver existed (`dualtrack stage preflight` compares an AMI's
# CreationDate with it). A release missing here is not compared.
RELEASED: dict[str, date] = {
    "2.33.0": date(2026, 10, 19),
    "2.33.1": date(2026, 11, 11),
    "2.34.0": date(2026, 11, 30),
}


class UnknownNeuronRelease(ValueError):
    pass


def known_releases() -> str:
    return ", ".join(NEURON_RELEASES)


def neuron_release(neuron_sdk: str) -> NeuronRelease:
    """The table's row for ``neuron_sdk`` (a full release, ``2.34.0``); an unknown release is refused."""
    try:
        return NEURON_RELEASES[neuron_sdk]
    except KeyError:
        raise UnknownNeuronRelease(
            f"Neuron SDK {neuron_sdk} is not a release this deployment knows (known: {known_releases()}): record its "
            "driver and training stack in lambdas.domain.neuron_stack.NEURON_RELEASES, or pin a known release"
        ) from None


def release_line(neuron_sdk: str) -> tuple[int, int]:
    """``2.33`` for ``2.33.1`` and for ``2.33``."""
    major, minor = neuron_sdk.split(".")[:2]
    return int(major), int(minor)


def training_stack(neuron_sdk: str) -> TrainingStack | None:
    """The training stack the images of ``neuron_sdk`` carry (a full release or a ``major.minor`` line); a line older
    than the table's is the PyTorch/XLA path, one newer than the table's keeps the newest row's stack."""
    line = release_line(neuron_sdk)
    rows = sorted((release_line(sdk), sdk, row.training) for sdk, row in NEURON_RELEASES.items())
    same = [stack for row_line, _, stack in rows if row_line == line]
    if same:
        return same[-1]
    if line < rows[0][0]:
        return "xla"
    return rows[-1][2]


# What a host that fails a boot check runs. "By default, when you initiate a shutdown from an Amazon EBS backed
# instance (using a command such as shutdown or poweroff), the instance stops", and an instance whose
# InstanceInitiatedShutdownBehavior is terminate terminates instead ("Change instance initiated shutdown behavior",
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/Using_ChangingInstanceInitiatedShutdownBehavior.html): the
# launch templates set it (infra.constructs.batch_compute). Batch runs a compute environment's hosts in an Auto
# Scaling group ("Use Amazon EC2 launch templates with AWS Batch",
# https://docs.aws.amazon.com/batch/latest/userguide/launch-templates.html), which launches a replacement to keep its
# desired capacity ("Health checks for instances in an Auto Scaling group",
# https://docs.aws.amazon.com/autoscaling/ec2/userguide/healthcheck.html). ``halt`` would not do: it "doesn't
# initiate a shutdown".
HOST_SHUTDOWN = "shutdown -h now"

_VERSION = re.compile(r"(\d+(?:\.\d+)+)")


def _numbers(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def minimum_driver(neuron_sdk: str) -> str:
    """The oldest driver line (``major.minor``) the release's runtime was tested with; an unknown release is refused."""
    return ".".join(neuron_release(neuron_sdk).driver.split(".")[:2])


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
    """What is wrong with this host's driver for an image carrying ``neuron_sdk`` (None: nothing)."""
    need = minimum_driver(neuron_sdk)
    shipped = DRIVER_SHIPPED[neuron_sdk]
    have = loaded_driver(driver_text)
    if have is None:
        return (f"no Neuron driver is loaded; Neuron SDK {neuron_sdk} needs aws-neuronx-dkms {need} or newer "
                f"({shipped} ships with it)")
    if _numbers(have)[:2] < _numbers(need):
        return (f"the Neuron driver is {have}, older than {need}, the line Neuron SDK {neuron_sdk} was tested with "
                f"(it ships aws-neuronx-dkms {shipped}): use a newer AMI, or pin an image of an older Neuron SDK "
                "release")
    return None


def host_driver_check(neuron_sdk: str, *, version_file: str = "/sys/module/neuron/version",
                      log_file: str = "/var/log/dualtrack-neuron-driver.log", console: str = "/dev/console") -> str:
    """The host set-up step (bash) that logs the loaded driver and, when it is older than the release needs (or none
    is loaded), says so and shuts the host down (:data:`HOST_SHUTDOWN`) so that it is replaced rather than given
    jobs whose runtime would stop at start-up. An unknown release is refused."""
    need = minimum_driver(neuron_sdk)
    q = shlex.quote
    return f"""\
set -u
log() {{ echo "dualtrack-neuron: $*" | tee -a {q(log_file)} > {q(console)}; }}
fail() {{ log "$*; shutting this host down for its compute environment to replace it"; {HOST_SHUTDOWN}; exit 1; }}
have=""
[ -r {q(version_file)} ] && have=$(tr -d '[:space:]' < {q(version_file)})
[ -n "$have" ] || have=$(modinfo -F version neuron 2>/dev/null || true)
if [ -z "$have" ]; then
  fail "no Neuron driver loaded: Neuron SDK {neuron_sdk} needs aws-neuronx-dkms {need} or newer"
fi
if [ "$(printf '%s\\n%s\\n' {need} "$have" | sort -V | head -n 1)" != {need} ]; then
  fail "Neuron driver $have is older than {need}, the line Neuron SDK {neuron_sdk} was tested with"
fi
log "Neuron driver $have (Neuron SDK {neuron_sdk} needs {need} or newer)"
"""
