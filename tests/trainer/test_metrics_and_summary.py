"""CloudWatch publishing off the hot path (moto), progress lines, and the summary the cost Lambdas read."""

from __future__ import annotations

import io
import json
from pathlib import Path

import boto3
import pytest
import torch
from moto import mock_aws
from trainer.learning import fingerprint, learning_record
from trainer.metrics import CloudWatchPublisher, MetricsLog, Progress, publishing_enabled
from trainer.summary import MAX_STEP_TIMES, WARMUP_STEPS, steady_step_times

from lambdas.domain.evidence.run_summary import RunSummary, parse_summary
from lambdas.domain.money.ledger import summary_entry
from lambdas.domain.report.records import _merged_loss
from tests.json_access import obj
from tests.trainer.helpers import attempt


def test_publisher_batches_metrics_with_trial_run_attempt_dimensions() -> None:
    with mock_aws():
        publisher = CloudWatchPublisher("trial-1", "trn2", 2, flush_every=5)
        log = MetricsLog(publisher)
        for step in range(1, 4):
            log.step(step, 2.0 / step, 0.1, 512, 8, 1e-3)
        log.final({"compile_s": 3.0, "train_s": 1.0}, 100.0, "miss")
        publisher.close()
        assert not publisher.errors and publisher.sent == 12 + 7 + 3
        metrics = boto3.client("cloudwatch").list_metrics(Namespace="Dualtrack")["Metrics"]
        names = {m["MetricName"] for m in metrics}
        assert {"Loss", "GlobalStep", "CompileSeconds", "TrainSeconds", "CompileCacheMisses"} <= names
        dims = {d["Name"]: d["Value"] for d in metrics[0]["Dimensions"]}
        assert dims == {"TrialId": "trial-1", "Run": "trn2", "Attempt": "2"}


def test_publishing_is_off_when_asked_or_without_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DUALTRACK_METRICS", "off")
    assert not publishing_enabled()
    monkeypatch.setenv("DUALTRACK_METRICS", "on")
    assert publishing_enabled()
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert not publishing_enabled()


def test_progress_lines_are_json() -> None:
    out = io.StringIO()
    Progress(out).emit("step", step=3, loss=1.5)
    assert json.loads(out.getvalue()) == {"event": "step", "step": 3, "loss": 1.5}


def test_summary_accepts_compact_loss_points_and_rejects_local_times() -> None:
    base = {"trial_id": "t", "track": "gpu", "run": "gpu", "attempt": 1, "backend": "cpu", "stand_in": True,
            "precision": "fp32", "status": "succeeded", "exit_code": 0, "global_step": 2, "max_steps": 2,
            "start_step": 0, "environment": {"python": "3.11", "torch": "2", "hostname": "h"},
            "started_at": "2026-01-01T00:00:00Z", "ended_at": "2026-01-01T00:01:00Z",
            "loss": {"per_step": [[1, 2.0], [2, 1.5]], "eval": [[2, 1.7]]}}
    summary = RunSummary.model_validate(base)
    assert summary.loss.per_step[1].step == 2 and summary.loss.eval[0].loss == 1.7
    with pytest.raises(ValueError, match="UTC"):
        RunSummary.model_validate({**base, "ended_at": "2026-01-01T00:01:00+02:00"})


@pytest.mark.slow
def test_a_real_summary_feeds_the_ledger_and_report(write_spec, tmp_path: Path) -> None:
    code, raw = attempt(write_spec(max_steps=4, checkpoint_interval_steps=2, fault_injection=None,
                                   evaluation={"interval_steps": 2, "prompts": [], "max_new_tokens": 1}),
                        str(tmp_path / "gpu"))
    summary = parse_summary(raw)
    assert code == 0 and summary.exit_code == 0
    plain = summary.model_dump(mode="json")
    assert _merged_loss([summary]) == [(p.step, p.loss) for p in summary.loss.per_step]
    entry = summary_entry("t", "gpu", 1, plain)
    assert obj(entry.body["phases"])["train_s"] == summary.phases.train_s and entry.body["global_step"] == 4
    metrics = [json.loads(line) for line in (tmp_path / "gpu" / "attempt-1" / "metrics.jsonl").read_text()
               .splitlines()]
    assert [m["step"] for m in metrics if m["kind"] == "step"] == [1, 2, 3, 4]
    assert {m["kind"] for m in metrics} == {"step", "eval", "checkpoint", "phases"}
    # Steps 2-4 were timed (step 1 compiles); the first two of them are warm-up: one steady-state sample.
    step_times = [m["step_time_s"] for m in metrics if m["kind"] == "step"][1:]
    assert summary.throughput.step_times_s == pytest.approx(step_times[WARMUP_STEPS:], abs=1e-4)
    assert len(summary.throughput.step_times_s) == 1


def test_steady_step_times_leave_out_warm_up_and_stay_bounded() -> None:
    assert steady_step_times([0.5, 0.2, 0.1, 0.1, 0.1]) == [0.1, 0.1, 0.1]
    assert steady_step_times([0.3]) == []
    many = steady_step_times([0.1] * (MAX_STEP_TIMES * 3 + 7))
    assert 0 < len(many) <= MAX_STEP_TIMES


def test_the_learning_record_tells_moved_weights_from_frozen_ones() -> None:
    """Only the trainable parameters are read (a LoRA model's frozen base is not), and a tensor counts as changed
    when its sum or norm moved; one that did not, or a weight whose update was below its bf16 resolution, did not."""
    base, head = torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)
    model = torch.nn.Sequential(base, head)
    base.requires_grad_(False)  # frozen, as peft leaves a LoRA model's base weights
    trainable = [p for p in model.parameters() if p.requires_grad]
    before = fingerprint(trainable)
    with torch.no_grad():
        base.weight.add_(1.0)  # a frozen weight moving is not learning
    unchanged = learning_record(before, fingerprint(trainable), steps=5)
    assert unchanged["weights_changed"] is False and unchanged["tensors_changed"] == 0
    assert unchanged["trainable_params"] == 4 * 2 + 2 and unchanged["trainable_tensors"] == 2
    assert unchanged["norm_start"] == unchanged["norm_end"]

    with torch.no_grad():
        head.bias.add_(1e-3)
    moved = learning_record(before, fingerprint(trainable), steps=5)
    assert moved["weights_changed"] is True and moved["tensors_changed"] == 1 and moved["steps"] == 5

    weight = torch.nn.Parameter(torch.ones(8, dtype=torch.bfloat16))
    start = fingerprint([weight])
    with torch.no_grad():
        weight.add_(1e-4)  # below bf16's resolution at 1.0: the stored weight does not change
    assert learning_record(start, fingerprint([weight]), steps=1)["weights_changed"] is False
    assert learning_record(fingerprint([]), fingerprint([]), steps=0)["weights_changed"] is False
