"""The processes of a local Batch job's nodes: started as ECS starts a container, stopped as ECS stops one.

Every node runs on this machine (its address is loopback) as one process in a session of its own, from the
repository root, with its log file per attempt (:func:`start_nodes`). :func:`stop_nodes` stops nodes as a stopped
container ends: SIGTERM to each node's process group, then SIGKILL after the grace period, with every process found
under the node's launcher (``torchrun``'s ranks run in sessions of their own).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

import psutil

from lambdas.domain.json_types import JsonObject

ROOT = Path(__file__).resolve().parents[2]
LOOPBACK = "127.0.0.1"  # every node's address here: the main node's, as child nodes see it

NoteFn = Callable[[str, JsonObject], None]  # (kind, record): what happened to a node


def free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def _open_log(log_dir: Path | None, job_name: str, index: int, attempt: int, several_nodes: bool) -> TextIO | None:
    """The node's log file for this attempt (None without a log directory)."""
    if log_dir is None:
        return None
    log_dir.mkdir(parents=True, exist_ok=True)
    per_node = f".node-{index}" if several_nodes else ""
    name = f"{job_name}.attempt-{attempt}{per_node}"
    return (log_dir / f"{name}.log").open("a", buffering=1)


def start_nodes(launches: Sequence[tuple[int, list[str], dict[str, str]]], *, main: int, job_name: str,
                attempt: int, log_dir: Path | None, several_nodes: bool, logs: list[TextIO],
                procs: dict[int, subprocess.Popen[str]], note: NoteFn) -> str | None:
    """Start each node's process (``(index, command, environment)``, into ``procs``, its open log into ``logs``); why
    the main node could not start, if so. A child node that cannot start is reported (``note``) and the others go
    on. The main node's stdout is a pipe, for its progress lines; every other stream goes to the node's log (nowhere
    without a log directory)."""
    for index, command, env in launches:
        log = _open_log(log_dir, job_name, index, attempt, several_nodes)
        if log is not None:
            logs.append(log)
        is_main = index == main
        try:
            procs[index] = subprocess.Popen(
                command, cwd=ROOT, env=env, text=True, start_new_session=True,
                stdout=subprocess.PIPE if is_main else (log or subprocess.DEVNULL),
                stderr=log or subprocess.DEVNULL)
        except OSError as exc:
            reason = f"CannotStartContainerError: {exc}"
            if is_main:
                return reason
            note("node_exit", {"node": index, "exit_code": None, "reason": reason, "attempt": attempt})
    return None


def _terminate(proc: subprocess.Popen[str], grace_s: float) -> None:
    """SIGTERM (the trainer checkpoints if it can), then SIGKILL after the grace period, like ECS's stop timeout."""
    stop_nodes([proc], grace_s)


def stop_nodes(procs: Sequence[subprocess.Popen[str]], grace_s: float) -> None:
    """:func:`_terminate` for several nodes of one job at once: one grace period for all.

    A node is its launcher and every process under it. ``torchrun`` starts its ranks in sessions of their own, so
    signalling the launcher's process group alone would orphan them; a stopped container takes every process in
    it, so the ranks found under each launcher before the SIGTERM are killed with it at the end of the grace."""
    live = [proc for proc in procs if proc.poll() is None]
    trees = [_descendants(proc.pid) for proc in live]
    if grace_s > 0:
        for proc in live:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for proc in live:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    for proc, tree in zip(live, trees, strict=True):
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        for child in tree:
            with contextlib.suppress(psutil.Error):
                child.kill()
        psutil.wait_procs(tree, timeout=5)


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
