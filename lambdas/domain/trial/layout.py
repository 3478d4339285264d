"""A track's parallel layout: devices per node, the data/tensor-parallel split of its world and the gradient
accumulation that keeps the effective batch per optimizer step the same at every node count."""

from __future__ import annotations

from dataclasses import dataclass

from lambdas.domain.trial.catalogue import InstanceCatalogue, load_catalogue
from lambdas.domain.trial.spec import GpuTrack, TrackName, TrialSpec, Trn2Track


@dataclass(frozen=True)
class Layout:
    """How one track's devices are split. `devices_per_node` = GPUs, or logical NeuronCores for Trainium2."""

    devices_per_node: int
    nodes: int
    tensor_parallel: int
    pipeline_parallel: int

    @property
    def world_size(self) -> int:
        return self.devices_per_node * self.nodes

    @property
    def model_parallel(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel

    @property
    def data_parallel(self) -> int:
        return self.world_size // self.model_parallel


def devices_per_node(track: GpuTrack | Trn2Track, catalogue: InstanceCatalogue) -> int:
    info = catalogue.get(track.instance_type)
    if isinstance(track, Trn2Track):
        return info.logical_neuron_cores(track.logical_nc_config)
    return info.accelerators


def track_layout(spec: TrialSpec, name: TrackName, catalogue: InstanceCatalogue | None = None,
                 run: str | None = None) -> Layout:
    """The track's layout, for ``run`` when given (a scaling run has its own node count)."""
    track = spec.run_track(run) if run is not None else spec.track(name)
    cat = catalogue or load_catalogue()
    return Layout(devices_per_node(track, cat), track.nodes, track.tensor_parallel, track.pipeline_parallel)


def tensor_parallel_problems(tensor_parallel: int, *, num_attention_heads: int, num_key_value_heads: int,
                             intermediate_size: int) -> list[tuple[str, str]]:
    """(model config field, message) for each dimension ``tensor_parallel`` cannot split evenly: the trainer splits
    whole attention and key/value heads and the MLP's intermediate features over a tensor-parallel group."""
    out = []
    for name, value in (("num_attention_heads", num_attention_heads), ("num_key_value_heads", num_key_value_heads),
                        ("intermediate_size", intermediate_size)):
        if value % tensor_parallel:
            fits = [d for d in range(1, tensor_parallel + 1) if value % d == 0]
            out.append((name, f"tensor_parallel {tensor_parallel} must divide the model's {name} ({value}) to "
                              f"split it evenly; use tensor_parallel in {fits}, or a model whose {name} is a "
                              f"multiple of {tensor_parallel}"))
    return out


def gradient_accumulation_steps(spec: TrialSpec, layout: Layout) -> int:
    """Micro-batches per optimizer step on each data-parallel rank, so every track sees the same effective batch."""
    return spec.effective_batch_size // (spec.micro_batch_size * layout.data_parallel)
