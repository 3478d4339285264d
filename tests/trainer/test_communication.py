"""Collective timings in the run summary: zeros / None for one process, measured for several."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lambdas.domain.evidence.run_summary import CommunicationRecord, parse_summary
from tests.trainer.helpers import attempt


def test_a_single_process_calls_no_collective_and_records_zeros(write_spec: Any, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed as dist

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    called: list[str] = []
    for name in ("all_reduce", "all_gather", "barrier"):
        monkeypatch.setattr(dist, name, lambda *a, _n=name, **k: called.append(_n))
    spec = write_spec(max_steps=3, checkpoint_interval_steps=3, fault_injection=None,
                      evaluation={"interval_steps": 3, "prompts": [], "max_new_tokens": 1})
    code, summary = attempt(spec, str(tmp_path / "run"))
    assert code == 0 and called == []
    assert summary["layout"]["world_size_run"] == 1
    comm = summary["communication"]
    assert comm["world_size"] == 1 and comm["communication_s"] == 0.0 and comm["communication_share"] == 0.0
    assert comm["communication_per_step_s"] is None
    assert comm["sync_wait_median_s"] is None and comm["sync_wait_max_s"] is None and comm["sync_samples"] == 0
    opt = summary["optimizer"]
    assert opt == {"name": "adamw", "learning_rate": 0.01, "weight_decay": 0.0, "grad_clip_norm": 1.0,
                   "lr_schedule": "linear warmup, then linear decay", "warmup_steps": 1, "final_lr_factor": 0.1,
                   "sharding": "replicated"}


def test_summaries_written_before_the_communication_fields_still_parse(write_spec: Any, tmp_path: Path) -> None:
    import json

    spec = write_spec(max_steps=2, checkpoint_interval_steps=2, fault_injection=None,
                      evaluation={"interval_steps": 2, "prompts": [], "max_new_tokens": 1})
    _, summary = attempt(spec, str(tmp_path / "run"))
    summary.pop("communication")
    summary.pop("optimizer")
    old = parse_summary(json.dumps(summary))
    assert old.communication == CommunicationRecord() and old.optimizer is None


def test_collective_stats_summarise_time_and_skew() -> None:
    from trainer.distributed import CollectiveStats
    from trainer.summary import _communication

    stats = CollectiveStats(sample_every=2)
    stats.communication_s, stats.steps, stats.skews = 0.5, 4, [0.01, 0.03]
    record = stats.record(world_size=2)
    assert record["communication_per_step_s"] == pytest.approx(0.125)
    assert record["sync_wait_median_s"] == pytest.approx(0.02) and record["sync_wait_max_s"] == pytest.approx(0.03)
    assert record["sync_samples"] == 2 and record["sync_sample_every"] == 2

    class Inputs:
        world_size_run, communication, step_times, first_step_s = 2, record, [1.0, 1.0, 1.0], 1.0

    out = _communication(Inputs())  # type: ignore[arg-type]
    assert dict(out)["communication_share"] == pytest.approx(0.125)
    CommunicationRecord.model_validate(out)


def test_the_summary_records_the_process_group_the_collectives_ran_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Several processes: the ``communication`` block names the torch.distributed backend of the training group
    (gloo on the CPU stand-in); a single process has none."""
    import torch.distributed as dist
    from trainer.backends import make_backend
    from trainer.distributed import Distributed
    from trainer.summary import _communication

    backend = make_backend("cpu", "fp32")
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert Distributed.from_env(backend).communication() is None
    # A one-rank gloo group stands for the group torchrun forms (from_env joins a group already formed).
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        monkeypatch.setenv("WORLD_SIZE", "2")
        group = Distributed.from_env(backend)
        record = group.communication()
        assert record is not None and record["process_group"] == "gloo"

        class Inputs:
            world_size_run, communication, step_times, first_step_s = 2, record, [1.0], 1.0

        parsed = CommunicationRecord.model_validate(_communication(Inputs()))  # type: ignore[arg-type]
        assert parsed.process_group == "gloo"
    finally:
        dist.destroy_process_group()
