"""Price overrides: a malformed one is refused naming the field and what it must hold, never half-applied; the
worst case counts every run a trial may make."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from lambdas.domain.money.prices import PricesInvalid, load_price_table, worst_case_usd
from lambdas.domain.trial.rules import parse_trial


@pytest.mark.parametrize(("overrides", "path", "fix"), [
    ({"instances": {"us-east-1": {"p5.48xlarge": {"hourly_usd": "abc"}}}},
     "instances.us-east-1.p5.48xlarge.hourly_usd", "USD per hour"),
    ({"instances": {"us-east-1": {"p5.48xlarge": "-3"}}}, "instances.us-east-1.p5.48xlarge.hourly_usd",
     "USD per hour"),
    ({"instances": {"us-east-1": {"p5.48xlarge": {"hourly_usd": 1, "rate": 2}}}},
     "instances.us-east-1.p5.48xlarge.rate", "hourly_usd, confidence, note"),
    ({"instances": ["x"]}, "instances", '{"<region>": {"<instance type>"'),
    ({"instances": {"us-east-1": [1]}}, "instances.us-east-1", '{"<instance type>"'),
    ({"instances": {"us-east-1": {"p5.48xlarge": [1]}}}, "instances.us-east-1.p5.48xlarge", "hourly_usd"),
    ({"instances": {"us-east-1": {"p5.48xlarge": True}}}, "instances.us-east-1.p5.48xlarge", "hourly_usd"),
    ({"s3": {"us-east-1": 5}}, "s3.us-east-1", "storage_gb_month_usd"),
    ({"s3": {"eu-north-1": {"put_per_1000_usd": "0.005"}}}, "s3.eu-north-1.storage_gb_month_usd", "required"),
    ({"version": 7}, "version", "a string"),
    ({"bogus": 1}, "bogus", "instances, s3, version, source"),
    (["x"], "", "a JSON object"),
])
def test_a_malformed_override_names_its_field_and_the_fix(overrides: Any, path: str, fix: str) -> None:
    with pytest.raises(PricesInvalid) as info:
        load_price_table(overrides)
    message = str(info.value)
    assert message.startswith("price overrides: ") and f"{path}: " in message and fix in message, message


def test_a_valid_override_replaces_the_row_and_marks_it() -> None:
    table = load_price_table({"instances": {"us-east-1": {"p5.48xlarge": "12.5"}}})
    row = table.instance_price("p5.48xlarge", "us-east-1")
    assert (str(row.hourly_usd), row.confidence) == ("12.5", "override")


def test_the_worst_case_prices_each_scaling_run_at_its_own_node_count(example_trial: dict[str, Any]) -> None:
    """Each scaling run is a whole run: hourly price x its node count x max_hours x attempts, added to the total."""
    example_trial["tracks"]["gpu"]["nodes"], example_trial["tracks"]["trn2"]["nodes"] = [1, 2], [1, 2, 4]
    spec = parse_trial(example_trial)
    table = load_price_table()
    worst = worst_case_usd(spec, table, "us-east-1", attempts=2)
    hours = Decimal(str(example_trial["limits"]["max_hours"])) * 2
    gpu_hour, trn2_hour = (table.instance_hourly_usd(t, "us-east-1") for t in ("p5.48xlarge", "trn2.48xlarge"))
    assert worst["gpu"] == gpu_hour * 2 * hours and worst["trn2"] == trn2_hour * 4 * hours
    assert worst["gpu-n1"] == gpu_hour * 1 * hours
    assert (worst["trn2-n1"], worst["trn2-n2"]) == (trn2_hour * 1 * hours, trn2_hour * 2 * hours)
    assert worst["total"] == sum((v for k, v in worst.items() if k != "total"), Decimal(0))
    example_trial["tracks"]["gpu"]["nodes"], example_trial["tracks"]["trn2"]["nodes"] = 2, 4
    main_only = parse_trial(example_trial)
    without = worst_case_usd(main_only, table, "us-east-1", attempts=2)
    assert worst["total"] - without["total"] == worst["gpu-n1"] + worst["trn2-n1"] + worst["trn2-n2"]
