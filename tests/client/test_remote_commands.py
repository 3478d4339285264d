"""submit · status · watch · cancel · cache against the real API handler behind the local SigV4 shim (moto AWS)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dualtrack.client.errors import (
    EXIT_CONFIG,
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    EXIT_REFUSED,
    EXIT_TRIAL_FAILED,
    EXIT_UNAVAILABLE,
    ClientFailure,
)
from dualtrack.client.http import RetryPolicy
from tests.client.conftest import json_response

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish:UserWarning")


def submit(cli: Any, url: str, path: str, *extra: str) -> tuple[int, str, str]:
    return cli("submit", path, "--endpoint", url, *extra)


def test_submit_launches_once_and_a_repeat_starts_nothing(cli: Any, served: Any, trial_file: Any,
                                                          aws: dict[str, Any]) -> None:
    path = trial_file()
    code, out, err = submit(cli, served.url, path, "--yes")
    assert code == 0, err
    assert "route dual_track (standard_lora)" in err and "worst case $" in err
    trial_id = out.split()[1].rstrip(":")
    assert out.startswith(f"submitted {trial_id}: workflow started (arn:aws:states:")
    code, out, _ = submit(cli, served.url, path, "--yes", "--json")
    body = json.loads(out)
    assert code == 0 and body["created"] is False and body["trial"]["already_submitted"] is True
    assert body["trial"]["trial_id"] == trial_id and body["local"]["triage"]["route"] == "dual_track"
    assert len(aws["sfn"].list_executions(stateMachineArn=aws["state_machine"])["executions"]) == 1
    assert all(s.verdict == "ok" for s in served.seen)


def test_submit_without_a_terminal_or_yes_launches_nothing(cli: Any, served: Any, trial_file: Any,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    code, _, err = submit(cli, served.url, trial_file(limits={"max_usd": 10, "max_hours": 12}))
    assert code == EXIT_TRIAL_FAILED
    assert "not launched: confirmation needed (worst case $" in err
    assert "pass --yes to launch from a script" in err
    assert served.seen == []


def test_submit_asks_on_a_terminal_and_no_means_no(cli: Any, served: Any, trial_file: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    code, _, err = submit(cli, served.url, trial_file(workload={"shared_platform": True},
                                                      limits={"max_usd": 10, "max_hours": 12}))
    assert code == EXIT_TRIAL_FAILED and served.seen == []
    assert "attention: worst case $" in err and "exceeds limits.max_usd $10.00" in err
    assert "triage routes" not in err  # a shared platform routes to dual_track: only the cost needs confirming


def test_local_validation_uses_the_api_messages_and_sends_nothing(cli: Any, served: Any, trial_file: Any) -> None:
    path = trial_file(sequence_length="long", extra_field=1)
    code, _out, err = submit(cli, served.url, path, "--yes")
    assert code == EXIT_INVALID and served.seen == []
    assert f"{path}: sequence_length:" in err and f"{path}: extra_field:" in err
    code, _validate_out, validate_err = cli("validate", path)
    assert sorted(err.splitlines()) == sorted(validate_err.splitlines())


def test_api_422_is_shown_with_its_field_paths(cli: Any, served: Any, trial_file: Any) -> None:
    code, _, err = submit(cli, served.url, trial_file(limits={"max_usd": 100, "max_hours": 12}), "--yes")
    assert code == EXIT_INVALID
    assert "error: HTTP 422: submission refused (limits); nothing was started" in err
    assert "  limits.max_usd: worst case" in err and "Traceback" not in err


def test_api_409_triage_refusal(served: Any, example_text: str) -> None:
    from dualtrack.client.api import TrialApi
    from dualtrack.client.http import SignedClient

    api = TrialApi(SignedClient(served.url, "us-east-1", served.credentials, retry=RetryPolicy(max_attempts=1)))
    refused = dict(json.loads(example_text), workload={"custom_cuda_ops": True})
    with pytest.raises(ClientFailure) as raised:
        api.submit(refused)
    assert raised.value.status == 409 and raised.value.exit_code == EXIT_REFUSED
    from lambdas.domain.trial.rules import parse_trial
    from lambdas.domain.trial.triage import submission_refusal, triage

    spec = parse_trial(refused)
    # The API's answer is its own sentence; the triage's reason (the CLI's local words) is the problem it lists.
    assert raised.value.message == "HTTP 409: submission refused (triage); nothing was started"
    assert [(e.path, e.message) for e in raised.value.errors] == [
        ("triage", submission_refusal(spec, triage(spec)))]


def test_the_cli_refuses_a_triage_blocked_trial_locally_with_the_same_reason(cli: Any, served: Any,
                                                                             trial_file: Any) -> None:
    code, _, err = submit(cli, served.url, trial_file(workload={"custom_cuda_ops": True}), "--yes")
    assert code == EXIT_REFUSED and served.seen == []
    assert "triage routes this trial to gpu" in err and "triage_override" in err


def test_status_of_an_unknown_trial_is_404_exit_3(cli: Any, served: Any) -> None:
    code, out, err = cli("status", "no-such-trial", "--endpoint", served.url)
    assert code == EXIT_NOT_FOUND and out == ""
    assert err.strip() == "error: HTTP 404: no trial 'no-such-trial'; list trials with GET /trials"
    code, out, _ = cli("status", "no-such-trial", "--endpoint", served.url, "--json")
    assert code == EXIT_NOT_FOUND and json.loads(out)["status"] == 404


def test_status_list_watch_and_cancel(cli: Any, served: Any, trial_file: Any) -> None:
    _, out, _ = submit(cli, served.url, trial_file(), "--yes", "--json")
    trial_id = json.loads(out)["trial"]["trial_id"]
    code, out, _ = cli("status", trial_id, "--endpoint", served.url)
    assert code == 0 and out.startswith(f"trial {trial_id}  SUBMITTED")
    assert "route dual_track" in out and "no run has started yet" in out and "of worst case $" in out
    code, out, _ = cli("status", "--endpoint", served.url)
    assert code == 0 and out.splitlines()[0].split() == ["TRIAL", "STATUS", "OWNER", "CREATED"]
    assert trial_id in out
    code, out, _ = cli("cancel", trial_id, "--endpoint", served.url, "--reason", "wrong data version")
    assert code == 0 and out.strip() == f"cancelled {trial_id} (workflow aborted)"
    code, out, _ = cli("cancel", trial_id, "--endpoint", served.url)
    assert code == 0 and out.strip() == f"{trial_id} already ended CANCELLED: nothing to cancel"
    code, out, _ = cli("watch", trial_id, "--endpoint", served.url, "--interval", "1")
    assert code == EXIT_TRIAL_FAILED and "CANCELLED (wrong data version)" in out
    assert out.strip().endswith(f"trial {trial_id} ended CANCELLED")
    code, _, err = cli("cancel", "no-such-trial", "--endpoint", served.url)
    assert code == EXIT_NOT_FOUND and "no trial 'no-such-trial'" in err


def test_watch_polls_until_a_terminal_state(served: Any, trial_file: Any, cli: Any) -> None:
    from dualtrack.client.api import TrialApi
    from dualtrack.client.http import SignedClient
    from dualtrack.commands.watch import watch
    from lambdas.handlers import on_trial_api

    _, out, _ = submit(cli, served.url, trial_file(), "--yes", "--json")
    trial_id = json.loads(out)["trial"]["trial_id"]
    states = iter(["STOPPING", "STOPPING", "STOPPING", "CANCELLED"])  # a cancel, then the stop finishing
    sleeps: list[float] = []

    def advance(seconds: float) -> None:
        sleeps.append(seconds)
        on_trial_api.compose().trials.update(trial_id, status=next(states))

    written: list[str] = []
    api = TrialApi(SignedClient(served.url, "us-east-1", served.credentials))
    final = watch(api, trial_id, interval_s=5, as_json=True, live=False, sleep=advance, write=written.append)
    assert final["status"] == "CANCELLED" and sleeps == [5, 5, 5, 5]
    assert [json.loads(w)["status"] for w in written] == ["SUBMITTED", "STOPPING", "CANCELLED"]
    live: list[str] = []
    watch(api, trial_id, interval_s=5, as_json=False, live=True, sleep=advance, write=live.append)
    assert live[0].startswith(f"trial {trial_id}  CANCELLED") and "\x1b[" not in live[0]


def test_cache_list(cli: Any, served: Any, aws: dict[str, Any]) -> None:
    code, out, _ = cli("cache", "list", "--endpoint", served.url)
    assert code == 0 and out.startswith("no compile-cache entries yet")
    from lambdas.adapters.dynamo_items import to_item

    aws["ddb"].put_item(TableName="cache-registry", Item=to_item({
        "cache_key": "ab" * 32, "model_slug": "meta-llama-llama-3-1-8b", "compiler_version": "2.21.0",
        "status": "ready", "hits": 3, "misses": 1, "first_compile_s": 1800, "hit_compile_s_total": 90,
        "objects": {"neuron/a.neff": 1_500_000_000}, "last_used_at": "2026-11-20T10:00:00Z"}))
    code, out, _ = cli("cache", "list", "--endpoint", served.url)
    assert code == 0 and out.startswith("no compile-cache entries yet")  # no trial of the caller's team used it
    aws["ddb"].put_item(TableName="trials", Item=to_item({
        "trial_id": "pilot-0123456789", "team": "team-nlp", "status": "SUCCEEDED",
        "created_at": "2026-11-20T09:00:00Z", "cache_key": "ab" * 32}))
    code, out, _ = cli("cache", "list", "--endpoint", served.url)
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[:4] == ["MODEL", "COMPILER", "KEY", "STATUS"]
    row = lines[1].split()
    assert row[:4] == ["meta-llama-llama-3-1-8b", "2.21.0", "ab" * 6, "ready"]
    assert "75%" in lines[1] and "5,310 s" in lines[1] and "1.4 GiB" in lines[1]
    code, out, _ = cli("cache", "list", "--endpoint", served.url, "--json", "--model", "other")
    assert code == 0 and json.loads(out)["entries"] == []


def test_network_failure_and_5xx_are_reported_with_exit_5(cli: Any, serve: Any,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dualtrack.client.http.time.sleep", lambda s: None)
    monkeypatch.setattr(RetryPolicy, "delay", lambda self, attempt, rng, retry_after=None: 0.0)
    shim = serve(lambda e, c: json_response(500, {"message": "Internal server error"}))
    code, _, err = cli("status", "x", "--endpoint", shim.url)
    assert code == EXIT_UNAVAILABLE and len(shim.seen) == 5
    assert err.count("note: HTTP 500; retrying in 0.0 s") == 4
    assert err.strip().endswith("error: HTTP 500: Internal server error (gave up after 5 attempts)")
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code, out, err = cli("status", "x", "--endpoint", f"http://127.0.0.1:{port}/prod", "--json")
    failure = json.loads(out)
    assert code == EXIT_UNAVAILABLE and failure["exit_code"] == EXIT_UNAVAILABLE
    assert "connection refused" in failure["message"] and "Traceback" not in err


def test_missing_credentials_are_a_config_problem(cli: Any, served: Any, monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Any) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SECURITY_TOKEN", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setattr("botocore.credentials.ContainerProvider.load", lambda self: None)
    code, _, err = cli("status", "x", "--endpoint", served.url)
    assert code == EXIT_CONFIG and "no AWS credentials found" in err


def test_a_pending_trial_is_approved_by_another_approver_and_a_quota_refusal_is_not_retried(
        cli: Any, served: Any, trial_file: Any, aws: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """submit answers 202 PENDING_APPROVAL and says who must act; approve as the submitter is refused (403, exit
    6), as another approver it starts the workflow; reject afterwards is a conflict (exit 4). A team-quota 429 is
    a refusal: the client does not retry it and exits 4."""
    from lambdas.runtime.settings import reset_settings
    from tests.stage import GOVERNANCE, principal

    teams = {**GOVERNANCE["teams"], "team-nlp": {"approval_threshold_usd": "1000",
                                                 "quotas": {"concurrent_trials": 1}}}
    monkeypatch.setenv("GOVERNANCE", json.dumps({**GOVERNANCE, "teams": teams}))
    reset_settings()
    served.user_arn = principal("dualtrack-team-nlp-approver")
    code, out, err = submit(cli, served.url, trial_file(), "--yes")
    assert code == 0, err
    trial_id = out.split()[1].rstrip(":")
    assert "waiting for an approver of team team-nlp" in out and f"dualtrack approve {trial_id}" in out
    code, _, err = cli("approve", trial_id, "--comment", "my own", "--endpoint", served.url)
    assert code == EXIT_CONFIG and "cannot approve or reject it" in err
    served.user_arn = principal("platform-admin")
    code, out, err = cli("approve", trial_id, "--comment", "budget agreed", "--endpoint", served.url)
    assert code == 0 and out.startswith(f"approved {trial_id}: SUBMITTED (workflow arn:aws:states:"), err
    code, _, err = cli("reject", trial_id, "--comment", "too late", "--endpoint", served.url)
    assert code == EXIT_REFUSED and "not PENDING_APPROVAL" in err

    served.user_arn = principal("dualtrack-team-nlp-submitter")
    before = len(served.seen)
    code, _, err = submit(cli, served.url, trial_file(name="second-trial"), "--yes")
    assert code == EXIT_REFUSED and "quota.concurrent_trials: quota concurrent_trials: limit 1, in use 1" in err
    assert len(served.seen) == before + 1  # one request: a quota refusal is not retried


def test_report_costs_shows_the_callers_team(cli: Any, served: Any, trial_file: Any, aws: dict[str, Any]) -> None:
    from lambdas.handlers.scheduled_cost_report import handler as scheduled
    from tests.integration.conftest import Context

    code, _, err = cli("report", "costs", "--endpoint", served.url)
    assert code == EXIT_NOT_FOUND and "no cost report yet" in err
    code, out, err = submit(cli, served.url, trial_file(), "--yes")
    trial_id = out.split()[1].rstrip(":")
    from lambdas.adapters.ledger_table import DynamoLedger
    from tests.builders import run_cost, stored_cost

    closed = run_cost("15", "trn2", trial_id=trial_id, effective_training_usd="12.5", compile_usd="2.5")
    DynamoLedger("ledger").put_cost(f"{trial_id}#trn2", stored_cost(closed, ended_at="2026-11-18T10:00:00Z"), facts=3)
    scheduled({"time": "2026-11-23T06:00:00Z"}, Context())
    code, out, err = cli("report", "costs", "--endpoint", served.url)
    assert code == 0, err
    assert out.startswith("# Cost report 2026-W47 for team team-nlp")
    assert "| team-nlp | 15 " in out and "trn2 15" in out and "2.5 / 0" in out
    code, out, _ = cli("report", "costs", "--endpoint", served.url, "--format", "json")
    assert code == 0 and json.loads(out)["total"]["compile_usd"] == "2.5"
    code, _, err = cli("report", trial_id, "--team", "team-nlp", "--endpoint", served.url)
    assert code == EXIT_INVALID and "--team goes with `dualtrack report costs`" in err
