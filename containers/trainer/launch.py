"""Launch-command construction for multi-device and multi-node runs (pure: environment in, argv + env out).

AWS Batch multi-node parallel jobs set ``AWS_BATCH_JOB_NODE_INDEX``, ``AWS_BATCH_JOB_NUM_NODES`` and, on the
child nodes only, ``AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS``; the main node uses its own address. GPU runs
go through ``torchrun``; Trainium2 runs through ``torchrun`` too, one process per logical NeuronCore (64 on a
trn2.48xlarge at LNC 2, "How to use torch.distributed on Neuron"), with the Neuron runtime's root communicator on the
main node and, across nodes, libfabric on EFA (:data:`NEURON_EFA`). The CPU stand-ins (``cpu``,
``compiled``) run one process on a single node, which simulates every data-parallel rank by itself; on more than
one node they still form one process group across the nodes (``torchrun``, one process per node, gloo), process
``r`` of ``N`` simulating the data-parallel ranks ``r, r + N, ...`` (``trainer.data.simulated_ranks``).

``DUALTRACK_RENDEZVOUS_PORT`` sets the main node's rendezvous port (default 29500), e.g. for several jobs whose
nodes share one machine. ``DUALTRACK_STANDIN_PROCESSES_PER_NODE`` (default 1) gives the CPU stand-ins that many
processes per node, so several ranks per node can be rehearsed on a machine without devices.

How the exit code travels. AWS Batch reads the job's exit code from the container's main process, and the job
definitions' retry strategy decides on it (``FAULT_EXIT_CODE`` 75 is retried, anything else ends the job). A
single process on a single node is the rank itself: ``launch`` execs it, so its code (and Batch's SIGTERM) is the
rank's own. Several processes (or several nodes) go through torchrun's elastic launch, run inside the ``launch``
process (``LaunchPlan.torchrun_args``) rather than exec'd: torchrun's own exit code is 1 whenever any rank fails,
which would turn a planned, resumable fault into a failure Batch never retries. In process, the launcher reads every
failed rank's exit code and exits with :func:`job_exit_code` of them; a SIGTERM (or SIGINT) to the launcher is
forwarded by the elastic agent to every rank, which checkpoints if it can and exits, and the launcher then exits with
:func:`signal_exit_code` (143 for SIGTERM). The Neuron compile stage (``neuron_parallel_compile``, an external
driver that starts torchrun itself, used by the retired PyTorch/XLA path only) is still exec'd; its outputs are
compile artifacts, not a resumable run. On TorchNeuron the compile stage starts the ranks as training does, on the
same Trn2 hosts, and runs its few steps for real: each graph compiles on its first call (TorchNeuron's compile-only
mode is the job's opt-in, :func:`torchneuron_compile_only`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from trainer import FAILURE_EXIT_CODE, FAULT_EXIT_CODE, PERMANENT_FAULT_EXIT_CODE

RENDEZVOUS_PORT = 29500
RENDEZVOUS_PORT_VARIABLE = "DUALTRACK_RENDEZVOUS_PORT"
STANDIN_PROCESSES_VARIABLE = "DUALTRACK_STANDIN_PROCESSES_PER_NODE"
NEURON_ROOT_COMM_PORT = 62182
NEURON_BACKENDS = ("neuron", "xla")  # TorchNeuron, and the retired PyTorch/XLA path
# libfabric on EFA between Trainium2 nodes (the Neuron multi-node training setup): the EFA provider, RDMA on the
# device, and fork safety for the data loader's workers.
NEURON_EFA = {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "FI_EFA_FORK_SAFE": "1"}


# The Neuron SDK's ahead-of-time compile driver (on the image's PATH): it runs the command once with graph extraction
# on, then compiles every graph in parallel into the persistent cache (NEURON_COMPILE_CACHE_URL). PyTorch NeuronX
# neuron_parallel_compile CLI: "neuron_parallel_compile <run commands>", e.g. "neuron_parallel_compile torchrun
# --nproc_per_node=2 <train script>"; the outputs of that run are not valid results, only its graphs are kept.
NEURON_PARALLEL_COMPILE = "neuron_parallel_compile"

# TorchNeuron's compile-only mode ("How torch.compile works on Neuron" lists it): the graphs
# ``torch.compile(backend="neuron")`` captures go through neuronx-cc into the NEFF cache and are not run. vLLM
# Neuron's TorchNeuron Native backend design turns it on with ``TORCH_NEURONX_COMPILE_ONLY=1``; TorchNeuron's boolean
# variables take 1 or 0 ("TorchNeuron environment variables"). No TorchNeuron page documents compiling training graphs
# without a Trainium device (the TorchNeuron FAQ answers "No" to torch.compile on an instance without Trainium
# hardware), so the stage runs on training's own Trn2 hosts, where the target is detected and
# ``NEURON_PLATFORM_TARGET_OVERRIDE`` (what a CPU-only compile needs) is not set.
COMPILE_ONLY_VARIABLE = "TORCH_NEURONX_COMPILE_ONLY"

# ``python -m torch.distributed.run`` (torchrun): the elastic launcher's module.
TORCHRUN_MODULE = "torch.distributed.run"


@dataclass(frozen=True)
class LaunchPlan:
    """``argv`` is the command that starts this node's ranks. When ``torchrun_args`` is set, ``argv`` is
    ``python -m torch.distributed.run <torchrun_args>`` and the launcher runs that elastic launch in its own process
    (so it can read the ranks' exit codes); otherwise it execs ``argv``."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    nodes: int = 1
    node_rank: int = 0
    processes_per_node: int = 1
    main_address: str = "127.0.0.1"
    torchrun_args: list[str] | None = None


class LaunchError(ValueError):
    pass


def batch_node(env: Mapping[str, str], local_address: str) -> tuple[int, int, str]:
    """(node index, node count, main-node address) from the Batch MNP environment (single node when absent)."""
    try:
        nodes = int(env.get("AWS_BATCH_JOB_NUM_NODES", "1"))
        index = int(env.get("AWS_BATCH_JOB_NODE_INDEX", "0"))
    except ValueError as exc:
        raise LaunchError(f"AWS_BATCH_JOB_NUM_NODES/AWS_BATCH_JOB_NODE_INDEX must be integers: {exc}") from None
    if nodes < 1 or not 0 <= index < nodes:
        raise LaunchError(f"node index {index} is outside 0..{nodes - 1} (AWS_BATCH_JOB_NODE_INDEX)")
    main = env.get("AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS") or local_address
    if nodes > 1 and index > 0 and not env.get("AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"):
        raise LaunchError("a child node needs AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS (set by Batch MNP)")
    return index, nodes, main


def rendezvous_port(env: Mapping[str, str]) -> int:
    raw = env.get(RENDEZVOUS_PORT_VARIABLE) or str(RENDEZVOUS_PORT)
    try:
        port = int(raw)
    except ValueError:
        raise LaunchError(f"{RENDEZVOUS_PORT_VARIABLE} must be a port number, got {raw!r}") from None
    if not 0 < port < 65536:
        raise LaunchError(f"{RENDEZVOUS_PORT_VARIABLE} must be a port number, got {raw!r}")
    return port


def standin_processes(env: Mapping[str, str], devices_per_node: int) -> int:
    raw = env.get(STANDIN_PROCESSES_VARIABLE) or "1"
    try:
        count = int(raw)
    except ValueError:
        count = 0
    if not 1 <= count <= devices_per_node:
        raise LaunchError(f"{STANDIN_PROCESSES_VARIABLE} must be a whole number from 1 to the node's "
                          f"{devices_per_node} device(s), got {raw!r}")
    return count


def torchneuron_compile_only(env: Mapping[str, str], compile_only: bool) -> dict[str, str]:
    """The compile-only switch a TorchNeuron rank starts with. Off by default: the warm-up compile stage runs its few
    steps for real, which is what TorchNeuron documents for training (a graph compiles on its first call into the
    NEFF cache); no page documents what compile-only mode does to a training step's loss, eager optimizer and
    collectives. A job whose environment says ``TORCH_NEURONX_COMPILE_ONLY=1`` opts its compile stage in. Training
    is always off, whatever the image or the job sets: a step that compiles without running trains nothing."""
    if not compile_only:
        return {COMPILE_ONLY_VARIABLE: "0"}
    return {COMPILE_ONLY_VARIABLE: "1" if env.get(COMPILE_ONLY_VARIABLE) == "1" else "0"}


def launch_plan(*, backend: str, devices_per_node: int, worker_args: Sequence[str], env: Mapping[str, str],
                local_address: str = "127.0.0.1", expected_nodes: int | None = None,
                python: str = "python", compile_only: bool = False) -> LaunchPlan:
    """The command that starts this node's workers (``python -m trainer run ...`` once per device). On the retired
    PyTorch/XLA path, a compile-only run (the warm-up compile stage) goes through ``neuron_parallel_compile``: it runs
    the workers once to extract the training step's graphs, then compiles them in parallel into the persistent
    cache. TorchNeuron compiles each graph on its first call, so its compile stage starts the ranks as training does
    (compile-only mode only where the job opts in: :func:`torchneuron_compile_only`)."""
    index, nodes, main = batch_node(env, local_address)
    if expected_nodes is not None and nodes != expected_nodes:
        raise LaunchError(f"the trial declares {expected_nodes} node(s) but Batch started {nodes} "
                          "(AWS_BATCH_JOB_NUM_NODES); fix the job definition's node count")
    worker = [python, "-m", "trainer", "run", *worker_args]
    stand_in = backend in ("cpu", "compiled")
    # The CPU stand-ins run one process per node unless told otherwise, joined across the nodes (gloo).
    per_node = standin_processes(env, devices_per_node) if stand_in else devices_per_node
    wrap = [NEURON_PARALLEL_COMPILE] if compile_only and backend == "xla" else []
    extra = torchneuron_compile_only(env, compile_only) if backend == "neuron" else {}
    if nodes == 1 and per_node == 1:
        return LaunchPlan(argv=[*wrap, *worker], env=extra, nodes=nodes, node_rank=index, main_address=main)
    port = rendezvous_port(env)
    torchrun = [f"--nnodes={nodes}", f"--node_rank={index}", f"--nproc_per_node={per_node}", f"--master_addr={main}",
                f"--master_port={port}", "-m", "trainer", "run", *worker_args]
    argv = [*wrap, python, "-m", TORCHRUN_MODULE, *torchrun]
    if backend in NEURON_BACKENDS:
        extra["NEURON_RT_ROOT_COMM_ID"] = f"{main}:{NEURON_ROOT_COMM_PORT}"
        if nodes > 1:
            extra.update(NEURON_EFA)
    elif backend == "cuda" and nodes > 1:
        extra.update({"FI_PROVIDER": "efa", "NCCL_SOCKET_IFNAME": env.get("NCCL_SOCKET_IFNAME", "^lo,docker")})
    return LaunchPlan(argv=argv, env=extra, nodes=nodes, node_rank=index, processes_per_node=per_node,
                      main_address=main, torchrun_args=None if wrap else torchrun)


def signal_exit_code(signum: int) -> int:
    """The exit code a process killed by (or stopping for) signal ``signum`` reports: 128 + N, as a shell and the
    container runtime do (SIGTERM: 143, ``SIGTERM_EXIT_CODE``)."""
    return 128 + signum


def job_exit_code(exit_codes: Sequence[int]) -> int:
    """The job's exit code from its failed ranks' exit codes, the first observed failure first.

    A negative code (the rank was killed by signal N, as ``subprocess`` reports it) counts as 128 + N. The codes are
    ranked, not just the first one taken, because a rank's failure is rarely alone: as soon as one rank exits
    non-zero the elastic agent sends SIGTERM to the ranks still running and records their exit codes too (143, or
    -15 for a rank past its own SIGTERM handling), and a peer may fail its next collective (1) before it sees the
    signal. Whichever rank the agent saw first, a planned fault must reach Batch as itself, since the retry strategy
    decides on it: ``PERMANENT_FAULT_EXIT_CODE`` (76) if any rank exited with it, else ``FAULT_EXIT_CODE`` (75) if
    any did, else the first failure's code. A 143 gets no precedence of its own: within one launch it is the agent's
    collateral stop of the surviving ranks (a SIGTERM to the launcher itself is reported by the launcher as 143
    without coming here), so ranking it above the first failure would report a crash as an interruption.
    Nothing non-zero at all (the launcher still reports a failure) is ``FAILURE_EXIT_CODE``."""
    codes = [signal_exit_code(-code) if code < 0 else code for code in exit_codes]
    for planned in (PERMANENT_FAULT_EXIT_CODE, FAULT_EXIT_CODE):
        if planned in codes:
            return planned
    return next((code for code in codes if code != 0), FAILURE_EXIT_CODE)
