"""The statuses and exit codes the plane, the trainer, the infrastructure and the CLI share, defined once.

Batch job statuses are AWS Batch's (``JobDetail.status``); a job is settled at SUCCEEDED or FAILED. Execution
statuses are Step Functions' (``DescribeExecution.status``; PENDING_REDRIVE is a failed execution that may be
redriven). Trial statuses are this plane's own (the trials table and ``GET /trials/{id}``). Exit codes are the
trainer's contract with the job definitions' retry strategies (``infra.constructs.job_definitions``)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal, get_args

from lambdas.domain.neuron_stack import training_stack

BatchStatus = Literal["SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING", "SUCCEEDED", "FAILED"]
BATCH_STATUSES: tuple[str, ...] = get_args(BatchStatus)
BATCH_TERMINAL: tuple[str, ...] = ("SUCCEEDED", "FAILED")  # in order of precedence: a success wins

ExecutionStatus = Literal["RUNNING", "SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED", "PENDING_REDRIVE"]
EXECUTION_TERMINAL: tuple[str, ...] = ("SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED")

# The values the trials table holds: PENDING_APPROVAL while a trial waits for an approver (nothing started),
# SUBMITTING while the submission (or the approval) starts its execution, SUBMITTED once the execution runs (the
# execution's own status says how far it got), STOPPING from a cancel or a crossed limit until its execution is seen
# stopped and its jobs ended (it still holds its place: its jobs may still bill), then one terminal value: set by
# the workflow's last state, CANCELLED once a stop is complete, or REJECTED by an approver.
TrialStatus = Literal["PENDING_APPROVAL", "SUBMITTING", "SUBMITTED", "STOPPING", "SUCCEEDED", "FAILED", "CANCELLED",
                      "REJECTED"]
TRIAL_STATUSES: tuple[str, ...] = get_args(TrialStatus)
TRIAL_ACTIVE: tuple[str, ...] = ("PENDING_APPROVAL", "SUBMITTING", "SUBMITTED", "STOPPING")
TRIAL_STOPPABLE: tuple[str, ...] = ("PENDING_APPROVAL", "SUBMITTING", "SUBMITTED")  # what a stop can start from
TRIAL_TERMINAL: tuple[str, ...] = ("SUCCEEDED", "FAILED", "CANCELLED", "REJECTED")

# A trial's runs: each is one Batch job (and its own prefix under the trial). ``trn2-compile`` is the warm-up compile
# stage the workflow runs before the Trainium2 training job when the compile cache has no entry for the trial's key:
# compile only, no training results kept, its cost booked as compile. ``gpu-fallback`` resumes a failed Trainium2 run
# on the GPU track.
RunName = Literal["gpu", "trn2", "gpu-fallback", "trn2-compile"]
RUNS: tuple[RunName, ...] = get_args(RunName)
COMPILE_RUN: RunName = "trn2-compile"
# The workflow input's ``jobs`` entry for the warm-up compile stage (beside the tracks' and ``fallback``).
COMPILE_TARGET = "compile"
# A compile queue's name ends with this (``dualtrack-<stage>-trn2-<type>-compile``): the compile quota counts them.
COMPILE_QUEUE_SUFFIX = "-compile"
FALLBACK_RUN: RunName = "gpu-fallback"

# A scaling run: the track's training at another node count than its main run's, for a trial whose track declares
# several (``nodes: [1, 2]``). Named ``<track>-n<nodes>`` (``gpu-n1``), which is valid as a Batch job name, an S3
# prefix segment and a ledger key. It trains exactly as the main run does (same spec, same effective batch: the
# gradient accumulation takes up the difference in data-parallel ranks), with no fault injection and no fallback.
SCALING_RUN = re.compile(r"(?P<track>gpu|trn2)-n(?P<nodes>[1-9][0-9]?)")  # use fullmatch: the whole name
# Any run's name as a regular expression (for S3 keys): the fixed names, longest first, then the scaling form.
RUN_PATTERN = "|".join([*sorted(RUNS, key=len, reverse=True), r"(?:gpu|trn2)-n[1-9][0-9]?"])
RUN_NAME = f"^(?:{RUN_PATTERN})$"  # a whole run name (for model fields: pydantic's pattern, where $ is the end)


def scaling_run(track: str, nodes: int) -> str:
    """The name of ``track``'s scaling run at ``nodes`` nodes."""
    return f"{track}-n{nodes}"


def scaling_nodes(run: str) -> int | None:
    """The node count a scaling run's name carries (None: not a scaling run)."""
    match = SCALING_RUN.fullmatch(run)
    return int(match["nodes"]) if match else None


def is_run(name: str) -> bool:
    """Whether ``name`` names a run: one of the fixed runs or a scaling run."""
    return name in RUNS or SCALING_RUN.fullmatch(name) is not None


def track_of(run: str) -> Literal["gpu", "trn2"]:
    """The track (hardware family) a run's job runs on."""
    match = SCALING_RUN.fullmatch(run)
    if match:
        return "trn2" if match["track"] == "trn2" else "gpu"
    return "trn2" if run in ("trn2", COMPILE_RUN) else "gpu"


def runs_of(tracks: Iterable[str], scaling: Iterable[str] = ()) -> set[str]:
    """The runs a trial with these tracks may start: each track's own, the warm-up compile stage with a Trainium2
    track, the GPU fallback with both, and the ``scaling`` runs it declared (``<track>-n<nodes>``) of its tracks."""
    names = set(tracks)
    return (names | ({COMPILE_RUN} if "trn2" in names else set())
            | ({FALLBACK_RUN} if {"gpu", "trn2"} <= names else set())
            | {run for run in scaling if SCALING_RUN.fullmatch(run) and track_of(run) in names})


# Batch attempts per run a stage allows unless it sets max_attempts (infra.config.StageConfig): attempt 2 resumes
# from the newest checkpoint. A trial's worst case counts every attempt.
DEFAULT_MAX_ATTEMPTS = 2

# Trainer exit codes. 75 and 76 are the planned fault injections (the job definitions retry 75, never 76); 143 is
# 128 + SIGTERM, the trainer's exit after a stop it checkpointed for; 1 is any other failure.
FAILURE_EXIT_CODE = 1
FAULT_EXIT_CODE = 75
PERMANENT_FAULT_EXIT_CODE = 76
SIGTERM_EXIT_CODE = 143


# The Trainium2 training stack an image's Neuron SDK release carries (lambdas.domain.neuron_stack.NEURON_RELEASES):
# TorchNeuron (the ``neuron`` backend) from 2.33, up to 2.31 the retired PyTorch/XLA path (the ``xla`` backend;
# "Neuron no longer supports PyTorch/XLA for training starting with Neuron 2.30"), which reports carry with this
# label, and neither in 2.32.
XLA_LABEL = "PyTorch/XLA (end of support for training)"


class NoTrainingStack(ValueError):
    """A Neuron SDK release whose images carry no training stack the trainer runs."""


def trn2_backend(neuron_sdk: str | None) -> Literal["neuron", "xla"]:
    """The trainer backend a Trainium2 image with this Neuron SDK release runs (TorchNeuron when unknown); a release
    without a training stack (2.32) is refused."""
    if not neuron_sdk:
        return "neuron"
    stack = training_stack(neuron_sdk)
    if stack is None:
        raise NoTrainingStack(
            f"Neuron SDK {neuron_sdk} ships neither TorchNeuron nor PyTorch/XLA for training (torch-neuronx is not "
            "in its images, and TorchNeuron starts with 2.33.0): pin a Trainium2 image of Neuron SDK 2.33.0 or later "
            "(TorchNeuron), or 2.31 or earlier (the retired PyTorch/XLA path)")
    return stack
