"""Tensor parallelism (``trainer.tensor_parallel``): a layout's tensor_parallel groups each hold one replica of the
model, its projections split over the group's processes. Four CPU processes run a trn2.3xlarge layout (4 logical
NeuronCores, tensor_parallel 2: two replicas of two processes) and reproduce one process's losses; the checkpoint
they write keeps every tensor whole, so 2 processes (one replica) or 1 process resume it with the same losses."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer.conftest import ROOT
from tests.trainer.helpers import launched, losses, run_error, summary_of

STEPS = 8
TRACKS = {"gpu": {"instance_type": "g6e.12xlarge", "nodes": 1, "tensor_parallel": 2, "pipeline_parallel": 1},
          "trn2": {"instance_type": "trn2.3xlarge", "nodes": 1, "tensor_parallel": 2, "pipeline_parallel": 1,
                   "neuron_sdk": "2.26.0"}}
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


def test_groups_are_consecutive_processes_and_data_groups_hold_the_same_slice() -> None:
    from trainer.tensor_parallel import Groups

    groups = Groups.layout(8, rank=5, size=4)
    assert (groups.rank, groups.replica, groups.replicas) == (1, 1, 2)
    assert groups.tensor_lists == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert groups.data_lists == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert groups.data_rank(0) == 1  # replica 0's process holding slice 1


class _LocalComm:
    """A group of ``size`` simulated in one process: only what splitting the model needs."""

    def __init__(self, size: int, rank: int):
        self.size, self.rank, self.stats = size, rank, None


def test_the_split_keeps_names_and_cuts_lora_to_match_its_base_layer() -> None:
    from peft import LoraConfig, get_peft_model
    from trainer.tensor_parallel import ColumnParallelLinear, RowParallelLinear, split_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=8, num_key_value_heads=4)
    model = get_peft_model(LlamaForCausalLM(config), LoraConfig(r=4, target_modules=["q_proj", "o_proj"]))
    whole = {n: p.detach().clone() for n, p in model.named_parameters()}
    sharding = split_model(model, _LocalComm(2, 1))  # type: ignore[arg-type]
    params = dict(model.named_parameters())
    assert set(params) == set(whole)  # the optimizer and checkpoints see the same names
    attn = model.base_model.model.model.layers[0].self_attn
    assert isinstance(attn.q_proj.base_layer, ColumnParallelLinear)
    assert isinstance(attn.o_proj.base_layer, RowParallelLinear)
    assert isinstance(attn.q_proj.lora_B["default"], ColumnParallelLinear)  # lora_A stays whole
    assert type(attn.q_proj.lora_A["default"]) is torch.nn.Linear
    assert isinstance(attn.o_proj.lora_A["default"], RowParallelLinear)  # lora_B stays whole
    assert type(attn.o_proj.lora_B["default"]) is torch.nn.Linear
    q = "base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight"
    o = "base_model.model.model.layers.0.self_attn.o_proj.lora_A.default.weight"
    # Process 1 of 2 holds the second half: q's output features (heads 4..7), o's adapter input features.
    assert torch.equal(params[q], whole[q][16:]) and sharding.dims[q] == 0
    assert torch.equal(params[o], whole[o][:, 16:]) and sharding.dims[o] == 1
    assert sharding.slice(q, whole[q]).shape == (16, 32)
    norm = "base_model.model.model.norm.weight"
    assert not sharding.is_split(norm) and torch.equal(params[norm], whole[norm])


def test_a_model_whose_heads_do_not_split_is_refused_naming_the_field() -> None:
    from trainer.tensor_parallel import TensorParallelError, split_model
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=4, num_key_value_heads=2))
    with pytest.raises(TensorParallelError, match=r"num_key_value_heads \(2\).*use tensor_parallel in \[1, 2\]"):
        split_model(model, _LocalComm(4, 0))  # type: ignore[arg-type]


def test_on_trainium_the_operators_come_from_neuronx_distributed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Neuron image carries neuronx-distributed: its model-parallel state is set up with the trainer's group
    size, its groups must be the trainer's, and its tensor-parallel mappings carry the communication. (A seam:
    neuronx-distributed and torch-xla are not installable here; these stand in for their modules.)"""
    from trainer.tensor_parallel import NxdCollectives, TensorParallelError, make_groups

    calls: dict[str, Any] = {}
    state = types.SimpleNamespace(
        model_parallel_is_initialized=lambda: False,
        initialize_model_parallel=lambda **kw: calls.update(kw),
        get_tensor_model_parallel_group=lambda as_list=False: [[0, 1, 2, 3], [4, 5, 6, 7]])
    mappings = types.SimpleNamespace(copy_to_tensor_model_parallel_region=lambda x: ("copy", x),
                                     reduce_from_tensor_model_parallel_region=lambda x: ("reduce", x))
    layers = types.ModuleType("neuronx_distributed.parallel_layers")
    layers.mappings, layers.parallel_state = mappings, state  # type: ignore[attr-defined]
    xla_model = types.ModuleType("torch_xla.core.xla_model")
    xla_model.REDUCE_SUM = "sum"  # type: ignore[attr-defined]
    for name, module in {"neuronx_distributed": types.ModuleType("neuronx_distributed"),
                         "neuronx_distributed.parallel_layers": layers,
                         "torch_xla": types.ModuleType("torch_xla"),
                         "torch_xla.core": types.ModuleType("torch_xla.core"),
                         "torch_xla.core.xla_model": xla_model}.items():
        monkeypatch.setitem(sys.modules, name, module)

    groups, comm = make_groups(8, 6, 4, "xla")
    assert calls == {"tensor_model_parallel_size": 4}
    assert isinstance(comm, NxdCollectives) and (groups.rank, groups.replica) == (2, 1)
    assert comm.copy("x") == ("copy", "x") and comm.reduce("y") == ("reduce", "y")  # type: ignore[arg-type]
    state.get_tensor_model_parallel_group = lambda as_list=False: [[0, 2, 4, 6], [1, 3, 5, 7]]
    with pytest.raises(TensorParallelError, match="not the trainer's"):
        make_groups(8, 6, 4, "xla")


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
@pytest.mark.parametrize(("method", "sharding", "resume_processes"), [("lora", "replicated", 2),
                                                                      ("full", "zero-1", 1)])
def test_four_processes_split_the_model_and_train_like_one(method: str, sharding: str, resume_processes: int,
                                                           tmp_path: Path, data: Path) -> None:
    spec = _spec(tmp_path, data, method)
    reference = _both_attempts(spec, tmp_path / "one", 1, 1)
    split = _both_attempts(spec, tmp_path / "split", 4, resume_processes)
    first = split[0]
    assert first["layout"]["world_size_run"] == 4 and first["layout"]["tensor_parallel_run"] == 2
    assert first["layout"]["model_parallel_run"] is True and first["optimizer"]["sharding"] == sharding
    # The group's sums (forward and backward) and the data-parallel sum are timed as communication.
    assert first["communication"]["measured"] is True and first["communication"]["communication_s"] > 0
    assert split[1]["layout"]["tensor_parallel_run"] == (2 if resume_processes == 2 else 1)
    _like(reference, split)
    # The checkpoint keeps every tensor whole: the weights a plain loader opens, the optimizer state written by the
    # first process of each group (replicated LoRA state: by process 0 alone).
    step_dir = tmp_path / "split" / "checkpoints" / "step-4"
    manifest = json.loads((step_dir / "manifest.json").read_text())
    sizes = {f["name"]: f["bytes"] for f in manifest["shards"] if f["name"].endswith(".distcp")}
    writers = sorted(name for name, size in sizes.items() if size > 0)
    assert writers == (["__0_0.distcp", "__2_0.distcp"] if sharding == "zero-1" else ["__0_0.distcp"])
    from safetensors.torch import load_file

    weights = load_file(str(step_dir / ("model.safetensors" if method == "full" else "adapter_model.safetensors")))
    q = next(v for k, v in weights.items() if "q_proj" in k and ("lora_B" in k or method == "full"))
    assert q.shape[0] == 32  # eight heads of four: whole, not a slice
