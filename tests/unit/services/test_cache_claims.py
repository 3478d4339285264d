"""A run's summary speaks only for the compile-cache entry the plane resolved for that run
(``lambdas.services.cache_observation``, ``lambdas.services.cache_resolution``), over in-memory ports.

Team A's trial resolved entry K; team B's GPU-only trial (no entry at all) and team B's Trainium2 trial (another
entry) write summaries whose ``compile.cache_key`` is K. None of their claims moves K: not its status (ready,
failed, with a message of their choosing), not its counts, not its ``hit_trials`` (which moves A's compile spend to
"shared"). Each refused claim is counted once. Within A's own trial, only the run the workflow sent to compile the
entry (the warm-up compile stage when the cache is cold and the stage has a compile queue, else the training run)
marks it ready or failed; every Trainium2 run of the trial may report a hit.
"""

from __future__ import annotations

from typing import Any

import pytest

from lambdas.domain.cache.compile_cache import cache_key
from lambdas.domain.json_types import JsonObject
from lambdas.domain.money.ledger import summary_entry
from lambdas.domain.trial.rules import parse_trial
from lambdas.domain.trial.trial_record import TrialRecord
from lambdas.domain.vocabulary import COMPILE_RUN
from lambdas.services.cache_observation import observe_run
from lambdas.services.cache_resolution import CompileCaches
from tests import fakes

OTHER_KEY = "f" * 64


@pytest.fixture
def plane(example_trial: dict[str, Any]) -> dict[str, Any]:
    trials, registry = fakes.InMemoryTrials(), fakes.InMemoryCacheRegistry()
    artifacts, cache = fakes.InMemoryObjects("artifacts"), fakes.InMemoryObjects("cache")
    spec = parse_trial(example_trial)
    artifacts.put_json(f"trials/{spec.trial_id}/spec.json", spec.model_dump(mode="json", exclude_none=True))
    caches = CompileCaches(trials=trials, registry=registry, artifacts=artifacts, cache_objects=cache,
                           cache_bucket="cache")
    return {"trials": trials, "registry": registry, "caches": caches, "spec": spec, "cache": cache,
            "spec_uri": artifacts.uri(f"trials/{spec.trial_id}/spec.json")}


def _trial(plane: dict[str, Any], trial_id: str, *, team: str, tracks: tuple[str, ...], compile_queue: bool) -> None:
    queues: JsonObject = {t: f"{t}-queue" for t in tracks}
    if compile_queue:
        queues[COMPILE_RUN] = "compile-queue"
    plane["trials"].create(TrialRecord.from_item({
        "trial_id": trial_id, "team": team, "status": "SUBMITTED", "queues": queues,
        "tracks": {t: {"instance_type": "x", "nodes": 1} for t in tracks}}))


def _summary(trial_id: str, run: str, attempt: int, key: str, cache: str, **compile_info: Any) -> Any:
    return summary_entry(trial_id, run, attempt, {
        "status": "failed" if cache == "failed" else "succeeded", "ended_at": "2026-12-01T10:00:00Z",
        "compile": {"cache_key": key, "cache": cache, "seconds": 600.0, **compile_info}})


def _observe(plane: dict[str, Any], trial_id: str, run: str, *entries: Any) -> Any:
    return observe_run(fakes.InMemoryLedger(), plane["registry"], plane["trials"], trial_id, run, list(entries))


def _resolved(plane: dict[str, Any], *, compile_queue: bool = True) -> str:
    spec = plane["spec"]
    _trial(plane, spec.trial_id, team="team-a", tracks=("gpu", "trn2"), compile_queue=compile_queue)
    resolved = plane["caches"].resolve(spec.trial_id, plane["spec_uri"])
    assert resolved.cache_key == cache_key(spec).key
    return str(resolved.cache_key)


def test_the_resolve_step_records_the_entry_and_the_run_sent_to_compile_it(plane: dict[str, Any]) -> None:
    """Cold with a compile queue: the warm-up compile stage builds it (the workflow's CacheCold choice)."""
    key = _resolved(plane)
    item = plane["trials"].get(plane["spec"].trial_id)
    assert item is not None and item.cache_key == key and item.cache_writer == COMPILE_RUN
    assert (item.cache_prefix or "").endswith(f"/{key}/")


def test_without_a_compile_queue_the_training_run_compiles_the_entry_itself(plane: dict[str, Any]) -> None:
    _resolved(plane, compile_queue=False)
    assert plane["trials"].items[plane["spec"].trial_id]["cache_writer"] == "trn2"


@pytest.mark.parametrize(("thief", "tracks", "outcome"), [
    ("gpu-only", ("gpu",), "hit"), ("gpu-only", ("gpu",), "miss"), ("gpu-only", ("gpu",), "failed"),
    ("trn2", ("trn2",), "hit"), ("trn2", ("trn2",), "miss"), ("trn2", ("trn2",), "failed"),
])
def test_another_teams_summary_cannot_speak_for_the_entry(plane: dict[str, Any], thief: str,
                                                          tracks: tuple[str, ...], outcome: str) -> None:
    key = _resolved(plane)
    _trial(plane, "team-b-trial", team="team-b", tracks=tracks, compile_queue=False)
    if thief == "trn2":
        plane["trials"].update("team-b-trial", cache_key=OTHER_KEY, cache_writer="trn2",
                               cache_prefix=f"neuron/m/c/{OTHER_KEY}/")
    before = plane["registry"].get(key)
    run = "gpu" if thief == "gpu-only" else "trn2"
    claim = _summary("team-b-trial", run, 1, key, outcome, error="compiler crashed: never use this entry")
    observed = _observe(plane, "team-b-trial", run, claim)
    assert not observed.counted and [r.claimed_key for r in observed.refused] == [key]
    entry = plane["registry"].get(key)
    assert entry == before  # status, counts, hit_trials, failure_reason: all as they were
    assert entry.hit_trials == [] and entry.status == "new"
    # Seen again (the run's terminal event re-reads its summaries): refused again, counted once.
    again = _observe(plane, "team-b-trial", run, claim)
    assert not again.counted and again.refused == []
    assert plane["trials"].items["team-b-trial"]["cache_claims_refused"] == 1


def test_only_the_run_sent_to_compile_marks_the_entry_and_any_trn2_run_of_the_trial_may_hit(
        plane: dict[str, Any]) -> None:
    key = _resolved(plane)  # cold, compile queue: trn2-compile builds it
    trial_id = plane["spec"].trial_id
    early = _observe(plane, trial_id, "trn2", _summary(trial_id, "trn2", 1, key, "failed", error="forged"))
    assert not early.counted and len(early.refused) == 1
    assert plane["registry"].get(key).status == "new"
    built = _observe(plane, trial_id, COMPILE_RUN, _summary(trial_id, COMPILE_RUN, 1, key, "miss"))
    assert built.counted == {"miss": 1} and built.refused == []
    assert plane["registry"].get(key).status == "ready"
    used = _observe(plane, trial_id, "trn2", _summary(trial_id, "trn2", 2, key, "hit"))
    assert used.counted == {"hit": 1} and plane["registry"].get(key).hit_trials == [trial_id]
    fallback = _observe(plane, trial_id, "gpu-fallback", _summary(trial_id, "gpu-fallback", 1, key, "hit"))
    assert not fallback.counted and len(fallback.refused) == 1  # a GPU run uses no Neuron cache


def test_a_warm_entry_is_written_by_no_run(plane: dict[str, Any]) -> None:
    """The training run of a trial that finds its entry warm is sent to use it: a hit counts, a miss or a failure it
    reports does not rewrite the entry's status."""
    key = _resolved(plane)
    trial_id = plane["spec"].trial_id
    _observe(plane, trial_id, COMPILE_RUN, _summary(trial_id, COMPILE_RUN, 1, key, "miss"))
    plane["registry"].record_object(key, "graph.neff", 4, "2026-12-01T10:00:00Z")
    plane["cache"].put_json(f"{plane['trials'].items[trial_id]['cache_prefix']}_dualtrack_complete.json",
                            {"version": 2, "files": {"graph.neff": {"bytes": 4}}})
    plane["cache"].blobs[f"{plane['trials'].items[trial_id]['cache_prefix']}graph.neff"] = b"neff"
    warm = plane["caches"].resolve(trial_id, plane["spec_uri"])
    assert warm.warm is True and warm.writer is None
    assert "cache_writer" not in plane["trials"].get(trial_id)
    forged = _observe(plane, trial_id, "trn2", _summary(trial_id, "trn2", 1, key, "failed", error="forged"))
    assert not forged.counted and len(forged.refused) == 1
    assert plane["registry"].get(key).status == "ready"


def test_a_scaling_run_reports_its_own_key_freely_but_cannot_speak_for_the_trials_entry(
        plane: dict[str, Any]) -> None:
    """A Trainium2 scaling run (``trn2-n1``) is sent with no entry and compiles its own node count's graphs: a failed
    compile of its own key is no claim (no false alarm, no registry entry moved); claiming the trial's entry is."""
    key = _resolved(plane)
    trial_id = plane["spec"].trial_id
    own = "e" * 64  # its node count's key (the data-parallel degree is part of it)
    failed = _observe(plane, trial_id, "trn2-n1", _summary(trial_id, "trn2-n1", 1, own, "failed", error="OOM"))
    assert not failed.counted and failed.refused == [] and plane["registry"].get(own) is None
    assert plane["trials"].items[trial_id].get("cache_claims_refused", 0) == 0
    forged = _observe(plane, trial_id, "trn2-n1", _summary(trial_id, "trn2-n1", 2, key, "miss"))
    assert not forged.counted and [r.reason for r in forged.refused] == [
        f"run trn2-n1 is a scaling run, sent with no compile-cache entry, but reported miss for {key}"]
    assert plane["registry"].get(key).status == "new"
