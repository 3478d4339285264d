"""The GPU baseline a trial declares (``lambdas.domain.evidence.baseline``): the three log formats teams have,
refusals that say what is wrong and where, and the check that the trial's GPU track reproduces the baseline before
Trainium2 is compared with it."""

from __future__ import annotations

import json
import math

import pytest

from lambdas.domain.evidence.baseline import (
    MAX_BASELINE_BYTES,
    BaselineInvalid,
    baseline_refusal,
    compare,
    parse_baseline,
)

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


def test_step_time_throughput_and_memory_are_read_where_a_log_carries_them() -> None:
    """The Trainer's closing log_history entry, the trainer's own step and phases records (the names
    containers/trainer/metrics.py writes) and a CSV's optional columns; a figure a log lacks stays None."""
    closing = {"epoch": 1.0, "step": 30, "total_flos": 1e15, "train_loss": 2.2, "train_runtime": 120.0,
               "train_samples_per_second": 16.0, "train_steps_per_second": 0.25}
    state = json.loads(json.dumps(TRAINER_STATE))
    state["log_history"][-1] = closing  # the Trainer's own closing entry in place of the fixture's
    trainer = parse_baseline(json.dumps(state).encode())
    assert trainer.train == {10: 2.5, 20: 2.1, 30: 1.9}  # the closing train_loss is no step's loss
    assert (trainer.step_time_s, trainer.samples_per_s, trainer.tokens_per_s, trainer.memory_mib) == (
        4.0, 16.0, None, None)
    assert trainer.throughput_basis.startswith("1 / train_steps_per_second")
    runtime_only = parse_baseline(json.dumps(TRAINER_STATE).encode())
    assert runtime_only.step_time_s == 4.0 and "train_runtime over its 30 steps" in runtime_only.throughput_basis

    jsonl = "\n".join(json.dumps(r) for r in [
        {"kind": "step", "step": 1, "loss": 2.5, "step_time_s": 9.0, "tokens": 4096, "samples": 2},  # compile
        {"kind": "step", "step": 2, "loss": 2.1, "step_time_s": 0.5, "tokens": 4096, "samples": 2},
        {"kind": "step", "step": 3, "loss": 1.9, "step_time_s": 0.5, "tokens": 4096, "samples": 2},
        {"kind": "phases", "train_s": 10.0, "memory_peak_mib": 30000.5},
    ]).encode()
    mine = parse_baseline(jsonl)
    assert mine.step_time_s == 0.5  # the median: the compile step does not move it
    assert mine.tokens_per_s == 3 * 4096 / 10.0 and mine.samples_per_s == 0.6 and mine.memory_mib == 30000.5

    table = parse_baseline(b"step,loss,Step_Time_S,tokens_per_s,memory_mib\n1,2.5,0.3,900,100\n2,2.1,0.2,1000,\n"
                           b"3,1.9,0.2,1100,120\n")
    assert (table.step_time_s, table.tokens_per_s, table.memory_mib) == (0.2, 1000.0, 120.0)

    plain = parse_baseline(CSV.encode())
    assert (plain.step_time_s, plain.tokens_per_s, plain.samples_per_s, plain.memory_mib) == (None,) * 4
    assert plain.throughput_basis == ""
    with pytest.raises(BaselineInvalid, match="CSV line 2 step_time_s: '-1' is negative"):
        parse_baseline(b"step,loss,step_time_s\n1,2.5,-1\n")


# ---- where a baseline may be read from ---------------------------------------------------------------------------
ROOT = "s3://artifacts/"
TEAMS = {"nlp-earlier-0123456789": "team-nlp", "vision-run-0123456789": "team-vision"}


@pytest.mark.parametrize("uri", ["s3://artifacts/trials/nlp-earlier-0123456789/gpu/attempt-1/metrics.jsonl",
                                 "s3://example-datasets/baselines/llama-gpu.csv",  # a data bucket: shared
                                 "s3://artifacts-archive/trials/vision-run-0123456789/x.csv"])  # not the bucket
def test_a_baseline_of_the_teams_own_trial_or_outside_the_artifacts_bucket_is_allowed(uri: str) -> None:
    """The artifacts bucket's trials/ holds every team's trials: one of the team's own is allowed there; the data
    buckets are shared by the stage's teams (governance gives a team no buckets of its own), and another bucket is
    the readability check's to refuse."""
    assert baseline_refusal(uri, "team-nlp", artifacts_root=ROOT, team_of=TEAMS.get) is None


@pytest.mark.parametrize("uri", ["s3://artifacts/trials/vision-run-0123456789/gpu/attempt-1/metrics.jsonl",
                                 "s3://artifacts/trials/no-such-trial-0123456789/gpu/metrics.jsonl",
                                 "s3://artifacts/trials/nlp-earlier-0123456789/../vision-run-0123456789/m.csv",
                                 "s3://artifacts/trials/nlp-earlier-0123456789",
                                 "s3://artifacts/reports/2026-12/cost.json"])
def test_a_baseline_in_another_teams_trial_or_elsewhere_in_the_artifacts_bucket_is_refused(uri: str) -> None:
    """Another team's trial, a trial that does not exist (the same answer, so a refusal never tells which trial
    ids exist), a '..' segment, or a key outside trials/<trial_id>/: refused, naming the allowed locations."""
    refusal = baseline_refusal(uri, "team-nlp", artifacts_root=ROOT, team_of=TEAMS.get,
                               data_buckets=["example-datasets"])
    assert refusal is not None and refusal.startswith(uri)
    assert "the stage's data buckets (s3://example-datasets/), which its teams share" in refusal
    assert "team team-nlp's own trials (s3://artifacts/trials/<trial_id>/...)" in refusal
    assert "team-vision" not in refusal
