"""Trials that AWS or the plane would refuse later are refused at validation, naming the field and the rule."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from lambdas.domain.trial.rules import TrialInvalid, parse_trial


def problems(doc: Any, **kw: Any) -> dict[str, str]:
    with pytest.raises(TrialInvalid) as info:
        parse_trial(doc, **kw)
    return {p.path: p.message for p in info.value.problems}


@pytest.mark.parametrize(("bucket", "rule"), [
    ("my..data", "two adjacent periods"),
    ("192.168.10.4", "formatted as an IP address"),
    ("xn--data", "starts with 'xn--'"),
    ("my.-data", "period next to a hyphen"),
    ("my-.data", "period next to a hyphen"),
    ("data-s3alias", "ends with '-s3alias'"),
    ("data--ol-s3", "ends with '--ol-s3'"),
    ("sthree-data", "starts with 'sthree-'"),
])
def test_bucket_names_s3_forbids_are_refused(example_trial: dict[str, Any], bucket: str, rule: str) -> None:
    """Amazon S3 User Guide, "General purpose bucket naming rules": "Bucket names must not contain two adjacent
    periods", "must not be formatted as an IP address", "must not start with the prefix xn--" (and sthree-), "must
    not end with the suffix -s3alias" (and --ol-s3); a period next to a hyphen is refused as the older rules (and
    virtual-hosted-style addressing over TLS) require."""
    doc = copy.deepcopy(example_trial)
    doc["data"]["train_uri"] = f"s3://{bucket}/train.jsonl"
    found = problems(doc)
    assert rule in found["data.train_uri"] and "bucket naming rules" in found["data.train_uri"]


def test_an_ordinary_dotted_bucket_is_accepted(example_trial: dict[str, Any]) -> None:
    doc = copy.deepcopy(example_trial)
    doc["data"]["train_uri"] = "s3://team.data-2026/train.jsonl"
    assert parse_trial(doc).data.train_uri == "s3://team.data-2026/train.jsonl"


@pytest.mark.parametrize(("field", "value"), [("id", "meta-llama/../../trials"), ("revision", "main/.."),
                                              ("revision", "a//b"), ("id", "org/")])
def test_parent_segments_in_the_model_reference_are_refused(example_trial: dict[str, Any], field: str,
                                                            value: str) -> None:
    doc = copy.deepcopy(example_trial)
    doc["model"][field] = value
    assert "'..' path segment" in problems(doc)[f"model.{field}"]


def test_a_field_given_twice_is_ambiguous_and_refused(example_trial: dict[str, Any]) -> None:
    text = json.dumps(example_trial)
    twice = text[:-1] + ', "max_steps": 5}'
    found = problems(twice)
    assert "given more than once" in found["max_steps"]
    assert parse_trial(text).max_steps == example_trial["max_steps"]


def test_the_api_refuses_a_body_with_a_field_twice_before_parsing(example_trial: dict[str, Any]) -> None:
    from lambdas.handlers.on_trial_api import refused_before_parsing

    body = json.dumps(example_trial)[:-1] + ', "name": "other"}'
    answer = refused_before_parsing({"body": body, "headers": {"Content-Type": "application/json"}}, 10**6)
    assert answer is not None and answer["statusCode"] == 422 and isinstance(answer["body"], str)
    assert json.loads(answer["body"])["errors"][0]["path"] == "name"
    assert refused_before_parsing({"body": json.dumps(example_trial), "headers": {}}, 10**6) is None


@pytest.mark.parametrize(("track", "tracks"), [("gpu", None), ("trn2", ["trn2"])])
def test_a_permanent_fault_needs_a_track_to_fall_back_to(example_trial: dict[str, Any], track: str,
                                                         tracks: list[str] | None) -> None:
    doc = copy.deepcopy(example_trial)
    if tracks is not None:
        doc["tracks"] = {name: doc["tracks"][name] for name in tracks}
        doc.pop("failure_recovery", None)
    doc["fault_injection"] = {**doc["fault_injection"], "track": track, "mode": "permanent"}
    assert "no track to fall back to" in problems(doc)["fault_injection.mode"]
