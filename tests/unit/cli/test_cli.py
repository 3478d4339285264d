"""The CLI as a user meets it: exit codes, one line per problem, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

import pytest

from dualtrack.cli import main
from dualtrack.pricing import hourly_usd_from_products, product_filters, refresh

if TYPE_CHECKING:
    from mypy_boto3_pricing.type_defs import GetProductsRequestTypeDef, GetProductsResponseTypeDef

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = str(ROOT / "examples" / "trial-llama31-8b-lora.json")


def write(tmp_path: Path, doc: Any) -> str:
    path = tmp_path / "trial.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def test_validate_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", EXAMPLE]) == 0
    out = capsys.readouterr().out
    assert "valid trial llama31-8b-lora-pilot-" in out and "grad accumulation 8" in out


def test_validate_reports_each_problem_on_its_own_line(tmp_path: Path, example_trial: dict[str, Any],
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    example_trial.update(bogus=1, precision="fp8")
    path = write(tmp_path, example_trial)
    assert main(["validate", path]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2
    assert any(": bogus: unknown field" in line for line in lines)
    assert any(": precision: must be" in line for line in lines)


@pytest.mark.parametrize("text", ["", "{", "[1, 2]", "not json at all", '{"schema_version": 1}'])
def test_validate_malformed_input_exits_2_without_traceback(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text)
    proc = subprocess.run([sys.executable, "-m", "dualtrack", "validate", path], capture_output=True, text=True,
                          cwd=ROOT)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.stderr.strip()


def test_validate_refuses_a_model_the_job_cannot_load(tmp_path: Path, example_trial: dict[str, Any],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    del example_trial["model"]["uri"]
    assert main(["validate", write(tmp_path, example_trial)]) == 2
    err = capsys.readouterr().err
    assert ": model.uri: " in err and "no internet access" in err
    example_trial["model"]["uri"] = str(tmp_path / "weights")
    example_trial["data"].update(train_uri="examples/data/train.jsonl", validation_uri="examples/data/validation.jsonl")
    assert main(["validate", "--local", write(tmp_path, example_trial)]) == 0


def test_validate_refuses_max_hours_under_a_minute(tmp_path: Path, example_trial: dict[str, Any],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    example_trial["limits"]["max_hours"] = 0.01
    assert main(["validate", write(tmp_path, example_trial)]) == 2
    assert ": limits.max_hours: " in capsys.readouterr().err


def test_validate_refuses_a_worst_case_over_max_usd_as_the_api_does(tmp_path: Path,
                                                                   example_trial: dict[str, Any]) -> None:
    """A trial whose worst case ($3,500.23 at 2 attempts per run) exceeds its limits.max_usd (100) is invalid to
    `validate` as it is to the API: exit 2, one `FILE: limits.max_usd: ...` line with the figure and the fix, and
    the same problem under --json."""
    example_trial["limits"]["max_usd"] = 100
    path = write(tmp_path, example_trial)
    proc = subprocess.run([sys.executable, "-m", "dualtrack", "validate", path], capture_output=True, text=True,
                          cwd=ROOT)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{path}: limits.max_usd: worst case 3500.23 USD"), lines
    assert "exceeds limits.max_usd 100" in lines[0] and "raise max_usd, lower max_hours" in lines[0]
    assert "valid trial" not in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "dualtrack", "validate", "--json", path], capture_output=True,
                          text=True, cwd=ROOT)
    assert proc.returncode == 2
    result = json.loads(proc.stdout)
    assert result["valid"] is False and [e["path"] for e in result["errors"]] == ["limits.max_usd"]
    assert "worst case 3500.23 USD" in result["errors"][0]["message"]


def test_validate_missing_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "/nonexistent/trial.json"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_validate_json_output(tmp_path: Path, example_trial: dict[str, Any],
                              capsys: pytest.CaptureFixture[str]) -> None:
    example_trial["precision"] = "fp8"
    assert main(["validate", "--json", write(tmp_path, example_trial)]) == 2
    result = json.loads(capsys.readouterr().out)
    assert result["valid"] is False and result["errors"][0]["path"] == "precision"


def test_triage_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["triage", EXAMPLE]) == 0
    out = capsys.readouterr().out
    assert "route: dual_track" in out and "gpu 4 | trn2 trial 4 | dual track 5" in out
    assert main(["triage", "--json", EXAMPLE]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["scores"] == {"gpu": 4, "trn2_trial": 4, "dual_track": 5}
    assert result["submission"]["accepted"] is True


@pytest.mark.parametrize("command", ["validate", "triage", "estimate"])
def test_output_json_is_accepted_as_the_aws_cli_spells_it(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``--output json`` selects JSON as the AWS CLI's global option does (AWS CLI user guide, "Setting the output
    format"); ``--output text`` keeps the text answer."""
    assert main([command, "--json", EXAMPLE]) == 0
    as_flag = capsys.readouterr().out
    assert main([command, "--output", "json", EXAMPLE]) == 0
    assert capsys.readouterr().out == as_flag and json.loads(as_flag)
    assert main([command, "--output", "text", EXAMPLE]) == 0
    assert not capsys.readouterr().out.lstrip().startswith("{")


def test_triage_shows_refusal(tmp_path: Path, example_trial: dict[str, Any],
                              capsys: pytest.CaptureFixture[str]) -> None:
    example_trial["workload"]["custom_cuda_ops"] = True
    assert main(["triage", write(tmp_path, example_trial)]) == 0
    assert "submission: refused" in capsys.readouterr().out


def test_estimate_limits(tmp_path: Path, example_trial: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", EXAMPLE]) == 0
    assert "within" in capsys.readouterr().out
    example_trial["limits"]["max_usd"] = 100
    assert main(["estimate", write(tmp_path, example_trial)]) == 1
    assert "OVER" in capsys.readouterr().out


def test_help_teaches(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["validate", "--help"])
    out = capsys.readouterr().out
    assert "exit codes" in out and "examples:" in out


class FakePricing:
    def __init__(self, rows: dict[str, str]):
        self.rows = rows
        self.calls: list[GetProductsRequestTypeDef] = []

    def get_products(self, **kw: Unpack[GetProductsRequestTypeDef]) -> GetProductsResponseTypeDef:
        self.calls.append(kw)
        itype = next(f["Value"] for f in kw.get("Filters", []) if f["Field"] == "instanceType")
        found = [json.dumps(_product(self.rows[itype]))] if itype in self.rows else []
        return {"FormatVersion": "aws_v1", "PriceList": found,
                "ResponseMetadata": {"RequestId": "test", "HTTPStatusCode": 200, "HTTPHeaders": {}, "RetryAttempts": 0}}


def _product(usd: str, market: str = "OnDemand") -> dict[str, Any]:
    return {"product": {"attributes": {"marketoption": market, "capacitystatus": "Used"}},
            "terms": {"OnDemand": {"X.Y": {"priceDimensions": {"X.Y.Z": {"unit": "Hrs",
                                                                          "pricePerUnit": {"USD": usd}}}}}}}


def test_pricing_parser_skips_capacity_block_zero_rows() -> None:
    assert hourly_usd_from_products([_product("0.0000000000")]) is None
    assert hourly_usd_from_products([_product("12.5000000000", market="CapacityBlock")]) is None
    assert hourly_usd_from_products([json.dumps(_product("35.7630000000"))]) == "35.763"
    filters = {f["Field"]: f["Value"] for f in product_filters("trn2.48xlarge", "us-east-2")}
    assert filters["marketoption"] == "OnDemand" and filters["capacitystatus"] == "Used"


def test_prices_refresh_updates_rows_and_records_source() -> None:
    client = FakePricing({"trn2.48xlarge": "40.1000000000"})
    table, missing = refresh("us-east-2", client=client, instance_types=["trn2.48xlarge", "p5.48xlarge"])
    assert table.instance_hourly_usd("trn2.48xlarge", "us-east-2") == __import__("decimal").Decimal("40.1")
    assert table.instance_price("trn2.48xlarge", "us-east-2").confidence == "pricing-api"
    assert missing == ["p5.48xlarge"]
    assert "Pricing API" in table.source


def test_cache_key_prints_every_component_and_takes_the_images_versions(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cache", "key", EXAMPLE]) == 0
    out = capsys.readouterr().out
    for component in ("architecture", "lora_rank", "sequence_length", "tensor_parallel", "neuronx_cc",
                      "compiler_flags", "logical_nc_config", "instance_family"):
        assert f"  {component}" in out, component
    image = tmp_path / "image-env.json"
    image.write_text(json.dumps({"neuronx_cc": "2.21.18.0", "torch_neuronx": "2.7.0.2.9", "neuron_runtime": "2.27"}))
    assert main(["cache", "key", EXAMPLE, "--image-env", str(image), "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["components"]["neuronx_cc"] == "2.21.18.0" and body["prefix"].split("/")[2] == "2.21.18.0"
    image.write_text("[1, 2]")
    assert main(["cache", "key", EXAMPLE, "--image-env", str(image)]) == 2
    assert "expected a JSON object of versions" in capsys.readouterr().err


def test_cache_explain_names_the_components_and_change_classes(tmp_path: Path, example_trial: dict[str, Any],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    other = {**example_trial, "sequence_length": 8192, "learning_rate": 0.0005}
    assert main(["cache", "explain", EXAMPLE, write(tmp_path, other)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("different keys: sequence_length differ (training flow)")
    assert "sequence_length: 4096 -> 8192  [training flow]" in out
    assert main(["cache", "explain", EXAMPLE, EXAMPLE, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["change_classes"] == ["data or hyper-parameters"]


@pytest.mark.parametrize(("table", "named"), [
    ({"instances": {"us-east-1": {"p5.48xlarge": {"hourly_usd": "abc"}}}},
     "instances.us-east-1.p5.48xlarge.hourly_usd"),
    ("{not json", "not JSON"),
    ("[1]", "a JSON object"),
    (None, "cannot read"),
])
@pytest.mark.parametrize("command", [["estimate", EXAMPLE], ["prices", "show"]])
def test_a_malformed_price_table_is_a_clean_error_naming_the_file_and_field(
        tmp_path: Path, table: Any, named: str, command: list[str]) -> None:
    path = tmp_path / "prices.json"
    if table is not None:
        path.write_text(table if isinstance(table, str) else json.dumps({**json.loads(
            (ROOT / "lambdas" / "domain" / "data" / "prices.json").read_text()), **table}))
    proc = subprocess.run([sys.executable, "-m", "dualtrack", *command, "--prices", str(path)], capture_output=True,
                          text=True, cwd=ROOT)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert str(path) in proc.stderr and named in proc.stderr, proc.stderr


def test_local_run_names_what_to_change_in_a_trial_it_cannot_rehearse(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's llama trial is valid but loads its model and data from S3, which a rehearsal on this machine
    does not have: one line per field with the fix, an exit code of its own, before anything is deployed."""
    assert main(["local", "run", EXAMPLE]) == 8
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert [line.split(": ")[1] for line in lines] == ["model", "data.train_uri", "data.validation_uri"]
    assert all("examples/trial-rehearsal.json" in line for line in lines) and "Traceback" not in captured.err
    assert main(["local", "run", "--json", EXAMPLE]) == 8
    assert [e["path"] for e in json.loads(capsys.readouterr().out)["errors"]] == ["model", "data.train_uri",
                                                                                  "data.validation_uri"]
