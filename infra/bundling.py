"""Local (Docker-free) bundling of the Lambda code and its dependency layer.

The function code is the ``lambdas/`` package copied as-is; its third-party dependencies live in one layer built
with ``pip install --platform manylinux2014_aarch64 --only-binary=:all: --python-version 3.12``, so an x86 machine
without Docker produces arm64 Python 3.12 artefacts. The layer is cached under ``.cdk-cache/lambda-deps/<hash>``
(hash of the requirements and the pip target), so only the first synth after a requirements change touches the
package index; later synths, and every synth in the test suite, copy from the cache.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypedDict, Unpack

import aws_cdk as cdk
import jsii
from aws_cdk import aws_lambda as lambda_

from lambdas.domain.json_types import JsonMapping

REPO_ROOT = Path(__file__).resolve().parent.parent
LAMBDA_SOURCE = REPO_ROOT / "lambdas"
REQUIREMENTS = Path(__file__).resolve().parent / "lambda-requirements.txt"
PYTHON_VERSION = "3.12"
PLATFORM = "manylinux2014_aarch64"
CACHE_ENV = "DUALTRACK_BUNDLE_CACHE"
# The Lambda Python runtime ships these (pulled in through aws-xray-sdk); the layer must not shadow them.
RUNTIME_PROVIDED = ("boto3", "botocore", "s3transfer")
_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".mypy_cache", ".pytest_cache")


class BundlingFailed(RuntimeError):
    pass


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or REPO_ROOT / ".cdk-cache")


def requirements_hash(requirements: Path = REQUIREMENTS) -> str:
    recipe = f"{requirements.read_text()}\n{PLATFORM}\n{PYTHON_VERSION}\n{','.join(RUNTIME_PROVIDED)}\n"
    return hashlib.sha256(recipe.encode()).hexdigest()


def build_dependency_dir(requirements: Path = REQUIREMENTS) -> Path:
    """The pip target directory for the layer, built once per requirements hash."""
    target = cache_root() / "lambda-deps" / requirements_hash(requirements)
    if (target / ".complete").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="deps-", dir=target.parent))
    command = [
        sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
        "--platform", PLATFORM, "--implementation", "cp", "--python-version", PYTHON_VERSION,
        "--only-binary=:all:", "--target", str(staging), "-r", str(requirements),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise BundlingFailed(
            f"building the Lambda dependency layer failed ({' '.join(command)}):\n{done.stderr[-2000:]}\n"
            f"fix {requirements} or pre-build the layer into {target} (set {CACHE_ENV} to reuse another cache)"
        )
    (staging / ".complete").write_text(requirements_hash(requirements))
    try:
        staging.rename(target)
    except OSError:  # another synth finished first: keep its copy
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _layer_ignore(root: Path) -> Callable[[str, list[str]], set[str]]:
    def ignore(directory: str, names: list[str]) -> set[str]:
        skipped = {n for n in names if n in (".complete", "__pycache__")}
        if Path(directory) == root:
            skipped |= {n for n in names if n.split("-")[0] in RUNTIME_PROVIDED}
        return skipped

    return ignore


class BundlingSettings(TypedDict, total=False):
    """The rest of ``cdk.BundlingOptions``, which CDK passes to ``ILocalBundling.try_bundle``; a local copy needs
    none of it."""

    bundling_file_access: cdk.BundlingFileAccess | None
    command: Sequence[str] | None
    entrypoint: Sequence[str] | None
    environment: Mapping[str, str] | None
    local: cdk.ILocalBundling | None
    network: str | None
    output_type: cdk.BundlingOutput | None
    platform: str | None
    security_opt: str | None
    user: str | None
    volumes: Sequence[cdk.DockerVolume | JsonMapping] | None  # a struct or its dict form
    volumes_from: Sequence[str] | None
    working_directory: str | None


@jsii.implements(cdk.ILocalBundling)
class DependencyLayerBundler:
    """Copies the cached pip target into ``<output>/python`` (where Lambda puts layers on ``sys.path``)."""

    def __init__(self, requirements: Path = REQUIREMENTS):
        self._requirements = requirements

    def try_bundle(self, output_dir: str, *, image: cdk.DockerImage, **_: Unpack[BundlingSettings]) -> bool:
        source = build_dependency_dir(self._requirements)
        shutil.copytree(source, Path(output_dir) / "python", dirs_exist_ok=True, ignore=_layer_ignore(source))
        return True


@jsii.implements(cdk.ILocalBundling)
class LambdaPackageBundler:
    """Copies the ``lambdas`` package, so every handler module that exists is deployed."""

    def try_bundle(self, output_dir: str, *, image: cdk.DockerImage, **_: Unpack[BundlingSettings]) -> bool:
        shutil.copytree(LAMBDA_SOURCE, Path(output_dir) / "lambdas", dirs_exist_ok=True, ignore=_IGNORED)
        return True


# The image is never pulled: local bundling always succeeds, and CDK only needs a value for the field.
_UNUSED_IMAGE = cdk.DockerImage.from_registry("public.ecr.aws/sam/build-python3.12:latest")


def lambda_code() -> lambda_.Code:
    return lambda_.Code.from_asset(
        str(LAMBDA_SOURCE),
        asset_hash_type=cdk.AssetHashType.SOURCE,
        exclude=["**/__pycache__", "**/*.pyc"],
        bundling=cdk.BundlingOptions(image=_UNUSED_IMAGE, local=LambdaPackageBundler()),
    )


def dependency_layer_code(requirements: Path = REQUIREMENTS) -> lambda_.Code:
    return lambda_.Code.from_asset(
        str(requirements.parent),
        asset_hash_type=cdk.AssetHashType.CUSTOM,
        asset_hash=requirements_hash(requirements),
        bundling=cdk.BundlingOptions(image=_UNUSED_IMAGE, local=DependencyLayerBundler(requirements)),
    )
