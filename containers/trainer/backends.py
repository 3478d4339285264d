"""Device backends behind one seam. Both tracks run the same training code, the same PyTorch and the same
parallelism (DDP for LoRA, FSDP2 for full-parameter runs, the same collectives); a track differs only in the three
settings of :data:`TRACK_DEVICES`: the device, the process-group backend and the compile backend.

- ``cuda``: NVIDIA GPUs, ``nccl``, eager (bf16 autocast).
- ``neuron``: TorchNeuron on Trainium2, ``neuron`` process group, ``torch.compile(backend="neuron",
  fullgraph=True)`` or eager, as the trial's ``tracks.trn2.execution`` says.
- ``cpu`` (the GPU track's stand-in) and ``compiled`` (the Trainium2 track's stand-in: the same ``cpu`` + ``gloo``
  as AWS's TorchNeuron distributed tutorial, with Inductor's ``torch.compile`` and its persistent cache standing
  in for the Neuron compiler, so compile time and cache hits are real measurements locally).
- ``xla``: the retired PyTorch/XLA path (torch-xla / torch-neuronx 2.x), for stages whose image pins a Neuron SDK
  up to 2.31 (:mod:`trainer.legacy_xla`: "Neuron no longer supports PyTorch/XLA for training starting with Neuron
  2.30").

CUDA, TorchNeuron and XLA imports happen only when those backends are built.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import resource
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from trainer.launch import COMPILE_ONLY_VARIABLE

BACKENDS = ("cpu", "compiled", "cuda", "neuron", "xla")


@dataclass(frozen=True)
class DeviceSettings:
    """What a track's runs differ in, and nothing else."""

    device: str  # torch device type
    process_group: str  # torch.distributed backend of the training collectives
    compile_backend: str  # torch.compile backend when the step is compiled


# The whole difference between the tracks (and their stand-ins), in one table.
CUDA = DeviceSettings(device="cuda", process_group="nccl", compile_backend="inductor")
NEURON = DeviceSettings(device="neuron", process_group="neuron", compile_backend="neuron")
CPU = DeviceSettings(device="cpu", process_group="gloo", compile_backend="inductor")
TRACK_DEVICES: dict[str, DeviceSettings] = {"cuda": CUDA, "neuron": NEURON, "cpu": CPU, "compiled": CPU}
# TorchNeuron's environment ("TorchNeuron environment variables"): the compiled graphs' (NEFF) cache directory, and
# whether a graph that fails to compile may fall back to eager execution (1, the default: it may not).
NEFF_CACHE_VARIABLE = "TORCH_NEURONX_NEFF_CACHE_DIR"
FALLBACK_VARIABLE = "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"


class BackendUnavailable(RuntimeError):
    pass


def neuron_device_present() -> bool:
    return Path("/dev/neuron0").exists() and importlib.util.find_spec("torch_neuronx") is not None


def default_backend(track: str) -> str:
    """The track's device when this machine has it, else its stand-in."""
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
    # What the process group, the loop and the summary ask of a backend (instead of checking its name):
    process_group = CPU.process_group  # the torch.distributed backend of the training collectives
    collectives_in_graph = False  # collectives join the device's lazy graph (torch-xla): issued there, untimed
    times_with_device_events = False  # collectives run on a device stream: time them with device events
    sync_sample_every = 1  # steps between gradient-sync-wait samples (a sample synchronizes the device)
    compiles = False  # the step runs as compiled graphs: compile time and a compile-cache outcome are measured
    generates_on_device = True  # greedy generation runs on the device (else on a CPU copy of the weights)
    # Runs torch's parallel APIs on both tracks: DDP (LoRA), FSDP2 (full-parameter, and any layout whose
    # tensor-parallel groups form several replicas) and DTensor tensor parallelism. Only the retired XLA path does
    # not: it sums the gradients in its lazy graph and refuses tensor parallelism.
    torch_data_parallel = True

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
        """Move the model to the device (before the data-parallel wrappers)."""
        return model.to(self.device)

    def compiled(self, module: torch.nn.Module) -> torch.nn.Module:
        """What the training step calls: ``module`` (the model, or its DDP wrapper), compiled when this backend's
        execution compiles; after the wrappers, as torch's compiled DDP and FSDP2 expect."""
        return module

    # ---- the step ------------------------------------------------------------------------------------------
    def autocast(self) -> contextlib.AbstractContextManager[None]:
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


class CompiledBackend(Backend):
    """The Trainium2 track's stand-in: the CPU model under ``torch.compile`` (Inductor) when the trial's execution is
    ``compiled``, eager when it is ``eager``; compile time and cache hits are real measurements locally."""

    name = "compiled"
    compiles = True

    def __init__(self, precision: str, execution: str = "compiled"):
        super().__init__(precision)
        self.execution = execution

    def configure_cache(self, directory: Path | None) -> None:
        super().configure_cache(directory)
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            # Read by Inductor when it first compiles; must be set before the first compiled call.
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(directory)
            os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
            os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "1")

    def compiled(self, module: torch.nn.Module) -> torch.nn.Module:
        if self.execution == "eager":
            return module
        return torch.compile(module, backend=CPU.compile_backend, dynamic=False)  # type: ignore[return-value]

    def compile_counters(self) -> tuple[int, int] | None:
        from torch._dynamo.utils import counters

        inductor = counters["inductor"]
        hits, misses = int(inductor.get("fxgraph_cache_hit", 0)), int(inductor.get("fxgraph_cache_miss", 0))
        return (hits, misses) if hits or misses else None


class CudaBackend(Backend):
    name = "cuda"
    stand_in = False
    process_group = CUDA.process_group
    times_with_device_events = True
    sync_sample_every = 10

    def __init__(self, precision: str):
        super().__init__(precision)
        if not torch.cuda.is_available():
            raise BackendUnavailable("backend cuda needs an NVIDIA GPU; use --backend cpu on this machine")
        self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(self.device)

    def autocast(self) -> contextlib.AbstractContextManager[None]:
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


class TorchNeuronBackend(Backend):
    """TorchNeuron on Trainium2: PyTorch's own ``neuron`` device, the ``neuron`` process group, and either eager
    execution or ``torch.compile(backend="neuron", fullgraph=True)`` ("What is TorchNeuron?", "How to use
    torch.distributed on Neuron", "torch.compile backend reference"). Everything else is the code the GPU track runs:
    DDP for LoRA, FSDP2 for full-parameter runs, c10d collectives timed like NCCL's. ``torch_neuronx`` is imported
    only here (it registers the device and the process group); it comes with the Neuron image."""

    name = "neuron"
    stand_in = False
    torch_data_parallel = True
    process_group = NEURON.process_group
    compiles = True
    sync_sample_every = 10
    # A compiled graph per sequence length: generation would compile one per token; it runs on a CPU copy.
    generates_on_device = False
    loss_read_lag = 1

    def __init__(self, precision: str, compiler_flags: list[str] | None = None, execution: str = "compiled"):
        # Before the import: TorchNeuron may read its settings when it initialises.
        os.environ.update(neuron_compile_environment(compiler_flags or []))
        if execution != "compiled":
            # Compile-only mode is torch.compile's ("How torch.compile works on Neuron"); an eager step compiles its
            # operations as it runs them, so an eager compile stage runs its few steps for real.
            os.environ[COMPILE_ONLY_VARIABLE] = "0"
        try:
            import torch_neuronx  # noqa: F401  registers the "neuron" device and process group
        except ImportError as exc:
            raise BackendUnavailable("backend neuron needs TorchNeuron (torch-neuronx, in the Neuron training image); "
                                     "use --backend compiled for the CPU stand-in") from exc
        super().__init__(precision)
        self.execution = execution
        try:
            # As AWS's torchrun workers do ("How to use torch.distributed on Neuron"): torch.device("neuron") with no
            # index, LOCAL_RANK read only to print it; which logical NeuronCore a worker gets is TorchNeuron's, and the
            # runtime's placement variables (NEURON_RT_VISIBLE_CORES) are left to it ("Neuron framework extensions
            # set most of these on your behalf", "Reference: Neuron Runtime environment variables"). Not
            # cuda-style neuron:<LOCAL_RANK>.
            self.device = torch.device(NEURON.device)
        except RuntimeError as exc:  # torch-neuronx 2.x (PyTorch/XLA) registers no "neuron" device
            raise BackendUnavailable("this image's torch-neuronx registers no `neuron` device: it is the retired "
                                     "PyTorch/XLA stack; run --backend xla (set trn2.image_versions.neuron_sdk to "
                                     "the image's SDK release)") from exc

    def configure_cache(self, directory: Path | None) -> None:
        super().configure_cache(directory)
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            # TorchNeuron keeps compiled graphs (NEFFs) in a local or shared directory, not at an s3:// URL: the
            # plane's entry is mirrored into it and published back (trainer.cache), as for the stand-in.
            os.environ[NEFF_CACHE_VARIABLE] = str(directory)

    def compiled(self, module: torch.nn.Module) -> torch.nn.Module:
        if self.execution == "compiled":
            return torch.compile(module, backend=NEURON.compile_backend, fullgraph=True)  # type: ignore[return-value]
        return module

    def autocast(self) -> contextlib.AbstractContextManager[None]:
        if self.precision == "bf16":
            return torch.autocast(NEURON.device, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(self.device)

    def synchronize(self) -> None:
        torch.accelerator.synchronize()

    def collective_device(self) -> torch.device:
        return self.device

    def memory_peak_mib(self) -> float:
        module = getattr(torch, "neuron", None)
        peak = getattr(module, "max_memory_allocated", None)
        if peak is not None:
            try:
                return float(peak()) / 2**20
            except Exception:  # memory statistics are best-effort across releases
                pass
        return super().memory_peak_mib()

    def versions(self) -> dict[str, str | None]:
        return _package_versions(("torch_neuronx", "torch-neuronx"), ("neuronx_cc", "neuronx-cc"),
                                 ("neuron_runtime", "libneuronxla"))


def neuron_compile_environment(compiler_flags: list[str]) -> dict[str, str]:
    """What a Trainium2 rank's compiler is told: the trial's flags, and a compile that fails stays failed
    (``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=1``, TorchNeuron's default, pinned so an image or a user setting
    cannot turn a failed compile into a silent eager run: "TorchNeuron environment variables")."""
    env = {FALLBACK_VARIABLE: "1"}
    if compiler_flags:
        env["NEURON_CC_FLAGS"] = " ".join([os.environ.get("NEURON_CC_FLAGS", ""), *compiler_flags]).strip()
    return env


def _package_versions(*fields: tuple[str, str]) -> dict[str, str | None]:
    from importlib import metadata

    out: dict[str, str | None] = {}
    for field, dist in fields:
        try:
            out[field] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[field] = None
    return out


def _nvidia_driver() -> str | None:
    try:
        import subprocess

        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=False)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def make_backend(name: str, precision: str, compiler_flags: list[str] | None = None,
                 execution: str = "compiled") -> Backend:
    """The backend ``name``; ``execution`` (the trial's ``tracks.trn2.execution``) decides whether the Trainium2
    backends compile the step (TorchNeuron's neuron backend, the stand-in's Inductor) or run it eagerly."""
    if name == "cpu":
        return CpuBackend(precision)
    if name == "compiled":
        return CompiledBackend(precision, execution=execution)
    if name == "cuda":
        return CudaBackend(precision)
    if name == "neuron":
        return TorchNeuronBackend(precision, compiler_flags, execution=execution)
    if name == "xla":
        from trainer.legacy_xla import XlaBackend

        return XlaBackend(precision, compiler_flags)
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
