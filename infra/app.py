"""CDK entry point: ``npx cdk synth`` (cdk.json) or ``python -m infra.app``.

The only reader of context: ``-c stage=<name>`` picks an entry of ``dualtrack:stages`` (default: the
``dualtrack:default-stage`` context value). Stack names carry the stage, resources carry no physical names, so two
stages deploy side by side in one account. Synth makes no lookups and no network, STS or git calls.
"""

from __future__ import annotations

import os

import aws_cdk as cdk

from infra.config import StageConfig, stage_config
from infra.constructs.nag import apply_checks
from infra.constructs.retention import ExpiringFunctionLogs, retention_days
from infra.stacks.compute import ComputeStack
from infra.stacks.control import ControlStack
from infra.stacks.stateful import StatefulStack
from lambdas.domain.json_types import JsonMapping


def build_stacks(app: cdk.App, config: StageConfig) -> dict[str, cdk.Stack]:
    env = (cdk.Environment(account=config.account, region=config.region)
           if config.account or config.region else None)
    prefix = config.stack_prefix
    tags = {"dualtrack:stage": config.name, "dualtrack:component": ""}
    stateful = StatefulStack(app, f"{prefix}-Stateful", config=config, env=env,
                             description=f"dualtrack {config.name}: trial data (retained)")
    compute = ComputeStack(app, f"{prefix}-Compute", config=config, storage=stateful.storage, env=env,
                           description=f"dualtrack {config.name}: network, Batch capacity and job definitions")
    control = ControlStack(app, f"{prefix}-Control", config=config, storage=stateful.storage,
                           targets=compute.targets, image_versions=compute.image_versions, env=env,
                           description=f"dualtrack {config.name}: workflow, API, events, monitoring")
    stacks: dict[str, cdk.Stack] = {"stateful": stateful, "compute": compute, "control": control}
    for component, stack in stacks.items():
        cdk.Tags.of(stack).add("dualtrack:stage", tags["dualtrack:stage"])
        cdk.Tags.of(stack).add("dualtrack:component", component)
    retention = retention_days(config.log_retention_days)
    for keyed in (stateful, compute, control):
        cdk.Aspects.of(keyed).add(ExpiringFunctionLogs(retention, keyed.log_key))
    return stacks


def build_app(*, outdir: str | None = None, context: JsonMapping | None = None,
              stage: str | None = None) -> cdk.App:
    app = cdk.App(outdir=outdir, context=context) if outdir else cdk.App(context=context)
    raw = {
        "dualtrack:stages": app.node.try_get_context("dualtrack:stages"),
    }
    chosen = stage or app.node.try_get_context("stage") or app.node.try_get_context("dualtrack:default-stage")
    config = stage_config(raw, str(chosen or "dev"))
    build_stacks(app, config)
    apply_checks(app)
    return app


def main() -> None:
    os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
    build_app().synth()


if __name__ == "__main__":
    main()
