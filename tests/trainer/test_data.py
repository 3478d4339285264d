"""Tokenised fixed shapes, the seed-fixed order, and an effective batch that does not depend on the device count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from trainer.data import (
    IGNORE_INDEX,
    BatchPlan,
    DataError,
    SampleStream,
    TokenisedSet,
    encode_row,
    read_rows,
    simulated_ranks,
)
from trainer.tokenizer import ByteTokenizer

from lambdas.domain.trial.layout import gradient_accumulation_steps, track_layout
from lambdas.domain.trial.rules import parse_trial
from tests.trainer.helpers import attempt, losses

TOK = ByteTokenizer()


def test_byte_tokenizer_round_trips_utf8() -> None:
    ids = TOK.encode("héllo", bos=True, eos=True)
    assert ids[0] == TOK.bos_token_id and ids[-1] == TOK.eos_token_id
    assert TOK.decode(ids) == "héllo"


def test_prompt_tokens_and_padding_carry_no_loss() -> None:
    ids, labels = encode_row({"prompt": "ab", "completion": "c"}, TOK, 8)
    assert len(ids) == len(labels) == 8
    assert labels[:3] == [IGNORE_INDEX] * 3  # bos + 2 prompt bytes
    assert labels[3:5] == [ord("c") + 3, TOK.eos_token_id]
    assert labels[5:] == [IGNORE_INDEX] * 3 and ids[5:] == [TOK.pad_token_id] * 3
    long_ids, _ = encode_row({"text": "x" * 100}, TOK, 8)
    assert len(long_ids) == 8


def test_bad_rows_name_the_line_and_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "ok"}\n{"question": "no"}\n')
    with pytest.raises(DataError, match=r"line 2: a row needs a 'text' field"):
        read_rows(str(path))


def test_order_is_fixed_by_the_seed_and_positions_do_not_overlap() -> None:
    data = TokenisedSet.build([{"text": str(i)} for i in range(10)], TOK, 8)
    a, b = SampleStream(data, seed=5), SampleStream(data, seed=5)
    assert a.indices(0, 25) == b.indices(0, 25)
    assert sorted(a.indices(0, 10)) == list(range(10))  # an epoch is a permutation
    assert a.indices(0, 25)[12:20] == a.indices(12, 8)  # resuming at a position continues the same stream
    assert SampleStream(data, seed=6).indices(0, 10) != a.indices(0, 10)


def test_ranks_share_the_global_batch_exactly() -> None:
    plan = BatchPlan(micro_batch_size=2, data_parallel=2, accumulation=2)
    ids = torch.arange(8 * 4).reshape(8, 4)
    shares = [plan.micro_batches(ids, ids, process=r, processes=2) for r in range(2)]
    seen = sorted(int(row[0]) for share in shares for chunk, _ in share for row in chunk)
    assert seen == sorted(int(row[0]) for row in ids) and len(shares[0]) == plan.accumulation


def _rows(share: list[tuple[torch.Tensor, torch.Tensor]]) -> list[int]:
    return [int(row[0]) for chunk, _ in share for row in chunk]


@pytest.mark.parametrize("processes", [1, 2, 4, 8, 16])
def test_processes_together_run_every_data_parallel_rank_once(processes: int) -> None:
    plan = BatchPlan(micro_batch_size=2, data_parallel=16, accumulation=3)
    ids = torch.arange(plan.global_batch).reshape(-1, 1)
    everything = _rows(plan.micro_batches(ids, ids))
    assert sorted(everything) == list(range(plan.global_batch))
    shares = [_rows(plan.micro_batches(ids, ids, process=r, processes=processes)) for r in range(processes)]
    union = [row for share in shares for row in share]
    assert len(union) == len(set(union)) and sorted(union) == sorted(everything)
    assert all(len(share) == plan.global_batch // processes for share in shares)
    # Strided: process r simulates data-parallel ranks r, r + N, ...
    ranks = [simulated_ranks(16, processes, r) for r in range(processes)]
    assert ranks[0] == list(range(0, 16, processes)) and sorted(r for share in ranks for r in share) == list(range(16))


@pytest.mark.parametrize("processes", [3, 5, 6, 7, 12])
def test_a_process_count_that_does_not_divide_the_data_parallel_ranks_is_refused(processes: int) -> None:
    plan = BatchPlan(micro_batch_size=1, data_parallel=16, accumulation=1)
    ids = torch.arange(16).reshape(-1, 1)
    with pytest.raises(DataError, match=f"{processes} processes cannot share 16 data-parallel ranks"):
        plan.micro_batches(ids, ids, process=0, processes=processes)


def test_model_parallel_processes_beyond_the_data_parallel_ranks_train_nothing_of_their_own() -> None:
    # One process per device, tensor parallel 8 of 64 cores: 8 data-parallel ranks among 64 processes.
    assert [simulated_ranks(8, 64, r) for r in (0, 7, 8, 63)] == [[0], [7], [], []]
    with pytest.raises(DataError, match="multiple of 8"):
        simulated_ranks(8, 12, 0)


def test_a_run_refuses_a_process_count_its_layout_cannot_share(write_spec, tmp_path: Path, monkeypatch) -> None:
    from trainer import runner
    from trainer.distributed import Distributed

    tracks = {"gpu": {"instance_type": "p5.48xlarge", "nodes": 2, "tensor_parallel": 1, "pipeline_parallel": 1}}
    spec = write_spec(tracks=tracks, effective_batch_size=16, micro_batch_size=1, fault_injection=None)
    monkeypatch.setattr(runner.Distributed, "from_env", classmethod(lambda cls, backend: Distributed(0, 3)))
    code, summary = attempt(spec, str(tmp_path / "run"))
    assert code != 0 and summary["status"] == "failed"
    assert "p5.48xlarge x 2 node(s)" in summary["error"] and "data_parallel 16" in summary["error"]
    assert "3 processes cannot share 16" in summary["error"]
    assert summary["layout"]["world_size_run"] == 3 and summary["layout"]["data_parallel"] == 16
    assert summary["steps_this_attempt"] == 0


@pytest.mark.parametrize(("tp", "mbs", "dp", "accumulation"), [(1, 1, 8, 1), (2, 1, 4, 2), (8, 2, 1, 4)])
def test_effective_batch_is_the_same_whatever_the_layout(example_trial, tp, mbs, dp, accumulation) -> None:
    example_trial["tracks"].pop("trn2")
    example_trial.pop("fault_injection")
    example_trial["effective_batch_size"] = 8
    example_trial["micro_batch_size"] = mbs
    example_trial["tracks"]["gpu"]["tensor_parallel"] = tp
    spec = parse_trial(example_trial)
    layout = track_layout(spec, "gpu")
    assert (layout.data_parallel, gradient_accumulation_steps(spec, layout)) == (dp, accumulation)
    plan = BatchPlan(mbs, layout.data_parallel, gradient_accumulation_steps(spec, layout))
    assert plan.global_batch == spec.effective_batch_size


@pytest.mark.slow
def test_training_is_layout_independent(write_spec, tmp_path: Path) -> None:
    """8 ranks x 1 sample (trn2, tp 8 of 64 cores) and 1 rank x 4 micro-batches of 2 (gpu, tp 8 of 8 GPUs) train
    the same global batches to the same losses."""
    spec_path = Path(write_spec(max_steps=3, checkpoint_interval_steps=3, fault_injection=None))
    trial = json.loads(spec_path.read_text())
    trial["evaluation"]["interval_steps"] = 3
    trial["tracks"]["gpu"]["tensor_parallel"] = 8
    trial["micro_batch_size"] = 1
    spec_path.write_text(json.dumps(trial))
    _, trn2 = attempt(str(spec_path), str(tmp_path / "trn2"), track="trn2")
    trial["micro_batch_size"] = 2
    trial["tracks"].pop("trn2")  # 2-sample micro-batches do not fit its 8 data-parallel ranks
    spec_path.write_text(json.dumps(trial))
    _, gpu = attempt(str(spec_path), str(tmp_path / "gpu"), track="gpu")
    assert (trn2["layout"]["data_parallel"], trn2["layout"]["gradient_accumulation_steps"]) == (8, 1)
    assert (gpu["layout"]["data_parallel"], gpu["layout"]["gradient_accumulation_steps"]) == (1, 4)
    assert trn2["samples_consumed"] == gpu["samples_consumed"] == 24
    a, b = losses(trn2), losses(gpu)
    assert a.keys() == b.keys()
    assert all(a[s] == pytest.approx(b[s], rel=1e-5) for s in a)
