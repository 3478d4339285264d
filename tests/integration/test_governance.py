"""Two teams sharing one stage in one (moto) account, through the API handler as API Gateway invokes it: each
team sees and cancels only its own trials, an approver other than the submitter approves, quotas refuse with the
quota named. The caller is ``requestContext.identity.userArn`` (API Gateway developer guide, "Variables for data
transformations for API Gateway": "The Amazon Resource Name (ARN) of the effective user identified after
authentication"; https://docs.aws.amazon.com/apigateway/latest/developerguide/api-gateway-mapping-template-reference.html)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.integration.conftest import Context, api_event
from tests.json_access import obj
from tests.stage import ACCOUNT, GOVERNANCE, principal

NLP = f"arn:aws:iam::{ACCOUNT}:user/model-team"
NLP_LEAD = principal("dualtrack-team-nlp-approver")
VISION = principal("dualtrack-team-vision-submitter")
ADMIN = principal("platform-admin")


def call(method: str, path: str, body: Any = None, *, who: str = NLP,
         query: dict[str, str] | None = None) -> tuple[int, dict[str, Any], dict[str, str]]:
    from lambdas.handlers.on_trial_api import handler

    out = obj(handler(api_event(method, path, body, query=query, principal=who), Context()))
    # A REST API proxy response carries its headers as multiValueHeaders (Powertools' APIGatewayRestResolver).
    headers = {k: v[-1] for k, v in (out.get("multiValueHeaders") or {}).items()} | (out.get("headers") or {})
    return out["statusCode"], json.loads(out["body"]), headers


def executions(aws: dict[str, Any]) -> int:
    return len(aws["sfn"].list_executions(stateMachineArn=aws["state_machine"])["executions"])


def governed(monkeypatch: pytest.MonkeyPatch, **team_nlp: Any) -> None:
    from lambdas.runtime.settings import reset_settings

    teams = {**GOVERNANCE["teams"], "team-nlp": {**GOVERNANCE["teams"]["team-nlp"], **team_nlp}}
    monkeypatch.setenv("GOVERNANCE", json.dumps({**GOVERNANCE, "teams": teams}))
    reset_settings()


def test_a_team_reads_lists_and_cancels_only_its_own_trials(aws: dict[str, Any], example: dict[str, Any]) -> None:
    status, submitted, _ = call("POST", "/trials", example)
    assert status == 201 and submitted["team"] == "team-nlp" and submitted["submitted_by"] == NLP
    trial = submitted["trial_id"]
    vision_trial = dict(example, name="vision-pilot", owner="team-vision")
    status, other, _ = call("POST", "/trials", vision_trial, who=VISION)
    assert status == 201, other

    for method, path in (("GET", f"/trials/{trial}"), ("GET", f"/trials/{trial}/report"),
                         ("POST", f"/trials/{trial}/cancel")):
        status, body, _ = call(method, path, who=VISION)
        assert status == 404 and body["message"].startswith(f"no trial '{trial}'"), (method, path, body)
    assert call("GET", f"/trials/{trial}")[1]["status"] == "SUBMITTED"  # nothing was cancelled

    listed = {who: [t["trial_id"] for t in call("GET", "/trials", who=who)[1]["trials"]]
              for who in (NLP, VISION, ADMIN)}
    assert listed[NLP] == [trial] and listed[VISION] == [other["trial_id"]]
    assert sorted(listed[ADMIN]) == sorted([trial, other["trial_id"]])
    assert call("GET", f"/trials/{trial}", who=ADMIN)[0] == 200

    status, body, _ = call("POST", "/trials", dict(example, name="posing"), who=VISION)  # owner team-nlp
    assert status == 403 and body["errors"][0]["path"] == "team" and "set owner to 'team-vision'" in \
        body["errors"][0]["message"]
    status, body, _ = call("GET", "/trials", who=f"arn:aws:iam::{ACCOUNT}:user/stranger")
    assert status == 403 and "member of no team" in body["errors"][0]["message"]


def test_an_approver_other_than_the_submitter_starts_a_pending_trial(aws: dict[str, Any], example: dict[str, Any],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    governed(monkeypatch, approval_threshold_usd="1000")
    status, pending, headers = call("POST", "/trials", example, who=NLP_LEAD)
    assert status == 202 and pending["status"] == "PENDING_APPROVAL" and executions(aws) == 0
    trial = pending["trial_id"]
    assert headers["Location"] == f"/trials/{trial}"
    assert call("POST", "/trials", example, who=NLP_LEAD)[0] == 200  # the same body: the same pending trial

    status, body, _ = call("POST", f"/trials/{trial}/approve", {"comment": "mine, approved"}, who=NLP_LEAD)
    assert status == 403 and body["errors"][0]["path"] == "approver" and "cannot approve" in body["errors"][0][
        "message"]
    status, body, _ = call("POST", f"/trials/{trial}/approve", {"comment": "lgtm"}, who=NLP)
    assert status == 403 and "not an approver of team 'team-nlp'" in body["errors"][0]["message"]
    assert call("POST", f"/trials/{trial}/approve", {"comment": "lgtm"}, who=VISION)[0] == 404
    assert executions(aws) == 0

    status, approved, _ = call("POST", f"/trials/{trial}/approve", {"comment": "budget agreed with finance"},
                               who=ADMIN)
    assert status == 200 and approved["status"] == "SUBMITTED" and executions(aws) == 1
    assert approved["approval"]["decided_as"] == ADMIN and approved["approval"]["comment"] == \
        "budget agreed with finance"
    status, body, _ = call("POST", f"/trials/{trial}/reject", {"comment": "changed my mind"}, who=ADMIN)
    assert status == 409 and "is SUBMITTED, not PENDING_APPROVAL" in body["message"]


def test_quotas_refuse_naming_the_quota_its_limit_use_and_when_it_frees(aws: dict[str, Any], example: dict[str, Any],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    governed(monkeypatch, quotas={"concurrent_trials": 1})
    assert call("POST", "/trials", example)[0] == 201
    status, body, headers = call("POST", "/trials", dict(example, name="second"))
    assert status == 429 and "Retry-After" not in headers  # frees when a trial ends, not at a known time
    assert body["errors"] == [{"path": "quota.concurrent_trials",
                               "message": "quota concurrent_trials: limit 1, in use 1, this trial asks 1; frees when "
                                          "one of the team's trials finishes, is cancelled or is rejected"}]
    governed(monkeypatch, quotas={"usd_per_month": "5000"})
    status, body, headers = call("POST", "/trials", dict(example, name="third"))
    assert status == 429 and int(headers["Retry-After"]) > 0
    assert body["quotas"][0]["quota"] == "usd_per_month" and body["quotas"][0]["current"] == "3500.23 USD"
    governed(monkeypatch, quotas={"max_usd_per_trial": "3000"})
    status, body, headers = call("POST", "/trials", dict(example, name="fourth"))
    assert status == 409 and body["quotas"][0]["quota"] == "max_usd_per_trial"
    assert "lower limits.max_hours" in body["errors"][0]["message"]
    assert executions(aws) == 1


def test_a_team_reads_its_own_cost_report_and_an_admin_reads_every_teams(aws: dict[str, Any],
                                                                         example: dict[str, Any]) -> None:
    from lambdas.handlers.scheduled_cost_report import handler as scheduled
    from tests.integration.conftest import Context

    status, body, _ = call("GET", "/reports/costs")
    assert status == 404 and "cost_report_period" in body["message"]
    trial = call("POST", "/trials", example)[1]["trial_id"]
    from lambdas.adapters.ledger_table import DynamoLedger
    from tests.builders import run_cost, stored_cost

    closed = run_cost("100", trial_id=trial, effective_training_usd="80", failed_reruns_usd="20")
    # a closed run of team-nlp's trial, as settling stores it
    DynamoLedger("ledger").put_cost(f"{trial}#gpu", stored_cost(closed, ended_at="2026-11-18T10:00:00Z"), facts=3)
    assert scheduled({"time": "2026-11-23T06:00:00Z"}, Context())["period"] == "2026-W47"

    status, mine, _ = call("GET", "/reports/costs")
    assert status == 200 and mine["team"] == "team-nlp" and mine["period"] == "2026-W47"
    assert mine["total"]["total_usd"] == "100" and mine["rerun_share"] == 0.2
    status, body, _ = call("GET", "/reports/costs", query={"team": "team-nlp"}, who=VISION)
    assert status == 403 and "team 'team-nlp' is not yours" in body["errors"][0]["message"]
    status, theirs, _ = call("GET", "/reports/costs", who=VISION)
    assert status == 200 and theirs["team"] == "team-vision" and theirs["runs_closed"] is False
    status, everything, _ = call("GET", "/reports/costs", who=ADMIN)
    assert status == 200 and set(everything["teams"]) == {"team-nlp"} and everything["runs"] == 1


def test_the_compile_cache_listing_shows_a_team_only_the_entries_its_trials_used(aws: dict[str, Any],
                                                                                 example: dict[str, Any]) -> None:
    from lambdas.adapters.cache_registry import DynamoCacheRegistry
    from lambdas.handlers.resolve_compile_cache import handler as resolve

    nlp = call("POST", "/trials", example)[1]["trial_id"]
    vision = call("POST", "/trials", dict(example, name="vision-pilot", owner="team-vision", sequence_length=2048),
                  who=VISION)[1]["trial_id"]
    keys = {trial: resolve({"trial_id": trial, "spec_uri": f"s3://artifacts/trials/{trial}/spec.json"},
                           Context())["cache_key"] for trial in (nlp, vision)}
    registry = DynamoCacheRegistry("cache-registry")
    # An entry team-nlp's trial hit without resolving it (its trial item names another key), and one no trial used.
    for key in ("d" * 64, "e" * 64):
        registry.ensure(key, prefix=f"neuron/m/c/{key}/", model_slug="m", compiler_version="c", components=None,
                        at="2026-11-20T10:00:00Z")
    registry.observe("d" * 64, f"{nlp}#trn2#a001", "hit", 5.0, "2026-11-20T11:00:00Z")

    def listed(who: str) -> tuple[int, dict[str, Any]]:
        status, body, _ = call("GET", "/compile-cache", who=who)
        return status, body

    status, mine = listed(NLP)
    assert status == 200 and {e["cache_key"] for e in mine["entries"]} == {keys[nlp], "d" * 64}
    assert sum(g["entries"] for g in mine["groups"]) == 2
    status, theirs = listed(VISION)
    assert status == 200 and [e["cache_key"] for e in theirs["entries"]] == [keys[vision]]
    status, everything = listed(ADMIN)
    assert status == 200 and {e["cache_key"] for e in everything["entries"]} == {*keys.values(), "d" * 64, "e" * 64}
    status, body = listed(f"arn:aws:iam::{ACCOUNT}:user/stranger")
    assert status == 403 and "member of no team" in body["errors"][0]["message"]


def test_a_forged_page_token_is_a_400_never_another_teams_page(aws: dict[str, Any], example: dict[str, Any]) -> None:
    """A page token wraps the query's ``LastEvaluatedKey``, to be passed back as ``ExclusiveStartKey``: "Use the
    value that was returned for LastEvaluatedKey in the previous operation", with "the same KeyConditionExpression"
    (DynamoDB API reference, "Query": https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_Query.html;
    developer guide, "Paginating table query results in DynamoDB":
    https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Query.Pagination.html). A team's pages are
    keyed by the team index (trial_id, team, created_at); a scan's by the table's key (trial_id)."""
    import base64

    for name in ("first", "second"):
        assert call("POST", "/trials", dict(example, name=name))[0] == 201
    status, page, _ = call("GET", "/trials", query={"limit": "1"})
    assert status == 200 and page["next_token"]
    assert call("GET", "/trials", query={"limit": "1", "next_token": page["next_token"]})[0] == 200

    def token(value: Any) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode()

    key = json.loads(base64.urlsafe_b64decode(page["next_token"]))
    forged = {
        "not a key": token({"a": 1}),
        "a list": token([1]),
        "the table's key alone": token({"trial_id": key["trial_id"]}),
        "another team's partition": token({**key, "team": {"S": "team-vision"}}),
        "a number for a string": token({**key, "created_at": {"N": "1"}}),
        "an extra attribute": token({**key, "status": {"S": "RUNNING"}}),
        "an empty value": token({**key, "trial_id": {"S": ""}}),
    }
    for what, value in forged.items():
        status, body, _ = call("GET", "/trials", query={"next_token": value})
        assert status == 400 and body["errors"][0]["path"] == "next_token", (what, status, body)
        if what != "the table's key alone":  # which is a scan's key: an admin's listing
            status, body, _ = call("GET", "/trials", query={"next_token": value}, who=ADMIN)
            assert status == 400, (what, "admin", status, body)
    assert call("GET", "/trials", query={"next_token": page["next_token"]}, who=ADMIN)[0] == 400  # a team's key
    status, admin_page, _ = call("GET", "/trials", query={"limit": "1"}, who=ADMIN)
    assert call("GET", "/trials", query={"next_token": admin_page["next_token"]}, who=ADMIN)[0] == 200
    status, body, _ = call("GET", "/trials", query={"next_token": admin_page["next_token"]})
    assert status == 400  # a scan's key is not a team page's


def test_a_baseline_in_another_teams_trial_is_refused_at_submission(aws: dict[str, Any],
                                                                    example: dict[str, Any]) -> None:
    """A baseline_logs_uri under the artifacts bucket's trials/ is accepted only for a trial of the submitting
    team: team-vision naming team-nlp's trial is refused (422, path baseline_logs_uri, the allowed locations named,
    nothing stored); team-nlp naming its own trial is accepted."""
    status, nlp, _ = call("POST", "/trials", example)
    assert status == 201
    uri = f"s3://artifacts/trials/{nlp['trial_id']}/gpu/attempt-1/metrics.jsonl"
    vision_trial = dict(example, name="vision-pilot", owner="team-vision", baseline_logs_uri=uri)
    status, body, _ = call("POST", "/trials", vision_trial, who=VISION)
    assert status == 422, body
    assert [e["path"] for e in body["errors"]] == ["baseline_logs_uri"]
    message = body["errors"][0]["message"]
    assert f"trial {nlp['trial_id']} is not a trial of team team-vision" in message
    assert "s3://artifacts/trials/<trial_id>/" in message and "team-nlp" not in message
    assert aws["ddb"].scan(TableName="trials")["Count"] == 1 and executions(aws) == 1
    status, own, _ = call("POST", "/trials", dict(example, name="nlp-second", baseline_logs_uri=uri))
    assert status == 201, own
