"""`validate` and `estimate` show a trial's scaling runs: a track declaring ``"nodes": [1, 2]`` trains its main run at
2 nodes and a whole run at 1 node (``gpu-n1``), which the worst case prices at its own node count."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from dualtrack.cli import main
from dualtrack.commands._common import usd
from dualtrack.local.staging import rehearsal_data_bucket, staged_trial
from lambdas.domain.trial.rules import parse_trial

ROOT = Path(__file__).resolve().parents[3]
TWO_NODE = ROOT / "examples" / "trial-rehearsal-2node.json"


def answer(capsys: pytest.CaptureFixture[str], *argv: str, code: int = 0) -> Any:
    assert main(list(argv)) == code
    return json.loads(capsys.readouterr().out)


def test_the_two_node_example_declares_a_one_node_scaling_run_kept_through_staging() -> None:
    spec = parse_trial(json.loads(TWO_NODE.read_text()), allow_local_paths=True)
    gpu = spec.track("gpu")
    assert (gpu.nodes, gpu.scaling_nodes) == (2, [1])
    assert spec.scaling_runs() == {"gpu-n1": ("gpu", 1)}
    assert spec.fault_injection is not None and spec.fault_injection.track == "gpu"
    staged = staged_trial(spec, rehearsal_data_bucket()).spec  # what the rehearsal submits
    assert staged.scaling_runs() == {"gpu-n1": ("gpu", 1)}


def test_validate_lists_each_scaling_run_with_its_layout_and_worst_case(capsys: pytest.CaptureFixture[str]) -> None:
    result = answer(capsys, "validate", "--local", "--json", str(TWO_NODE))
    assert result["tracks"]["gpu"]["nodes"] == 2
    worst = result["worst_case_usd"]
    assert result["scaling_runs"] == {"gpu-n1": {
        "track": "gpu", "instance_type": "p5.48xlarge", "nodes": 1, "devices_per_node": 8, "data_parallel": 8,
        "gradient_accumulation_steps": 2, "worst_case_usd": worst["gpu-n1"]}}
    # A whole run at half the nodes: half the main run's worst case, and counted in the total.
    assert Decimal(worst["gpu-n1"]) * 2 == Decimal(worst["gpu"])
    assert Decimal(worst["total"]) == sum(Decimal(v) for k, v in worst.items() if k != "total")

    assert main(["validate", "--local", str(TWO_NODE)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "  gpu    p5.48xlarge x2: 16 devices, tp=1 pp=1 dp=16, grad accumulation 1 (effective batch 16)" in lines
    assert (f"  gpu-n1 p5.48xlarge x1: 8 devices, tp=1 pp=1 dp=8, grad accumulation 2 (effective batch 16); "
            f"scaling run of gpu, worst case {usd(Decimal(worst['gpu-n1']))}") in lines
    assert any(f"gpu-n1 {usd(Decimal(worst['gpu-n1']))}" in line for line in lines if "worst case at" in line)


def test_validate_without_scaling_runs_keeps_its_columns(capsys: pytest.CaptureFixture[str]) -> None:
    trial = str(ROOT / "examples" / "trial-rehearsal.json")
    assert answer(capsys, "validate", "--local", "--json", trial)["scaling_runs"] == {}
    assert main(["validate", "--local", trial]) == 0
    assert "\n  gpu   p5.48xlarge x1: 8 devices" in capsys.readouterr().out


def test_estimate_prices_the_scaling_run_at_its_node_count(capsys: pytest.CaptureFixture[str]) -> None:
    result = answer(capsys, "estimate", "--local", "--json", str(TWO_NODE))
    assert result["runs"]["gpu-n1"] == {"instance_type": "p5.48xlarge", "nodes": 1, "scaling": True}
    assert result["runs"]["gpu"] == {"instance_type": "p5.48xlarge", "nodes": 2, "scaling": False}
    worst = result["worst_case_usd"]
    assert Decimal(worst["gpu-n1"]) * 2 == Decimal(worst["gpu"]) and result["over_limit"] is False

    assert main(["estimate", "--local", str(TWO_NODE)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert (f"  gpu-n1       p5.48xlarge x1 for 1.0 h x 2 attempt(s) = {usd(Decimal(worst['gpu-n1']))} "
            "(scaling run of gpu)") in lines


def test_a_scaling_run_counts_against_max_usd(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads(TWO_NODE.read_text())
    without = json.loads(TWO_NODE.read_text())
    without["tracks"]["gpu"]["nodes"] = 2
    total_without = Decimal(answer(capsys, "estimate", "--local", "--json", _write(tmp_path, without))
                            ["worst_case_usd"]["total"])
    doc["limits"]["max_usd"] = float(total_without) + 1  # enough for the main runs alone, not with gpu-n1
    result = answer(capsys, "estimate", "--local", "--json", _write(tmp_path, doc), code=1)
    assert result["over_limit"] is True and "gpu-n1" in result["worst_case_usd"]


def _write(tmp_path: Path, doc: dict[str, Any]) -> str:
    path = tmp_path / "trial.json"
    path.write_text(json.dumps(doc))
    return str(path)
