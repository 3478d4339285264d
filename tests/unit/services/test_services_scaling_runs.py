"""Scaling runs (``gpu-n1``: a track's training at another node count) are runs like the fixed ones wherever a
service names, checks or walks a trial's runs: job credentials, settlement, stopping and reporting."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from lambdas.domain.json_types import JsonObject
from lambdas.domain.money import ledger as L
from lambdas.domain.money.prices import load_price_table
from lambdas.domain.trial.rules import parse_trial
from lambdas.domain.trial.trial_record import TrialRecord
from lambdas.services.job_credentials import CredentialsRefused, identify, vend
from lambdas.services.run_settlement import ForeignEvent, JobIdentity, RunSettlement, identify_job
from lambdas.services.trial_reporting import gather, report_stopped_trial, run_names, write_report
from lambdas.services.trial_status import Stopper, finish_stop, live_jobs
from lambdas.services.trial_submission import trial_status
from tests import fakes
from tests.builders import run_cost, run_summary, stored_cost
from tests.stage import ACCOUNT, GOVERNANCE, principal
from tests.unit.services.test_job_credentials import JOB, Jobs, Signed, Writer, request, session, single_node

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "trial-llama31-8b-lora.json"
T0 = datetime(2026, 12, 4, 10, 0, tzinfo=UTC)
PLACED: JsonObject = {"gpu": {"queue": "q-gpu", "definition": "d-gpu-2", "nodes": 2, "instance_type": "p5.48xlarge"},
          "gpu-n1": {"queue": "q-gpu", "definition": "d-gpu-1", "nodes": 1, "instance_type": "p5.48xlarge"}}


def placed_record(trial_id: str = "alpha", **item: Any) -> TrialRecord:
    """A trial whose gpu track declared ``nodes: [1, 2]``, placed with its main run and the scaling run gpu-n1."""
    return TrialRecord.from_item({"trial_id": trial_id, "status": "SUBMITTED",
                                  "tracks": {"gpu": {"instance_type": "p5.48xlarge", "nodes": 2,
                                                     "scaling_nodes": [1]}},
                                  "runs": PLACED, **item})


def scaling_job(run: str) -> dict[str, Any]:
    """DescribeJobs of a single-node job of ``run``, as the workflow's Map state submits a scaling run's."""
    return single_node(run=run)


def test_a_scaling_run_the_trial_was_placed_with_gets_credentials_for_its_own_prefix() -> None:
    trials = fakes.InMemoryTrials()
    trials.create(placed_record())
    answer = vend(request(), jobs=Jobs(scaling_job("gpu-n1")), trials=trials, writer=Writer(),
                  identity=Signed(session(JOB)), bucket="artifacts", duration_s=3600)
    assert (answer["run"], answer["write_prefix"]) == ("gpu-n1", "trials/alpha/gpu-n1/")


@pytest.mark.parametrize("run", ["gpu-n3", "trn2-n1"])
def test_a_scaling_run_the_trial_was_not_placed_with_gets_none(run: str) -> None:
    trials = fakes.InMemoryTrials()
    trials.create(placed_record())
    with pytest.raises(CredentialsRefused, match=f"trial alpha has no run {run} "):
        identify(request(), Jobs(scaling_job(run)), trials, Signed(session(JOB)))


def test_a_run_name_of_no_form_is_refused_before_the_trial_is_read() -> None:
    with pytest.raises(CredentialsRefused, match="name no trial and run of this plane"):
        identify(request(), Jobs(scaling_job("gpu-n0")), fakes.InMemoryTrials(), Signed(session(JOB)))


def test_a_scaling_runs_job_is_known_by_its_settings_or_its_name() -> None:
    assert identify_job({"DUALTRACK_TRIAL_ID": "t-1", "DUALTRACK_RUN": "gpu-n1"}, {}, "x") == JobIdentity(
        "t-1", "gpu-n1")
    assert identify_job({}, {}, "t-1-gpu-n1") == JobIdentity("t-1", "gpu-n1")
    assert identify_job({}, {}, "my-trial-trn2-n4") == JobIdentity("my-trial", "trn2-n4")
    # The fixed runs still read as before.
    assert identify_job({}, {}, "t-1-gpu-fallback") == JobIdentity("t-1", "gpu-fallback")
    assert identify_job({}, {}, "t-1-trn2-compile") == JobIdentity("t-1", "trn2-compile")
    assert identify_job({}, {}, "t-1-gpu") == JobIdentity("t-1", "gpu")
    assert identify_job({"DUALTRACK_TRIAL_ID": "t-1", "DUALTRACK_RUN": "gpu-n0"}, {}, "x") is None


def test_settlement_takes_a_placed_scaling_runs_events_and_refuses_one_never_placed() -> None:
    trials = fakes.InMemoryTrials()
    trials.create(placed_record("t-1"))
    settlement = RunSettlement(fakes.InMemoryLedger(), trials, fakes.InMemoryObjects(), load_price_table(),
                               "us-east-1")
    settlement.check_started("t-1", "gpu-n1")
    with pytest.raises(ForeignEvent, match=r"trial t-1 has no run 'gpu-n3' \(its runs: gpu, gpu-n1\)"):
        settlement.check_started("t-1", "gpu-n3")
    with pytest.raises(ForeignEvent, match="has no run 'trn2-n1'"):
        settlement.check_started("t-1", "trn2-n1")


def transition(trial_id: str, run: str, job_id: str, status: str) -> L.LedgerEntry:
    return L.transition_entry(trial_id, run, job_id=job_id, attempt=1, status=status, at=T0)


def test_a_stop_terminates_a_scaling_runs_live_job_too() -> None:
    record = placed_record("t-1", status="STOPPING", status_cause="cancelled by alice")
    ledger, trials, batch = fakes.InMemoryLedger(), fakes.InMemoryTrials(), fakes.InMemoryBatchJobs()
    trials.create(record)
    for entry in (transition("t-1", "gpu", "job-main", "RUNNING"), transition("t-1", "gpu-n1", "job-n1", "RUNNING"),
                  transition("t-1", "gpu-n1", "job-n1-old", "FAILED")):
        ledger.append(entry)
    assert live_jobs(ledger, record) == {"job-main": "gpu", "job-n1": "gpu-n1"}

    batch.statuses.update({"job-main": "RUNNING", "job-n1": "RUNNING"})
    state = finish_stop(record, Stopper(trials, fakes.InMemoryWorkflow(), ledger, batch), now="2026-12-04T10:05:00Z")
    assert sorted(batch.terminated) == ["job-main", "job-n1"]
    assert "job job-n1 (gpu-n1) has not ended yet" in state.pending


def test_status_shows_a_scaling_run_and_counts_its_cost_in_the_total() -> None:
    """GET /trials/{id} lists every run the trial was placed with, so its total is what the limit guard counts."""
    from lambdas.domain.trial.governance import Governance

    trials, ledger = fakes.InMemoryTrials(), fakes.InMemoryLedger()
    trials.create(placed_record("t-1", team="team-nlp", max_steps=1000))
    for run, usd in (("gpu", "3.00"), ("gpu-n1", "1.25")):
        ledger.append(transition("t-1", run, f"job-{run}", "SUCCEEDED"))
        ledger.put_cost(f"t-1#{run}", stored_cost(run_cost(usd, run, trial_id="t-1")), facts=1)
    admin = Governance.model_validate(GOVERNANCE).identify(principal("platform-admin"), ACCOUNT)
    settlement = RunSettlement(ledger, trials, fakes.InMemoryObjects(), load_price_table(), "us-east-1")
    status = trial_status("t-1", caller=admin, trials=trials, ledger=ledger, settlement=settlement, now=T0)
    runs = status["runs"]
    assert isinstance(runs, dict) and set(runs) == {"gpu", "gpu-n1"}
    assert status["total_usd"] == "4.25"


def scaling_spec() -> Any:
    data = json.loads(EXAMPLE.read_text())
    data["tracks"]["gpu"]["nodes"] = [1, 2]
    return parse_trial(data)


def test_the_report_gathers_each_scaling_runs_summaries_and_cost() -> None:
    spec = scaling_spec()
    assert run_names(spec) == ["gpu", "trn2", "gpu-fallback", "trn2-compile", "gpu-n1"]
    objects, ledger = fakes.InMemoryObjects(), fakes.InMemoryLedger()
    for run in ("gpu", "gpu-n1"):
        objects.put_json(f"trials/{spec.trial_id}/{run}/attempt-1/summary.json",
                         run_summary(run, trial_id=spec.trial_id).model_dump(mode="json"))
        ledger.put_cost(f"{spec.trial_id}#{run}", stored_cost(run_cost("3.00", run, trial_id=spec.trial_id)),
                        facts=3)
    ledger.append(transition(spec.trial_id, "gpu-n1", "job-n1", "SUCCEEDED"))

    evidence = gather(spec.trial_id, objects, ledger, run_names(spec))
    assert [s.run for s in evidence.summaries["gpu-n1"]] == ["gpu-n1"]
    assert set(evidence.costs) == {"gpu", "gpu-n1"}
    assert [e.run for e in evidence.entries] == ["gpu-n1"]
    out = write_report(spec.trial_id, spec, objects, ledger, generated_at="2026-12-05T10:00:00Z")
    assert out.report_uri.endswith("report/report.json")


def test_a_stopped_trials_report_waits_for_its_scaling_run_to_settle() -> None:
    spec = scaling_spec()
    objects, ledger = fakes.InMemoryObjects(), fakes.InMemoryLedger()
    objects.put_json(f"trials/{spec.trial_id}/spec.json", json.loads(spec.canonical_json()))
    record = placed_record(spec.trial_id, status="CANCELLED",
                           execution_arn=f"arn:aws:states:us-east-1:123456789012:execution:w:{spec.trial_id}",
                           spec_uri=objects.uri(f"trials/{spec.trial_id}/spec.json"))
    ledger.append(transition(spec.trial_id, "gpu", "job-main", "FAILED"))
    ledger.put_cost(f"{spec.trial_id}#gpu", stored_cost(run_cost("3.00", trial_id=spec.trial_id)), facts=1)
    ledger.append(transition(spec.trial_id, "gpu-n1", "job-n1", "RUNNING"))
    assert report_stopped_trial(record, objects, ledger, "2026-12-05T10:00:00Z") is None  # gpu-n1 still open

    ledger.put_cost(f"{spec.trial_id}#gpu-n1", stored_cost(run_cost("1.00", "gpu-n1", trial_id=spec.trial_id)),
                    facts=1)
    assert report_stopped_trial(record, objects, ledger, "2026-12-05T10:00:00Z") is not None
