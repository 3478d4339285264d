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


def test_every_schema_the_openapi_document_references_is_in_it() -> None:
    import json
    import re

    document = json.loads((ROOT / "lambdas" / "openapi.json").read_text())
    referenced = set(re.findall(r'"#/components/schemas/([^"]+)"', json.dumps(document)))
    assert referenced and referenced <= set(document["components"]["schemas"]), referenced


def test_settings_name_the_missing_variable() -> None:
    from lambdas.runtime.api_settings import ApiSettings
    from lambdas.runtime.settings import SettingsInvalid

    with pytest.raises(SettingsInvalid, match=r"STATE_MACHINE_ARN.*ARN of the trial workflow"):
        ApiSettings.from_env(
            {
                "LEDGER_TABLE": "l",
                "USAGE_TABLE": "u",
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
    # INIT needs no environment and makes no AWS call: settings are validated on the first invocation, and the
    # composition (adapters and their boto3 clients) is built then, once per execution environment.
    code = (
        "import importlib\n"
        f"for name in {HANDLERS!r}:\n"
        "    module = importlib.import_module('lambdas.handlers.' + name)\n"
        "    assert callable(module.handler), name\n"
        "    assert module.compose.cache_info().currsize == 0, name\n"
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
        "vend_job_credentials",
        "reconcile_trials",
    }


@pytest.mark.parametrize("name", HANDLERS)
def test_every_handler_checks_its_settings_before_anything_else(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    from lambdas.runtime.composition import reset_environment
    from lambdas.runtime.settings import SettingsInvalid

    for variable in ("LEDGER_TABLE", "TRIALS_TABLE", "ARTIFACTS_BUCKET"):
        monkeypatch.delenv(variable, raising=False)
    reset_environment()
    module = importlib.import_module(f"lambdas.handlers.{name}")
    with pytest.raises(SettingsInvalid, match=r"(LEDGER|TRIALS)_TABLE: .*DynamoDB (ledger|trials) table"):
        module.handler({}, None)
    assert module.compose.cache_info().currsize == 0


def test_the_first_request_freezes_what_init_built_and_requests_are_still_collected() -> None:
    """INIT's objects live as long as the execution environment, so the first invocation moves them out of the
    collector's sight (``gc.freeze()``, https://docs.python.org/3/library/gc.html#gc.freeze); cycles a request makes
    are still collected. In a fresh interpreter, so this test process is left as it was."""
    code = (
        "import gc, importlib\n"
        "module = importlib.import_module('lambdas.handlers.set_trial_status')\n"
        "assert gc.get_freeze_count() == 0\n"
        "from lambdas.runtime.settings import SettingsInvalid\n"
        "try:\n"
        "    module.handler({}, None)\n"
        "except SettingsInvalid:\n"
        "    pass\n"
        "frozen = gc.get_freeze_count()\n"
        "assert frozen > 10_000, frozen\n"
        "try:\n"
        "    module.handler({}, None)\n"
        "except SettingsInvalid:\n"
        "    pass\n"
        "assert gc.get_freeze_count() == frozen  # once per environment\n"
        "class Node:\n"
        "    pass\n"
        "a, b = Node(), Node()\n"
        "a.other, b.other = b, a\n"
        "del a, b\n"
        "assert gc.collect() >= 2\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
