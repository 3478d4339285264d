"""What a job writes under its trial's prefix becomes a ledger fact only if it is well formed and describes the
object its key names (``lambdas.domain.evidence.artifacts``)."""

from __future__ import annotations

from typing import Any

import pytest

from lambdas.domain.evidence.artifacts import ArtifactRejected, artifact_fact
from lambdas.domain.money.ledger import CheckpointFact, SummaryFact
from tests.builders import run_summary

MANIFEST_KEY = "trials/t-1/gpu/checkpoints/step-200/manifest.json"
SUMMARY_KEY = "trials/t-1/gpu/attempt-2/summary.json"


def manifest(**over: Any) -> dict[str, Any]:
    return {"step": 200, "shards": [{"name": "model.safetensors", "bytes": 4000, "sha256": "0" * 64},
                                    {"name": "optim-0.distcp", "bytes": 1000}], "bytes": 5000, "save_s": 2.5,
            **over}


def test_a_well_formed_manifest_and_summary_become_facts() -> None:
    entry = artifact_fact(MANIFEST_KEY, manifest(), f"s3://artifacts/{MANIFEST_KEY}")
    assert entry is not None
    fact = entry.fact
    assert isinstance(fact, CheckpointFact) and (fact.step, fact.bytes, fact.files) == (200, 5000, 2)
    assert fact.uri == "s3://artifacts/trials/t-1/gpu/checkpoints/step-200/"
    summary = run_summary("gpu", trial_id="t-1", attempt=2, phases={"train_s": 100.0}).model_dump(mode="json")
    entry = artifact_fact(SUMMARY_KEY, summary, "s3://artifacts/x")
    assert entry is not None
    fact = entry.fact
    assert isinstance(fact, SummaryFact) and fact.attempt == 2
    assert fact.phases is not None and fact.phases["train_s"] == 100.0
    assert artifact_fact("trials/t-1/gpu/attempt-2/metrics.jsonl", {}, "s3://x") is None


@pytest.mark.parametrize(("key", "document", "reason"), [
    (MANIFEST_KEY, manifest(bytes=-1), "bytes: Input should be greater than or equal to 0"),
    (MANIFEST_KEY, manifest(shards=[{"name": "w", "bytes": 10**30}], bytes=None), "shards.0.bytes"),
    (MANIFEST_KEY, manifest(save_s=-3.0), "save_s"),
    (MANIFEST_KEY, manifest(bytes=1), "bytes 1 is not the sum of its shards' bytes (5000)"),
    (MANIFEST_KEY, manifest(step=400), "manifest step 400 is not the step its key names (200)"),
    (MANIFEST_KEY, manifest(shards=[]), "shards"),
    (MANIFEST_KEY, ["not", "an", "object"], "must be a JSON object"),
    (SUMMARY_KEY, {**run_summary("gpu", trial_id="t-1", attempt=2).model_dump(mode="json"),
                   "phases": {"train_s": -5.0}}, "phases.train_s"),
    (SUMMARY_KEY, {**run_summary("gpu", trial_id="t-1", attempt=2).model_dump(mode="json"),
                   "tokens_this_attempt": 10**30}, "tokens_this_attempt"),
    (SUMMARY_KEY, run_summary("gpu", trial_id="t-2", attempt=2).model_dump(mode="json"),
     "the summary is of trial t-2, run gpu, attempt 2; its key names t-1, gpu, 2"),
    (SUMMARY_KEY, run_summary("gpu", trial_id="t-1", attempt=1).model_dump(mode="json"), "attempt 1"),
    (SUMMARY_KEY, {"status": "succeeded"}, "Field required"),
])
def test_forged_malformed_and_absurd_objects_are_refused_with_the_reason(key: str, document: Any,
                                                                         reason: str) -> None:
    with pytest.raises(ArtifactRejected) as raised:
        artifact_fact(key, document, f"s3://artifacts/{key}")
    assert raised.value.key == key and reason in raised.value.reason


def test_every_run_writes_facts_and_counts_against_the_write_limits() -> None:
    """The warm-up compile stage's summaries are facts like any run's (its cache miss reaches the registry, which
    then serves the key as warm), and its objects count against the trial's write limits."""
    from lambdas.domain.evidence.artifacts import ATTEMPT_SUMMARY, CHECKPOINT_MANIFEST, RUN_OBJECT
    from lambdas.domain.vocabulary import RUNS

    for run in RUNS:
        assert ATTEMPT_SUMMARY.match(f"trials/t-1/{run}/attempt-2/summary.json").group("run") == run  # type: ignore[union-attr]
        assert RUN_OBJECT.match(f"trials/t-1/{run}/logs/x").group("run") == run  # type: ignore[union-attr]
        manifest = CHECKPOINT_MANIFEST.match(f"trials/t-1/{run}/checkpoints/step-4/manifest.json")
        assert manifest is not None and manifest.group("run") == run
    assert RUN_OBJECT.match("trials/t-1/trn2-compiler/x") is None  # a run's name, exactly
