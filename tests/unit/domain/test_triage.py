"""Routing follows the source document's tables 1 and 3."""

from __future__ import annotations

from typing import Any

import pytest

from lambdas.domain.trial.rules import parse_trial
from lambdas.domain.trial.triage import SCENARIOS, best_route, planned_tracks, route_refusal, submission_refusal, triage

TABLE_3 = {  # scenario: (gpu, trn2 trial, dual track) exactly as published
    "standard_lora": (4, 4, 5),
    "full_parameter_continued": (4, 3, 5),
    "daily_structure_changes": (5, 2, 4),
    "custom_cuda_ops": (5, 1, 3),
    "multi_team_platform": (4, 3, 5),
    "long_stable_graph": (3, 4, 5),
}


def test_scores_are_table_3() -> None:
    assert {s.id: (s.scores.gpu, s.scores.trn2_trial, s.scores.dual_track) for s in SCENARIOS} == TABLE_3


def _spec(doc: dict[str, Any], **workload: Any) -> Any:
    doc["workload"].update(workload)
    return parse_trial(doc)


def test_every_scenario_routes_to_its_best_score_in_table_3() -> None:
    """One recommendation: the route is table 3's best score for the matched scenario; table 1 is its reasoning."""
    for scenario in SCENARIOS:
        scores = scenario.scores.model_dump()
        assert scores[best_route(scenario.scores)] == max(scores.values()), scenario.id


def test_standard_lora_runs_both_tracks_side_by_side(example_trial: dict[str, Any]) -> None:
    result = triage(parse_trial(example_trial))
    assert (result.route, result.scenario) == ("dual_track", "standard_lora")  # table 3: 4, 4, 5
    assert "first compile" in result.risks
    assert submission_refusal(parse_trial(example_trial), result) is None


def test_the_route_shapes_what_runs_and_what_the_trial_must_bring(example_trial: dict[str, Any]) -> None:
    both = parse_trial(example_trial)
    assert planned_tracks(both, "gpu") == ["gpu"] and planned_tracks(both, "dual_track") == ["gpu", "trn2"]
    gpu_only = parse_trial({**example_trial, "tracks": {"gpu": example_trial["tracks"]["gpu"]},
                            "fault_injection": None})
    assert route_refusal(gpu_only, "dual_track") is None  # the GPU side alone needs no approval
    trn2_only = parse_trial({**example_trial, "tracks": {"trn2": example_trial["tracks"]["trn2"]}})
    refusal = route_refusal(trn2_only, "dual_track")
    assert refusal and "add tracks.gpu" in refusal
    assert "set baseline_logs_uri" in (route_refusal(trn2_only, "trn2_trial") or "")
    pilot = parse_trial({**example_trial, "tracks": {"trn2": example_trial["tracks"]["trn2"]},
                         "baseline_logs_uri": "s3://example-datasets/baselines/llama-gpu.csv"})
    assert route_refusal(pilot, "trn2_trial") is None and planned_tracks(pilot, "trn2_trial") == ["trn2"]
    assert "add tracks.gpu" in (route_refusal(pilot, "gpu") or "")
    # Without an override the pilot runs as its triage's route, which needs both tracks.
    assert "add tracks.gpu" in (submission_refusal(pilot, triage(pilot)) or "")
    overridden = parse_trial({**example_trial, "tracks": {"trn2": example_trial["tracks"]["trn2"]},
                              "baseline_logs_uri": "s3://example-datasets/baselines/llama-gpu.csv",
                              "triage_override": {"route": "trn2_trial", "reason": "pilot against our GPU logs"}})
    assert submission_refusal(overridden, triage(overridden)) is None


@pytest.mark.parametrize(
    ("workload", "scenario", "route"),
    [
        ({"custom_cuda_ops": True}, "custom_cuda_ops", "gpu"),
        ({"graph_change_frequency": "daily"}, "daily_structure_changes", "gpu"),
        ({"dynamic_shapes": True}, "daily_structure_changes", "gpu"),
        ({"shared_platform": True}, "multi_team_platform", "dual_track"),
        ({"long_running": True}, "long_stable_graph", "dual_track"),
    ],
)
def test_workload_traits_route(example_trial: dict[str, Any], workload: dict[str, Any], scenario: str,
                               route: str) -> None:
    result = triage(_spec(example_trial, **workload))
    assert (result.scenario, result.route) == (scenario, route)


def test_full_parameter_is_pilot_with_fallback(example_trial: dict[str, Any]) -> None:
    example_trial["method"] = "full"
    example_trial.pop("lora")
    result = triage(parse_trial(example_trial))
    assert (result.scenario, result.route) == ("full_parameter_continued", "dual_track")
    assert "loss curve broken after resume" in result.risks


def test_blockers_win_over_other_matches_and_say_why(example_trial: dict[str, Any]) -> None:
    result = triage(_spec(example_trial, custom_cuda_ops=True, shared_platform=True,
                          graph_change_frequency="daily"))
    assert result.scenario == "custom_cuda_ops"
    assert "blockers come first" in result.winner and "multi_team_platform" in result.winner
    assert len(result.blockers) == 2
    assert [c.scenario for c in result.considered if c.matched] == [
        "custom_cuda_ops", "daily_structure_changes", "multi_team_platform"]


def test_gpu_route_with_trn2_track_is_refused_unless_overridden(example_trial: dict[str, Any]) -> None:
    spec = _spec(example_trial, custom_cuda_ops=True)
    refusal = submission_refusal(spec, triage(spec))
    assert refusal and "triage_override" in refusal and "custom CUDA" in refusal
    example_trial["triage_override"] = {"route": "dual_track", "reason": "Neuron port of the kernel exists",
                                        "approved_by": "platform-team"}
    spec = parse_trial(example_trial)
    assert submission_refusal(spec, triage(spec)) is None


def test_gpu_route_without_trn2_track_is_accepted(example_trial: dict[str, Any]) -> None:
    example_trial["tracks"].pop("trn2")
    example_trial.pop("fault_injection")
    spec = _spec(example_trial, custom_cuda_ops=True)
    assert submission_refusal(spec, triage(spec)) is None
