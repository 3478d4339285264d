"""Where a trial may read its GPU baseline from (``lambdas.services.baseline_sources``), over the in-memory trials
table: the check the API makes at submission and the report makes before reading. A trial's team is the one the
trials table booked it to."""

from __future__ import annotations

from typing import Any

import pytest

from lambdas.domain.trial.rules import parse_trial
from lambdas.domain.trial.trial_record import TrialRecord
from lambdas.services.baseline_sources import baseline_refused
from tests import fakes

NLP_TRIAL, VISION_TRIAL = "nlp-earlier-0123456789", "vision-run-0123456789"
ROOT = "s3://artifacts/"


@pytest.fixture
def trials() -> fakes.InMemoryTrials:
    table = fakes.InMemoryTrials()
    for trial_id, team in ((NLP_TRIAL, "team-nlp"), (VISION_TRIAL, "team-vision")):
        table.create(TrialRecord.from_item({"trial_id": trial_id, "status": "SUCCEEDED", "team": team,
                                            "tracks": {"gpu": {"instance_type": "p5.48xlarge", "nodes": 1}}}))
    return table


def _refused(example_trial: dict[str, Any], uri: str, trials: fakes.InMemoryTrials | None,
             team: str = "team-nlp") -> str | None:
    spec = parse_trial({**example_trial, "owner": team, "baseline_logs_uri": uri})
    return baseline_refused(spec, team, trials, artifacts_root=ROOT, data_buckets=["example-datasets"])


def test_a_team_may_name_its_own_trials_and_the_shared_data_buckets(example_trial: dict[str, Any],
                                                                     trials: fakes.InMemoryTrials) -> None:
    assert _refused(example_trial, f"s3://artifacts/trials/{NLP_TRIAL}/gpu/attempt-1/metrics.jsonl", trials) is None
    assert _refused(example_trial, f"s3://artifacts/trials/{VISION_TRIAL}/gpu/metrics.jsonl", trials,
                    team="team-vision") is None
    assert _refused(example_trial, "s3://example-datasets/baselines/llama-gpu.csv", trials) is None
    assert baseline_refused(parse_trial(example_trial), "team-nlp", trials, artifacts_root=ROOT) is None  # none


@pytest.mark.parametrize("trial_id", [VISION_TRIAL, "never-submitted-0123456789"])
def test_another_teams_trial_and_an_unknown_one_are_refused_alike(example_trial: dict[str, Any],
                                                                  trials: fakes.InMemoryTrials,
                                                                  trial_id: str) -> None:
    """Team-nlp naming team-vision's trial, or a trial id nobody submitted: the same refusal, naming where a
    baseline may be read from and nothing of the other team."""
    uri = f"s3://artifacts/trials/{trial_id}/gpu/attempt-1/metrics.jsonl"
    refusal = _refused(example_trial, uri, trials)
    assert refusal == (f"{uri}: trial {trial_id} is not a trial of team team-nlp; a baseline is read only from the "
                       "stage's data buckets (s3://example-datasets/), which its teams share, or from the files of "
                       "one of team team-nlp's own trials (s3://artifacts/trials/<trial_id>/...)")


def test_without_the_trials_table_no_baseline_in_the_artifacts_bucket_is_allowed(
        example_trial: dict[str, Any]) -> None:
    """No trial's team can be told, so even the team's own trial is refused rather than read unchecked."""
    assert _refused(example_trial, f"s3://artifacts/trials/{NLP_TRIAL}/gpu/metrics.jsonl", None) is not None
    assert _refused(example_trial, "s3://example-datasets/baselines/llama-gpu.csv", None) is None
