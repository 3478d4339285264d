"""Tensor parallelism for the Llama-class model, Megatron style: each group of ``tensor_parallel`` processes holds one
replica of the model, every decoder layer's projections split over the group.

``q_proj``, ``k_proj``, ``v_proj``, ``gate_proj`` and ``up_proj`` are column-parallel (each process keeps a slice of
the output features: whole attention heads, a slice of the MLP), ``o_proj`` and ``down_proj`` row-parallel (a slice
of the input features; the partial products are summed over the group). Embeddings, norms and the head stay
replicated, and every process of a group computes the same loss. Two autograd operators carry the communication:
``copy`` (identity forward, gradient summed over the group backward) in front of every column-parallel product,
and ``reduce`` (sum over the group forward, identity backward) after every row-parallel one.

LoRA adapters (peft) are split to match their base layer: on a column-parallel layer ``lora_A`` stays whole and
``lora_B`` is column-parallel, on a row-parallel one ``lora_A`` is row-parallel and ``lora_B`` stays whole. Every
replicated parameter then gets the same, whole gradient on each process of a group, and every split one its own
slice's, so the data-parallel reduction runs over the processes holding the same slice (``Groups.data``).

The split is made in place (a module's class becomes its parallel subclass, its weight the process's slice), so
parameter names and the optimizer's references stay valid. Checkpoints stay layout-free: ``Sharding.whole``
gathers the slices for a save and re-slices what a load wrote, so any world size and layout resumes from them.

The communication runs over ``torch.distributed`` groups (gloo on the CPU stand-ins, NCCL on CUDA). On Trainium2
the same operators come from neuronx-distributed (``neuronx_distributed.parallel_layers``: its model-parallel
state and its tensor-parallel mappings), which the Neuron image carries; without it, torch-xla's collectives over
replica groups are used.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from lambdas.domain.trial import tensor_parallel_problems

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


# ---- the two operators -------------------------------------------------------------------------------------


class _Copy(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, comm: Collectives) -> torch.Tensor:  # type: ignore[override]
        ctx.comm = comm
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        return ctx.comm.all_reduce(grad), None


class _Reduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, comm: Collectives) -> torch.Tensor:  # type: ignore[override]
        return comm.all_reduce(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        return grad, None


class Collectives:
    """Sum and gather over this process's tensor-parallel group (``torch.distributed``), timed as communication."""

    def __init__(self, group: Any, size: int, rank: int, stats: Any = None):
        self.group, self.size, self.rank, self.stats = group, size, rank, stats

    def copy(self, x: torch.Tensor) -> torch.Tensor:
        return _Copy.apply(x, self)  # type: ignore[no-any-return]

    def reduce(self, x: torch.Tensor) -> torch.Tensor:
        return _Reduce.apply(x, self)  # type: ignore[no-any-return]

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        out = x.contiguous().clone()
        started = self.stats.start() if self.stats is not None else None
        dist.all_reduce(out, op=dist.ReduceOp.SUM, group=self.group)
        if self.stats is not None:
            self.stats.stop(started)
        return out

    def all_gather(self, x: torch.Tensor, dim: int) -> torch.Tensor:
        import torch.distributed as dist

        parts = [torch.empty_like(x) for _ in range(self.size)]
        dist.all_gather(parts, x.contiguous(), group=self.group)
        return torch.cat(parts, dim=dim)


class XlaCollectives(Collectives):
    """torch-xla's collectives over replica groups (XLA has no host clock for them: nothing is timed)."""

    def __init__(self, groups: list[list[int]], size: int, rank: int):
        super().__init__(None, size, rank)
        import torch_xla.core.xla_model as xm

        self.xm, self.groups = xm, groups

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        return self.xm.all_reduce(self.xm.REDUCE_SUM, x, groups=self.groups)  # type: ignore[no-any-return]

    def all_gather(self, x: torch.Tensor, dim: int) -> torch.Tensor:
        return self.xm.all_gather(x.contiguous(), dim=dim, groups=self.groups)  # type: ignore[no-any-return]


class NxdCollectives(XlaCollectives):
    """neuronx-distributed's tensor-parallel mappings (on Trainium2, after its model-parallel state is set up)."""

    def __init__(self, groups: list[list[int]], size: int, rank: int, mappings: Any):
        super().__init__(groups, size, rank)
        self.mappings = mappings

    def copy(self, x: torch.Tensor) -> torch.Tensor:
        return self.mappings.copy_to_tensor_model_parallel_region(x)  # type: ignore[no-any-return]

    def reduce(self, x: torch.Tensor) -> torch.Tensor:
        return self.mappings.reduce_from_tensor_model_parallel_region(x)  # type: ignore[no-any-return]


# ---- the parallel linears ----------------------------------------------------------------------------------


class ColumnParallelLinear(torch.nn.Linear):
    """A slice of the output features; the input is whole, its gradient summed over the group."""

    comm: Collectives

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self.comm.copy(x), self.weight, self.bias)


class RowParallelLinear(torch.nn.Linear):
    """A slice of the input features; the partial products are summed over the group, then the bias added."""

    comm: Collectives

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.comm.reduce(F.linear(x, self.weight))
        return out if self.bias is None else out + self.bias


# ---- groups and the split ----------------------------------------------------------------------------------


@dataclass
class Groups:
    """How ``processes`` split into tensor-parallel groups of ``size`` consecutive processes. Process ``r`` holds
    slice ``r % size`` of replica ``r // size``; the data-parallel group is the processes holding the same slice."""

    size: int
    rank: int  # this process's slice
    replica: int  # this process's replica (its data-parallel index)
    replicas: int
    tensor: Any = None  # torch.distributed group of this process's replica (None: no such group)
    data: Any = None  # torch.distributed group of the processes holding this slice (None: the whole world)
    tensor_lists: list[list[int]] = field(default_factory=list)
    data_lists: list[list[int]] = field(default_factory=list)

    @classmethod
    def layout(cls, processes: int, rank: int, size: int) -> Groups:
        replicas = processes // size
        return cls(size=size, rank=rank % size, replica=rank // size, replicas=replicas,
                   tensor_lists=[[r * size + t for t in range(size)] for r in range(replicas)],
                   data_lists=[[r * size + t for r in range(replicas)] for t in range(size)])

    def data_rank(self, replica: int) -> int:
        """The global rank of ``replica``'s process holding this process's slice."""
        return replica * self.size + self.rank


def make_groups(processes: int, rank: int, size: int, process_group: str) -> tuple[Groups, Collectives | None]:
    """Create the groups (collective: every process calls it, in the same order) and the tensor-parallel
    collectives (None when ``size`` is 1)."""
    groups = Groups.layout(processes, rank, size)
    if size == 1:
        return groups, None
    if process_group == "xla":
        return groups, _xla_collectives(groups)
    import torch.distributed as dist

    for members in groups.data_lists:
        group = dist.new_group(members)
        if rank in members:
            groups.data = group
    for members in groups.tensor_lists:
        group = dist.new_group(members)
        if rank in members:
            groups.tensor = group
    return groups, Collectives(groups.tensor, size, groups.rank)


def _xla_collectives(groups: Groups) -> Collectives:
    try:
        from neuronx_distributed.parallel_layers import mappings, parallel_state
    except ImportError:
        return XlaCollectives(groups.tensor_lists, groups.size, groups.rank)
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=groups.size)
    nxd_tensor = parallel_state.get_tensor_model_parallel_group(as_list=True)
    if [list(g) for g in nxd_tensor] != groups.tensor_lists:
        raise TensorParallelError(f"neuronx-distributed's tensor-parallel groups {nxd_tensor} are not the "
                                  f"trainer's {groups.tensor_lists}")
    return NxdCollectives(groups.tensor_lists, groups.size, groups.rank, mappings)


@dataclass
class Sharding:
    """Which parameters (by name) are split, along which dimension, and how to make them whole again."""

    comm: Collectives
    dims: dict[str, int]  # parameter name -> the dimension it is split along

    @property
    def size(self) -> int:
        return self.comm.size

    def is_split(self, name: str) -> bool:
        return name in self.dims

    def gather(self, name: str, value: torch.Tensor) -> torch.Tensor:
        """The whole tensor of a split parameter (or of its optimizer state), from every process's slice."""
        return self.comm.all_gather(value, self.dims[name]) if name in self.dims else value

    def slice(self, name: str, whole: torch.Tensor) -> torch.Tensor:
        """This process's slice of ``whole`` (a split parameter's shape), or ``whole`` for a replicated one."""
        if name not in self.dims:
            return whole
        dim = self.dims[name]
        width = whole.shape[dim] // self.size
        return whole.narrow(dim, self.comm.rank * width, width).contiguous()

    @contextlib.contextmanager
    def whole(self, model: torch.nn.Module, names: Iterable[str], *, gather: bool = True) -> Iterator[None]:
        """Within the block the split parameters among ``names`` hold whole tensors (gathered, or zeros to load
        into when ``gather`` is False); on the way out each keeps its slice of whatever they hold then."""
        params = dict(model.named_parameters())
        local: dict[str, torch.Tensor] = {}
        with torch.no_grad():
            for name in sorted(set(names) & set(self.dims)):
                param = params[name]
                local[name] = param.data
                if gather:
                    param.data = self.gather(name, param.data)
                else:
                    shape = list(param.shape)
                    shape[self.dims[name]] *= self.size
                    param.data = torch.zeros(shape, dtype=param.dtype, device=param.device)
        try:
            yield
        finally:
            with torch.no_grad():
                for name, mine in local.items():
                    mine.copy_(self.slice(name, params[name].data))
                    params[name].data = mine

    def clip_grad_norm_(self, params: list[tuple[str, torch.nn.Parameter]], max_norm: float) -> torch.Tensor:
        """``torch.nn.utils.clip_grad_norm_`` over the whole model: the split gradients' squares summed over the
        group, the replicated ones (the same on every process) counted once."""
        device = next((p.grad.device for _, p in params if p.grad is not None), torch.device("cpu"))
        split = torch.zeros((), dtype=torch.float32, device=device)
        replicated = torch.zeros((), dtype=torch.float32, device=device)
        for name, p in params:
            if p.grad is None:
                continue
            square = p.grad.detach().float().pow(2).sum()
            if name in self.dims:
                split = split + square
            else:
                replicated = replicated + square
        total = (self.comm.all_reduce(split) + replicated).sqrt()
        scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        for _, p in params:
            if p.grad is not None:
                p.grad.detach().mul_(scale.to(p.grad.dtype))
        return total


def _split_linear(module: torch.nn.Linear, cls: type[torch.nn.Linear], dim: int, comm: Collectives) -> None:
    size, rank = comm.size, comm.rank
    width = module.weight.shape[dim]
    if width % size:
        raise TensorParallelError(f"{module} has {width} features along dimension {dim}, which "
                                  f"tensor_parallel {size} cannot split evenly")
    part = width // size
    with torch.no_grad():
        module.weight = torch.nn.Parameter(module.weight.narrow(dim, rank * part, part).clone(),
                                           requires_grad=module.weight.requires_grad)
        if module.bias is not None and dim == 0:
            module.bias = torch.nn.Parameter(module.bias.narrow(0, rank * part, part).clone(),
                                             requires_grad=module.bias.requires_grad)
    if dim == 0:
        module.out_features = part
    else:
        module.in_features = part
    module.__class__ = cls
    module.comm = comm  # type: ignore[assignment]


def split_model(model: torch.nn.Module, comm: Collectives) -> Sharding:
    """Split every decoder layer's projections of ``model`` (peft-wrapped or not) over the group, in place."""
    layers = _decoder_layers(model)
    config = getattr(model, "config", None)
    if config is not None:
        problems = tensor_parallel_problems(comm.size, num_attention_heads=config.num_attention_heads,
                                         num_key_value_heads=config.num_key_value_heads,
                                         intermediate_size=config.intermediate_size)
        if problems:
            raise TensorParallelError("; ".join(f"model.config.{field_}: {text}" for field_, text in problems))
    dims: dict[str, int] = {}
    prefix = {id(module): name for name, module in model.named_modules()}
    for layer in layers:
        for name, module in layer.named_modules():
            leaf = name.rpartition(".")[2]
            if leaf not in COLUMN + ROW:
                continue
            column = leaf in COLUMN
            base = getattr(module, "base_layer", None)
            targets: list[tuple[torch.nn.Linear, bool]]  # (linear, split it as the layer's kind)
            if base is not None:  # peft's LoRA layer around the projection
                targets = [(base, True)]
                for adapter in module.lora_A.values():  # type: ignore[union-attr,operator]
                    targets.append((adapter, not column))
                for adapter in module.lora_B.values():  # type: ignore[union-attr,operator]
                    targets.append((adapter, column))
            elif isinstance(module, torch.nn.Linear):
                targets = [(module, True)]
            else:
                continue
            for linear, split in targets:
                if not split:
                    continue
                dim = 0 if column else 1
                _split_linear(linear, ColumnParallelLinear if column else RowParallelLinear, dim, comm)
                owner = prefix[id(linear)]
                dims[f"{owner}.weight"] = dim
                if linear.bias is not None and column:
                    dims[f"{owner}.bias"] = 0
    if not dims:
        raise TensorParallelError("found no q/k/v/o or MLP projections to split in the model's decoder layers")
    return Sharding(comm, dims)


def _decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    for module in model.modules():
        layers = getattr(module, "layers", None)
        if isinstance(layers, torch.nn.ModuleList) and len(layers) and hasattr(layers[0], "self_attn"):
            return list(layers)
    raise TensorParallelError(f"cannot find the decoder layers of {type(model).__name__} to split")
