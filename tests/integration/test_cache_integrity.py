"""The compile-cache registry against moto, through the deployed handlers: what a job can make the registry believe.

* A summary speaks only for the entry the resolve step recorded for its trial: another team's job that names
  team A's entry in its summary moves nothing (status, counts, ``hit_trials``, failure reason), and each refused
  claim is counted once (CompileCacheClaimsRefused).
* An entry is served only when the objects S3 lists under it are the ones its completion marker lists, at their
  sizes (ListObjectsV2 gives each object's ``Size``:
  https://docs.aws.amazon.com/AmazonS3/latest/API/API_ListObjectsV2.html). One that disagrees is not served
  (``warm`` false, so the workflow builds it again), marked ``rejected`` with the reason and counted
  (CompileCacheEntriesRejected); the rebuilding run's miss makes it ready again.
* An S3 key is any UTF-8 string up to 1,024 bytes, ``..`` segments included, since keys are flat names, not paths
  (https://docs.aws.amazon.com/AmazonS3/latest/userguide/object-keys.html): an object under an entry whose name
  would leave the entry is an event rejected (EventsRejected), never an object name of the entry.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from lambdas.domain.cache.compile_cache import ENTRY_MARKER, RegistryEntry
from tests.integration.conftest import Context, api_event, s3_event
from tests.integration.test_metrics import published
from tests.integration.test_run_events import summary
from tests.json_access import obj
from tests.stage import principal

NEFF = "MODULE_1/model.neff"
ENTRY_LISTING = {"version": 2, "files": {NEFF: {"bytes": 1234}}, "count": 1, "bytes": 1234}  # as trainer.cache writes


def _submit(body: dict[str, Any], who: str | None = None) -> str:
    from lambdas.handlers.on_trial_api import handler as api

    answer = obj(api(api_event("POST", "/trials", body, principal=who), Context()))
    assert answer["statusCode"] in (200, 201, 202), answer["body"]
    return str(json.loads(answer["body"])["trial_id"])


def _resolve(trial_id: str) -> dict[str, Any]:
    from lambdas.handlers.resolve_compile_cache import handler as resolve

    return resolve({"trial_id": trial_id, "spec_uri": f"s3://artifacts/trials/{trial_id}/spec.json"}, Context())


def _publish(aws: dict[str, Any], prefix: str, size: int = 1234, marker: Any = None) -> None:
    """What the compiling job leaves: its artefact, then the completion marker listing it."""
    aws["s3"].put_object(Bucket="compile-cache", Key=prefix + NEFF, Body=b"x" * size)
    body = marker if marker is not None else ENTRY_LISTING
    aws["s3"].put_object(Bucket="compile-cache", Key=prefix + ENTRY_MARKER, Body=json.dumps(body).encode())


def _entry(key: str) -> RegistryEntry:
    from lambdas.adapters.cache_registry import DynamoCacheRegistry

    entry = DynamoCacheRegistry("cache-registry").get(key)
    assert entry is not None
    return entry


def _ready_entry(aws: dict[str, Any], example: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Team A's trial, its entry resolved, built by the run sent to compile it (the training run: the test stage
    has no compile queue) and warm."""
    from lambdas.handlers.on_artifact_created import handler as on_artifact

    trial_id = _submit(example)
    cold = _resolve(trial_id)
    assert cold["warm"] is False
    _publish(aws, cold["prefix"])
    key = f"trials/{trial_id}/trn2/attempt-1/summary.json"
    aws["s3"].put_object(Bucket="artifacts", Key=key, Body=json.dumps(summary(trial_id, 1, compile={
        "seconds": 600.0, "cache": "miss", "cache_key": cold["cache_key"], "cache_url": cold["cache_url"]})).encode())
    on_artifact(s3_event("artifacts", key, 100, "own-1"), Context())
    assert _entry(cold["cache_key"]).status == "ready"
    warm = _resolve(trial_id)
    assert warm["warm"] is True and warm.get("rejected") is None
    return trial_id, warm


def test_another_teams_job_cannot_speak_for_an_entry(aws: dict[str, Any], example: dict[str, Any],
                                                     capsys: Any) -> None:
    from lambdas.handlers.on_artifact_created import handler as on_artifact

    _, resolved = _ready_entry(aws, example)
    before = _entry(resolved["cache_key"])
    gpu_only = copy.deepcopy(example)
    gpu_only["tracks"].pop("trn2")
    gpu_only.pop("fault_injection", None)
    gpu_only.update(name="vision-gpu-only", owner="team-vision")
    thief = _submit(gpu_only, principal("dualtrack-team-vision-submitter"))
    capsys.readouterr()
    claims = {1: {"cache": "hit"}, 2: {"cache": "miss", "status": "failed", "error": "poisoned: never use it"},
              3: {"cache": "miss"}}
    for attempt, claim in claims.items():
        key = f"trials/{thief}/gpu/attempt-{attempt}/summary.json"
        body = summary(thief, attempt, run="gpu", track="gpu", backend="cpu", compile={
            "seconds": 900.0, "cache_key": resolved["cache_key"], "cache_url": resolved["cache_url"], **claim})
        aws["s3"].put_object(Bucket="artifacts", Key=key, Body=json.dumps(body).encode())
        on_artifact(s3_event("artifacts", key, 100, f"thief-{attempt}"), Context())
        on_artifact(s3_event("artifacts", key, 100, f"thief-{attempt}-again"), Context())  # a redelivery
    entry = _entry(resolved["cache_key"])
    assert entry == before, "another team's summaries changed the entry"
    assert thief not in entry.hit_trials
    assert published(capsys.readouterr().out).get("CompileCacheClaimsRefused") == len(claims)
    from lambdas.adapters.trials_table import DynamoTrials

    record = DynamoTrials("trials").get(thief)
    assert record is not None and record.cache_claims_refused == len(claims)


def test_an_entry_that_disagrees_with_its_marker_is_not_served_but_reported_and_rebuilt(
        aws: dict[str, Any], example: dict[str, Any], capsys: Any) -> None:
    from lambdas.adapters.cache_registry import DynamoCacheRegistry

    trial_id, warm = _ready_entry(aws, example)
    capsys.readouterr()
    aws["s3"].put_object(Bucket="compile-cache", Key=warm["prefix"] + NEFF, Body=b"x" * 1000)  # torn or replaced
    torn = _resolve(trial_id)
    assert torn["warm"] is False and "1000 bytes" in (torn.get("rejected") or "")
    assert torn.get("writer") == "trn2"  # the test stage has no compile queue: the training run rebuilds it
    entry = _entry(warm["cache_key"])
    assert entry.status == "rejected" and "1000 bytes" in (entry.rejected_reason or "")
    assert published(capsys.readouterr().out).get("CompileCacheEntriesRejected") == 1

    # An older trainer's marker (a count and a total) lists nothing to check: not served either.
    _publish(aws, warm["prefix"], marker={"files": 1, "bytes": 1234})
    DynamoCacheRegistry("cache-registry").observe(warm["cache_key"], f"{trial_id}#trn2#a002", "miss", 600.0,
                                                  "2026-11-20T12:00:00Z")
    old = _resolve(trial_id)
    assert old["warm"] is False and "lists no files" in (old.get("rejected") or "")

    # Rebuilt whole by the run sent to compile it: its miss makes the entry ready, and it is served again.
    _publish(aws, warm["prefix"])
    DynamoCacheRegistry("cache-registry").observe(warm["cache_key"], f"{trial_id}#trn2#a003", "miss", 600.0,
                                                  "2026-11-20T13:00:00Z")
    again = _resolve(trial_id)
    assert again["warm"] is True and again.get("rejected") is None


def test_an_object_name_that_leaves_its_entry_is_rejected(aws: dict[str, Any], example: dict[str, Any],
                                                          capsys: Any) -> None:
    from lambdas.handlers.on_artifact_created import handler as on_artifact

    trial_id = _submit(example)
    prefix = _resolve(trial_id)["prefix"]
    capsys.readouterr()
    for n, name in enumerate(["../../../escape.neff", "MODULE_1/../../x.neff", "./MODULE_1/a.neff", "a//b.neff"]):
        out = obj(on_artifact(s3_event("compile-cache", prefix + name, 10, f"bad-{n}"), Context()))
        assert out["kind"] == "rejected" and "leaves the entry" in out["rejected"], out
    entry = _entry(prefix.rstrip("/").rsplit("/", 1)[1])
    assert entry.objects == {}
    assert published(capsys.readouterr().out).get("EventsRejected") == 4


@pytest.mark.parametrize("flavour", ["aws", "fake"])
def test_a_rejected_entry_is_ready_again_once_its_writer_rebuilds_it(flavour: str,
                                                                     request: pytest.FixtureRequest) -> None:
    """The registry port's ``reject`` as DynamoDB and the in-memory fake keep it: the status and reason, counted;
    the rebuilding run's miss makes the entry ready again."""
    from lambdas.services.ports import CacheRegistry
    from tests import fakes

    if flavour == "aws":
        from lambdas.adapters.cache_registry import DynamoCacheRegistry

        request.getfixturevalue("aws")
        registry: CacheRegistry = DynamoCacheRegistry("cache-registry")
    else:
        registry = fakes.InMemoryCacheRegistry()
    registry.ensure("k1", prefix="neuron/m/c/k1/", model_slug="m", compiler_version="c", components=None,
                    at="2026-12-01T00:00:00Z")
    registry.observe("k1", "t#trn2#a001", "miss", 600.0, "2026-12-01T01:00:00Z")
    registry.reject("k1", "graph.neff is 10 bytes; the completion marker lists 12", "2026-12-01T02:00:00Z")
    registry.reject("k1", "graph.neff is 10 bytes; the completion marker lists 12", "2026-12-01T03:00:00Z")
    entry = registry.get("k1")
    assert entry is not None and entry.status == "rejected" and entry.rejections == 2
    assert "10 bytes" in (entry.rejected_reason or "")
    registry.observe("k1", "t#trn2#a002", "miss", 600.0, "2026-12-01T04:00:00Z")
    entry = registry.get("k1")
    assert entry is not None and entry.status == "ready"
