"""The Trainium2 stack from host to image: the Neuron SDK releases the deployment knows, the Neuron driver the hosts
need for the release the image carries, hosts that fail their boot checks replaced, and the supported stacks both
training images pin (one PyTorch minor on both tracks)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dualtrack.local.dockerfile import parse_dockerfile
from infra.config import ComputeFamily, ConfigInvalid, stage_config
from infra.constructs import batch_compute
from infra.constructs.batch_compute import efa_setup
from lambdas.domain.neuron_stack import (
    DRIVER_SHIPPED,
    HOST_SHUTDOWN,
    NEURON_RELEASES,
    UnknownNeuronRelease,
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


def test_the_neuron_image_carries_torchneuron_of_the_current_release() -> None:
    """Neuron 2.34.0 (2026-11-30) is the current release ("AWS Neuron SDK 2.34.0 release notes",
    https://awsdocs-neuron.readthedocs-hosted.com/en/latest/release-notes/2.34.0.html). The TorchNeuron training image
    AWS describes carries torch-neuronx 2.14 ("PyTorch Training (TorchNeuron)": "Native PyTorch training with
    torch-neuronx 2.14 and TorchTitan", "Install PyTorch via Deep Learning Container",
    https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/setup/pytorch/dlc.html); from 2.33.0 the Neuron DLCs are
    Ubuntu 26.04 and Python 3.14, tags ending ``-ubuntu26.04``
    (https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/setup/pytorch/update-dlc.html); the training repository
    is ``public.ecr.aws/neuron/pytorch-training-neuronx``
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/setup/pytorch/update-dlc.html). The image states the
    release it carries, the deployment knows that release, and its backend is the one that release runs."""
    tag = NEURON_TAG.match(_base_image("containers/neuron/Dockerfile"))
    assert tag is not None, "keep the Neuron DLC tag scheme <PyTorch>-neuronx-py<NNN>-sdk<release>-ubuntu<NN.NN>"
    assert tag.group("repo") == "public.ecr.aws/neuron/pytorch-training-neuronx"
    assert (tag.group("torch"), tag.group("py"), tag.group("sdk"), tag.group("ubuntu")) == \
        ("2.14", "14", "2.34.0", "26.04")
    env = _image_env("containers/neuron/Dockerfile")
    assert env["NEURON_SDK_VERSION"] == tag.group("sdk") and tag.group("sdk") in NEURON_RELEASES
    assert env["DUALTRACK_BACKEND"] == trn2_backend(tag.group("sdk")) == "neuron"


def test_both_tracks_run_one_pytorch_minor() -> None:
    """The GPU track's image is AWS's PyTorch DLC for EC2 as its page lists it,
    ``public.ecr.aws/deep-learning-containers/pytorch:2.14-cu133-amzn2023`` (PyTorch 2.14.0, CUDA 13.3.1, Python
    3.12; "ML Training using PyTorch DLC", https://github.com/aws/deep-learning-containers/blob/main/docs/pytorch/index.md);
    the Trainium2 image carries torch-neuronx 2.14 ("Install the torch-neuronx package family that matches the
    PyTorch version", "Release Notes for Neuron Component: TorchNeuron"). Same PyTorch minor on both, and each
    Dockerfile refuses a base of another. (The local CPU stand-in runs the CPU build this machine has, torch 2.13:
    docs/deploying.md says so.)"""
    gpu = _base_image("containers/gpu/Dockerfile")
    assert gpu == "public.ecr.aws/deep-learning-containers/pytorch:2.14-cu133-amzn2023"
    neuron = NEURON_TAG.match(_base_image("containers/neuron/Dockerfile"))
    assert neuron is not None and neuron.group("torch") == "2.14"
    for dockerfile in ("containers/gpu/Dockerfile", "containers/neuron/Dockerfile"):
        text = (REPO / dockerfile).read_text()
        assert "startswith('2.14.')" in text and "2.13" not in text.split("FROM", 1)[1], dockerfile


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


def test_the_release_table_holds_each_releases_driver_with_its_page() -> None:
    """Each release's ``aws-neuronx-dkms`` from its own release content: 2.30.0 ships 2.28.0.0, 2.31.0 2.29.0.0,
    2.32.0 2.30.2.0, 2.33.0 2.31.7.0 (https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/release-notes/releasecontent.html),
    2.34.0 2.32.6.0 (https://awsdocs-neuron.readthedocs-hosted.com/en/v2.34.0/release-notes/releasecontent.html); the
    2.33.1 patch (2026-11-11, a DMA race that can hang the chip fabric during collectives) 2.31.8.0 ("AWS Neuron SDK
    Release Notes - v2.33.1", https://awsdocs-neuron.readthedocs-hosted.com/en/latest/release-notes/2.33.1.html).
    The runtime compatibility page applies "Neuron SDK 2.33.0 ... Neuron Driver 2.31": the driver line is what a
    host must have (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/neuron-runtime/compatibility.html)."""
    assert DRIVER_SHIPPED == {"2.30.0": "2.28.0.0", "2.31.0": "2.29.0.0", "2.32.0": "2.30.2.0", "2.33.0": "2.31.7.0",
                              "2.33.1": "2.31.8.0", "2.34.0": "2.32.6.0"}
    assert [minimum_driver(s) for s in NEURON_RELEASES] == ["2.28", "2.29", "2.30", "2.31", "2.31", "2.32"]
    for sdk, release in NEURON_RELEASES.items():  # every row names the AWS page(s) its facts come from
        assert "https://awsdocs-neuron.readthedocs-hosted.com/" in release.driver_source, sdk
        assert "https://awsdocs-neuron.readthedocs-hosted.com/" in release.training_source, sdk
    assert [NEURON_RELEASES[s].training for s in NEURON_RELEASES] == ["xla", "xla", None, "neuron", "neuron", "neuron"]
    sdk = _image_env("containers/neuron/Dockerfile")["NEURON_SDK_VERSION"]
    assert minimum_driver(sdk) == "2.32"


def test_a_release_the_table_does_not_know_is_refused_not_waved_through() -> None:
    """A release without its driver on record would deploy hosts checked against nothing: refused, naming the
    known releases."""
    for refuse in (lambda: minimum_driver("2.35.0"), lambda: host_driver_check("2.35.0"),
                   lambda: driver_problem("2.35.0", "2.40.0.0")):
        with pytest.raises(UnknownNeuronRelease, match=r"Neuron SDK 2\.35\.0 is not a release this deployment knows "
                                                       r"\(known: 2\.30\.0, .*2\.33\.1, 2\.34\.0\)"):
            refuse()


def _stage(image_versions: dict[str, str]) -> dict[str, Any]:
    trn2 = {"instance_types": ["trn2.48xlarge"], "ami_ssm_parameter": "/a/b", "multi_node_counts": [],
            "availability_zone": "us-east-2b", "image_uri": "123456789012.dkr.ecr.us-east-2.amazonaws.com/t:1",
            "image_versions": image_versions}
    return {"dualtrack:stages": {"x": {"region": "us-east-2", "availability_zones": ["us-east-2b"], "trn2": trn2}}}


@pytest.mark.parametrize(("sdk", "said"), [
    ("2.35.0", r"neuron_sdk 2\.35\.0: Neuron SDK 2\.35\.0 is not a release this deployment knows \(known: 2\.30\.0,"),
    ("2.33", r"neuron_sdk 2\.33: Neuron SDK 2\.33 is not a release this deployment knows"),
    ("2.32.0", r"neuron_sdk 2\.32\.0: Neuron SDK 2\.32\.0 ships neither TorchNeuron nor PyTorch/XLA"),
])
def test_a_stage_pinning_an_unknown_or_untrainable_release_is_refused_at_synth(sdk: str, said: str) -> None:
    """The stage's ``trn2.image_versions.neuron_sdk`` decides the hosts' driver check and the training stack: a
    release the table does not know, or one that carries no training stack (2.32.0: "torch-neuronx (PyTorch/XLA) is
    not included in Neuron 2.32.0", https://awsdocs-neuron.readthedocs-hosted.com/en/v2.32.0/setup/pytorch/update-manual.html),
    fails synth with the field named."""
    with pytest.raises(ConfigInvalid, match=r"dualtrack:stages\.x\.trn2\.image_versions: .*" + said):
        stage_config(_stage({"neuron_sdk": sdk}), "x")
    assert stage_config(_stage({"neuron_sdk": "2.34.0"}), "x").trn2 is not None


def test_a_built_image_whose_base_names_an_unknown_release_is_refused_at_synth(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """For the image built from containers/neuron the release is read from its base image tag (``-sdk2.34.0-``);
    one the table does not know stops the compute stack, naming the Dockerfile and the known releases."""
    dockerfile = tmp_path / "containers" / "neuron" / "Dockerfile"
    dockerfile.parent.mkdir(parents=True)
    dockerfile.write_text("ARG BASE_IMAGE=public.ecr.aws/neuron/pytorch-training-neuronx:"
                          "2.15.0-neuronx-py314-sdk2.35.0-ubuntu26.04\n")
    monkeypatch.setattr(batch_compute, "REPO_ROOT", tmp_path)
    family = ComputeFamily.model_validate({"instance_types": ["trn2.48xlarge"], "ami_ssm_parameter": "/a/b"})
    with pytest.raises(ConfigInvalid, match=r"containers/neuron/Dockerfile: BASE_IMAGE names Neuron SDK 2\.35\.0 "
                                            r"\(-sdk2\.35\.0-\): Neuron SDK 2\.35\.0 is not a release "
                                            r".*known: 2\.30\.0"):
        batch_compute.image_versions("trn2", family)
    monkeypatch.setattr(batch_compute, "REPO_ROOT", REPO)
    assert batch_compute.image_versions("trn2", family) == {"neuron_sdk": "2.34.0"}


def test_a_host_driver_older_than_the_releases_line_is_refused() -> None:
    """A runtime on an older driver stops at start-up ("This runtime requires Neuron Driver version ... or greater.
    Please upgrade aws-neuron-dkms package", https://awsdocs-neuron.readthedocs-hosted.com/en/latest/neuron-runtime/faq.html).
    The loaded driver reads from ``/sys/module/neuron/version`` or ``modinfo neuron``."""
    assert loaded_driver("2.31.7.0\n") == "2.31.7.0"
    assert loaded_driver("filename:  /lib/modules/6.1/extra/neuron.ko\nversion:        2.30.2.0\nlicense: GPL\n") \
        == "2.30.2.0"
    assert loaded_driver("") is None
    assert driver_problem("2.34.0", "2.32.6.0") is None and driver_problem("2.34.0", "2.33.1.0\n") is None
    problem = driver_problem("2.34.0", "version: 2.31.8.0")
    assert problem is not None and "2.31.8.0, older than 2.32" in problem and "2.32.6.0" in problem
    missing = driver_problem("2.34.0", "")
    assert missing is not None and "no Neuron driver is loaded" in missing
    assert driver_problem("2.33.1", "2.31.7.0") is None  # the line decides, as the compatibility page states it


def _fake_host(tmp_path: Path) -> tuple[Path, Path]:
    """A PATH where ``modinfo`` finds no neuron module and ``shutdown`` records its arguments instead of halting."""
    bin_dir, shut = tmp_path / "bin", tmp_path / "shutdown-called"
    bin_dir.mkdir()
    for name, body in (("modinfo", "exit 1"), ("shutdown", f'echo "$*" > {shut}'),
                       ("modprobe", "exit 0"), ("udevadm", "exit 0")):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir, shut


@pytest.mark.parametrize(("loaded", "exit_code", "said"), [
    ("2.32.6.0\n", 0, "Neuron driver 2.32.6.0 (Neuron SDK 2.34.0 needs 2.32 or newer)"),
    ("2.33.0.0\n", 0, "Neuron driver 2.33.0.0"),
    ("2.31.8.0\n", 1, "Neuron driver 2.31.8.0 is older than 2.32"),
    (None, 1, "no Neuron driver loaded"),
])
def test_a_host_whose_driver_check_fails_shuts_down_to_be_replaced(tmp_path: Path, loaded: str | None,
                                                                   exit_code: int, said: str) -> None:
    """The ECS-optimized AL2023 Neuron AMI installs the newest ``aws-neuronx-dkms`` when the AMI is built, unpinned
    (aws/amazon-ecs-ami ``scripts/enable-ecs-agent-inferentia-support.sh``), so the host checks what it loaded. A
    host that fails shuts down: "By default, when you initiate a shutdown from an Amazon EBS backed instance (using a
    command such as shutdown or poweroff), the instance stops. You can change this behavior so that the instance
    terminates instead" ("Change instance initiated shutdown behavior", Amazon EC2 User Guide,
    https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/Using_ChangingInstanceInitiatedShutdownBehavior.html); the
    compute environment's Auto Scaling group then launches a replacement to keep its desired capacity ("Health checks
    for instances in an Auto Scaling group", https://docs.aws.amazon.com/autoscaling/ec2/userguide/healthcheck.html;
    Batch runs a compute environment's hosts in an Auto Scaling group: "Use Amazon EC2 launch templates with AWS
    Batch", https://docs.aws.amazon.com/batch/latest/userguide/launch-templates.html)."""
    version_file, log_file, console = tmp_path / "version", tmp_path / "driver.log", tmp_path / "console"
    if loaded is not None:
        version_file.write_text(loaded)
    bin_dir, shut = _fake_host(tmp_path)
    script = host_driver_check("2.34.0", version_file=str(version_file), log_file=str(log_file),
                               console=str(console))
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert done.returncode == exit_code, done.stderr
    assert said in log_file.read_text() and said in console.read_text()
    assert shut.exists() == (exit_code != 0)
    if exit_code:
        assert shut.read_text().strip() == "-h now" == HOST_SHUTDOWN.removeprefix("shutdown ")
        assert "shutting this host down for its compute environment to replace it" in log_file.read_text()


@pytest.mark.parametrize(("present", "exit_code"), [(2, 0), (1, 1), (0, 1)])
def test_a_host_missing_an_efa_device_shuts_down_to_be_replaced(tmp_path: Path, present: int,
                                                                exit_code: int) -> None:
    """AWS Batch runs EFA jobs only where "The AMI has the EFA driver loaded" ("Elastic Fabric Adapter",
    https://docs.aws.amazon.com/batch/latest/userguide/efa.html), and a job maps ``/dev/infiniband/uverbs<N>``: a
    host of a 2-interface type with a device missing shuts down to be replaced (same pages as the driver check)."""
    devices, log_file, console = tmp_path / "infiniband", tmp_path / "efa.log", tmp_path / "console"
    devices.mkdir()
    for index in range(present):
        (devices / f"uverbs{index}").write_text("")
    bin_dir, shut = _fake_host(tmp_path)
    script = efa_setup(2, device_dir=str(devices), log_file=str(log_file), console=str(console))
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert done.returncode == exit_code, done.stderr
    assert shut.exists() == bool(exit_code)
    said = log_file.read_text()
    assert ("EFA driver loaded: 2 uverbs device(s)" in said) == (exit_code == 0)
    if exit_code:
        assert f"{devices}/uverbs1 is missing" in said and "shutting this host down" in said


def test_hosts_check_at_boot_and_terminate_on_a_failed_check(compute: dict[str, Any]) -> None:
    """The Trainium2 launch templates run the driver check for the SDK release the built image carries, as its own
    part of the MIME multi-part user data Batch requires ("Launch template support": "user data ... must be in the
    MIME multi-part archive format"), beside the EFA set-up; the GPU hosts do not. Every launch template sets
    ``InstanceInitiatedShutdownBehavior: terminate``, so a host that shuts itself down after a failed check is
    terminated and replaced, not left stopped ("Change instance initiated shutdown behavior",
    https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/Using_ChangingInstanceInitiatedShutdownBehavior.html)."""
    from tests.stacks.conftest import resources

    need = minimum_driver("2.34.0")
    templates = resources(compute, "AWS::EC2::LaunchTemplate")
    assert templates
    for logical_id, template in templates.items():
        data = template["Properties"]["LaunchTemplateData"]
        assert data.get("InstanceInitiatedShutdownBehavior") == "terminate", logical_id
        user_data = json.dumps(data.get("UserData", ""))
        checks = "dualtrack-neuron" in user_data
        assert checks == logical_id.startswith("Trn2"), logical_id
        assert "dualtrack-efa" in user_data  # the EFA part is still there
        assert user_data.count(HOST_SHUTDOWN) == (2 if checks else 1), logical_id
        if checks:
            assert f"needs aws-neuronx-dkms {need} or newer" in user_data and "multipart/mixed" in user_data
            assert "Neuron SDK 2.34.0" in user_data
