"""The stage a `dualtrack stage` action works on: cdk.json's ``dualtrack:stages`` entry, validated."""

from __future__ import annotations

import json

from infra.config import ConfigInvalid, StageConfig, stage_config
from infra.synth import REPO_ROOT
from lambdas.domain.json_types import JsonObject


class StageUnusable(Exception):
    """No such stage, an invalid one, or no checkout to read it from: the message says which (exit 2)."""


def load_stage(name: str | None, command: str) -> StageConfig:
    """The stage ``name`` (default: cdk.json's ``dualtrack:default-stage``, else ``dev``) of this checkout."""
    cdk_json = REPO_ROOT / "cdk.json"
    if not cdk_json.exists():
        raise StageUnusable(f"no cdk.json at {REPO_ROOT}: `{command}` reads a stage of a dualtrack checkout")
    context: JsonObject = json.loads(cdk_json.read_text())["context"]
    defined = context.get("dualtrack:stages")
    stages = defined if isinstance(defined, dict) else {}
    default = context.get("dualtrack:default-stage")
    stage: str = name or (default if isinstance(default, str) else None) or "dev"
    if stage not in stages:
        raise StageUnusable(f"unknown stage {stage!r}: cdk.json defines {', '.join(sorted(stages)) or 'no stages'} "
                            "(context dualtrack:stages)")
    try:
        return stage_config(context, stage)
    except ConfigInvalid as exc:
        raise StageUnusable(f"stage {stage!r} is invalid: {exc}") from None
