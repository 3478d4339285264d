"""Writing a trial's report (``lambdas.services.trial_reporting``) over in-memory ports: the evidence is read back as
typed summaries and costs, and a summary the report cannot read is named in it, not dropped."""

from __future__ import annotations

import json
from pathlib import Path

from lambdas.domain.trial.rules import parse_trial
from lambdas.domain.trial.trial_record import TrialRecord
from lambdas.services.trial_reporting import gather, run_names, write_report
from tests import fakes
from tests.builders import run_cost, run_summary, stored_cost

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "trial-llama31-8b-lora.json"


def test_summaries_and_costs_come_back_typed_and_an_unreadable_summary_is_named() -> None:
    spec = parse_trial(json.loads(EXAMPLE.read_text()))
    objects, ledger = fakes.InMemoryObjects(), fakes.InMemoryLedger()
    base = f"trials/{spec.trial_id}/gpu"
    for attempt in (2, 1, 10):  # written out of order; attempt 10 sorts after 2 by number, not by text
        objects.put_json(f"{base}/attempt-{attempt}/summary.json",
                         run_summary("gpu", trial_id=spec.trial_id, attempt=attempt).model_dump(mode="json"))
    objects.put_json(f"trials/{spec.trial_id}/trn2/attempt-1/summary.json", {"run": "trn2", "status": "halfway"})
    ledger.put_cost(f"{spec.trial_id}#gpu", stored_cost(run_cost("12.50", trial_id=spec.trial_id)), facts=3)

    evidence = gather(spec.trial_id, objects, ledger, run_names(spec))
    assert [s.attempt for s in evidence.summaries["gpu"]] == [1, 2, 10]
    assert str(evidence.costs["gpu"].total_usd) == "12.50"
    assert [u["key"] for u in evidence.unreadable] == [f"trials/{spec.trial_id}/trn2/attempt-1/summary.json"]

    out = write_report(spec.trial_id, spec, objects, ledger, generated_at="2026-12-05T10:00:00Z")
    report = objects.get_json(f"trials/{spec.trial_id}/report/report.json")
    assert report is not None
    assert out.report_uri.endswith("report/report.json")
    assert report["tracks"]["gpu"]["attempts"] == 3 and report["tracks"]["gpu"]["cost"]["total_usd"] == "12.50"
    assert report["unreadable_summaries"][0]["key"].endswith("trn2/attempt-1/summary.json")
    markdown = objects.blobs[f"trials/{spec.trial_id}/report/report.md"].decode()
    assert "Summaries the report could not read" in markdown and "trn2/attempt-1/summary.json" in markdown


class Sources:
    """Documents by URI; a missing one raises as S3 would (NoSuchKey is a client error the report names)."""

    def __init__(self, documents: dict[str, bytes]) -> None:
        self.documents = documents

    def read(self, uri: str, max_bytes: int) -> bytes:
        if uri not in self.documents:
            raise KeyError(f"NoSuchKey: {uri}")
        return self.documents[uri][: max_bytes + 1]


def test_the_baseline_is_read_through_its_uri_and_a_missing_one_is_named_not_fatal() -> None:
    uri = "s3://example-datasets/baselines/llama-gpu.csv"
    spec = parse_trial({**json.loads(EXAMPLE.read_text()), "baseline_logs_uri": uri})
    objects, ledger = fakes.InMemoryObjects(), fakes.InMemoryLedger()
    objects.put_json(f"trials/{spec.trial_id}/gpu/attempt-1/summary.json",
                     run_summary("gpu", trial_id=spec.trial_id, loss={"per_step": [[1, 2.5], [2, 2.0], [3, 1.5]]})
                     .model_dump(mode="json"))
    write_report(spec.trial_id, spec, objects, ledger, "2026-12-05T12:00:00Z",
                 sources=Sources({uri: b"step,loss\n1,2.5\n2,2.01\n3,1.5\n"}))
    report = objects.get_json(f"trials/{spec.trial_id}/report/report.json")
    assert report is not None
    assert report["baseline"]["format"] == "csv" and report["baseline"]["reproduced"] is True
    write_report(spec.trial_id, spec, objects, ledger, "2026-12-05T12:00:00Z", sources=Sources({}))
    report = objects.get_json(f"trials/{spec.trial_id}/report/report.json")
    assert report is not None
    assert report["baseline"] == {"uri": uri, "error": f"could not be read (KeyError: 'NoSuchKey: {uri}')"}


def _trial_of(trials: fakes.InMemoryTrials, trial_id: str, team: str) -> None:
    trials.create(TrialRecord.from_item({"trial_id": trial_id, "status": "SUCCEEDED", "team": team,
                                         "tracks": {"gpu": {"instance_type": "p5.48xlarge", "nodes": 1}}}))


def test_a_baseline_in_another_teams_trial_is_never_read_and_the_report_says_why() -> None:
    """A baseline_logs_uri naming another team's trial under the artifacts bucket's trials/: the report does not
    read it (the source is never asked for it) and names the locations a baseline is read from; one of the trial's
    own team's trials is read as any baseline is."""
    theirs = "s3://artifacts/trials/vision-run-0123456789/gpu/attempt-1/metrics.jsonl"
    ours = "s3://artifacts/trials/nlp-earlier-0123456789/gpu/attempt-1/metrics.jsonl"
    log = b'{"kind": "step", "step": 1, "loss": 2.5}\n{"kind": "step", "step": 2, "loss": 2.0}\n'
    trials = fakes.InMemoryTrials()
    _trial_of(trials, "vision-run-0123456789", "team-vision")
    _trial_of(trials, "nlp-earlier-0123456789", "team-nlp")
    asked: list[str] = []

    class Asked(Sources):
        def read(self, uri: str, max_bytes: int) -> bytes:
            asked.append(uri)
            return super().read(uri, max_bytes)

    sources = Asked({theirs: log, ours: log})
    for uri, team in ((theirs, "team-nlp"), (ours, "team-nlp")):
        spec = parse_trial({**json.loads(EXAMPLE.read_text()), "owner": team, "baseline_logs_uri": uri})
        objects, ledger = fakes.InMemoryObjects(), fakes.InMemoryLedger()
        write_report(spec.trial_id, spec, objects, ledger, "2026-12-05T12:00:00Z", sources=sources, trials=trials)
        report = objects.get_json(f"trials/{spec.trial_id}/report/report.json")
        assert report is not None
        if uri == theirs:
            error = report["baseline"]["error"]
            assert error.startswith(f"not read: {uri}: trial vision-run-0123456789 is not a trial of team team-nlp")
            assert "team team-nlp's own trials (s3://artifacts/trials/<trial_id>/...)" in error
            assert "could not be used: not read" in objects.blobs[f"trials/{spec.trial_id}/report/report.md"].decode()
        else:
            assert report["baseline"]["format"] == "metrics_jsonl" and "error" not in report["baseline"]
    assert asked == [ours]
