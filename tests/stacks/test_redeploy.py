"""A code or image change redeploys without touching any export another stack imports.

CloudFormation refuses to update an export that is in use: "After another stack imports an output value, you can't
delete the stack that is exporting the output value or modify the exported output value"
(https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-stack-exports.html). When the control
plane referred to job definitions by their revisioned ARN, every image change produced a new revision, a new export
value and a failed deploy. It now refers to Batch queues and job definitions by fixed names, so the exports it
imports must not move when Lambda code or a training image changes.

The test copies the app into a temporary directory, synthesizes the prod stage, changes a file under ``lambdas/``
and one under ``containers/``, synthesizes again, and compares the imported exports of the two assemblies.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from infra.synth import Assembly, synthesize

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
APP_DIRS = ("infra", "lambdas", "containers")
APP_FILES = ("cdk.json", "package.json", "pyproject.toml")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".mypy_cache", ".pytest_cache", ".ruff_cache")
STAGE = "prod"
# What each change appends: a comment, so behaviour is the same but every content hash moves.
CHANGE = "\n# redeploy check: content changed, behaviour unchanged\n"
CHANGED_FILES = ("lambdas/domain/money/cost.py", "lambdas/handlers/set_trial_status.py", "containers/trainer/cli.py")
# Resources whose identifier changes with their content; an export of one of them blocks redeploys.
REVISIONED_TYPES = {"AWS::Batch::JobDefinition", "AWS::Batch::JobQueue", "AWS::Lambda::LayerVersion",
                    "AWS::Lambda::Version", "AWS::ECS::TaskDefinition"}
BATCH_MARKERS = ("jobdefinition", "job-definition", "jobqueue", "job-queue")


@dataclass(frozen=True)
class Export:
    stack: str
    name: str
    value: str
    referenced: frozenset[str]  # resource types in the exporting stack that the value refers to


def _render(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _imports(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, child in node.items():
            if key == "Fn::ImportValue":
                yield _render(child)
            yield from _imports(child)
    elif isinstance(node, list):
        for child in node:
            yield from _imports(child)


def _logical_ids(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, child in node.items():
            if key == "Ref" and isinstance(child, str):
                yield child
            elif key == "Fn::GetAtt":
                yield child[0] if isinstance(child, list) else str(child).split(".")[0]
            else:
                yield from _logical_ids(child)
    elif isinstance(node, list):
        for child in node:
            yield from _logical_ids(child)


def imported_exports(assembly: Assembly) -> dict[str, Export]:
    """Every export that some other stack of the assembly imports, by export name."""
    templates: dict[str, dict[str, Any]] = assembly.templates()
    exports: dict[str, Export] = {}
    for stack, template in templates.items():
        resources = template.get("Resources", {})
        for output in template.get("Outputs", {}).values():
            if "Export" in output:
                name = _render(output["Export"]["Name"])
                types = frozenset(resources[i]["Type"] for i in _logical_ids(output["Value"]) if i in resources)
                exports[name] = Export(stack, name, _render(output["Value"]), types)
    imported = {name for stack, template in templates.items() for name in _imports(template)
                if name in exports and exports[name].stack != stack}
    return {name: exports[name] for name in sorted(imported)}


def asset_hashes(assembly: Assembly) -> dict[str, set[str]]:
    """The content hashes of the assembly's assets: zip (Lambda code and layer) files and Docker images."""
    hashes: dict[str, set[str]] = {"zip": set(), "docker": set()}
    for manifest in assembly.path.glob("*.assets.json"):
        assets = json.loads(manifest.read_text())
        hashes["zip"] |= {h for h, a in assets.get("files", {}).items() if a["source"].get("packaging") == "zip"}
        hashes["docker"] |= set(assets.get("dockerImages", {}))
    return hashes


def job_definition_images(assembly: Assembly) -> dict[str, str]:
    compute: dict[str, Any] = assembly.template(assembly.stack("Compute"))
    images: dict[str, str] = {}
    for logical_id, resource in compute["Resources"].items():
        if resource["Type"] != "AWS::Batch::JobDefinition":
            continue
        props = resource["Properties"]
        container = props.get("ContainerProperties") or props["NodeProperties"]["NodeRangeProperties"][0]["Container"]
        images[logical_id] = _render(container["Image"])
    return images


@dataclass(frozen=True)
class Synths:
    root: Path
    before: Assembly
    after: Assembly


@pytest.fixture(scope="module")
def synths(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synths]:
    root = tmp_path_factory.mktemp("app")
    for folder in APP_DIRS:
        shutil.copytree(REPO / folder, root / folder, ignore=IGNORED)
    for name in APP_FILES:
        shutil.copy2(REPO / name, root / name)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DUALTRACK_SYNTH_CACHE", str(tmp_path_factory.mktemp("assemblies")))
        # The Lambda dependency layer comes from the repository's cache (no package index).
        patch.setenv("DUALTRACK_BUNDLE_CACHE", str(REPO / ".cdk-cache"))
        # The copy's infra/ and lambdas/ come first, never the installed (editable) checkout.
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
        patch.setenv("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
        before = synthesize(STAGE, root=root, use_cli=False)
        for relative in CHANGED_FILES:
            with (root / relative).open("a") as handle:
                handle.write(CHANGE)
        after = synthesize(STAGE, root=root, use_cli=False)
    yield Synths(root, before, after)


def test_both_synths_ran_from_the_copy(synths: Synths) -> None:
    assert synths.before.key != synths.after.key and synths.before.path != synths.after.path
    assert synths.before.method == synths.after.method == "python"
    # The Lambda code bundled into the second assembly is the copy's, with the change in it.
    bundled = [p for p in synths.after.path.glob("asset.*/lambdas/domain/money/cost.py")
               if not (p.parents[2] / "containers").exists()]
    assert bundled and all(p.read_text().endswith(CHANGE) for p in bundled)


def test_the_change_reached_lambda_code_and_images(synths: Synths) -> None:
    before, after = asset_hashes(synths.before), asset_hashes(synths.after)
    assert before["zip"] - after["zip"], "no Lambda code asset changed: the comparison below would be vacuous"
    assert before["docker"] and after["docker"] and before["docker"].isdisjoint(after["docker"])
    images_before, images_after = job_definition_images(synths.before), job_definition_images(synths.after)
    assert images_before.keys() == images_after.keys() and images_before
    assert all(images_before[k] != images_after[k] for k in images_before)


def test_imported_exports_do_not_change(synths: Synths) -> None:
    before, after = imported_exports(synths.before), imported_exports(synths.after)
    assert before, "the stages share storage through exports; none found"
    assert before.keys() == after.keys()
    changed = {name: (before[name].value, after[name].value) for name in before
               if before[name].value != after[name].value}
    assert changed == {}, "CloudFormation refuses to modify an export that another stack imports"
    hashes = set().union(*asset_hashes(synths.before).values(), *asset_hashes(synths.after).values())
    for export in after.values():
        assert not any(h in export.value for h in hashes), export


def test_no_revisioned_resource_is_imported(synths: Synths) -> None:
    for assembly in (synths.before, synths.after):
        for export in imported_exports(assembly).values():
            text = f"{export.name} {export.value}".lower()
            assert not any(marker in text for marker in BATCH_MARKERS), export
            assert not export.referenced & REVISIONED_TYPES, export
