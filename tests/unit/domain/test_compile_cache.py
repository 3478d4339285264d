"""Compile-cache keys: stable, isolated by every component, readable prefixes."""

from __future__ import annotations

import copy
import subprocess
import sys
from typing import Any

import pytest

from lambdas.domain.compile_cache import cache_key, cache_url
from lambdas.domain.trial import parse_trial


def test_key_is_stable_across_processes(example_trial: dict[str, Any]) -> None:
    key = cache_key(parse_trial(example_trial)).key
    code = ("import json;from lambdas.domain.trial import parse_trial;from lambdas.domain.compile_cache import "
            "cache_key;print(cache_key(parse_trial(json.load(open('examples/trial-llama31-8b-lora.json')))).key)")
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
        lambda d: d["tracks"]["trn2"].update(compiler_flags=["--model-type=transformer", "-O2"]),
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
