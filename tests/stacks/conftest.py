"""One synthesis of the app per test session (cached by source hash), shared by every infra test."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")

from infra.synth import Assembly, synthesize


@pytest.fixture(scope="session")
def assembly() -> Assembly:
    return synthesize("dev")


@pytest.fixture(scope="session")
def templates(assembly: Assembly) -> dict[str, dict[str, Any]]:
    return assembly.templates()


@pytest.fixture(scope="session")
def stateful(assembly: Assembly) -> dict[str, Any]:
    return assembly.template(assembly.stack("Stateful"))


@pytest.fixture(scope="session")
def compute(assembly: Assembly) -> dict[str, Any]:
    return assembly.template(assembly.stack("Compute"))


@pytest.fixture(scope="session")
def control(assembly: Assembly) -> dict[str, Any]:
    return assembly.template(assembly.stack("Control"))


@pytest.fixture(scope="session")
def prod_assembly() -> Assembly:
    """The prod stage of cdk.json: zones, Spot, two GPU types, multi-node Trainium2."""
    return synthesize("prod")


@pytest.fixture(scope="session")
def prod_compute(prod_assembly: Assembly) -> dict[str, Any]:
    return prod_assembly.template(prod_assembly.stack("Compute"))


@pytest.fixture(scope="session")
def prod_control(prod_assembly: Assembly) -> dict[str, Any]:
    return prod_assembly.template(prod_assembly.stack("Control"))


def resources(template: Mapping[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def props(template: Mapping[str, Any], kind: str) -> list[dict[str, Any]]:
    return [v.get("Properties", {}) for v in resources(template, kind).values()]
