"""A stage is priced at its own region's rates: a region the price table lacks is refused, never priced from
another region (the functions, the stage config and `dualtrack stage cost` alike)."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from infra.config import ConfigInvalid, stage_config
from lambdas.domain.json_types import JsonObject
from lambdas.domain.money.cost import AttemptUsage, RunUsage, compute_run_cost
from lambdas.domain.money.prices import PriceMissing, load_price_table
from lambdas.runtime.settings import LedgerSettings, SettingsInvalid

ROOT = Path(__file__).resolve().parents[3]
CONTEXT = json.loads((ROOT / "cdk.json").read_text())["context"]
GPU = {"instance_types": ["g6e.48xlarge"], "ami_ssm_parameter": "/aws/service/ecs/optimized-ami/amazon-linux-2023/"
       "gpu/recommended/image_id"}
RATES: JsonObject = {"storage_gb_month_usd": "0.024", "put_per_1000_usd": "0.0053", "get_per_1000_usd": "0.00042"}


def _stage(**entry: Any) -> Any:
    return stage_config({"dualtrack:stages": {"s": entry}}, "s")


def _run(region: str) -> RunUsage:
    return RunUsage(trial_id="t", run="gpu", track="gpu", instance_type="g6e.48xlarge", region=region,
                    attempts=[AttemptUsage(attempt=1, billed_seconds=Decimal(3600))], checkpoint_bytes=2**30)


def test_s3_rates_of_a_region_the_table_lacks_are_refused_not_borrowed() -> None:
    with pytest.raises(PriceMissing, match=r'no S3 rates for eu-west-1 .*"s3": \{"eu-west-1"'):
        load_price_table().s3_rates("eu-west-1")


def test_a_run_is_costed_at_its_own_regions_rows() -> None:
    cost = compute_run_cost(_run("us-east-2"), load_price_table())
    assert cost.price.region == "us-east-2" and cost.price.confidence == "estimate"  # the us-east-2 row, marked so
    with pytest.raises(PriceMissing, match="no S3 rates for eu-west-1"):  # an instance override alone is not enough
        compute_run_cost(_run("eu-west-1"), load_price_table({"instances": {"eu-west-1": {"g6e.48xlarge": "31"}}}))
    priced = load_price_table({"instances": {"eu-west-1": {"g6e.48xlarge": "31"}}, "s3": {"eu-west-1": RATES}})
    assert compute_run_cost(_run("eu-west-1"), priced).price.hourly_usd == Decimal(31)
    assert priced.s3_rates("eu-west-1").confidence == "override"


def test_the_functions_price_the_region_they_run_in_unless_told() -> None:
    """Lambda sets AWS_REGION in every function's environment (Lambda, "Defined runtime environment variables",
    https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html#configuration-envvars-runtime): without
    PRICE_REGION a function prices its own region, never a fixed one."""
    base = {"LEDGER_TABLE": "l", "TRIALS_TABLE": "t", "USAGE_TABLE": "u", "ARTIFACTS_BUCKET": "a"}
    assert LedgerSettings.model_validate({**base, "AWS_REGION": "us-east-2"}).PRICE_REGION == "us-east-2"
    assert LedgerSettings.model_validate({**base, "AWS_REGION": "us-east-2", "PRICE_REGION": "eu-west-1"}
                                         ).PRICE_REGION == "eu-west-1"
    with pytest.raises(SettingsInvalid, match="PRICE_REGION"):
        LedgerSettings.from_env(base)


def test_the_shipped_stages_are_priced_in_their_own_region() -> None:
    for name in ("dev", "prod", "local"):
        config = stage_config(CONTEXT, name)
        assert config.pricing_region == config.region, name


def test_a_stage_in_a_region_the_table_lacks_is_refused_unless_its_overrides_price_it() -> None:
    with pytest.raises(ConfigInvalid, match=r"no eu-west-1 price for g6e.48xlarge, S3 .*price_overrides"):
        _stage(region="eu-west-1", gpu=GPU)
    priced = _stage(region="eu-west-1", gpu=GPU, price_overrides={
        "instances": {"eu-west-1": {"g6e.48xlarge": {"hourly_usd": "33.1"}}}, "s3": {"eu-west-1": RATES}})
    assert priced.pricing_region == "eu-west-1"


def test_a_price_region_other_than_the_stages_own_is_refused() -> None:
    with pytest.raises(ConfigInvalid, match="price_region 'us-east-1' differs from region 'us-east-2'"):
        _stage(region="us-east-2", price_region="us-east-1", gpu=GPU)


def test_a_stage_without_a_region_is_priced_where_it_deploys() -> None:
    assert _stage(gpu=GPU).pricing_region is None  # the functions read their own AWS_REGION
    assert _stage(gpu=GPU, price_region="us-east-2").pricing_region == "us-east-2"
    with pytest.raises(ConfigInvalid, match="spot capacity, whose price rows name a region"):
        _stage(gpu={**GPU, "spot": True})
