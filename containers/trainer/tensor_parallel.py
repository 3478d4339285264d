"""Tensor parallelism for the Llama-class model with DTensor's ``parallelize_module``: each group of
``tensor_parallel`` processes (the ``"tp"`` dimension of the run's device mesh) holds one replica of the model, every
decoder layer's projections split over the group. The same code runs on both tracks (gloo on the CPU stand-ins,
NCCL on CUDA, the ``neuron`` process group on Trainium2, where TorchNeuron supports DTensor's column- and row-wise
styles).

``q_proj``, ``k_proj``, ``v_proj``, ``gate_proj`` and ``up_proj`` are ``ColwiseParallel`` (each process keeps a
slice of the output features: whole attention heads, a slice of the MLP), ``o_proj`` and ``down_proj``
``RowwiseParallel`` (a slice of the input features; the partial products are summed over the group). Embeddings,
norms and the head stay whole, and every process of a group computes the same loss. The communication is DTensor's
own: the all-reduce of a column-parallel input's gradient in the backward, and of a row-parallel output in the
forward.

LoRA adapters (peft) follow their base layer: on a column-parallel projection ``lora_A`` stays whole and ``lora_B``
is column-parallel, on a row-parallel one ``lora_A`` is row-parallel and ``lora_B`` stays whole. A split
parameter becomes a DTensor under its own name (the optimizer's state for it is a DTensor too), so checkpoints,
written with ``torch.distributed.checkpoint``, stay layout-free: any world size and layout resumes them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from lambdas.domain.trial.layout import tensor_parallel_problems

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

COLUMN = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
ROW = ("o_proj", "down_proj")


class TensorParallelError(ValueError):
    pass


def degree(processes: int, tensor_parallel: int, data_parallel: int) -> int:
    """The tensor-parallel degree ``processes`` run a layout with: ``tensor_parallel`` when they form whole groups
    that share the data-parallel ranks evenly (one process per device, or a multiple of the group on a stand-in),
    else 1 (a stand-in with fewer processes runs whole replicas, each simulating data-parallel ranks)."""
    if tensor_parallel > 1 and processes % tensor_parallel == 0 and data_parallel % (processes // tensor_parallel) == 0:
        return tensor_parallel
    return 1


def check_model(model: torch.nn.Module, size: int) -> None:
    """Refuse a ``tensor_parallel`` the model's heads or MLP cannot be split by, naming the config field."""
    config = getattr(model, "config", None)
    if config is None:
        return
    problems = tensor_parallel_problems(size, num_attention_heads=config.num_attention_heads,
                                        num_key_value_heads=config.num_key_value_heads,
                                        intermediate_size=config.intermediate_size)
    if problems:
        raise TensorParallelError("; ".join(f"model.config.{name}: {text}" for name, text in problems))


def plan(model: torch.nn.Module) -> dict[str, str]:
    """Which linear (by module name) is split how: ``"colwise"`` or ``"rowwise"``; an unnamed one stays whole."""
    out: dict[str, str] = {}
    names = {id(module): name for name, module in model.named_modules()}
    for layer in decoder_layers(model):
        for name, module in layer.named_modules():
            leaf = name.rpartition(".")[2]
            if leaf not in COLUMN + ROW:
                continue
            style = "colwise" if leaf in COLUMN else "rowwise"
            base = getattr(module, "base_layer", None)
            if base is not None:  # peft's LoRA layer around the projection
                out[names[id(base)]] = style
                adapters = module.lora_B if style == "colwise" else module.lora_A  # type: ignore[union-attr]
                for adapter in adapters.values():  # type: ignore[operator]
                    out[names[id(adapter)]] = style
            elif isinstance(module, torch.nn.Linear):
                out[names[id(module)]] = style
    if not out:
        raise TensorParallelError("found no q/k/v/o or MLP projections to split in the model's decoder layers")
    return out


def parallelize(model: torch.nn.Module, mesh: DeviceMesh) -> dict[str, str]:
    """Split ``model`` (peft-wrapped or not) over the 1-D tensor-parallel ``mesh``, in place; returns the plan."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    check_model(model, mesh.size())
    layout = plan(model)
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    parallelize_module(model, mesh, {name: styles[style]() for name, style in layout.items()})
    return layout


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    for module in model.modules():
        layers = getattr(module, "layers", None)
        if isinstance(layers, torch.nn.ModuleList) and len(layers) and hasattr(layers[0], "self_attn"):
            return list(layers)
    raise TensorParallelError(f"cannot find the decoder layers of {type(model).__name__} to split or shard")
