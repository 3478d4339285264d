"""One contract per port, run against the AWS adapter (on moto) and against its in-memory fake (``tests/fakes.py``):
the service tests that use the fakes rely on exactly what is asserted here.

The AWS behaviours the adapters rely on: a conditional ``PutItem`` fails with ``ConditionalCheckFailedException``
and writes nothing (DynamoDB developer guide, "Condition expressions"); ``UpdateItem`` creates the item when the key
is absent ("UpdateItem", API reference); ``PutObject`` with ``If-None-Match: *`` fails with ``PreconditionFailed``
when the key exists (S3 user guide, "Conditional writes"); ``StartExecution`` with the name of an existing
execution fails with ``ExecutionAlreadyExists`` when the input differs ("StartExecution", API reference)."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest

from lambdas.domain.money.ledger import CheckpointFact, LedgerEntry, LedgerRow, StoredCost, SummaryFact
from lambdas.domain.trial.trial_record import TrialRecord
from lambdas.services.ports import CacheRegistry, Ledger, Objects, Trials, Workflow
from tests import fakes
from tests.builders import run_cost, stored_cost

Make = Callable[[], Any]


def _aws(name: str) -> Make:
    """The adapter as a deployed function composes it (the API function holds one of each)."""

    def make() -> Any:
        from lambdas.handlers.on_trial_api import compose

        return getattr(compose(), name)

    return make


@pytest.fixture(params=["aws", "fake"])
def flavour(request: pytest.FixtureRequest) -> str:
    if request.param == "aws":
        request.getfixturevalue("aws")
    return str(request.param)


def _fact(key: str, value: int, kind: str = "checkpoint") -> LedgerEntry:
    """A fact under ``key`` whose body carries ``value`` (a checkpoint's step, or a summary's attempt)."""
    fact = CheckpointFact(step=value) if kind == "checkpoint" else SummaryFact(attempt=value)
    return LedgerEntry(run_key="t-1#gpu", entry_key=key, kind=fact.kind, body=fact.body())


def test_ledger_facts_are_written_once_and_the_cost_only_moves_forward(flavour: str) -> None:
    ledger: Ledger = _aws("ledger")() if flavour == "aws" else fakes.InMemoryLedger()
    assert ledger.append(_fact("b", 1)) is True
    assert ledger.append(_fact("b", 2)) is False  # the first write stands
    assert ledger.append(_fact("a", 3, "summary")) is True
    assert [(e.entry_key, e.body) for e in ledger.entries("t-1#gpu")] == [("a", _fact("a", 3, "summary").body),
                                                                         ("b", _fact("b", 1).body)]
    assert ledger.entries("t-1#trn2") == []
    assert ledger.cost("t-1#gpu") is None

    def cost(total: str, facts: int) -> StoredCost:
        return stored_cost(run_cost(total, trial_id="t-1"), facts=facts)

    assert ledger.put_cost("t-1#gpu", cost("1.5", 2), facts=2) is True
    assert ledger.put_cost("t-1#gpu", cost("9", 2), facts=2) is False  # not over more facts
    assert ledger.put_cost("t-1#gpu", cost("1.0", 1), facts=1) is False
    assert ledger.put_cost("t-1#gpu", cost("2.50", 3), facts=3) is True
    stored = ledger.cost("t-1#gpu")
    assert stored is not None and stored == cost("2.50", 3)
    assert str(stored.cost.total_usd) == "2.50"  # read back as written
    assert [e.entry_key for e in ledger.entries("t-1#gpu")] == ["a", "b"]  # the cost entry is not a fact
    assert list(ledger.iter_costs()) == [LedgerRow("t-1#gpu", "cost", cost("2.50", 3))]
    rows = sorted(ledger.iter_kinds(("summary", "cost")), key=lambda row: row.kind)
    assert [(row.run_key, row.kind) for row in rows] == [("t-1#gpu", "cost"), ("t-1#gpu", "summary")]
    assert rows[1].body == SummaryFact(attempt=3)  # a fact comes back as its kind's model


def test_trials_are_created_once_updated_only_when_present_and_listed_in_pages(flavour: str) -> None:
    trials: Trials = _aws("trials")() if flavour == "aws" else fakes.InMemoryTrials()
    assert trials.create(TrialRecord.from_item({"trial_id": "t-1", "status": "SUBMITTING", "max_steps": 10})) is True
    assert trials.create(TrialRecord.from_item({"trial_id": "t-1", "status": "FAILED"})) is False
    trials.update("t-1", status="SUBMITTED", execution_arn="arn:x", max_steps=None)
    assert trials.get("t-1") == TrialRecord(trial_id="t-1", status="SUBMITTED", execution_arn="arn:x")
    with pytest.raises(Exception):  # noqa: B017  ConditionalCheckFailedException / KeyError: no such trial
        trials.update("t-missing", status="FAILED")
    assert trials.get("t-missing") is None
    for n in range(2, 6):
        trials.create(TrialRecord.from_item({"trial_id": f"t-{n}", "status": "SUBMITTED"}))
    seen: list[str] = []
    token: str | None = None
    for _ in range(10):
        page, token = trials.list(2, token)
        assert len(page) <= 2
        seen += [record.trial_id for record in page]
        if token is None:
            break
    assert sorted(seen) == [f"t-{n}" for n in range(1, 6)]
    trials.delete("t-5")
    assert sorted(record.trial_id for record in trials.iter_all()) == [f"t-{n}" for n in range(1, 5)]


def test_trial_tallies_add_to_counters_that_start_at_zero_and_set_in_the_same_write(flavour: str) -> None:
    """``ADD`` on an attribute the item lacks starts it at 0, ``SET`` and ``ADD`` apply in one UpdateItem, and
    ``ReturnValues=ALL_NEW`` returns the whole item after it (DynamoDB developer guide, "Update expressions",
    https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Expressions.UpdateExpressions.html); the
    ``attribute_exists`` condition keeps a tally from creating a trial that is not there."""
    trials: Trials = _aws("trials")() if flavour == "aws" else fakes.InMemoryTrials()
    assert trials.create(TrialRecord.from_item({"trial_id": "t-1", "status": "SUBMITTED"})) is True
    after = trials.tally("t-1", add={"written_objects": 1, "written_bytes": 2048})
    assert after is not None and after.written_objects == 1 and after.written_bytes == 2048
    after = trials.tally("t-1", set_fields={"spend_usd#gpu": "1.25"}, add={"written_objects": 2})
    assert after == TrialRecord(trial_id="t-1", status="SUBMITTED", written_objects=3, written_bytes=2048,
                                spend_usd={"gpu": "1.25"})
    assert trials.tally("t-1", set_fields={"spend_usd#gpu": "2.50"}) == after.model_copy(
        update={"spend_usd": {"gpu": "2.50"}})
    assert trials.tally("t-missing", add={"written_objects": 1}) is None
    assert trials.get("t-missing") is None


def test_admission_books_the_trial_in_one_transaction_conditional_on_the_quotas_room(flavour: str) -> None:
    """The trial item and its team's usage item are written in one ``TransactWriteItems``: if any item's condition
    fails the whole transaction is cancelled and nothing is written, and ``TransactionCanceledException`` lists a
    reason per item in request order (DynamoDB developer guide, "Amazon DynamoDB Transactions: how it works",
    https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html). ``ADD`` creates the
    usage item and its counters on first use (API reference, "UpdateItem")."""
    trials: Trials = _aws("trials")() if flavour == "aws" else fakes.InMemoryTrials()
    booked = {"active": Decimal(1), "usd#2026-12": Decimal("40.5"), "jobs#q-gpu": Decimal(2)}
    room = {"active": Decimal(1), "usd#2026-12": Decimal("59.5")}  # concurrent_trials 2, usd_per_month 100
    first = {"trial_id": "t-1", "team": "nlp", "status": "SUBMITTING"}
    assert trials.admit(TrialRecord.from_item(first), booked, room) == "created"
    assert trials.admit(TrialRecord.from_item({**first, "status": "FAILED"}), booked, room) == "exists"
    assert trials.usage("nlp") == {"active": 1, "usd#2026-12": 40.5, "jobs#q-gpu": 2}
    assert trials.admit(TrialRecord.from_item({**first, "trial_id": "t-2"}), booked, room) == "created"  # 40.5 <= 59.5
    # 2 trials, 81 USD held
    assert trials.admit(TrialRecord.from_item({**first, "trial_id": "t-3"}), booked, room) == "over_quota"
    assert trials.get("t-3") is None  # cancelled as a whole: no trial item without its booking
    release = {"active": Decimal(-1), "usd#2026-12": Decimal("-40.5"), "jobs#q-gpu": Decimal(-2)}
    assert trials.close("t-2", ("SUBMITTING",), team="nlp", release=release, status="CANCELLED") is True
    assert trials.close("t-2", ("SUBMITTING",), team="nlp", release=release, status="CANCELLED") is False
    assert trials.withdraw("t-1", ("SUBMITTING",), team="nlp", release=release) is True
    assert trials.get("t-1") is None and getattr(trials.get("t-2"), "status", None) == "CANCELLED"
    usage = trials.usage("nlp") or {}
    assert (usage["active"], usage["usd#2026-12"], usage["jobs#q-gpu"]) == (0, 0, 0)  # each released once
    assert trials.seed_usage("nlp", {"active": Decimal(5)}, {}) is False  # the item exists: never seeded over


def test_a_transition_or_withdrawal_guarded_by_the_updated_at_read_fails_once_the_trial_moved(flavour: str) -> None:
    """A condition on an attribute's value (``updated_at = :read``) makes a write that raced a newer one fail as a
    whole: UpdateItem and a transaction's Delete are written only if their ``ConditionExpression`` holds (DynamoDB
    developer guide, "Condition expressions",
    https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Expressions.ConditionExpressions.html). The
    reconciler withdraws only the trial it read; a resubmission claims the start with the same guard."""
    trials: Trials = _aws("trials")() if flavour == "aws" else fakes.InMemoryTrials()
    booked = {"active": Decimal(1), "usd#2026-12": Decimal("10")}
    release = {name: -value for name, value in booked.items()}
    read = {"trial_id": "t-1", "team": "nlp", "status": "SUBMITTING", "updated_at": "2026-12-04T12:00:00Z"}
    assert trials.admit(TrialRecord.from_item(read), booked, {}) == "created"
    claimed = trials.transition("t-1", ("SUBMITTING",), if_updated_at="2026-12-04T12:00:00Z",
                                updated_at="2026-12-04T12:06:00Z")
    assert claimed is True  # the resubmission claimed the start
    assert trials.transition("t-1", ("SUBMITTING",), if_updated_at="2026-12-04T12:00:00Z",
                             updated_at="2026-12-04T12:07:00Z") is False  # a second claim of the same read
    assert trials.withdraw("t-1", ("SUBMITTING",), team="nlp", release=release,
                           if_updated_at="2026-12-04T12:00:00Z") is False  # the reconciler's stale read
    assert getattr(trials.get("t-1"), "updated_at", None) == "2026-12-04T12:06:00Z"
    assert (trials.usage("nlp") or {})["active"] == 1  # nothing released
    assert trials.withdraw("t-1", ("SUBMITTING",), team="nlp", release=release,
                           if_updated_at="2026-12-04T12:06:00Z") is True
    assert trials.get("t-1") is None and (trials.usage("nlp") or {})["active"] == 0


def test_a_write_is_counted_once_however_often_its_event_is_delivered(flavour: str) -> None:
    """The counted-write marker and the counters are one transaction: a redelivered event's marker put fails its
    ``attribute_not_exists`` condition, which cancels the counter update too (developer guide, "Amazon DynamoDB
    Transactions: how it works")."""
    trials: Trials = _aws("trials")() if flavour == "aws" else fakes.InMemoryTrials()
    trials.create(TrialRecord.from_item({"trial_id": "t-1", "status": "SUBMITTED"}))
    fact = "artifacts/trials/t-1/gpu/ckpt/step-2/shard.distcp#v1"
    after = trials.tally_once("t-1", fact, {"written_objects": 1, "written_bytes": 10}, now_s=1_800_000_000)
    assert after is not None and after.written_objects == 1
    assert trials.tally_once("t-1", fact, {"written_objects": 1, "written_bytes": 10}, now_s=1_800_000_000) is None
    assert getattr(trials.get("t-1"), "written_bytes", None) == 10
    again = trials.tally_once("t-1", fact + "2", {"written_objects": 1}, now_s=1)
    assert again is not None and again.written_objects == 2
    assert trials.tally_once("t-missing", fact, {"written_objects": 1}, now_s=1) is None


def test_objects_written_if_absent_are_never_overwritten(flavour: str) -> None:
    objects: Objects = _aws("artifacts")() if flavour == "aws" else fakes.InMemoryObjects()
    assert objects.put_json("trials/t-1/spec.json", {"b": 1, "a": [1, 2]}, if_absent=True) is True
    assert objects.put_json("trials/t-1/spec.json", {"b": 2}, if_absent=True) is False
    assert objects.get_json("trials/t-1/spec.json") == {"a": [1, 2], "b": 1}
    assert objects.put_json("trials/t-1/spec.json", {"b": 3}) is True  # a plain put replaces
    objects.put_text("trials/t-1/report.md", "# report", "text/markdown")
    assert objects.get_json("trials/t-1/missing.json") is None
    assert objects.list_keys("trials/t-1/") == ["trials/t-1/report.md", "trials/t-1/spec.json"]
    objects.delete_key("trials/t-1/report.md")
    assert objects.list_keys("trials/") == ["trials/t-1/spec.json"]
    assert objects.uri("k") == "s3://artifacts/k"
    assert "trials/t-1/spec.json" in objects.presigned_get("trials/t-1/spec.json", 60)


def test_registry_counts_each_observation_once_and_retries_only_a_failure(flavour: str) -> None:
    registry: CacheRegistry = _aws("registry")() if flavour == "aws" else fakes.InMemoryCacheRegistry()
    registry.ensure("k1", prefix="neuron/k1/", model_slug="llama", compiler_version="2.26",
                    components={"sdk": "2.26"}, at="2026-12-01T00:00:00Z")
    registry.ensure("k1", prefix="other/", model_slug="x", compiler_version="9", components=None,
                    at="2026-12-02T00:00:00Z")  # first write stands
    entry = registry.get("k1")
    assert entry is not None
    assert (entry.prefix, entry.status, entry.hits, entry.misses) == ("neuron/k1/", "new", 0, 0)
    assert entry.components == {"sdk": "2.26"} and entry.created_at == "2026-12-01T00:00:00Z"
    assert registry.observe("k1", "t-1#trn2#1", "miss", 30.0, "2026-12-01T01:00:00Z") is True
    assert registry.observe("k1", "t-1#trn2#1", "miss", 30.0, "2026-12-01T01:00:00Z") is False
    assert registry.observe("k1", "t-2#trn2#1", "hit", 2.0, "2026-12-01T02:00:00Z") is True
    registry.touch("k1", "2026-11-01T00:00:00Z")  # older: the timestamp only moves forward
    registry.record_object("k1", "graph.neff", 1024, "2026-12-01T03:00:00Z")
    entry = registry.get("k1")
    assert entry is not None
    assert (entry.hits, entry.misses, entry.status, entry.first_compile_s) == (1, 1, "ready", 30)
    assert entry.last_used_at == "2026-12-01T02:00:00Z" and entry.objects == {"graph.neff": 1024}
    assert entry.hit_trials == ["t-2"] and entry.hit_compile_s_total == 2  # the trials the entry served
    assert entry.observed == ["t-1#trn2#1", "t-2#trn2#1"] and entry.last_object_at == "2026-12-01T03:00:00Z"
    assert registry.request_retry("k1") is False  # only a failed entry
    assert registry.observe("k1", "t-3#trn2#1", "failed", 0.0, "2026-12-01T04:00:00Z", reason="neuronx-cc crashed")
    assert registry.request_retry("k1") is True
    entry = registry.get("k1")
    assert entry is not None and (entry.status, entry.failures) == ("retry_requested", 1)
    assert (entry.failure_reason, entry.retry_requested) == ("neuronx-cc crashed", True)
    registry.reject("k1", "graph.neff is 3 bytes; the completion marker lists 1024", "2026-12-01T05:00:00Z")
    entry = registry.get("k1")
    assert entry is not None and (entry.status, entry.rejections, entry.rejected_at) == (
        "rejected", 1, "2026-12-01T05:00:00Z")
    assert [e.cache_key for e in registry.iter_all()] == ["k1"]
    registry.delete("k1")
    assert registry.get("k1") is None


def test_workflow_starts_one_execution_per_name_and_stops_it(flavour: str) -> None:
    workflow: Workflow = _aws("workflow")() if flavour == "aws" else fakes.InMemoryWorkflow()
    first = workflow.start("t-1", fakes.execution_input("t-1"))
    assert first.already_submitted is False and first.execution_arn == workflow.execution_arn("t-1")
    assert workflow.start("t-1", fakes.execution_input("t-1", timeout_s=60)).already_submitted is True
    assert workflow.status(first.execution_arn) in ("RUNNING", "SUCCEEDED")  # moto's Pass machine may have ended
    assert workflow.status(workflow.execution_arn("t-none")) is None
    if workflow.status(first.execution_arn) == "RUNNING":
        assert workflow.stop(first.execution_arn, "cancelled") == "ABORTED"


def test_pages_follows_each_continuation_token_to_the_last_page(aws: dict[str, Any]) -> None:
    """``pages`` stands in for botocore's paginators: a Query/Scan page that stops early carries
    ``LastEvaluatedKey``, passed back as ``ExclusiveStartKey`` ("Paginating table query results", DynamoDB developer
    guide); a truncated ListObjectsV2 carries ``NextContinuationToken``, passed back as ``ContinuationToken``
    ("ListObjectsV2", S3 API reference). Every item comes back once, whatever the page size."""
    from lambdas.adapters.aws import pages

    for n in range(5):
        aws["ddb"].put_item(TableName="ledger", Item={"run_key": {"S": "t#gpu"}, "entry_key": {"S": f"e{n}"}})
        aws["s3"].put_object(Bucket="artifacts", Key=f"p/{n}", Body=b"x")
    scanned = list(pages("dynamodb", "scan", TableName="ledger", Limit=2))
    queried = list(pages("dynamodb", "query", TableName="ledger", Limit=2, KeyConditionExpression="run_key = :k",
                         ExpressionAttributeValues={":k": {"S": "t#gpu"}}))
    listed = list(pages("s3", "list_objects_v2", Bucket="artifacts", Prefix="p/", MaxKeys=2))
    for got in (scanned, queried):
        assert len(got) >= 3 and sorted(i["entry_key"]["S"] for p in got for i in p["Items"]) == [
            f"e{n}" for n in range(5)]
    keys = [o["Key"] for p in listed for o in p.get("Contents", [])]
    assert len(listed) == 3 and keys == [f"p/{n}" for n in range(5)]
