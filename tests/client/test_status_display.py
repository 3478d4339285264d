"""The status view of a running trial in the API's shape: per-run step, attempts, resume, cost, fallback."""

from __future__ import annotations

from dualtrack.client.display import progress_bar, status_lines


def attempt(n: int, start: int, end: int, **extra: object) -> dict[str, object]:
    return {"attempt": n, "billed_seconds": "100", "queue_seconds": "0", "start_step": start, "end_step": end,
            "resumed_from_step": None, "rerun_steps": 0, "succeeded": False, **extra}


TRIAL = {
    "trial_id": "pilot-1", "status": "RUNNING", "owner": "team-nlp", "name": "pilot", "max_steps": 1000,
    "triage": {"route": "trn2_trial", "scenario": "standard_lora", "conclusion": "build the GPU baseline first"},
    "worst_case_usd": {"total": "1750.12"}, "total_usd": "61.5",
    "runs": {
        "gpu-fallback": {"status": "RUNNING", "attempts": [attempt(1, 200, 350)], "cost": {"total_usd": "3.5"},
                         "cost_final": False},
        "trn2": {"status": "FAILED", "cost": {"total_usd": "40"}, "cost_final": True,
                 "attempts": [attempt(1, 0, 300), attempt(2, 200, 260, resumed_from_step=200, rerun_steps=60)]},
        "gpu": {"status": "SUCCEEDED", "attempts": [attempt(1, 0, 1000, succeeded=True)], "loss": 1.11342,
                "cost": {"total_usd": "18"}, "cost_final": True},
    },
}


def test_runs_are_listed_in_track_order_with_step_attempts_and_cost() -> None:
    lines = status_lines(TRIAL)
    assert lines[0] == "trial pilot-1  RUNNING"
    assert lines[2] == "  route trn2_trial (standard_lora): build the GPU baseline first"
    gpu, trn2, fallback = lines[3:6]
    assert gpu.split()[:2] == ["gpu", "SUCCEEDED"] and "1000/1000 (100%)" in gpu and "loss 1.1134" in gpu
    assert "cost $18.00 final" in gpu
    assert "300/1000 (30%)" in trn2 and "attempts 2 (resumed from step 200, 60 steps rerun)" in trn2
    assert fallback.split()[:2] == ["gpu-fallback", "RUNNING"] and "cost $3.50 so far" in fallback
    assert lines[6].startswith("  fallback: the trn2 run failed")
    assert lines[7] == "  cost so far $61.50 of worst case $1,750.12"


def test_progress_bar() -> None:
    assert progress_bar(250, 1000, 8) == "[##......] 250/1000 (25%)"
    assert progress_bar(12, None) == "step 12"
    assert progress_bar(2000, 1000, 4) == "[####] 2000/1000 (100%)"


def test_a_scaling_run_is_listed_after_the_tracks_and_explained() -> None:
    trial = {**TRIAL, "runs": {**TRIAL["runs"], "gpu-n1": {  # type: ignore[dict-item]
        "status": "RUNNING", "attempts": [attempt(1, 0, 400)], "cost": {"total_usd": "2"}, "cost_final": False}}}
    lines = status_lines(trial)
    assert lines[6].split()[:2] == ["gpu-n1", "RUNNING"] and "400/1000 (40%)" in lines[6]
    assert lines[8] == ("  scaling runs (gpu-n1 at 1 node): the track trained again at another node count, for the "
                        "report's scaling section")
