"""Price overrides: a malformed one is refused naming the field and what it must hold, never half-applied."""

from __future__ import annotations

from typing import Any

import pytest

from lambdas.domain.prices import PricesInvalid, load_price_table


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
