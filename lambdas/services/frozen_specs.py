"""A trial's frozen spec, as the API stored it in the artifacts bucket when the trial was submitted."""

from __future__ import annotations

from lambdas.domain.trial.rules import parse_trial, split_s3_uri
from lambdas.domain.trial.spec import TrialSpec
from lambdas.services.ports import Objects


def load_spec(artifacts: Objects, spec_uri: str) -> TrialSpec:
    _bucket, key = split_s3_uri(spec_uri)
    if artifacts.uri(key) != spec_uri:
        raise ValueError(f"spec_uri {spec_uri!r} is outside the artifacts bucket; pass s3://<artifacts>/{key}")
    body = artifacts.get_json(key)
    if body is None:
        raise LookupError(f"no frozen spec at {spec_uri}; submit the trial through the API first")
    return parse_trial(body)
