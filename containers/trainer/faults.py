"""Planned faults (``fault_injection``), forced failures for fault tests, and SIGTERM handling."""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass
from types import FrameType

from lambdas.domain.trial.spec import TrialSpec
from lambdas.domain.vocabulary import scaling_nodes
from trainer import FAULT_EXIT_CODE, PERMANENT_FAULT_EXIT_CODE

FORCE_FAIL_POINTS = ("compile", "step", "save")


class PlannedFault(SystemExit):
    """Raised right after the faulted step; carries the reserved exit code."""

    def __init__(self, step: int, mode: str, code: int):
        super().__init__(code)
        self.step, self.mode, self.exit_code = step, mode, code


class ForcedFailure(RuntimeError):
    pass


@dataclass(frozen=True)
class FaultPlan:
    """The fault this attempt plans: ``at_step`` and ``mode`` as declared, whether it fires this attempt, and on
    which node (``node``, None for every node; ``this_node`` is the node this process runs on)."""

    at_step: int | None
    mode: str | None
    fires_this_attempt: bool
    node: int | None = None
    this_node: int = 0

    @classmethod
    def for_run(cls, spec: TrialSpec, track: str, attempt: int, run: str | None = None,
                this_node: int | None = None) -> FaultPlan:
        """The fault ``run`` (of ``track``) plans: ``fault_injection`` targets its track's runs, never a scaling run
        (``gpu-n1``), which measures the track at another node count and has no fault of its own."""
        fault = spec.fault_injection
        if fault is None or fault.track != track or (run is not None and scaling_nodes(run) is not None):
            return cls(None, None, False)
        # retryable: only the first attempt faults, so the retry can resume; permanent: every attempt does.
        return cls(fault.at_step, fault.mode, fault.mode == "permanent" or attempt == 1, fault.node,
                   node_index() if this_node is None else this_node)

    def fires(self, step: int) -> bool:
        """Whether the planned fault fires after ``step`` on some node: every node makes that step's checkpoint
        durable first, so they stay in step with each other."""
        return self.fires_this_attempt and step == self.at_step

    @property
    def on_this_node(self) -> bool:
        return self.node is None or self.node == self.this_node

    def fired_elsewhere(self, step: int) -> bool:
        """Whether, by ``step``, the planned fault has fired on another node than this one (so a peer this node
        lost is the fault's doing)."""
        return (self.fires_this_attempt and not self.on_this_node and self.at_step is not None
                and step >= self.at_step)

    def check(self, step: int) -> None:
        if self.fires(step) and self.on_this_node:
            code = PERMANENT_FAULT_EXIT_CODE if self.mode == "permanent" else FAULT_EXIT_CODE
            raise PlannedFault(step, str(self.mode), code)


def node_index() -> int:
    """This process's node of a multi-node job (``AWS_BATCH_JOB_NODE_INDEX``, set by Batch on every node; 0 on a
    single node)."""
    try:
        return int(os.environ.get("AWS_BATCH_JOB_NODE_INDEX", "0"))
    except ValueError:
        return 0


def forced_failure_point() -> str | None:
    value = os.environ.get("DUALTRACK_FORCE_FAIL", "").strip().lower()
    if not value:
        return None
    if value not in FORCE_FAIL_POINTS:
        raise ForcedFailure(f"DUALTRACK_FORCE_FAIL={value!r} is not one of {', '.join(FORCE_FAIL_POINTS)}")
    return value


class TerminationFlag:
    """Set by SIGTERM (Spot reclaim, cancelled job); the loop checks it between steps."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._previous: object = None

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)

    def uninstall(self) -> None:
        if self._previous is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._previous)  # type: ignore[arg-type]

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.event.set()

    @property
    def requested(self) -> bool:
        return self.event.is_set()
