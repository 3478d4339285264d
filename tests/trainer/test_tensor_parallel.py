"""Tensor parallelism (``trainer.tensor_parallel``, DTensor's ``parallelize_module``): a layout's tensor_parallel
groups each hold one replica of the model, its projections split over the group's processes. A trn2.3xlarge layout
(4 logical NeuronCores, tensor_parallel 2) on CPU processes reproduces one process's losses: two processes (one
group, LoRA) and four (two groups under FSDP2, full-parameter); the checkpoint they write is layout-free, so fewer
processes resume it with the same losses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer.conftest import ROOT
from tests.trainer.helpers import launched, losses, run_error, summary_of

STEPS = 8
TRACKS = {"gpu": {"instance_type": "g6e.12xlarge", "nodes": 1, "tensor_parallel": 2, "pipeline_parallel": 1},
          "trn2": {"instance_type": "trn2.3xlarge", "nodes": 1, "tensor_parallel": 2, "pipeline_parallel": 1,
                   "neuron_sdk": "2.33.0"}}
LORA = {"rank": 4, "alpha": 8, "dropout": 0.0,
        "target_modules": ["q_proj", "v_proj", "o_proj", "gate_proj", "down_proj"]}
COMMON = {"max_steps": STEPS, "checkpoint_interval_steps": 4, "tracks": TRACKS,
          "evaluation": {"interval_steps": STEPS, "prompts": ["What is 2 plus 3?"], "max_new_tokens": 2},
          "fault_injection": {"track": "trn2", "at_step": 6, "mode": "retryable"}}


# ---- which processes form which groups ---------------------------------------------------------------------


@pytest.mark.parametrize(("processes", "tensor", "data", "expected"), [
    (64, 8, 8, 8),  # one process per logical NeuronCore of a trn2.48xlarge: eight groups of eight
    (4, 2, 2, 2),  # the test layout below
    (2, 2, 2, 2),  # one group simulating both data-parallel ranks
    (1, 8, 8, 1),  # the stand-in's single process: whole replicas
    (2, 8, 8, 1),  # too few processes for one group
    (12, 2, 4, 1),  # six groups cannot share four data-parallel ranks
    (8, 1, 8, 1),
])
def test_processes_form_tensor_parallel_groups_only_when_they_can(processes: int, tensor: int, data: int,
                                                                  expected: int) -> None:
    from trainer.tensor_parallel import degree

    assert degree(processes, tensor, data) == expected


def _lora_llama(heads: int = 8, kv_heads: int = 4) -> torch.nn.Module:
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=heads, num_key_value_heads=kv_heads)
    return get_peft_model(LlamaForCausalLM(config), LoraConfig(r=4, target_modules=["q_proj", "o_proj"]))


def test_the_plan_splits_projections_and_lora_to_match_its_base_layer() -> None:
    """Column-wise q/k/v/gate/up, row-wise o/down; LoRA's lora_B follows a column-wise base, lora_A a row-wise
    one, and the other factor stays whole (the styles of ``torch.distributed.tensor.parallel``)."""
    from trainer.tensor_parallel import plan

    layout = plan(_lora_llama())
    attn, mlp = "base_model.model.model.layers.0.self_attn", "base_model.model.model.layers.0.mlp"
    assert layout[f"{attn}.q_proj.base_layer"] == layout[f"{attn}.q_proj.lora_B.default"] == "colwise"
    assert f"{attn}.q_proj.lora_A.default" not in layout
    assert layout[f"{attn}.o_proj.base_layer"] == layout[f"{attn}.o_proj.lora_A.default"] == "rowwise"
    assert f"{attn}.o_proj.lora_B.default" not in layout
    assert layout[f"{attn}.k_proj"] == layout[f"{mlp}.up_proj"] == "colwise" and layout[f"{mlp}.down_proj"] == "rowwise"
    assert not any("norm" in name or "embed" in name or "lm_head" in name for name in layout)


def test_a_model_whose_heads_do_not_split_is_refused_naming_the_field() -> None:
    from trainer.tensor_parallel import TensorParallelError, check_model

    with pytest.raises(TensorParallelError, match=r"num_key_value_heads \(2\).*use tensor_parallel in \[1, 2\]"):
        check_model(_lora_llama(heads=4, kv_heads=2), 4)


# ---- four processes, then two, then one --------------------------------------------------------------------


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tp-data")
    (out / "train.jsonl").write_text("\n".join((ROOT / "examples/data/train.jsonl").read_text().splitlines()[:96])
                                     + "\n")
    (out / "validation.jsonl").write_text(
        "\n".join((ROOT / "examples/data/validation.jsonl").read_text().splitlines()[:8]) + "\n")
    return out


def _spec(base: Path, data: Path, method: str) -> str:
    from tests.trainer.conftest import tiny_trial

    extra = {"method": "full", "lora": None} if method == "full" else {"lora": LORA}
    spec = base / f"{method}.json"
    spec.write_text(json.dumps(tiny_trial(str(data), **{**COMMON, **extra})))
    return str(spec)


def _both_attempts(spec: str, run_dir: Path, first: int, second: int) -> tuple[dict[str, Any], dict[str, Any]]:
    faulted = launched(spec, run_dir, first, 1, "trn2")
    assert faulted.returncode != 0 and summary_of(run_dir, 1)["status"] == "faulted", run_error(run_dir, 1)
    resumed = launched(spec, run_dir, second, 2, "trn2")
    assert resumed.returncode == 0, (run_error(run_dir, 2), resumed.stderr[-2000:])
    return summary_of(run_dir, 1), summary_of(run_dir, 2)


def _like(reference: tuple[dict[str, Any], dict[str, Any]], run: tuple[dict[str, Any], dict[str, Any]]) -> None:
    expected = {**losses(reference[0]), **losses(reference[1])}
    got = {**losses(run[0]), **losses(run[1])}
    assert sorted(got) == list(range(1, STEPS + 1))
    for step, value in expected.items():
        assert got[step] == pytest.approx(value, abs=1e-5), (step, value, got[step])
    assert run[1]["resumed_from_step"] == 4 and run[1]["continuity"]["loss_continuous"] is True
    assert run[1]["final_samples"] == reference[1]["final_samples"]


@pytest.mark.slow
@pytest.mark.parametrize(("method", "processes", "sharding", "resume_processes"), [
    ("lora", 2, "tensor-parallel", 1),  # one group of two: DTensor alone
    ("full", 4, "fsdp2", 2),  # two groups of two: FSDP2 over "dp", DTensor over "tp"
    ("lora", 4, "fsdp2", 1),  # the same with the base weights frozen
])
def test_split_processes_train_like_one(method: str, processes: int, sharding: str, resume_processes: int,
                                        tmp_path: Path, data: Path) -> None:
    spec = _spec(tmp_path, data, method)
    reference = _both_attempts(spec, tmp_path / "one", 1, 1)
    split = _both_attempts(spec, tmp_path / "split", processes, resume_processes)
    first = split[0]
    assert first["layout"]["world_size_run"] == processes and first["layout"]["tensor_parallel_run"] == 2
    assert first["layout"]["model_parallel_run"] is True and first["optimizer"]["sharding"] == sharding
    # The loss sum (and FSDP2's collectives) are timed; the tensor-parallel all-reduces inside DTensor's forward and
    # backward are named as untimed.
    communication = first["communication"]
    assert communication["measured"] is True and communication["untimed"] == [
        "tensor-parallel all-reduces inside DTensor's forward and backward"]
    assert split[1]["layout"]["tensor_parallel_run"] == (2 if resume_processes == 2 else 1)
    # Process 0 reads its share of each DTensor for the learning record, and counts the whole model's parameters.
    for one, shared in zip(reference, split, strict=True):
        assert shared["learning"]["weights_changed"] and shared["learning"]["steps"] == one["learning"]["steps"]
        assert shared["learning"]["trainable_params"] == one["learning"]["trainable_params"]
    _like(reference, split)
    # The checkpoint is layout-free: the weights a plain loader opens are whole, and every process wrote its share
    # of the split (DTensor) optimizer state.
    step_dir = tmp_path / "split" / "checkpoints" / "step-4"
    manifest = json.loads((step_dir / "manifest.json").read_text())
    sizes = {f["name"]: f["bytes"] for f in manifest["shards"] if f["name"].endswith(".distcp")}
    assert sorted(name for name, size in sizes.items() if size > 0) == [f"__{r}_0.distcp" for r in range(processes)]
    from safetensors.torch import load_file

    weights = load_file(str(step_dir / ("model.safetensors" if method == "full" else "adapter_model.safetensors")))
    q = next(v for k, v in weights.items() if "q_proj" in k and ("lora_B" in k or method == "full"))
    assert q.shape[0] == 32  # eight heads of four: whole, not a slice
