"""The GPU baseline a trial declares (``lambdas.domain.baseline``): the three log formats teams have, refusals that
say what is wrong and where, and the check that the trial's GPU track reproduces the baseline before Trainium2 is
compared with it."""

from __future__ import annotations

import json
import math

import pytest

from lambdas.domain.baseline import MAX_BASELINE_BYTES, BaselineInvalid, compare, parse_baseline

TRAINER_STATE = {"global_step": 30, "log_history": [
    {"epoch": 0.1, "learning_rate": 1e-4, "loss": 2.5, "step": 10},
    {"epoch": 0.2, "loss": 2.1, "step": 20},
    {"epoch": 0.2, "eval_loss": 2.2, "eval_runtime": 3.1, "step": 20},
    {"epoch": 0.3, "loss": 1.9, "step": 30},
    {"train_runtime": 120.0, "step": 30},  # the closing entry has no loss
]}
METRICS_JSONL = "\n".join(json.dumps(r) for r in [
    {"kind": "step", "step": 10, "loss": 2.5, "step_time_s": 0.2},
    {"kind": "step", "step": 20, "loss": 2.1, "step_time_s": 0.2},
    {"kind": "eval", "step": 20, "loss": 2.2, "eval_s": 3.0},
    {"kind": "checkpoint", "step": 20, "bytes": 10},
    {"kind": "step", "step": 30, "loss": 1.9, "step_time_s": 0.2},
]) + "\n"
CSV = "step,loss,eval_loss\n10,2.5,\n20,2.1,2.2\n30,1.9,\n"


@pytest.mark.parametrize(("data", "fmt"), [(json.dumps(TRAINER_STATE).encode(), "trainer_state"),
                                           (METRICS_JSONL.encode(), "metrics_jsonl"),
                                           (CSV.encode(), "csv"),
                                           (b"\xef\xbb\xbfStep , Loss\n10,2.5\n20,2.1\n30,1.9\n", "csv")])
def test_each_format_reads_as_the_same_losses(data: bytes, fmt: str) -> None:
    baseline = parse_baseline(data, "baseline")
    assert baseline.format == fmt
    assert baseline.train == {10: 2.5, 20: 2.1, 30: 1.9}
    assert baseline.eval == ({} if b"Step , Loss" in data else {20: 2.2})


@pytest.mark.parametrize(("data", "message"), [
    (b"epoch,loss\n1,2.0\n", "needs columns step and loss"),
    (b"step,loss\n10,nan\n", "CSV line 2 loss: 'nan' is not a finite number"),
    (b"step,loss\n-5,2.0\n", "CSV line 2: step '-5' is not a non-negative whole number"),
    (json.dumps({"global_step": 3}).encode(), "without log_history"),
    (json.dumps({"log_history": [{"step": 1.5, "loss": 2.0}]}).encode(), "log_history[0]: step 1.5"),
    (b'{"kind": "step", "step": 1, "loss": 2}\n{not json\n', "metrics.jsonl line 2: not JSON"),
    (b"step,loss\n", "no loss at any step"),
    (b"\xff\xfe\x00", "not UTF-8 text"),
])
def test_a_log_that_cannot_be_read_is_refused_naming_what_and_where(data: bytes, message: str) -> None:
    with pytest.raises(BaselineInvalid) as raised:
        parse_baseline(data, "s3://data/baseline.csv")
    assert message in str(raised.value)


def test_a_log_larger_than_a_log_is_refused() -> None:
    with pytest.raises(BaselineInvalid, match="over the"):
        parse_baseline(b" " * (MAX_BASELINE_BYTES + 1))


def test_the_gpu_track_reproduces_the_baseline_within_the_trials_tolerance() -> None:
    baseline = parse_baseline(CSV.encode())
    same = compare(baseline, {10: 2.51, 20: 2.08, 30: 1.9, 40: 1.8}, {20: 2.21}, tolerance=0.05)
    assert same.reproduced is True and (same.shared_train_steps, same.shared_eval_steps) == (3, 1)
    assert math.isclose(same.max_train_delta or 0, 0.02 / 2.1)  # relative, as loss_tolerance is
    off = compare(baseline, {10: 2.5, 20: 2.1, 30: 2.2}, {}, tolerance=0.05)
    assert off.reproduced is False and "outside loss_tolerance 0.05" in off.detail
    sparse = compare(baseline, {10: 2.5, 50: 1.0}, {}, tolerance=0.05)
    assert sparse.reproduced is None and "only 1 step(s) in common" in sparse.detail
