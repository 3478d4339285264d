"""The retired Trainium2 path: PyTorch/XLA (torch-xla, torch-neuronx 2.x), kept for stages whose image pins a Neuron
SDK up to 2.31 and labelled "PyTorch/XLA (end of support for training)" in reports ("Neuron no longer supports
PyTorch/XLA for training starting with Neuron 2.30"). Everything that imports torch_xla in the trainer's
data-parallel path is here; the XLA:CPU tier (`make check-xla`) runs it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import torch

from trainer.backends import Backend, BackendUnavailable, _package_versions, neuron_device_present


class XlaBackend(Backend):
    """torch-xla device (torch-neuronx 2.x on Trainium2; XLA:CPU under ``PJRT_DEVICE=CPU`` in the XLA check)."""

    name = "xla"
    torch_data_parallel = False  # the gradients are all-reduced inside the lazy graph
    process_group = "xla"
    collectives_in_graph = True
    compiles = True
    # Generation grows the sequence every token: on a graph-compiling device that is one graph per length.
    generates_on_device = False

    def __init__(self, precision: str, compiler_flags: list[str] | None = None):
        try:
            import torch_xla.core.xla_model as xm
        except ImportError as exc:
            raise BackendUnavailable("backend xla needs torch-xla (torch-neuronx 2.x on Trainium2): run in a Neuron "
                                     "image up to SDK 2.31, or `make check-xla` for XLA:CPU") from exc
        self.on_neuron = neuron_device_present()
        # torch-neuronx 2.x reads NEURON_COMPILE_CACHE_URL (local or s3://) itself on Trainium2.
        self.reads_cache_url = self.on_neuron
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

    def autocast(self) -> contextlib.AbstractContextManager[None]:
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

    # ---- the explicit sums (torch's DDP and FSDP2 do not run on the XLA device) -------------------------------
    def sum_in_graph(self, tensors: torch.Tensor | list[torch.Tensor]) -> Any:
        """Sum over every process inside the step's lazy graph (in place, over a list). This path refuses tensor
        parallelism, so every process is a data-parallel replica."""
        return self._xm.all_reduce(self._xm.REDUCE_SUM, tensors)

    def sum_gradients(self, params: list[torch.nn.Parameter]) -> None:
        grads = [p.grad for p in params if p.grad is not None]
        if grads:
            self.sum_in_graph(grads)

    def versions(self) -> dict[str, str | None]:
        return _package_versions(("torch_xla", "torch-xla"), ("torch_neuronx", "torch-neuronx"),
                                 ("neuronx_cc", "neuronx-cc"), ("neuron_runtime", "libneuronxla"))


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


def register_process_group() -> None:
    """torch-xla's "xla" process group is registered by importing its backend module."""
    import torch_xla.distributed.xla_backend  # noqa: F401
