"""The Trainium2 stack from host to image: the Neuron driver the hosts need for the Neuron SDK release the image
carries, and the supported stacks both training images pin (one PyTorch minor on both tracks)."""

from __future__ import annotations

import json
import re
import subprocess
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from dualtrack.local.dockerfile import parse_dockerfile
from lambdas.domain.neuron_stack import (
    DRIVER_SHIPPED,
    driver_problem,
    host_driver_check,
    loaded_driver,
    minimum_driver,
)
from lambdas.domain.vocabulary import trn2_backend

REPO = Path(__file__).resolve().parents[2]
NEURON_TAG = re.compile(r"^(?P<repo>\S+):(?P<torch>\d+\.\d+)\.\d+-neuronx-py3(?P<py>\d+)-sdk(?P<sdk>\d+\.\d+\.\d+)"
                        r"-ubuntu(?P<ubuntu>\d+\.\d+)$")


def _base_image(dockerfile: str) -> str:
    found = re.search(r"^ARG BASE_IMAGE=(\S+)$", (REPO / dockerfile).read_text(), re.MULTILINE)
    assert found is not None, dockerfile
    return found.group(1)


def _image_env(dockerfile: str) -> dict[str, str]:
    return dict(parse_dockerfile((REPO / dockerfile).read_text(), source=dockerfile).env)


def test_the_neuron_image_carries_torchneuron_on_a_supported_base() -> None:
    """"Neuron no longer supports PyTorch/XLA for training starting with Neuron 2.30"; Neuron 2.33.0 ships
    TorchNeuron, torch-neuronx 2.13.3 / 2.14.3 for PyTorch 2.13 / 2.14 on Python 3.12-3.14, with Ubuntu 22.04 images
    at end of support ("Release Notes for Neuron Component: TorchNeuron",
    https://awsdocs-neuron.readthedocs-hosted.com/en/latest/release-notes/components/torchneuron.html); from 2.33.0
    the Neuron DLCs are Ubuntu 26.04 and Python 3.14, tags ending ``-ubuntu26.04``
    (https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/setup/pytorch/update-dlc.html). The image states the
    release it carries, and its backend is the one that release runs."""
    tag = NEURON_TAG.match(_base_image("containers/neuron/Dockerfile"))
    assert tag is not None, "keep the Neuron DLC tag scheme <PyTorch>-neuronx-py<NNN>-sdk<release>-ubuntu<NN.NN>"
    assert tag.group("repo") == "public.ecr.aws/neuron/pytorch-training-neuronx"
    sdk = tag.group("sdk")
    assert tuple(map(int, sdk.split("."))) >= (2, 33, 0)
    assert int(tag.group("py")) >= 12 and tuple(map(int, tag.group("ubuntu").split("."))) >= (24, 4)
    env = _image_env("containers/neuron/Dockerfile")
    assert env["NEURON_SDK_VERSION"] == sdk
    assert env["DUALTRACK_BACKEND"] == trn2_backend(sdk) == "neuron"


def test_both_tracks_and_the_local_stand_in_run_one_pytorch_minor() -> None:
    """The GPU track's image is the AWS PyTorch 2.13 DLC on EC2 (``pytorch:2.13-cu133-amzn2023``: PyTorch 2.13.0,
    CUDA 13.3, Python 3.12, GA 2026-07-20; aws/deep-learning-containers ``docs/pytorch/index.md``); the Trainium2
    image carries torch-neuronx 2.13 ("Install the torch-neuronx package family that matches the PyTorch
    version"). Same PyTorch minor on both, and on the CPU stand-in that rehearses them here."""
    gpu = _base_image("containers/gpu/Dockerfile")
    assert gpu.startswith("public.ecr.aws/deep-learning-containers/pytorch:2.13")
    assert re.fullmatch(r"\S+:2\.13(\.\d+)?-cu13\d-amzn2023", gpu), gpu
    neuron = NEURON_TAG.match(_base_image("containers/neuron/Dockerfile"))
    assert neuron is not None and neuron.group("torch") == "2.13"
    assert ".".join(version("torch").split(".")[:2]) == "2.13"
    for dockerfile in ("containers/gpu/Dockerfile", "containers/neuron/Dockerfile"):
        assert "startswith('2.13.')" in (REPO / dockerfile).read_text(), f"{dockerfile} checks its base's torch"


def test_the_shipped_examples_declare_the_release_the_image_carries() -> None:
    """The API refuses a trial whose ``tracks.trn2.neuron_sdk`` differs from the stage's image
    (``lambdas.services.trial_submission``), and the release decides the stack: the examples run TorchNeuron."""
    sdk = _image_env("containers/neuron/Dockerfile")["NEURON_SDK_VERSION"]
    examples = sorted((REPO / "examples").glob("*.json"))
    assert examples
    for path in examples:
        trn2 = json.loads(path.read_text())["tracks"].get("trn2")
        if trn2:
            assert trn2["neuron_sdk"] == sdk, path.name


def test_the_image_release_needs_the_driver_it_was_tested_with() -> None:
    """Neuron 2.33.0 ships ``aws-neuronx-dkms-2.31.7.0``
    (https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/release-notes/releasecontent.html), and the runtime
    compatibility page applies to "Neuron SDK 2.33.0 ... Neuron Runtime library 2.35 ... Neuron Driver 2.31"
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/neuron-runtime/compatibility.html). Earlier releases
    from their own release-content pages: 2.30.0 ships 2.28.0.0, 2.31.0 ships 2.29.0.0, 2.32.0 ships 2.30.2.0."""
    sdk = _image_env("containers/neuron/Dockerfile")["NEURON_SDK_VERSION"]
    assert sdk in DRIVER_SHIPPED, f"record the driver Neuron SDK {sdk} ships before the image carries it"
    assert DRIVER_SHIPPED["2.33.0"] == "2.31.7.0" and minimum_driver("2.33.0") == "2.31"
    assert [minimum_driver(s) for s in ("2.30.0", "2.31.0", "2.32.0")] == ["2.28", "2.29", "2.30"]
    assert minimum_driver("2.34.0") is None  # not on record: not checked


def test_a_host_driver_older_than_the_releases_line_is_refused() -> None:
    """A runtime on an older driver stops at start-up ("This runtime requires Neuron Driver version ... or greater.
    Please upgrade aws-neuron-dkms package", https://awsdocs-neuron.readthedocs-hosted.com/en/latest/neuron-runtime/faq.html).
    The loaded driver reads from ``/sys/module/neuron/version`` or ``modinfo neuron``."""
    assert loaded_driver("2.31.7.0\n") == "2.31.7.0"
    assert loaded_driver("filename:  /lib/modules/6.1/extra/neuron.ko\nversion:        2.30.2.0\nlicense: GPL\n") \
        == "2.30.2.0"
    assert loaded_driver("") is None
    assert driver_problem("2.33.0", "2.31.7.0") is None and driver_problem("2.33.0", "2.32.1.0\n") is None
    problem = driver_problem("2.33.0", "version: 2.30.2.0")
    assert problem is not None and "2.30.2.0, older than 2.31" in problem and "2.31.7.0" in problem
    missing = driver_problem("2.33.0", "")
    assert missing is not None and "no Neuron driver is loaded" in missing
    assert driver_problem("2.34.0", "2.20.0.0") is None


@pytest.mark.parametrize(("loaded", "exit_code", "said"), [
    ("2.31.7.0\n", 0, "Neuron driver 2.31.7.0 (Neuron SDK 2.33.0 needs 2.31 or newer)"),
    ("2.32.0.0\n", 0, "Neuron driver 2.32.0.0"),
    ("2.30.2.0\n", 1, "Neuron driver 2.30.2.0 is older than 2.31"),
    (None, 1, "no Neuron driver loaded"),
])
def test_the_host_set_up_check_reads_the_loaded_driver(tmp_path: Path, loaded: str | None, exit_code: int,
                                                       said: str) -> None:
    """The ECS-optimized AL2023 Neuron AMI installs the newest ``aws-neuronx-dkms`` when the AMI is built, unpinned,
    then deletes the Neuron repository ("disable neuron package upgrades by deleting the yum repo", aws/amazon-ecs-ami
    ``scripts/enable-ecs-agent-inferentia-support.sh``): the driver is whatever was current at the AMI's build, so the
    host checks what it loaded. "The Neuron driver runs on the host, not inside the container"
    (https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/setup/pytorch/update-dlc.html)."""
    version_file, log_file, console = tmp_path / "version", tmp_path / "driver.log", tmp_path / "console"
    if loaded is not None:
        version_file.write_text(loaded)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "modinfo").write_text("#!/bin/sh\nexit 1\n")  # no neuron module on this machine
    (bin_dir / "modinfo").chmod(0o755)
    script = host_driver_check("2.33.0", version_file=str(version_file), log_file=str(log_file),
                               console=str(console))
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert done.returncode == exit_code, done.stderr
    assert said in log_file.read_text() and said in console.read_text()
    assert host_driver_check("2.34.0") == ""


def test_trainium2_hosts_check_their_neuron_driver_at_boot(compute: dict[str, Any]) -> None:
    """The Trainium2 launch templates run the driver check for the SDK release the built image carries, as its own
    part of the MIME multi-part user data Batch requires (AWS Batch, "Launch template support": "user data ... must
    be in the MIME multi-part archive format"), beside the EFA set-up; the GPU hosts do not."""
    from tests.infra.conftest import resources

    need = minimum_driver("2.33.0")
    for logical_id, template in resources(compute, "AWS::EC2::LaunchTemplate").items():
        user_data = json.dumps(template["Properties"]["LaunchTemplateData"].get("UserData", ""))
        checks = "dualtrack-neuron" in user_data
        assert checks == logical_id.startswith("Trn2"), logical_id
        assert "dualtrack-efa" in user_data  # the EFA part is still there
        if checks:
            assert f"needs aws-neuronx-dkms {need} or newer" in user_data and "multipart/mixed" in user_data
