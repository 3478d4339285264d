"""What the trial spec asks of the model and the loop reaches the trainer (or is recorded where it cannot)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from lambdas.domain.trial.rules import parse_trial


def _model(write_spec: Any, dropout: float) -> torch.nn.Module:
    from trainer.modeling import build_model, build_tokenizer

    lora = {"rank": 4, "alpha": 8, "dropout": dropout, "target_modules": ["q_proj", "v_proj"]}
    spec = parse_trial(Path(write_spec(lora=lora)).read_text(), allow_local_paths=True)
    return build_model(spec, build_tokenizer(spec))


def _lora_dropouts(model: torch.nn.Module) -> list[torch.nn.Module]:
    return [m for name, m in model.named_modules() if ".lora_dropout." in name]


def test_lora_dropout_comes_from_the_spec(write_spec: Any) -> None:
    model = _model(write_spec, 0.25)
    found = _lora_dropouts(model)
    assert len(found) == 2  # q_proj and v_proj of the one layer
    assert all(isinstance(m, torch.nn.Dropout) and m.p == pytest.approx(0.25) for m in found)
    from peft import LoraConfig, PeftModel

    assert isinstance(model, PeftModel)
    config = model.peft_config["default"]
    assert isinstance(config, LoraConfig) and config.lora_dropout == pytest.approx(0.25)


def test_zero_lora_dropout_is_the_identity(write_spec: Any) -> None:
    found = _lora_dropouts(_model(write_spec, 0.0))
    assert found and all(isinstance(m, torch.nn.Identity) for m in found)


def test_the_logical_neuroncore_size_reaches_the_neuron_runtime(write_spec: Any) -> None:
    from trainer.runner import neuron_environment

    # LNC 1: 128 logical NeuronCores; tensor_parallel 8 leaves 16 data-parallel ranks.
    trn2 = {"instance_type": "trn2.48xlarge", "nodes": 1, "tensor_parallel": 8, "pipeline_parallel": 1,
            "neuron_sdk": "2.26.0", "logical_nc_config": 1}
    spec = parse_trial(Path(write_spec(tracks={"trn2": trn2}, fault_injection=None,
                                       effective_batch_size=16)).read_text(), allow_local_paths=True)
    assert neuron_environment(spec, "trn2", "neuron") == {"NEURON_LOGICAL_NC_CONFIG": "1"}
    assert neuron_environment(spec, "trn2", "cpu") == {} and neuron_environment(spec, "gpu", "neuron") == {}
