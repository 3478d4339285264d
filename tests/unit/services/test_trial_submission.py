"""Submitting, approving and cancelling a trial (``lambdas.services.trial_submission``) over in-memory ports: no
moto, no patching of the project's seams. The ports' behaviour is pinned against AWS by
``tests/integration/test_port_contracts.py``. Two teams share the stage (``tests/stage.GOVERNANCE``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from lambdas.domain.money.prices import load_price_table
from lambdas.domain.trial.governance import Caller, Governance, NotPermitted
from lambdas.domain.trial.job_targets import JobTargets, parse_job_targets
from lambdas.domain.trial.rules import parse_trial
from lambdas.domain.trial.spec import TrialSpec
from lambdas.domain.trial.trial_record import ExecutionInput, TrialRecord
from lambdas.services.ports import Started
from lambdas.services.trial_status import Stopper, set_status
from lambdas.services.trial_submission import (
    DecisionConflict,
    Plane,
    QuotaExceeded,
    Stage,
    SubmissionRefused,
    Submitted,
    TrialNotFound,
    cancel,
    decide,
    submit,
    trial_status,
    visible,
)
from tests import fakes
from tests.json_access import arr, obj
from tests.stage import ACCOUNT, GOVERNANCE, job_targets, principal

NOW = datetime(2026, 12, 4, 12, tzinfo=UTC)
STAMP = "2026-12-04T12:00:00Z"


def who(arn: str, governance: Governance | None = None) -> Caller:
    return (governance or Governance.model_validate(GOVERNANCE)).identify(arn, ACCOUNT)


NLP = f"arn:aws:iam::{ACCOUNT}:user/model-team"  # a member of team-nlp
NLP_LEAD = principal("dualtrack-team-nlp-approver")
NLP_ROLE = principal("dualtrack-team-nlp-submitter")
VISION = principal("dualtrack-team-vision-submitter")
ADMIN = principal("platform-admin")


@pytest.fixture
def spec(example_trial: dict[str, Any]) -> TrialSpec:
    return parse_trial(example_trial)


@pytest.fixture
def ports() -> dict[str, Any]:
    return {"trials": fakes.InMemoryTrials(), "artifacts": fakes.InMemoryObjects(),
            "workflow": fakes.InMemoryWorkflow()}


def _plane(ports: dict[str, Any]) -> Plane:
    return Plane(trials=ports["trials"], artifacts=ports["artifacts"], workflow=ports["workflow"],
                 prices=load_price_table())


def _stage(**overrides: Any) -> Stage:
    settings: dict[str, Any] = {"region": "us-east-1", "attempt_timeout_s": 86400,
                                "data_buckets": ["example-datasets"], "artifacts_bucket": "artifacts",
                                "targets": parse_job_targets(job_targets()),
                                "governance": Governance.model_validate(GOVERNANCE), "max_attempts": 2}
    return Stage(**{**settings, **overrides})


def _submit(spec: TrialSpec, ports: dict[str, Any], caller: str = NLP, now: datetime = NOW,
            **overrides: Any) -> Submitted:
    stage = _stage(**overrides)
    return submit(spec, caller=who(caller, stage.governance), stage=stage, plane=_plane(ports), now=now)


def _stopper(ports: dict[str, Any]) -> Stopper:
    return Stopper(ports["trials"], ports["workflow"], ports.setdefault("ledger", fakes.InMemoryLedger()))


def _governed(**team_nlp: Any) -> Governance:
    data = {**GOVERNANCE, "teams": {**GOVERNANCE["teams"], "team-nlp": {**GOVERNANCE["teams"]["team-nlp"],
                                                                         **team_nlp}}}
    return Governance.model_validate(data)


def test_a_submission_freezes_the_spec_records_the_trial_and_starts_one_execution(spec: TrialSpec,
                                                                                  ports: dict[str, Any]) -> None:
    done = _submit(spec, ports)
    trial_id = spec.trial_id
    assert done.created is True and done.body["status"] == "SUBMITTED"
    assert ports["artifacts"].get_json(f"trials/{trial_id}/spec.json")["name"] == spec.name
    item = ports["trials"].items[trial_id]
    assert item["status"] == "SUBMITTED" and item["spec_hash"] == spec.spec_hash()
    assert (item["team"], item["submitted_by"]) == ("team-nlp", NLP)
    assert item["max_steps"] == spec.max_steps
    execution = ports["workflow"].executions[item["execution_arn"]]
    assert execution["input"]["spec_uri"] == f"s3://artifacts/trials/{trial_id}/spec.json"
    assert set(execution["input"]["run_dirs"]) == {"gpu", "trn2", "gpu-fallback", "trn2-compile"}

    again = _submit(spec, ports)  # the same body again: the same trial, no second execution
    assert again.created is False and again.body["already_submitted"] is True
    assert len(ports["workflow"].executions) == 1


def test_a_workflow_that_cannot_start_leaves_nothing_half_submitted(spec: TrialSpec, ports: dict[str, Any]) -> None:
    class Unavailable(fakes.InMemoryWorkflow):
        def start(self, name: str, execution_input: ExecutionInput) -> Started:
            raise ConnectionError("states endpoint unreachable")

    with pytest.raises(ConnectionError):
        _submit(spec, {**ports, "workflow": Unavailable()})
    assert ports["trials"].get(spec.trial_id) is None
    assert _submit(spec, ports).created is True  # the same body, sent again, goes through


def test_an_input_the_job_role_cannot_read_is_refused_before_anything_is_stored(spec: TrialSpec,
                                                                               ports: dict[str, Any]) -> None:
    with pytest.raises(SubmissionRefused):
        _submit(spec, ports, data_buckets=["another-bucket"])
    assert ports["trials"].items == {} and ports["artifacts"].blobs == {} and ports["workflow"].executions == {}


def test_cancelling_stops_the_execution_once(spec: TrialSpec, ports: dict[str, Any]) -> None:
    _submit(spec, ports)
    caller = who(NLP)
    first = cancel(spec.trial_id, caller=caller, stopper=_stopper(ports), now=STAMP,
                   reason="not needed")
    assert first == {"trial_id": spec.trial_id, "status": "CANCELLED", "execution_status": "ABORTED",
                     "changed": True}
    item = ports["trials"].items[spec.trial_id]
    assert item["status_cause"] == "not needed" and item["cancelled_by"] == NLP
    second = cancel(spec.trial_id, caller=caller, stopper=_stopper(ports), now=STAMP,
                    reason="again")
    assert second == {"trial_id": spec.trial_id, "status": "CANCELLED", "changed": False}


def test_the_submitting_principal_books_the_trial_to_its_own_team(spec: TrialSpec, ports: dict[str, Any],
                                                                  example_trial: dict[str, Any]) -> None:
    """``owner`` is no longer whatever the JSON says: it must name the caller's team; a principal in no team
    submits nothing; a platform admin submits for any team the stage defines."""
    with pytest.raises(NotPermitted, match=r"owner 'team-nlp' is not your team.*'team-vision'") as raised:
        _submit(spec, ports, caller=VISION)
    assert raised.value.role == "team"
    with pytest.raises(NotPermitted, match="member of no team"):
        _submit(spec, ports, caller=f"arn:aws:iam::{ACCOUNT}:user/stranger")
    with pytest.raises(NotPermitted, match="member of no team"):  # the convention matches the API's account only
        _submit(spec, ports, caller="arn:aws:sts::999999999999:assumed-role/dualtrack-team-nlp-submitter/s")
    assert ports["trials"].items == {} and ports["workflow"].executions == {}
    assert _submit(spec, ports, caller=NLP_ROLE).body["team"] == "team-nlp"  # a role session, by convention
    other = parse_trial({**example_trial, "name": "for-vision", "owner": "team-vision"})
    assert _submit(other, ports, caller=ADMIN).body["team"] == "team-vision"
    with pytest.raises(NotPermitted, match="not a team of this stage"):
        _submit(parse_trial({**example_trial, "name": "x", "owner": "nobody"}), ports, caller=ADMIN)


def test_another_teams_trial_reads_as_missing(spec: TrialSpec, ports: dict[str, Any]) -> None:
    """404, not 403: a team cannot learn that another team's trial id exists; reading, cancelling and approving
    all say "no trial"."""
    _submit(spec, ports)
    vision = who(VISION)
    for attempt in (
        lambda: visible(ports["trials"], spec.trial_id, vision),
        lambda: trial_status(spec.trial_id, caller=vision, trials=ports["trials"], ledger=fakes.InMemoryLedger(),
                             settlement=None),  # type: ignore[arg-type]
        lambda: cancel(spec.trial_id, caller=vision, stopper=_stopper(ports), now=STAMP,
                       reason="sabotage"),
        lambda: decide(spec.trial_id, approve=False, comment="nope", caller=vision, plane=_plane(ports), now=NOW),
    ):
        with pytest.raises(TrialNotFound):
            attempt()
    assert ports["trials"].items[spec.trial_id]["status"] == "SUBMITTED"
    assert visible(ports["trials"], spec.trial_id, who(ADMIN)).team == "team-nlp"  # the admin sees every team


def test_an_override_waits_for_an_approver_who_is_not_its_submitter(example_trial: dict[str, Any],
                                                                    ports: dict[str, Any]) -> None:
    spec = parse_trial({**example_trial, "workload": {"custom_cuda_ops": True},
                        "triage_override": {"route": "dual_track", "reason": "the kernels have NKI ports now"}})
    done = _submit(spec, ports, caller=NLP_LEAD)  # an approver submits: still needs another approver
    assert done.body["status"] == "PENDING_APPROVAL" and ports["workflow"].executions == {}
    assert "triage_override routes the trial to dual_track" in obj(done.body["approval"])["reasons"][0]
    with pytest.raises(NotPermitted, match=r"submitted trial .* cannot approve") as raised:
        decide(spec.trial_id, approve=True, comment="fine by me", caller=who(NLP_LEAD), plane=_plane(ports), now=NOW)
    assert raised.value.role == "approver"
    with pytest.raises(NotPermitted, match="not an approver of team 'team-nlp'"):
        decide(spec.trial_id, approve=True, comment="lgtm", caller=who(NLP), plane=_plane(ports), now=NOW)
    approved = decide(spec.trial_id, approve=True, comment="kernels ported, go", caller=who(ADMIN),
                      plane=_plane(ports), now=NOW)
    assert approved["status"] == "SUBMITTED" and len(ports["workflow"].executions) == 1
    record = ports["trials"].items[spec.trial_id]["approval"]
    assert (record["status"], record["decided_as"], record["decided_at"]) == ("APPROVED", ADMIN, STAMP)
    assert record["decided_by"] == f"arn:aws:iam::{ACCOUNT}:role/platform-admin"  # the session's role
    with pytest.raises(DecisionConflict, match="is SUBMITTED, not PENDING_APPROVAL"):
        decide(spec.trial_id, approve=False, comment="too late", caller=who(ADMIN), plane=_plane(ports), now=NOW)


def test_a_trial_over_the_teams_approval_threshold_waits_and_a_rejection_starts_nothing(
        spec: TrialSpec, ports: dict[str, Any]) -> None:
    governance = _governed(approval_threshold_usd="1000")
    done = _submit(spec, ports, governance=governance)  # worst case 3,500.23 USD
    assert done.body["status"] == "PENDING_APPROVAL"
    assert "above the team's approval_threshold_usd 1000 USD" in obj(done.body["approval"])["reasons"][0]
    lead = who(NLP_LEAD, governance)
    rejected = decide(spec.trial_id, approve=False, comment="run it at 4 h first", caller=lead, plane=_plane(ports),
                      now=NOW)
    assert rejected["status"] == "REJECTED" and ports["workflow"].executions == {}
    assert ports["trials"].items[spec.trial_id]["status_cause"] == "rejected: run it at 4 h first"


def test_two_approvers_racing_record_one_decision(spec: TrialSpec, ports: dict[str, Any]) -> None:
    """The decision is a conditional write from PENDING_APPROVAL: the second decider finds it decided."""
    governance = _governed(approval_threshold_usd="1000")
    _submit(spec, ports, governance=governance)

    class Interleaved(fakes.InMemoryTrials):
        def get(self, trial_id: str) -> TrialRecord | None:
            item = super().get(trial_id)
            if item and item.status == "PENDING_APPROVAL" and not getattr(self, "raced", False):
                self.raced = True  # the other approver's rejection lands between our read and our write
                decide(trial_id, approve=False, comment="rejected first", caller=who(ADMIN, governance),
                       plane=Plane(trials=ports["trials"], artifacts=ports["artifacts"],
                                   workflow=ports["workflow"], prices=load_price_table()), now=NOW)
            return item

    racing = Interleaved(items=ports["trials"].items)
    with pytest.raises(DecisionConflict, match="is REJECTED"):
        decide(spec.trial_id, approve=True, comment="approved second", caller=who(NLP_LEAD, governance),
               plane=Plane(trials=racing, artifacts=ports["artifacts"], workflow=ports["workflow"],
                           prices=load_price_table()), now=NOW)
    assert ports["trials"].items[spec.trial_id]["approval"]["status"] == "REJECTED"
    assert ports["workflow"].executions == {}


def test_a_cancel_during_submission_is_never_lost(spec: TrialSpec, ports: dict[str, Any]) -> None:
    """A cancel that lands while the execution is being started goes through STOPPING like any other: the
    submission finds the trial STOPPING, records the execution it started on it and stops it; the cancel sent again
    (or the reconciler) then finds nothing running and closes it CANCELLED."""
    trials = ports["trials"]

    class CancelledMeanwhile(fakes.InMemoryWorkflow):
        def start(self, name: str, execution_input: ExecutionInput) -> Started:
            cancel(name, caller=who(NLP), stopper=Stopper(trials, self, fakes.InMemoryLedger()), now=STAMP,
                   reason="changed my mind")
            return super().start(name, execution_input)

    workflow = CancelledMeanwhile()
    done = _submit(spec, {**ports, "workflow": workflow})
    item = trials.items[spec.trial_id]
    assert done.body["status"] == item["status"] == "STOPPING"
    assert workflow.executions[item["execution_arn"]]["status"] == "ABORTED"
    again = cancel(spec.trial_id, caller=who(NLP), stopper=Stopper(trials, workflow, fakes.InMemoryLedger()),
                   now=STAMP, reason="changed my mind")
    assert again["status"] == trials.items[spec.trial_id]["status"] == "CANCELLED"


def test_quotas_refuse_a_submission_naming_the_quota_its_limit_use_and_when_it_frees(
        spec: TrialSpec, ports: dict[str, Any], example_trial: dict[str, Any]) -> None:
    governance = _governed(quotas={"concurrent_trials": 1, "usd_per_month": "6000"})
    _submit(spec, ports, governance=governance)
    second = parse_trial({**example_trial, "name": "second"})
    with pytest.raises(QuotaExceeded) as raised:
        _submit(second, ports, governance=governance)
    (breach, month) = raised.value.breaches
    assert (breach.quota, breach.limit, breach.current) == ("concurrent_trials", "1", "1")
    assert "frees when one of the team's trials finishes" in breach.frees
    # 3,500.23 USD committed by the running trial + 3,500.23 asked > 6,000 USD
    assert (month.quota, month.current) == ("usd_per_month", "3500.23 USD")
    assert month.retry_after_s == 27 * 86400 + 43200  # 4 December, noon, to 1 January
    assert "2027-01-01T00:00:00Z" in month.frees
    # The workflow closes the first trial's costs: its settled cost replaces its worst case in the month's booking,
    # and its place is free.
    set_status(ports["trials"], spec.trial_id, "SUCCEEDED", None, STAMP, settled_usd=Decimal("210.50"))
    assert _submit(second, ports, governance=governance).created is True
    assert ports["trials"].usage_items["team-nlp"]["usd#2026-12"] == Decimal("3710.73")
    cancel(second.trial_id, caller=who(NLP, governance), stopper=_stopper(ports), now=STAMP, reason="make room")
    with pytest.raises(QuotaExceeded) as raised:  # it ran, so its worst case stays booked to the month
        _submit(parse_trial({**example_trial, "name": "third"}), ports, governance=governance)
    assert [b.quota for b in raised.value.breaches] == ["usd_per_month"]
    assert ports["trials"].usage_items["team-nlp"]["active"] == 0
    per_trial = _governed(quotas={"max_usd_per_trial": "3000", "max_hours_per_trial": 8})
    with pytest.raises(QuotaExceeded) as raised:
        _submit(parse_trial({**example_trial, "name": "fourth"}), ports, governance=per_trial)
    assert [b.quota for b in raised.value.breaches] == ["max_hours_per_trial", "max_usd_per_trial"]
    assert "set limits.max_hours to at most 8" in raised.value.breaches[0].frees


def test_the_worst_case_counts_every_attempt_batch_may_make(spec: TrialSpec, ports: dict[str, Any]) -> None:
    one = obj(_submit(spec, ports, max_attempts=1).body["worst_case_usd"])["total"]
    ports = {"trials": fakes.InMemoryTrials(), "artifacts": fakes.InMemoryObjects(),
             "workflow": fakes.InMemoryWorkflow()}
    with pytest.raises(SubmissionRefused, match="limits"):  # 3 x 1,750.12 USD > limits.max_usd 4,000
        _submit(spec, ports, max_attempts=3)
    assert float(one) == pytest.approx(1750.12, abs=0.01)


def test_the_limits_a_running_trial_is_held_to_are_frozen_on_it_at_submission(
        spec: TrialSpec, ports: dict[str, Any]) -> None:
    governance = _governed(quotas={"max_usd_per_trial": "3600", "failed_retries_per_run": 0,
                                   "write_bytes_per_trial": 10**12, "write_requests_per_trial": 50_000})
    done = _submit(spec, ports, governance=governance)
    # failed_retries_per_run 0: Batch's second attempt would be stopped, so the worst case counts one attempt
    assert float(obj(done.body["worst_case_usd"])["total"]) == pytest.approx(1750.12, abs=0.01)
    item = ports["trials"].items[spec.trial_id]
    assert item["run_limits"] == {
        "max_usd": {"value": "3600", "source": "team team-nlp quota max_usd_per_trial"},  # tighter than 4,000
        "failed_retries_per_run": {"value": "0", "source": "team team-nlp quota failed_retries_per_run"},
        "write_bytes": {"value": "1000000000000", "source": "team team-nlp quota write_bytes_per_trial"},
        "write_requests": {"value": "50000", "source": "team team-nlp quota write_requests_per_trial"},
    }
    assert item["queues"] == {"gpu": "dualtrack-test-gpu-p5-48xlarge", "trn2": "dualtrack-test-trn2-trn2-48xlarge",
                              "gpu-fallback": "dualtrack-test-gpu-p5-48xlarge"}


def test_jobs_per_queue_are_a_quota_of_their_own(spec: TrialSpec, ports: dict[str, Any],
                                                example_trial: dict[str, Any]) -> None:
    governance = _governed(quotas={"concurrent_jobs_per_queue": 3})
    _submit(spec, ports, governance=governance)  # gpu and its fallback: 2 jobs on the p5 queue
    with pytest.raises(QuotaExceeded) as raised:
        _submit(parse_trial({**example_trial, "name": "second"}), ports, governance=governance)
    (breach,) = raised.value.breaches
    assert (breach.quota, breach.limit, breach.current, breach.requested) == (
        "concurrent_jobs_per_queue[dualtrack-test-gpu-p5-48xlarge]", "3", "2", "2")
    trn2_only = {k: v for k, v in example_trial["tracks"].items() if k == "trn2"}
    pilot = {**example_trial, "name": "third", "tracks": trn2_only,
             "baseline_logs_uri": "s3://example-datasets/baselines/llama-gpu.csv",
             "triage_override": {"route": "trn2_trial", "reason": "a pilot against our own GPU logs"}}
    assert _submit(parse_trial(pilot), ports, governance=governance).created is True  # another queue: room there


def test_a_trial_declaring_another_neuron_sdk_than_the_image_is_refused_naming_both(
        spec: TrialSpec, ports: dict[str, Any]) -> None:
    with pytest.raises(SubmissionRefused) as refused:
        _submit(spec, ports, image_versions={"trn2": {"neuron_sdk": "2.33.1"}})
    (error,) = arr(refused.value.detail["errors"])
    assert error["path"] == "tracks.trn2.neuron_sdk"
    assert "declares Neuron SDK 2.34.0, but this stage's Trainium2 image pins 2.33.1" in error["message"]
    assert ports["trials"].get(spec.trial_id) is None  # nothing stored, nothing started
    assert _submit(spec, ports, image_versions={"trn2": {"neuron_sdk": "2.34.0"}}).created is True


def test_a_trial_that_follows_an_earlier_one_of_the_same_model_shows_its_change_class(
        spec: TrialSpec, ports: dict[str, Any], example_trial: dict[str, Any]) -> None:
    first = _submit(spec, ports)
    assert "follows" not in first.body or first.body["follows"] is None
    rerun = parse_trial({**example_trial, "name": "lr-sweep", "learning_rate": 0.0005})
    same = _submit(rerun, ports, now=NOW + timedelta(minutes=5))
    follows = obj(same.body["follows"])
    assert follows["trial_id"] == spec.trial_id
    assert follows["same_key"] is True
    assert follows["change_classes"] == ["data or hyper-parameters"]
    longer = parse_trial({**example_trial, "name": "seq8k", "sequence_length": 8192})
    flow = obj(_submit(longer, ports, now=NOW + timedelta(minutes=10)).body["follows"])
    assert flow["trial_id"] == rerun.trial_id and flow["change_classes"] == ["training flow"]
    assert flow["components"] == ["sequence_length"]


def _with_compile_queue() -> JobTargets:
    targets = job_targets()
    for target in targets["trn2"].values():
        target["compile_queue"] = target["queue"] + "-compile"
    return parse_job_targets(targets)


def test_a_stage_with_a_compile_queue_plans_the_warm_up_compile_stage(spec: TrialSpec, ports: dict[str, Any]) -> None:
    """The compile job runs the training job's definition on the compile queue; its run has a prefix of its own, a
    timeout of its own, a place in the worst case (trn2's price for the compile timeout) and in the queue counts."""
    plain = _submit(parse_trial({**spec.model_dump(mode="json"), "name": "plain"}), ports)
    done = _submit(spec, ports, targets=_with_compile_queue(), compile_timeout_s=1800)
    payload = ports["workflow"].executions[ports["trials"].items[spec.trial_id]["execution_arn"]]["input"]
    assert payload["jobs"]["compile"] == {**payload["jobs"]["trn2"],
                                          "queue": "dualtrack-test-trn2-trn2-48xlarge-compile"}
    assert payload["run_dirs"]["trn2-compile"].endswith(f"trials/{spec.trial_id}/trn2-compile")
    assert payload["compile_timeout_s"] == 1800
    worst, before = obj(done.body["worst_case_usd"]), obj(plain.body["worst_case_usd"])
    assert "trn2-compile" in worst and "trn2-compile" not in before
    # Each attempt of the training run may take max_hours (12 h), of the compile stage its timeout (0.5 h).
    assert float(worst["trn2-compile"]) == pytest.approx(float(before["trn2"]) * 0.5 / 12, rel=1e-3)
    assert float(worst["total"]) == pytest.approx(float(before["total"]) + float(worst["trn2-compile"]), abs=0.02)
    assert ports["trials"].items[spec.trial_id]["queues"]["trn2-compile"] == "dualtrack-test-trn2-trn2-48xlarge-compile"


def test_the_compile_quota_counts_compile_jobs_across_compile_queues(spec: TrialSpec, ports: dict[str, Any],
                                                                     example_trial: dict[str, Any]) -> None:
    governance = _governed(quotas={"concurrent_compile_jobs": 1})
    _submit(spec, ports, governance=governance, targets=_with_compile_queue())
    with pytest.raises(QuotaExceeded) as raised:
        _submit(parse_trial({**example_trial, "name": "second"}), ports, governance=governance,
                targets=_with_compile_queue())
    (breach,) = raised.value.breaches
    assert (breach.quota, breach.limit, breach.current, breach.requested) == ("concurrent_compile_jobs", "1", "1", "1")
    # A stage without the compile stage asks for no compile job: the quota does not bind.
    assert _submit(parse_trial({**example_trial, "name": "third"}), ports, governance=governance).created
