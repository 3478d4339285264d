"""Contracts of the Lambda package: committed OpenAPI document, settings errors, import-time behaviour."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
HANDLERS = sorted(p.stem for p in (ROOT / "lambdas" / "handlers").glob("*.py") if not p.stem.startswith("_"))


def test_openapi_document_is_current() -> None:
    from dualtrack.commands.openapi import document

    committed = (ROOT / "lambdas" / "openapi.json").read_text()
    assert committed == document(), "lambdas/openapi.json is stale: run `dualtrack openapi --write`"


def test_settings_name_the_missing_variable() -> None:
    from lambdas.runtime.settings import ApiSettings, SettingsInvalid

    with pytest.raises(SettingsInvalid, match=r"STATE_MACHINE_ARN.*ARN of the trial workflow"):
        ApiSettings.from_env(
            {
                "LEDGER_TABLE": "l",
                "TRIALS_TABLE": "t",
                "ARTIFACTS_BUCKET": "a",
                "IDEMPOTENCY_TABLE": "i",
                "CACHE_REGISTRY_TABLE": "c",
                "CACHE_BUCKET": "b",
            }
        )
    with pytest.raises(SettingsInvalid, match="PRICE_OVERRIDES"):
        ApiSettings.from_env({"PRICE_OVERRIDES": "{nope"})


def test_every_handler_imports_without_environment_or_clients() -> None:
    # Cold start: a handler module loads the Powertools runtime and nothing else of weight; the AWS SDK, pydantic's
    # model machinery, the API resolver and the function's task load on the first invocation.
    deferred = ["boto3", "botocore.client", "pydantic.main", "lambdas.tasks", "lambdas.runtime.settings",
                "aws_lambda_powertools.event_handler", "aws_lambda_powertools.utilities.idempotency"]
    code = (
        "import sys, importlib\n"
        f"for name in {HANDLERS!r}:\n"
        "    module = importlib.import_module('lambdas.handlers.' + name)\n"
        "    assert callable(module.handler), name\n"
        f"    loaded = [m for m in {deferred!r} if m in sys.modules]\n"
        "    assert not loaded, f'{name} imports {loaded} at cold start'\n"
        "from lambdas.adapters import aws\n"
        "assert aws.client.cache_info().currsize == 0\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert set(HANDLERS) == {
        "on_trial_api",
        "resolve_compile_cache",
        "on_batch_job_state",
        "on_artifact_created",
        "close_trial_costs",
        "build_trial_report",
        "set_trial_status",
        "scheduled_cost_report",
    }


def test_every_settings_name_a_handler_may_require_is_a_settings_model() -> None:
    from typing import get_args

    from lambdas.runtime import settings
    from lambdas.runtime.entry import SettingsName

    for name in get_args(SettingsName):
        model = getattr(settings, name)
        assert issubclass(model, settings._Settings), name
