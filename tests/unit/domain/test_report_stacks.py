"""The report names the stack each track trained on and warns when the tracks ran different PyTorch versions."""

from __future__ import annotations

from lambdas.domain.report.records import stack_label, torch_mismatch
from lambdas.domain.vocabulary import XLA_LABEL


def test_each_backend_is_named_and_the_retired_path_is_labelled() -> None:
    assert stack_label("xla") == XLA_LABEL == "PyTorch/XLA (end of support for training)"
    assert stack_label("neuron", "2.14.3.0") == "TorchNeuron 2.14.3.0"
    assert stack_label("cuda") == "CUDA" and stack_label("compiled") == "CPU stand-in (torch.compile)"
    assert stack_label(None) is None


def test_a_pytorch_minor_version_mismatch_is_a_caveat_and_a_build_suffix_is_not() -> None:
    same = {"gpu": "2.14.0+cu130", "trn2": "2.14.0"}
    assert torch_mismatch(same) is None
    different = {"gpu": "2.13.0+cu128", "trn2": "2.14.0"}
    caveat = torch_mismatch(different)
    assert caveat is not None and "gpu 2.13.0+cu128" in caveat and "trn2 2.14.0" in caveat
    assert torch_mismatch({"gpu": None, "trn2": "2.14.0"}) is None
