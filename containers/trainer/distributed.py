"""Data-parallel process group when launched under torchrun (``WORLD_SIZE`` > 1); a no-op single process
otherwise. Either way the processes together run every data-parallel rank's micro-batches of the declared layout:
with fewer processes than ranks each one simulates several (``trainer.data.simulated_ranks``), and the summed
gradients over the processes are the one-process gradients.

With more than one process the step's collectives are timed (``CollectiveStats``): wall time in the gradient and
loss all-reduces, and every ``DUALTRACK_SYNC_SAMPLE_EVERY`` steps (default 1; 10 on CUDA, where a sample
synchronizes the device) the skew between the ranks reaching the gradient all-reduce. A single process calls no
collective and times nothing.

The processes form a device mesh of ``("dp", "tp")``: groups of ``tensor_parallel`` consecutive ranks, each group
one replica of the model (``trainer.tensor_parallel``), and the data-parallel dimension across the groups. The
gradients are summed over ``"dp"`` by the model's own wrapper (DDP or FSDP2) inside the backward; the loss is
summed over it here. Only the retired PyTorch/XLA path sums the gradients itself, inside its lazy graph."""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, TypeAlias, TypedDict, TypeVar

import torch

from trainer.backends import Backend

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup
    from torch.distributed.device_mesh import DeviceMesh

    from trainer.sharded import CpuTwin

T = TypeVar("T")

SYNC_SAMPLE_EVERY_VARIABLE = "DUALTRACK_SYNC_SAMPLE_EVERY"


def _sample_every(backend: Backend) -> int:
    raw = os.environ.get(SYNC_SAMPLE_EVERY_VARIABLE) or str(backend.sync_sample_every)
    try:
        return max(1, int(raw))
    except ValueError:
        raise ValueError(f"{SYNC_SAMPLE_EVERY_VARIABLE} must be a whole number of steps, got {raw!r}") from None


class CommunicationRecord(TypedDict):
    """The summary's ``communication`` block (``lambdas.domain.evidence.run_summary.CommunicationRecord``) as the
    collective statistics give it."""

    world_size: int
    process_group: str | None
    measured: bool
    steps_timed: int
    communication_s: float
    communication_per_step_s: float | None
    sync_wait_median_s: float | None
    sync_wait_max_s: float | None
    sync_wait_mean_s: float | None
    sync_samples: int
    sync_sample_every: int
    untimed: list[str]


# When a collective started: a recorded CUDA event where the collectives are timed with device events, else the
# host clock (``time.perf_counter``).
Started: TypeAlias = torch.cuda.Event | float


@dataclass
class CollectiveStats:
    """Rank 0's (every rank's) view of the collectives of a multi-process attempt.

    ``communication_s`` is the wall time inside the step's all-reduces, the wait for slower ranks included. On CUDA
    the collectives run on the device's stream, so they are timed with CUDA events, resolved once complete; on the
    CPU stand-ins (gloo) a collective returns when it is done, and the host clock times it; on TorchNeuron the
    collectives are ordinary c10d calls of the ``neuron`` process group, timed the same way. Only the retired
    PyTorch/XLA path issues its all-reduces inside the step's lazy graph, so nothing is timed there (``measured`` is
    False). Tensor parallelism's collectives run inside DTensor's forward and backward and are not timed on their
    own: ``untimed`` names them.

    Sync wait: each rank notes its arrival at the gradient all-reduce relative to its own step start (so clocks on
    different hosts need no alignment); one all-reduce with MAX over ``[arrival, -arrival]`` gives the latest and
    the earliest arrival, and the skew ``max - min`` is how long the first rank waited for the last.
    """

    sample_every: int = 1
    process_group: str | None = None  # the torch.distributed backend of the training collectives
    measured: bool = True
    untimed: list[str] = field(default_factory=list)
    use_events: bool = False
    communication_s: float = 0.0
    steps: int = 0
    skews: list[float] = field(default_factory=list)
    step: int = 0
    step_started: float = 0.0
    _pending: list[tuple[torch.cuda.Event, torch.cuda.Event]] = field(default_factory=list)

    def sampling(self) -> bool:
        return self.step % self.sample_every == 0

    def start(self) -> Started:
        if self.use_events:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def stop(self, started: Started) -> None:
        if isinstance(started, torch.cuda.Event):  # use_events: start() recorded an event
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self._pending.append((started, end))
            self._resolve(wait=False)
        else:
            self.communication_s += time.perf_counter() - started

    def _resolve(self, *, wait: bool) -> None:
        while self._pending:
            start, end = self._pending[0]
            if not wait and not end.query():
                return
            end.synchronize()
            self.communication_s += start.elapsed_time(end) / 1000.0
            self._pending.pop(0)

    def record(self, world_size: int) -> CommunicationRecord:
        """The summary's ``communication`` block (``lambdas.domain.evidence.run_summary.CommunicationRecord``)."""
        self._resolve(wait=True)
        skews = self.skews
        return {"world_size": world_size, "process_group": self.process_group, "measured": self.measured,
                "steps_timed": self.steps,
                "communication_s": self.communication_s,
                "communication_per_step_s": self.communication_s / self.steps if self.steps else None,
                "sync_wait_median_s": statistics.median(skews) if skews else None,
                "sync_wait_max_s": max(skews) if skews else None,
                "sync_wait_mean_s": statistics.fmean(skews) if skews else None,
                "sync_samples": len(skews), "sync_sample_every": self.sample_every, "untimed": list(self.untimed)}


def _collective_timeout() -> timedelta | None:
    """How long a collective waits for its peers before failing (``DUALTRACK_COLLECTIVE_TIMEOUT_S``; torch's own
    default when unset, 30 minutes for gloo). A rank whose peer node is gone fails at the latest after this, so the
    attempt ends and Batch retries the job; a first collective after a long compile must fit inside it too."""
    value = os.environ.get("DUALTRACK_COLLECTIVE_TIMEOUT_S")
    return timedelta(seconds=float(value)) if value else None


@dataclass
class Distributed:
    rank: int = 0
    world_size: int = 1
    backend: Backend | None = None  # None: a CPU process (tests)
    stats: CollectiveStats | None = None  # None for a single process: nothing is timed
    synchronize: Callable[[], None] | None = None
    # Two gloo groups beside the training group: one for checkpoint writes (torch.distributed.checkpoint, which may
    # run on a background thread), one for the training thread's small control messages. Gloo carries CPU objects
    # whatever the training backend, and separate groups keep the two threads' collectives apart.
    checkpoint_group: ProcessGroup | None = None
    control_group: ProcessGroup | None = None
    # The ("dp", "tp") device mesh and its CPU twin (``trainer.sharded.CpuTwin``), once a layout needs them.
    mesh: DeviceMesh | None = None
    twin: CpuTwin | None = None
    tensor_parallel: int = 1

    @classmethod
    def from_env(cls, backend: Backend) -> Distributed:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return cls(backend=backend)
        import torch.distributed as dist

        if not dist.is_initialized():
            if backend.process_group == "xla":
                from trainer.legacy_xla import register_process_group

                register_process_group()
            dist.init_process_group(backend.process_group, timeout=_collective_timeout())
        stats = CollectiveStats(sample_every=_sample_every(backend), process_group=str(dist.get_backend()),
                                measured=not backend.collectives_in_graph,
                                use_events=backend.times_with_device_events)
        return cls(rank=dist.get_rank(), world_size=dist.get_world_size(), backend=backend, stats=stats,
                   synchronize=backend.synchronize,
                   checkpoint_group=dist.new_group(backend="gloo", timeout=_collective_timeout()),
                   control_group=dist.new_group(backend="gloo", timeout=_collective_timeout()))

    def begin_step(self, step: int) -> None:
        """Mark the step's start (the reference for this rank's arrival at the gradient all-reduce)."""
        if self.stats is not None:
            self.stats.step, self.stats.step_started = step, time.perf_counter()
            self.stats.steps += 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def form_mesh(self, tensor_parallel: int) -> None:
        """Form the ``("dp", "tp")`` device mesh and its CPU twin (collective: every process calls it)."""
        from torch.distributed.device_mesh import init_device_mesh

        from trainer.sharded import CpuTwin

        device = self.backend.device.type if self.backend is not None else "cpu"
        self.tensor_parallel = tensor_parallel
        self.mesh = init_device_mesh(device, (self.world_size // tensor_parallel, tensor_parallel),
                                     mesh_dim_names=("dp", "tp"))
        self.twin = CpuTwin(self.mesh)

    @property
    def replicas(self) -> int:
        """Data-parallel processes: the model replicas the processes hold."""
        return self.world_size // self.tensor_parallel

    @property
    def replica(self) -> int:
        """This process's replica (its data-parallel index)."""
        return self.rank // self.tensor_parallel

    @property
    def data_group(self) -> ProcessGroup | None:
        """The processes to sum the loss over (None: every process)."""
        if self.tensor_parallel > 1:
            assert self.mesh is not None  # form_mesh set both
            return self.mesh["dp"].get_group()
        return None

    @property
    def in_graph(self) -> bool:
        """The collectives are part of the device's lazy graph (the retired PyTorch/XLA path): issued there,
        untimed."""
        return self.backend is not None and self.backend.collectives_in_graph

    def gradients_ready(self, params: list[torch.nn.Parameter]) -> None:
        """The backward has ended (DDP or FSDP2 summed the gradients over ``"dp"`` inside it, timed by
        ``trainer.ddp``'s hook or ``trainer.fsdp.time_collectives``): on sampled steps, the skew of the processes'
        arrival here. On the retired PyTorch/XLA path the backend sums the gradients into the step's graph."""
        if self.replicas <= 1:
            return
        if self.in_graph:
            self.backend.sum_gradients(params)  # type: ignore[union-attr]
            return
        stats = self.stats
        if stats is None or not stats.sampling():
            return
        if self.synchronize is not None:
            self.synchronize()  # on a device, arrival means the backward has finished, not just been queued
        stats.skews.append(self._skew(time.perf_counter() - stats.step_started))

    def _skew(self, arrival: float) -> float:
        """Latest minus earliest arrival at the gradient all-reduce over the ranks (one small MAX all-reduce)."""
        import torch.distributed as dist

        device = self.backend.collective_device() if self.backend is not None else torch.device("cpu")
        both = torch.tensor([arrival, -arrival], dtype=torch.float64, device=device)
        dist.all_reduce(both, op=dist.ReduceOp.MAX)
        latest, neg_earliest = both.tolist()
        return max(0.0, latest + neg_earliest)

    def reduce_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """The step's global loss, still on the device (reading it is the caller's choice of when to sync). Every
        process of a tensor-parallel group holds the same loss, so the sum runs over the data-parallel group."""
        if self.world_size <= 1 or self.replicas <= 1:
            return loss
        if self.in_graph:
            return self.backend.sum_in_graph(loss)  # type: ignore[union-attr,no-any-return]
        import torch.distributed as dist

        loss = loss.clone()
        stats = self.stats
        started = stats.start() if stats is not None else None
        dist.all_reduce(loss, op=dist.ReduceOp.SUM, group=self.data_group)
        if stats is not None and started is not None:
            stats.stop(started)
        return loss

    # ---- control messages (the training thread, gloo) ---------------------------------------------------------
    def broadcast_object(self, obj: T) -> T:
        """Process 0's ``obj`` on every process."""
        if self.world_size <= 1:
            return obj
        import torch.distributed as dist

        holder = [obj]
        dist.broadcast_object_list(holder, src=0, group=self.control_group)
        return holder[0]

    def gather_objects(self, obj: T) -> list[T] | None:
        """Every process's ``obj`` on process 0 (None elsewhere)."""
        if self.world_size <= 1:
            return [obj]
        import torch.distributed as dist

        # One slot per process, each overwritten with that process's object.
        out: list[T] | None = [obj] * self.world_size if self.is_main else None
        dist.gather_object(obj, out, dst=0, group=self.control_group)
        return out

    def all_true(self, flag: bool) -> bool:
        """Whether ``flag`` holds on every process."""
        if self.world_size <= 1:
            return flag
        import torch.distributed as dist

        value = torch.tensor([1 if flag else 0], dtype=torch.int32)
        dist.all_reduce(value, op=dist.ReduceOp.MIN, group=self.control_group)
        return bool(value.item())

    def vote_any(self, flag: bool) -> Callable[[], bool]:
        """Start agreeing whether ``flag`` holds on any process, without waiting (an asynchronous all-reduce on the
        control group); the returned function waits for the answer, the same on every process."""
        if self.world_size <= 1:
            return lambda: flag
        import torch.distributed as dist

        value = torch.tensor([1 if flag else 0], dtype=torch.int32)
        work = dist.all_reduce(value, op=dist.ReduceOp.MAX, group=self.control_group, async_op=True)

        def answer() -> bool:
            work.wait()
            return bool(value.item())

        return answer

    def communication(self) -> CommunicationRecord | None:
        """The summary's ``communication`` block, or None for a single process (the schema's zeros apply)."""
        return None if self.stats is None else self.stats.record(self.world_size)

    def close(self, *, together: bool = True) -> None:
        """Leave together: a process that tore its groups down while another still used them (process 0 writing
        the summary, a collective still draining) would abort both. A process that leaves alone (it failed, or a
        fault planned on its node only fired) waits for no one: its peers are mid-step, and a barrier here would
        meet their next collective and hang both until the process group's timeout, where leaving lets their
        collective fail at once (the peer is gone) and the main node report it (``trainer.peers``)."""
        if self.world_size > 1:
            import torch.distributed as dist

            if dist.is_initialized():
                if together:
                    with contextlib.suppress(Exception):  # a peer already gone: nothing left to wait for
                        dist.barrier(group=self.control_group)
                dist.destroy_process_group()
