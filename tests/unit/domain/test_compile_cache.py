"""Compile-cache keys: stable, isolated by every component, readable prefixes."""

from __future__ import annotations

import copy
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lambdas.domain.cache.compile_cache import cache_key, cache_url, explain
from lambdas.domain.trial.rules import parse_trial


def test_key_is_stable_across_processes(example_trial: dict[str, Any]) -> None:
    key = cache_key(parse_trial(example_trial)).key
    code = ("import json;from lambdas.domain.trial.rules import parse_trial;"
            "from lambdas.domain.cache.compile_cache import cache_key;"
            "print(cache_key(parse_trial(json.load(open('examples/trial-llama31-8b-lora.json')))).key)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": ""}, cwd=str(__import__("pathlib").Path(
                             __file__).resolve().parents[3]))
    assert out.stdout.strip() == key


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d["model"].update(revision="v2"),
        lambda d: d["model"].update(id="meta-llama/Llama-3.1-70B"),
        lambda d: d.update(sequence_length=2048),
        lambda d: d.update(micro_batch_size=2, effective_batch_size=128),
        lambda d: d["tracks"]["trn2"].update(tensor_parallel=16, nodes=1),
        lambda d: d["tracks"]["trn2"].update(nodes=2, tensor_parallel=8),  # data parallel changes
        lambda d: d["tracks"]["trn2"].update(neuron_sdk="2.27.0"),
        lambda d: d["tracks"]["trn2"].update(compiler_flags=["--model-type=transformer", "--optlevel=2"]),
        lambda d: d["tracks"]["trn2"].update(compiler_flags=[]),
        lambda d: d["tracks"]["trn2"].update(logical_nc_config=1),
        lambda d: d.update(precision="fp32"),
        lambda d: d["tracks"]["trn2"].update(instance_type="trn2u.48xlarge"),
        lambda d: d["lora"].update(rank=8),
    ],
)
def test_any_component_change_gives_a_new_key(example_trial: dict[str, Any], mutate: Any) -> None:
    base = cache_key(parse_trial(example_trial)).key
    changed = copy.deepcopy(example_trial)
    mutate(changed)
    if changed.get("effective_batch_size", 0) % 16 == 0 and changed["tracks"]["trn2"].get("nodes") == 2:
        changed["effective_batch_size"] = 128
    assert cache_key(parse_trial(changed)).key != base


def test_changes_outside_the_graph_keep_the_key(example_trial: dict[str, Any]) -> None:
    base = cache_key(parse_trial(example_trial)).key
    changed = copy.deepcopy(example_trial)
    changed.update(max_steps=2000, learning_rate=0.001, seed=7, owner="team-b")
    assert cache_key(parse_trial(changed)).key == base


def test_environment_versions_enter_the_key_and_prefix(example_trial: dict[str, Any]) -> None:
    spec = parse_trial(example_trial)
    pinned = cache_key(spec, {"neuronx_cc": "2.21.18209.0", "torch_neuronx": "2.8.0.2.10"})
    assert pinned.key != cache_key(spec).key
    assert pinned.prefix.startswith("neuron/meta-llama-llama-3.1-8b-main/2.21.18209.0/")
    assert cache_url("cache-bkt", pinned) == f"s3://cache-bkt/{pinned.prefix}"


def test_no_trn2_track_has_no_key(example_trial: dict[str, Any]) -> None:
    example_trial["tracks"].pop("trn2")
    example_trial.pop("fault_injection")
    with pytest.raises(ValueError, match="trn2 track"):
        cache_key(parse_trial(example_trial))


def _rehearsal_trial() -> dict[str, Any]:
    import json
    from pathlib import Path

    return json.loads((Path(__file__).resolve().parents[3] / "examples" / "trial-rehearsal.json").read_text())


@settings(max_examples=40, deadline=None)
@given(field=st.sampled_from(["hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
                              "vocab_size"]),
       bump=st.integers(min_value=1, max_value=4))
def test_the_model_architecture_is_in_the_key(field: str, bump: int) -> None:
    """Changing hidden_size or the number of layers is a new graph: it must never hit the old entry."""
    base = _rehearsal_trial()
    changed = copy.deepcopy(base)
    config = changed["model"].setdefault("config", {})
    value = parse_trial(base, allow_local_paths=True).model.config
    assert value is not None
    current = getattr(value, field)
    config[field] = current * (bump + 1) if field != "num_attention_heads" else current // 2 or 1
    if field == "num_attention_heads":
        config["num_key_value_heads"] = config[field]
    try:
        other = parse_trial(changed, allow_local_paths=True)
    except Exception:
        return
    original = parse_trial(base, allow_local_paths=True)
    assert other.model.config != original.model.config
    assert cache_key(other).key != cache_key(original).key
    assert explain(original, other).change_classes[0] == "model structure or operators"


def test_one_trial_under_two_images_gets_two_entries(example_trial: dict[str, Any]) -> None:
    spec = parse_trial(example_trial)
    old = cache_key(spec, {"neuronx_cc": "2.20.1", "torch_neuronx": "2.7.0.2.9", "neuron_runtime": "2.27.23"})
    new = cache_key(spec, {"neuronx_cc": "2.21.18", "torch_neuronx": "2.7.0.2.9", "neuron_runtime": "2.27.23"})
    assert old.key != new.key and old.prefix != new.prefix
    assert old.prefix.split("/")[2] == "2.20.1" and new.prefix.split("/")[2] == "2.21.18"
    diff = explain(spec, spec, {"neuronx_cc": "2.20.1"}, {"neuronx_cc": "2.21.18"})
    assert [d.component for d in diff.differences] == ["neuronx_cc"]
    assert diff.change_classes == ["compiler environment"]


def test_explain_classifies_each_change_by_the_documents_classes(example_trial: dict[str, Any]) -> None:
    base = parse_trial(example_trial)
    same = parse_trial({**example_trial, "learning_rate": 0.0003, "max_steps": 2000})
    assert explain(base, same).same_key and explain(base, same).change_classes == ["data or hyper-parameters"]
    longer = parse_trial({**example_trial, "sequence_length": 8192})
    flow = explain(base, longer)
    assert not flow.same_key and flow.change_classes == ["training flow"]
    assert "re-verify compile artefacts and memory bounds" in flow.meaning[0]
    kernels = parse_trial({**example_trial, "workload": {**example_trial["workload"], "custom_cuda_ops": True}})
    assert "low-level extensions" in explain(base, kernels).change_classes


def test_a_trn2_scaling_run_has_its_own_key(example_trial: dict[str, Any]) -> None:
    """A scaling run (``trn2-n1``) trains at its own node count: its data-parallel degree, and so its graphs and its
    key, differ from the main run's; the main run's key is the same asked for by name or not."""
    raw = copy.deepcopy(example_trial)
    raw["tracks"]["trn2"]["nodes"] = [1, 2]
    raw["tracks"]["trn2"]["tensor_parallel"] = 8
    raw["effective_batch_size"] = raw["micro_batch_size"] * 16
    spec = parse_trial(raw)
    main, scaled = cache_key(spec), cache_key(spec, run="trn2-n1")
    assert cache_key(spec, run="trn2") == main
    assert scaled.key != main.key
    main_dp = main.components["data_parallel"]
    assert isinstance(main_dp, int)
    assert scaled.components["data_parallel"] == main_dp // 2
