"""Device backends behind one seam: ``cuda`` (NVIDIA, bf16), ``neuron`` (torch-xla / torch-neuronx on Trainium2),
and the stand-ins ``cpu`` and ``compiled`` (``torch.compile`` with a persistent Inductor cache, standing in for
graph compilation where no Neuron device exists). CUDA and XLA imports happen only when those backends are built.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import resource
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

BACKENDS = ("cpu", "compiled", "cuda", "neuron")


class BackendUnavailable(RuntimeError):
    pass


def neuron_device_present() -> bool:
    return Path("/dev/neuron0").exists() and importlib.util.find_spec("torch_neuronx") is not None


def default_backend(track: str) -> str:
    if track == "gpu":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return "neuron" if neuron_device_present() else "compiled"


def count_files(directory: Path | None) -> int:
    if directory is None or not directory.is_dir():
        return 0
    return sum(1 for p in directory.rglob("*") if p.is_file())


class Backend:
    name = "cpu"
    stand_in = True
    # Full-parameter runs with several processes shard the optimizer state ZeRO-1 style (trainer.optim) over the
    # data-parallel processes. Not on Neuron: its owners' broadcasts would have to join the lazy graph.
    shards_optimizer = True
    # What the process group, the loop and the summary ask of a backend (instead of checking its name):
    process_group = "gloo"  # the torch.distributed backend of the training collectives
    collectives_in_graph = False  # collectives join the device's lazy graph (torch-xla): issued there, untimed
    times_with_device_events = False  # collectives run on a device stream: time them with device events
    sync_sample_every = 1  # steps between gradient-sync-wait samples (a sample synchronizes the device)
    compiles = False  # the step runs as compiled graphs: compile time and a compile-cache outcome are measured
    generates_on_device = True  # greedy generation runs on the device (else on a CPU copy of the weights)
    # Runs torch's data-parallel wrappers on the GPU track: DDP (LoRA), and FSDP2 (full-parameter: parameters,
    # gradients and optimizer state sharded over the processes). The trn2 track's stand-ins keep the explicit
    # all-reduce and shard the optimizer only (ZeRO-1), as Trainium2 runs would. A tensor-parallel layout
    # (trainer.tensor_parallel) uses the explicit all-reduce over its data-parallel groups on every backend.
    torch_data_parallel = False

    def __init__(self, precision: str):
        # The CPU stand-ins train in fp32: bf16 autocast on CPU is slow and changes nothing this run measures.
        self.precision = "fp32" if self.stand_in else precision
        self.device = torch.device("cpu")
        self.cache_dir: Path | None = None

    # ---- set-up --------------------------------------------------------------------------------------------
    def configure_cache(self, directory: Path | None) -> None:
        """Point the backend's persistent compile cache at ``directory`` (before anything compiles)."""
        self.cache_dir = directory

    def prepare(self, model: torch.nn.Module) -> torch.nn.Module:
        """Move the model to the device; returns what the training step calls (maybe a compiled wrapper)."""
        return model.to(self.device)

    # ---- the step ------------------------------------------------------------------------------------------
    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(self.device)

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        optimizer.step()

    def step_end(self) -> None:
        """Where a lazy-tensor backend cuts and runs the step's graph."""

    # Steps whose loss is read only after the next step has been dispatched: reading a device scalar waits for the
    # device, so reading it at once would stall the host each step instead of letting it queue the next one.
    loss_read_lag = 0

    def read_later(self, value: torch.Tensor) -> Callable[[], float]:
        """A reader for a device scalar; calling it waits for that value only (not for work queued after it)."""
        return lambda: float(value.item())

    def synchronize(self) -> None:
        """Wait for queued device work so wall-clock timings are honest."""

    def collective_device(self) -> torch.device:
        """Where small tensors for the training process group's collectives live (NCCL takes device tensors)."""
        return torch.device("cpu")

    # ---- bookkeeping ---------------------------------------------------------------------------------------
    def compile_counters(self) -> tuple[int, int] | None:
        """(cache hits, cache misses) this process saw, when the compiler reports them; None otherwise."""
        return None

    def memory_peak_mib(self) -> float:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB

    def versions(self) -> dict[str, str | None]:
        return {}


class CpuBackend(Backend):
    name = "cpu"
    torch_data_parallel = True


class CompiledBackend(Backend):
    """Eager CPU model under ``torch.compile``: compile time and cache hits are real measurements locally."""

    name = "compiled"
    compiles = True

    def configure_cache(self, directory: Path | None) -> None:
        super().configure_cache(directory)
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            # Read by Inductor when it first compiles; must be set before the first compiled call.
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(directory)
            os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
            os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "1")

    def prepare(self, model: torch.nn.Module) -> torch.nn.Module:
        model = model.to(self.device)
        return torch.compile(model, dynamic=False)  # type: ignore[return-value]

    def compile_counters(self) -> tuple[int, int] | None:
        from torch._dynamo.utils import counters

        inductor = counters["inductor"]
        hits, misses = int(inductor.get("fxgraph_cache_hit", 0)), int(inductor.get("fxgraph_cache_miss", 0))
        return (hits, misses) if hits or misses else None


class CudaBackend(Backend):
    name = "cuda"
    stand_in = False
    torch_data_parallel = True
    process_group = "nccl"
    times_with_device_events = True
    sync_sample_every = 10

    def __init__(self, precision: str):
        super().__init__(precision)
        if not torch.cuda.is_available():
            raise BackendUnavailable("backend cuda needs an NVIDIA GPU; use --backend cpu on this machine")
        self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(self.device)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.precision == "bf16":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(self.device, non_blocking=True)

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def collective_device(self) -> torch.device:
        return self.device

    loss_read_lag = 1

    def read_later(self, value: torch.Tensor) -> Callable[[], float]:
        # Copy into pinned host memory behind the step's kernels and mark the stream there: reading waits for this
        # event, not for the next step's kernels queued after it.
        host = torch.empty((), dtype=value.dtype, pin_memory=True)
        host.copy_(value.detach(), non_blocking=True)
        ready = torch.cuda.Event()
        ready.record()

        def read() -> float:
            ready.synchronize()
            return float(host.item())

        return read

    def memory_peak_mib(self) -> float:
        return torch.cuda.max_memory_allocated(self.device) / 2**20

    def versions(self) -> dict[str, str | None]:
        return {"cuda": torch.version.cuda, "gpu_name": torch.cuda.get_device_name(self.device),
                "cuda_driver": _nvidia_driver()}


class NeuronBackend(Backend):
    """torch-xla device (torch-neuronx on Trainium2; XLA:CPU under ``PJRT_DEVICE=CPU`` in the XLA check)."""

    name = "neuron"
    shards_optimizer = False
    process_group = "xla"
    collectives_in_graph = True
    compiles = True
    # Generation grows the sequence every token: on a graph-compiling device that is one graph per length.
    generates_on_device = False

    def __init__(self, precision: str, compiler_flags: list[str] | None = None):
        try:
            import torch_xla.core.xla_model as xm
        except ImportError as exc:
            raise BackendUnavailable("backend neuron needs torch-xla (torch-neuronx on Trainium2): run in the "
                                     "Neuron image, or `make check-xla` for XLA:CPU") from exc
        self.on_neuron = neuron_device_present()
        self.stand_in = not self.on_neuron
        super().__init__(precision)
        if self.on_neuron and compiler_flags:
            os.environ["NEURON_CC_FLAGS"] = " ".join([os.environ.get("NEURON_CC_FLAGS", ""), *compiler_flags]).strip()
        import torch_xla

        self._xm, self._torch_xla = xm, torch_xla
        self.device = None  # type: ignore[assignment]  # created after the cache is configured

    def configure_cache(self, directory: Path | None) -> None:
        super().configure_cache(directory)
        if directory is not None and not self.on_neuron:
            # On Trainium2 torch-neuronx reads NEURON_COMPILE_CACHE_URL itself; XLA:CPU takes a local cache dir.
            directory.mkdir(parents=True, exist_ok=True)
            _initialize_xla_cache(directory)
        make_device = getattr(self._torch_xla, "device", None)
        self.device = make_device() if make_device is not None else self._xm.xla_device()

    def prepare(self, model: torch.nn.Module) -> torch.nn.Module:
        if self.device is None:
            self.configure_cache(None)
        return model.to(self.device)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.precision == "bf16" and self.on_neuron:
            return torch.autocast("xla", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def step_end(self) -> None:
        # Cut the lazy graph here and run it (torch_xla.sync in current releases, xm.mark_step in older ones).
        sync = getattr(self._torch_xla, "sync", None)
        sync() if sync is not None else self._xm.mark_step()

    def synchronize(self) -> None:
        self._xm.wait_device_ops()

    # step_end dispatched the step's graph asynchronously; its loss is a materialised device buffer, read once the
    # next step's graph is queued (the torch-xla advice: no per-step .item() on the hot path).
    loss_read_lag = 1

    def memory_peak_mib(self) -> float:
        if self.on_neuron:
            try:
                info = self._xm.get_memory_info(self.device)
                return float(info.get("peak_bytes_used", info.get("bytes_used", 0))) / 2**20
            except Exception:  # memory info is best-effort across SDK releases
                pass
        return super().memory_peak_mib()

    def versions(self) -> dict[str, str | None]:
        from importlib import metadata

        out: dict[str, str | None] = {}
        for field, dist in (("torch_xla", "torch-xla"), ("torch_neuronx", "torch-neuronx"),
                            ("neuronx_cc", "neuronx-cc"), ("neuron_runtime", "libneuronxla")):
            try:
                out[field] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                out[field] = None
        return out


_XLA_CACHE_DIR: list[Path] = []


def _initialize_xla_cache(directory: Path) -> None:
    """The XLA persistent cache can be initialised once per process; a second run in it must use the same dir."""
    if _XLA_CACHE_DIR:
        if _XLA_CACHE_DIR[0] != directory:
            raise BackendUnavailable(f"this process already uses XLA compile cache {_XLA_CACHE_DIR[0]}; "
                                     f"start a new process for cache {directory}")
        return
    import torch_xla.runtime as xr

    xr.initialize_cache(str(directory), readonly=False)
    _XLA_CACHE_DIR.append(directory)


def _nvidia_driver() -> str | None:
    try:
        import subprocess

        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=False)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def make_backend(name: str, precision: str, compiler_flags: list[str] | None = None) -> Backend:
    if name == "cpu":
        return CpuBackend(precision)
    if name == "compiled":
        return CompiledBackend(precision)
    if name == "cuda":
        return CudaBackend(precision)
    if name == "neuron":
        return NeuronBackend(precision, compiler_flags)
    raise BackendUnavailable(f"unknown backend {name!r}; use one of {', '.join(BACKENDS)}")


@contextlib.contextmanager
def no_grad_eval(model: torch.nn.Module) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)
