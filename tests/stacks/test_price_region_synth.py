"""The functions price the stage's own region: PRICE_REGION is the stage's region, or the region the stack is
deployed to when the stage names none, never a fixed one."""

from __future__ import annotations

from typing import Any

from infra.config import StageConfig
from tests.stacks.conftest import props

TRN2 = {"instance_types": ["trn2.48xlarge"], "ami_id": "ami-0123456789abcdef0", "availability_zone": "us-east-2b"}
GPU = {"instance_types": ["g6e.48xlarge"], "ami_id": "ami-0123456789abcdef0"}


def _price_regions(config: StageConfig) -> list[Any]:
    from aws_cdk import App
    from aws_cdk.assertions import Template

    from infra.app import build_stacks

    control = Template.from_stack(build_stacks(App(), config)["control"]).to_json()
    return [f["Environment"]["Variables"]["PRICE_REGION"] for f in props(control, "AWS::Lambda::Function")
            if "PRICE_REGION" in f.get("Environment", {}).get("Variables", {})]


def test_every_function_prices_the_stages_own_region() -> None:
    """CloudFormation's AWS::Region pseudo parameter (https://docs.aws.amazon.com/AWSCloudFormation/latest/
    UserGuide/pseudo-parameter-reference.html) is the region the stack is created in: a stage that names no region
    is priced there."""
    own = StageConfig.model_validate({"name": "ohio", "region": "us-east-2", "availability_zones": ["us-east-2b"],
                                      "trn2": TRN2})
    regions = _price_regions(own)
    assert regions and set(regions) == {"us-east-2"}
    anywhere = StageConfig.model_validate({"name": "anywhere", "gpu": GPU})
    assert {str(r) for r in _price_regions(anywhere)} == {str({"Ref": "AWS::Region"})}
