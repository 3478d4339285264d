"""Writing a trial's report (``lambdas.services.trial_reporting``) over in-memory ports: the evidence is read back as
typed summaries and costs, and a summary the report cannot read is named in it, not dropped."""

from __future__ import annotations

import json
from pathlib import Path

from lambdas.domain.trial import parse_trial
from lambdas.services.trial_reporting import gather, write_report
from tests import fakes
from tests.builders import run_cost, run_summary

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "trial-llama31-8b-lora.json"


def test_summaries_and_costs_come_back_typed_and_an_unreadable_summary_is_named() -> None:
    spec = parse_trial(json.loads(EXAMPLE.read_text()))
    objects, ledger = fakes.InMemoryObjects(), fakes.InMemoryLedger()
    base = f"trials/{spec.trial_id}/gpu"
    for attempt in (2, 1, 10):  # written out of order; attempt 10 sorts after 2 by number, not by text
        objects.put_json(f"{base}/attempt-{attempt}/summary.json",
                         run_summary("gpu", trial_id=spec.trial_id, attempt=attempt).model_dump(mode="json"))
    objects.put_json(f"trials/{spec.trial_id}/trn2/attempt-1/summary.json", {"run": "trn2", "status": "halfway"})
    ledger.put_cost(f"{spec.trial_id}#gpu", {"cost": run_cost("12.50", trial_id=spec.trial_id).model_dump(
        mode="json")}, facts=3)

    evidence = gather(spec.trial_id, objects, ledger)
    assert [s.attempt for s in evidence.summaries["gpu"]] == [1, 2, 10]
    assert str(evidence.costs["gpu"].total_usd) == "12.50"
    assert [u["key"] for u in evidence.unreadable] == [f"trials/{spec.trial_id}/trn2/attempt-1/summary.json"]

    out = write_report(spec.trial_id, spec, objects, ledger, generated_at="2026-12-05T10:00:00Z")
    report = objects.get_json(f"trials/{spec.trial_id}/report/report.json")
    assert out["report_uri"].endswith("report/report.json")
    assert report["tracks"]["gpu"]["attempts"] == 3 and report["tracks"]["gpu"]["cost"]["total_usd"] == "12.50"
    assert report["unreadable_summaries"][0]["key"].endswith("trn2/attempt-1/summary.json")
    markdown = objects.blobs[f"trials/{spec.trial_id}/report/report.md"].decode()
    assert "Summaries the report could not read" in markdown and "trn2/attempt-1/summary.json" in markdown
