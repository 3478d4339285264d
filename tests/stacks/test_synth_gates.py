"""Quality gates on the synthesized app: CDK CLI synth, cdk-nag, cfn-lint, determinism, bundling, config."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from infra.config import ConfigInvalid, stage_config
from infra.synth import Assembly, synthesize

REPO = Path(__file__).resolve().parents[2]


def test_synthesized_through_the_cdk_cli(assembly: Assembly) -> None:
    assert assembly.method == "cdk-cli", "install the pinned CDK CLI with `npm ci` (package.json at the repo root)"
    assert assembly.stack_names() == ["Dualtrack-dev-Compute", "Dualtrack-dev-Control", "Dualtrack-dev-Stateful"]


def test_cdk_nag_reports_nothing_unacknowledged(assembly: Assembly) -> None:
    # AwsSolutions and Serverless packs run as validation plugins; any open finding fails the synth itself.
    report = json.loads((assembly.path / "validation-report.json").read_text())
    assert report["pluginReports"] == []


def test_cfn_lint_has_no_errors(assembly: Assembly) -> None:
    templates = sorted(str(p) for p in assembly.path.glob("*.template.json"))
    done = subprocess.run([sys.executable, "-m", "cfnlint", "--format", "json", *templates],
                          capture_output=True, text=True, check=False, timeout=300)
    findings: list[dict[str, Any]] = json.loads(done.stdout or "[]")
    errors = [f for f in findings if f["Level"] == "Error"]
    assert errors == [], json.dumps(errors, indent=1)[:4000]


def test_template_has_no_lookups_or_environment(templates: dict[str, dict[str, Any]], assembly: Assembly) -> None:
    manifest = json.loads((assembly.path / "manifest.json").read_text())
    for name in templates:
        # No account is looked up; the region is the stage's own (dev names its zones, where trn2 is offered).
        assert manifest["artifacts"][name]["environment"] == "aws://unknown-account/us-east-2"
    assert not (REPO / "cdk.context.json").exists(), "synth must not record context lookups"


def test_workflow_timeout_comes_from_the_stage(templates: dict[str, dict[str, Any]]) -> None:
    control = next(t for n, t in templates.items() if n.endswith("-Control"))
    (machine,) = [r for r in control["Resources"].values() if r["Type"] == "AWS::StepFunctions::StateMachine"]
    text = "".join(p for p in machine["Properties"]["DefinitionString"]["Fn::Join"][1] if isinstance(p, str))
    assert f'"TimeoutSeconds":{14 * 24 * 3600}' in text


def test_lambda_assets_hold_the_package_and_an_arm64_layer(assembly: Assembly) -> None:
    assets = [p for p in assembly.path.glob("asset.*") if p.is_dir()]
    # The trainer images' build contexts (repo root) also hold lambdas/; the function code is only lambdas/.
    code = [p for p in assets if (p / "lambdas" / "handlers").is_dir() and not (p / "containers").exists()]
    layers = [p for p in assets if (p / "python").is_dir()]
    assert len(code) == 1 and len(layers) == 1
    site = layers[0] / "python"
    assert (site / "pydantic").is_dir() and (site / "aws_lambda_powertools").is_dir()
    assert list(site.glob("pydantic_core/*cpython-312-aarch64-linux-gnu.so")), "layer must be cp312 arm64"
    for provided in ("boto3", "botocore", "aws_cdk"):
        assert not (site / provided).exists(), f"{provided} must not ship in the layer"
    assert not list(code[0].rglob("__pycache__"))


def test_config_errors_name_the_field_and_fix() -> None:
    context = json.loads((REPO / "cdk.json").read_text())["context"]
    with pytest.raises(ConfigInvalid, match=r"stage 'qa' is not defined .* \(defined: dev, local, prod\)"):
        stage_config(context, "qa")
    bad = {"dualtrack:stages": {"x": {"gpu": {"instance_types": ["trn2.48xlarge"],
                                              "ami_ssm_parameter": "/aws/x"}}}}
    with pytest.raises(ConfigInvalid, match=r"gpu.instance_types\[0\]: 'trn2.48xlarge' is not a gpu instance type"):
        stage_config(bad, "x")
    with pytest.raises(ConfigInvalid, match=r"log_retention_days: .*must be one of"):
        stage_config({"dualtrack:stages": {"x": {"log_retention_days": 8}}}, "x")
    gpu = stage_config(context, "prod").gpu
    assert gpu is not None and gpu.spot is True


@pytest.mark.slow
def test_synth_is_deterministic(assembly: Assembly, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second, independent synth (plain `python -m infra.app`, fresh cache) gives identical templates."""
    monkeypatch.setenv("DUALTRACK_SYNTH_CACHE", str(tmp_path))
    again = synthesize("dev", use_cli=False)
    assert again.method == "python" and again.key == assembly.key
    assert again.templates() == assembly.templates()
