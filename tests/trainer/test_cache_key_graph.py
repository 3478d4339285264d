"""Every trial field that changes the graph the Trainium2 track compiles changes its compile-cache key.

The graph is what ``torch.compile`` hands its backend (TorchNeuron's ``neuron`` backend on Trainium2, Inductor in
the stand-in): the model the trainer builds from the spec (``trainer.modeling.build_model``), captured by a backend
that records the FX graph instead of compiling it, under the autocast the precision asks for. Two graphs are the
same when every node has the same operation, the same arguments (constants such as the dropout probability, the
LoRA scaling and the embedding's padding index are arguments) and values of the same shapes and dtypes. A field
whose change gives another graph must give another key, or a compiled graph would be served for a graph it is not.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from lambdas.domain.cache.compile_cache import cache_key
from lambdas.domain.trial.rules import parse_trial

ROOT = Path(__file__).resolve().parents[2]
Signature = tuple[tuple[str, ...], ...]


def _base() -> dict[str, Any]:
    spec = json.loads((ROOT / "examples" / "trial-rehearsal.json").read_text())
    spec["model"]["config"] = {"vocab_size": 264, "hidden_size": 16, "intermediate_size": 16,
                               "num_hidden_layers": 1, "num_attention_heads": 8, "num_key_value_heads": 8}
    spec.update(sequence_length=8, micro_batch_size=1, effective_batch_size=8)
    return spec


def _name(target: Any) -> str:
    if isinstance(target, str):
        return target
    return f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', type(target).__name__)}"


def _arg(value: Any) -> str:
    if isinstance(value, torch.fx.Node):
        return value.name
    if isinstance(value, tuple | list):
        return "(" + ",".join(_arg(v) for v in value) + ")"
    return _name(value) if callable(value) else repr(value)


def graph_of(document: dict[str, Any]) -> Signature:
    """The training forward's graph as torch.compile captures it from the model the trainer builds."""
    from trainer.modeling import build_model, build_tokenizer

    spec = parse_trial(document, allow_local_paths=True)
    model = build_model(spec, build_tokenizer(spec))
    captured: list[torch.fx.GraphModule] = []

    def capture(gm: torch.fx.GraphModule, example_inputs: Any) -> Callable[..., Any]:
        captured.append(gm)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(model, backend=capture, fullgraph=True, dynamic=False)
    ids = torch.zeros(spec.micro_batch_size, spec.sequence_length, dtype=torch.long)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=spec.precision == "bf16"):
        compiled(input_ids=ids)
    (graph,) = captured
    nodes = []
    for node in graph.graph.nodes:
        value = node.meta.get("example_value")
        shape = (str(tuple(value.shape)), str(value.dtype)) if isinstance(value, torch.Tensor) else ("", "")
        nodes.append((node.op, _name(node.target), _arg(node.args), _arg(sorted(node.kwargs.items())), *shape))
    return tuple(nodes)


def _saved_tokenizer(directory: Path) -> str:
    """A tokenizer saved the way ``model.tokenizer`` names one (a directory), with a pad id the byte one lacks."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i + 3 for i in range(40)}, "<pad>": 43}
    core = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                            pad_token="<pad>").save_pretrained(str(directory))
    return str(directory)


def _full(d: dict[str, Any]) -> None:
    d.update(method="full")
    d.pop("lora")


CHANGES: dict[str, Callable[[dict[str, Any], Path], None]] = {
    "lora.dropout 0 -> 0.1": lambda d, _: d["lora"].update(dropout=0.1),
    "lora.alpha": lambda d, _: d["lora"].update(alpha=32),
    "lora.rank": lambda d, _: d["lora"].update(rank=4),
    "lora.target_modules": lambda d, _: d["lora"].update(target_modules=["q_proj", "v_proj"]),
    "sequence_length": lambda d, _: d.update(sequence_length=16),
    "micro_batch_size": lambda d, _: d.update(micro_batch_size=2, effective_batch_size=16),
    "precision": lambda d, _: d.update(precision="fp32"),
    "method": lambda d, _: _full(d),
    "model.config": lambda d, _: d["model"]["config"].update(intermediate_size=32),
    "model.tokenizer": lambda d, tmp: d["model"].update(tokenizer=_saved_tokenizer(tmp / "tokenizer")),
}


@pytest.fixture(scope="module")
def base_graph() -> Signature:
    return graph_of(_base())


@pytest.mark.parametrize("field", sorted(CHANGES))
def test_a_field_that_changes_the_graph_changes_the_key(field: str, base_graph: Signature, tmp_path: Path) -> None:
    changed = copy.deepcopy(_base())
    CHANGES[field](changed, tmp_path)
    assert graph_of(changed) != base_graph, f"{field}: expected another graph; the comparison sees none"
    base_key = cache_key(parse_trial(_base(), allow_local_paths=True)).key
    assert cache_key(parse_trial(changed, allow_local_paths=True)).key != base_key, (
        f"{field} changes the compiled graph but not the compile-cache key: the old entry would be served")


def test_fields_outside_the_graph_keep_graph_and_key(base_graph: Signature) -> None:
    """The comparison is not blind: what only feeds the optimizer, the data order or the step count traces the same
    graph, and keeps the key."""
    changed = {**copy.deepcopy(_base()), "learning_rate": 0.01, "seed": 7, "max_steps": 60}
    assert graph_of(changed) == base_graph
    assert (cache_key(parse_trial(changed, allow_local_paths=True)).key
            == cache_key(parse_trial(_base(), allow_local_paths=True)).key)
