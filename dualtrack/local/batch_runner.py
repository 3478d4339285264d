"""Run AWS Batch jobs as local subprocesses inside moto, the way Batch would: the job lifecycle.

moto's Docker-less Batch marks every submitted job SUCCEEDED at once, ignores retry strategies and emits no
"Batch Job State Change" events. :class:`LocalBatch` replaces that one step: a submitted job walks the real status
sequence (SUBMITTED, PENDING, RUNNABLE, STARTING, RUNNING, then SUCCEEDED or FAILED); each attempt runs what ECS
would run in the job's container, as a subprocess: the image's ENTRYPOINT (read from the image's Dockerfile:
:mod:`dualtrack.local.dockerfile`) followed by the job's command, which replaces only the image's CMD, with the
image's ENV, then the job definition's environment, then the submission's overrides. The retry strategy (the
submission's when it sends one, else the definition's) decides between RETRY and EXIT exactly as Batch documents it
(first ``evaluateOnExit`` match wins; no match retries while attempts remain); an attempt that outlives
``timeout.attemptDurationSeconds`` is stopped and not retried; ``TerminateJob``/``CancelJob`` stop the job; a queue
without capacity keeps its jobs RUNNABLE until a ``jobStateTimeLimitActions`` entry cancels them; a multi-node
parallel job runs one process group per node, and its main node decides the attempt (see
:meth:`LocalBatch._run_attempt`; the processes are started and stopped by :mod:`dualtrack.local.processes`); every
transition is published as a real-shaped EventBridge event. Requests AWS refuses (a timeout under 60 s, malformed
time-limit actions) are refused here too, with ``ClientException``.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from dualtrack.local.aws.moto_shims import (
    SubmittedFields,
    assign_task,
    attempt_duration_s,
    job_status,
    task_credentials,
)
from dualtrack.local.aws.network import JobNetwork
from dualtrack.local.dockerfile import ImageConfig
from dualtrack.local.json_shapes import integer, mapping, sequence
from dualtrack.local.processes import LOOPBACK, ROOT, free_port, start_nodes, stop_nodes
from lambdas.domain.json_types import JsonIn, JsonMapping, JsonObject
from lambdas.domain.vocabulary import FAILURE_EXIT_CODE

if TYPE_CHECKING:
    from moto.batch.models import Job

ESSENTIAL_EXITED = "Essential container in task exited"
TIMED_OUT = "Job attempt duration exceeded timeout"
INSUFFICIENT_CAPACITY = "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY"
# https://docs.aws.amazon.com/batch/latest/userguide/job_stuck_in_runnable_capacity.html
CAPACITY_STATUS = INSUFFICIENT_CAPACITY + " - Service cannot fulfill the capacity requested for instance type [{}]"
CANCELED_BY_TIME_LIMIT = "Canceled by JobStateTimeLimit action due to reason: {}"
# https://docs.aws.amazon.com/batch/latest/userguide/job_env_vars.html: set on multi-node parallel job nodes only.
NODE_VARIABLES = ("AWS_BATCH_JOB_NODE_INDEX", "AWS_BATCH_JOB_NUM_NODES", "AWS_BATCH_JOB_MAIN_NODE_INDEX",
                  "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS")
RENDEZVOUS_PORT_VARIABLE = "DUALTRACK_RENDEZVOUS_PORT"  # read by containers/trainer/launch.py
TIME_LIMIT_REASONS = (INSUFFICIENT_CAPACITY, "MISCONFIGURATION:COMPUTE_ENVIRONMENT_MAX_RESOURCE",
                      "MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT",
                      "MISCONFIGURATION:EC2_INSTANCE_CONFIGURATION_UNSUPPORTED")

ProgressFn = Callable[[str, JsonObject], None]  # (job name, a progress record)
EventSink = Callable[[JsonObject], None]  # an EventBridge event


# ---- the job's JSON (definition, submission) -------------------------------------------------------------------
def _exit_rules(value: JsonIn) -> list[Mapping[str, str]]:
    """A retry strategy's ``evaluateOnExit`` rules: each pattern and the action are text."""
    return [{key: str(item) for key, item in mapping(rule).items()} for rule in sequence(value)]


def _strings(value: JsonIn) -> list[str] | None:
    """A command as a list of strings (None when there is none)."""
    return [str(part) for part in sequence(value)] if value else None


def evaluate_on_exit(rules: list[Mapping[str, str]], exit_code: int | None, status_reason: str,
                     reason: str) -> str | None:
    """The action of the first `evaluateOnExit` rule whose given patterns all match, else None.

    Batch matches `onExitCode`, `onStatusReason` and `onReason` as glob patterns (`*` only at the end in the API,
    which fnmatch covers); a rule with no patterns matches everything.
    """
    for rule in rules:
        checks = []
        lower = {k[0].lower() + k[1:]: v for k, v in rule.items()}
        if "onExitCode" in lower:
            checks.append(exit_code is not None and fnmatch.fnmatchcase(str(exit_code), lower["onExitCode"]))
        if "onStatusReason" in lower:
            checks.append(fnmatch.fnmatchcase(status_reason or "", lower["onStatusReason"]))
        if "onReason" in lower:
            checks.append(fnmatch.fnmatchcase(reason or "", lower["onReason"]))
        if all(checks):
            return str(lower.get("action", "")).upper()
    return None


# ---- running jobs ---------------------------------------------------------------------------------------------
def substitute_parameters(command: list[str], parameters: Mapping[str, str]) -> list[str]:
    """Batch's parameter substitution: each ``Ref::name`` in the command becomes the submission's value for
    ``name``, else the job definition's default; one with neither stays as written
    (https://docs.aws.amazon.com/batch/latest/userguide/job_definition_parameters.html#parameters)."""
    def value(match: re.Match[str]) -> str:
        return str(parameters.get(match.group(1), match.group(0)))

    return [re.sub(r"Ref::([A-Za-z0-9_]+)", value, part) for part in command]


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _env_list_to_dict(items: JsonIn) -> dict[str, str]:
    pairs = [mapping(item) for item in sequence(items or [])]
    return {str(e.get("name") or e["Name"]): str(e.get("value", e.get("Value", ""))) for e in pairs}


def _targets(target_nodes: str, index: int) -> bool:
    """Whether a ``targetNodes`` range (``2``, ``0:``, ``:3``, ``1:4``) names node ``index``."""
    low, sep, high = target_nodes.partition(":")
    if not sep:
        return int(low) == index
    return (not low or int(low) <= index) and (not high or index <= int(high))


@dataclass(frozen=True)
class _Node:
    """One node's container: its container properties, overrides and the Batch node variables it gets."""

    index: int
    props: JsonMapping
    overrides: JsonMapping
    env: dict[str, str]


@dataclass
class AttemptResult:
    exit_code: int | None
    reason: str
    started_at: datetime
    stopped_at: datetime
    status_reason: str = ESSENTIAL_EXITED
    timed_out: bool = False


@dataclass
class LocalBatch:
    """Executes moto Batch jobs locally: a ``BatchJobRunner`` for :func:`dualtrack.local.aws.moto_shims.moto_shims`."""

    events: EventSink
    progress: ProgressFn | None = None
    log_dir: Path | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    # Per-job additions on top of the job's own environment (e.g. breaking one track on purpose).
    job_env: Callable[[Mapping[str, str]], Mapping[str, str]] | None = None
    python: str = sys.executable
    terminate_grace_s: float = 10.0
    # Image URI -> what its container runs (see asset_image_configs); an image not listed cannot be pulled.
    images: Mapping[str, ImageConfig] = field(default_factory=dict)
    # Job queues (name or ARN) whose compute environments get no instances: their jobs stay RUNNABLE.
    no_capacity: Collection[str] = field(default_factory=set)
    # Job queue name -> its jobStateTimeLimitActions (CreateJobQueue through this runner records them itself).
    state_time_limit_actions: dict[str, list[JsonObject]] = field(default_factory=dict)
    # Job queue name -> the instance types of its compute environments (for the capacity status reason).
    instance_types: Mapping[str, Sequence[str]] = field(default_factory=dict)
    # Seconds of configured time (attempt timeouts, time-limit actions) per real second.
    time_scale: float = 1.0
    # The same for jobStateTimeLimitActions alone, when set (a rehearsal waits seconds, not 10 minutes).
    queue_time_scale: float | None = None
    # The app's network (dualtrack.local.aws.network): which services a job's container reaches, and whether the nodes
    # of a multi-node job reach each other. None: every job reaches everything (no VPC to model).
    network: JobNetwork | None = None
    _threads: list[threading.Thread] = field(default_factory=list)
    # Job id -> the running attempt's processes, one per node (the main node first).
    _procs: dict[str, list[subprocess.Popen[str]]] = field(default_factory=dict)
    _submissions: dict[str, SubmittedFields] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # ---- the runner moto_shims drives --------------------------------------------------------------------
    @contextlib.contextmanager
    def install(self) -> Iterator[LocalBatch]:
        """Run jobs while the block runs (pass this runner to ``moto_shims(batch=...)``, which owns every moto
        seam); every job still running when it ends is stopped."""
        try:
            yield self
        finally:
            self.stop_all("rehearsal stopped")

    def queue_created(self, name: str, time_limit_actions: list[JsonObject]) -> None:
        if time_limit_actions:
            self.state_time_limit_actions[name] = list(time_limit_actions)

    def terminate(self, job: Job, reason: str) -> None:
        """TerminateJob: moto has set ``job.stop``; stop the attempt's processes, every node's, now (SIGTERM, then
        SIGKILL)."""
        job.stop = True
        job.job_stopped_reason = job.job_stopped_reason or reason
        with self._lock:
            procs = list(self._procs.get(job.job_id, ()))
        if procs:
            threading.Thread(target=stop_nodes, args=(procs, self.terminate_grace_s), daemon=True).start()

    def start(self, job: Job, submitted: SubmittedFields) -> None:
        with self._lock:
            self._submissions[job.job_id] = submitted.copy()
        thread = threading.Thread(target=self._run_job, args=(job,), name=f"batch-{job.job_name}", daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def wait(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in list(self._threads):
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def stop_all(self, reason: str) -> None:
        with self._lock:
            procs = [proc for nodes in self._procs.values() for proc in nodes]
        stop_nodes(procs, self.terminate_grace_s)

    # ---- one job --------------------------------------------------------------------------------------------
    def _set(self, job: Job, status: str, reason: str | None = None) -> None:
        job.status = status
        if reason is not None:
            job.job_stopped_reason = reason
        try:
            self.events(self._event(job))
        except Exception as exc:  # publishing must never take the job down; EventBridge is best-effort here too
            self._note(job, "error", {"message": f"publishing {status} event failed: {exc!r}"})

    def _event(self, job: Job) -> JsonObject:
        detail = job.describe()
        detail["status"] = job_status(job)
        detail["attempts"] = [dict(a) for a in job.attempts]
        if job.job_started_at.year > 1970:
            detail["startedAt"] = _ms(job.job_started_at)
        backend = job.job_definition.backend
        return {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": "Batch Job State Change",
            "source": "aws.batch",
            "account": backend.account_id,
            "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": backend.region_name,
            "resources": [job.arn],
            "detail": json.loads(json.dumps(detail, default=str)),
        }

    def _retry_strategy(self, job: Job) -> JsonMapping:
        """The submission's retryStrategy replaces the definition's whole, evaluateOnExit rules included.

        https://docs.aws.amazon.com/batch/latest/APIReference/API_SubmitJob.html ("This retry strategy
        overrides the retry strategy defined in the job definition").
        """
        submitted = self._submissions.get(job.job_id, {}).get("retryStrategy")
        if submitted is not None:
            return dict(submitted)
        return dict(job.job_definition.retry_strategy or {})

    def _nodes(self, job: Job) -> tuple[list[_Node], int]:
        """The containers this job runs, one per node, and the main node's index.

        A container job is one node with no node variables. A multi-node parallel job has ``numNodes`` nodes (the
        submission's ``nodeOverrides.numNodes`` when given, which needs an open-ended range such as ``0:``); each
        node takes the container properties of the last node range whose ``targetNodes`` names it and the
        ``nodePropertyOverrides`` that target it, and gets the variables Batch sets on MNP nodes
        (https://docs.aws.amazon.com/batch/latest/userguide/job_env_vars.html): ``AWS_BATCH_JOB_NODE_INDEX``,
        ``AWS_BATCH_JOB_NUM_NODES``, ``AWS_BATCH_JOB_MAIN_NODE_INDEX`` and, on child nodes only,
        ``AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS`` (every node is this machine: 127.0.0.1).
        """
        definition = job.job_definition
        if definition.type != "multinode":
            return [_Node(0, definition.container_properties or {}, job.container_overrides, {})], 0
        properties = definition.node_properties or {}
        overrides = self._submissions.get(job.job_id, {}).get("nodeOverrides") or {}
        main = int(properties.get("mainNode", 0))
        num_nodes = integer(overrides.get("numNodes") or properties.get("numNodes", 1))
        nodes = []
        for index in range(num_nodes):
            props: JsonMapping = {}
            for node_range in properties.get("nodeRangeProperties", []):
                if _targets(str(node_range.get("targetNodes", "0:")), index):
                    props = node_range.get("container") or {}
            container_overrides: dict[str, JsonIn] = {}
            for override in map(mapping, sequence(overrides.get("nodePropertyOverrides", []))):
                if _targets(str(override.get("targetNodes", "0:")), index):
                    for key, value in mapping(override.get("containerOverrides") or {}).items():
                        if key == "environment":
                            merged = {**_env_list_to_dict(container_overrides.get("environment")),
                                      **_env_list_to_dict(value)}
                            container_overrides["environment"] = [{"name": k, "value": v}
                                                                  for k, v in merged.items()]
                        else:
                            container_overrides[key] = value
            node_env = {"AWS_BATCH_JOB_NUM_NODES": str(num_nodes), "AWS_BATCH_JOB_MAIN_NODE_INDEX": str(main),
                        "AWS_BATCH_JOB_NODE_INDEX": str(index)}
            if index != main:
                node_env["AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"] = LOOPBACK
            nodes.append(_Node(index, props, container_overrides, node_env))
        if not 0 <= main < num_nodes:
            raise ValueError(f"mainNode {main} is outside the job's {num_nodes} node(s)")
        return nodes, main

    def _run_job(self, job: Job) -> None:
        strategy = self._retry_strategy(job)
        attempts = integer(strategy.get("attempts") or 1)
        rules = _exit_rules(strategy.get("evaluateOnExit") or [])
        for status in ("SUBMITTED", "PENDING"):
            self._set(job, status)
        if not self._runnable(job):
            self._finish(job, success=False, last=None, reason=job.job_stopped_reason)
            return
        success, last = False, None
        for attempt in range(1, attempts + 1):
            if attempt > 1:
                self._set(job, "RUNNABLE")
            job.job_started_at = datetime.now()
            self._set(job, "STARTING")
            self._set(job, "RUNNING")
            last = self._run_attempt(job, attempt)
            # Batch lists an attempt once it has finished: the running one is never in `attempts`.
            job.latest_attempt = {
                "container": {"exitCode": last.exit_code, "reason": last.reason,
                              "logStreamName": f"{job.job_definition.name}/default/{job.job_id}",
                              "networkInterfaces": []},
                "startedAt": _ms(last.started_at), "stoppedAt": _ms(last.stopped_at),
                "statusReason": last.status_reason,
            }
            job.attempts.append(job.latest_attempt)
            if last.exit_code == 0 and not last.timed_out:
                success = True
                break
            # https://docs.aws.amazon.com/batch/latest/userguide/job_timeouts.html: a job terminated for
            # exceeding its timeout isn't retried.
            if job.stop or last.timed_out:
                break
            action = evaluate_on_exit(rules, last.exit_code, last.status_reason, last.reason)
            if action == "EXIT" or attempt == attempts:
                break
            self._note(job, "retry", {"attempt": attempt, "exit_code": last.exit_code, "action": action or "RETRY"})
        failure = None if success or last is None else last.status_reason
        reason = job.job_stopped_reason if job.stop else failure
        self._finish(job, success=success, last=last, reason=reason)

    def _finish(self, job: Job, *, success: bool, last: AttemptResult | None, reason: str | None) -> None:
        job.exit_code = last.exit_code if last else None
        job.job_stopped = True
        job.job_stopped_at = datetime.now()
        if reason:
            job.job_stopped_reason = reason
        self._set(job, "SUCCEEDED" if success else "FAILED")

    def _runnable(self, job: Job) -> bool:
        """RUNNABLE until the queue can place the job: at once, or never when its environments have no capacity.

        https://docs.aws.amazon.com/batch/latest/userguide/job_stuck_in_runnable_capacity.html: such a job shows
        ``CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY - ...`` and stays RUNNABLE until it is cancelled, by hand or by
        the queue's matching ``jobStateTimeLimitActions`` entry after ``maxTimeSeconds``. Returns False when the
        job was cancelled or terminated meanwhile (its status reason says why).
        """
        queue = job.job_queue
        if queue.name not in self.no_capacity and queue.arn not in self.no_capacity:
            self._set(job, "RUNNABLE")
            return True
        types = ", ".join(self.instance_types.get(queue.name, ())) or "optimal"
        self._set(job, "RUNNABLE", CAPACITY_STATUS.format(types))
        actions = [a for a in self.state_time_limit_actions.get(queue.name, [])
                   if a.get("state") == "RUNNABLE" and a.get("reason") == INSUFFICIENT_CAPACITY
                   and a.get("action") == "CANCEL"]
        limit = min((integer(a["maxTimeSeconds"]) for a in actions), default=None)
        scale = self.queue_time_scale or self.time_scale
        deadline = None if limit is None else time.monotonic() + limit / scale
        if limit is not None:
            self._note(job, "waiting", {"message": f"no capacity: the queue cancels the job after {limit} s in "
                                                   f"RUNNABLE, scaled to {limit / scale:.1f} s locally"})
        while not job.stop:
            if deadline is not None and time.monotonic() >= deadline:
                job.stop = True
                job.job_stopped_reason = CANCELED_BY_TIME_LIMIT.format(INSUFFICIENT_CAPACITY)
                break
            time.sleep(0.05)
        return False

    def _environment(self, job: Job, image: ImageConfig, props: JsonMapping, overrides: JsonMapping,
                     node_env: Mapping[str, str], attempt: int, rendezvous_port: int | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in NODE_VARIABLES}  # Batch sets them, or none
        if self.network is not None:  # the job's endpoints are its network's, not this process's
            env = {k: v for k, v in env.items() if not k.startswith("AWS_ENDPOINT_URL")}
        if rendezvous_port is not None:
            # Every node of every job is this machine, so each multi-node attempt rendezvouses on a port of its own
            # (on AWS each job's main node has its own address); the job's own settings may still pin one.
            env[RENDEZVOUS_PORT_VARIABLE] = str(rendezvous_port)
        env.update(self.extra_env)
        # The image's paths do not exist here: its PYTHONPATH (WORKDIR-based) maps onto the repository below.
        env.update({k: v for k, v in image.env.items() if k != "PYTHONPATH"})
        env.update(_env_list_to_dict(props.get("environment")))
        env.update(_env_list_to_dict(overrides.get("environment")))
        if self.job_env is not None:
            env.update(self.job_env(env))
        env.update(node_env)
        if self.network is not None:
            env.update(self.network.environment(job.job_queue.name, job_name=job.job_name,
                                                multi_node=job.job_definition.type == "multinode"))
        env.update({
            "AWS_BATCH_JOB_ID": job.job_id,
            "AWS_BATCH_JOB_ATTEMPT": str(attempt),
            "AWS_BATCH_JQ_NAME": job.job_queue.name,
            "AWS_BATCH_CE_NAME": "local",
            "DUALTRACK_IMDS_ENDPOINT": "off",  # not an EC2 instance: no metadata service to ask
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "containers"), os.environ.get("PYTHONPATH", "")]),
        })
        return env

    def _command(self, image: ImageConfig, props: JsonMapping, overrides: JsonMapping) -> list[str]:
        """ENTRYPOINT + (the submission's command, else the definition's, else the image's CMD), as ECS runs it.

        https://docs.aws.amazon.com/batch/latest/userguide/job_definition_parameters.html#containerProperties:
        the job's ``command`` maps to Docker's COMMAND (CMD), not to the ENTRYPOINT.
        """
        command = image.argv(_strings(overrides.get("command") or props.get("command") or None))
        if not command:
            raise ValueError("CannotStartContainerError: no command specified")
        if command[0] in ("python", "python3") or command[0].endswith(("/python", "/python3")):
            command[0] = self.python
        return command

    def _run_attempt(self, job: Job, attempt: int) -> AttemptResult:
        """One attempt: every node's container, as a process group each; the main node's exit ends it.

        Multi-node parallel jobs (https://docs.aws.amazon.com/batch/latest/userguide/multi-node-parallel-jobs.html):
        "The job is finished only if the main node exits. All child nodes are then stopped." and "The final job
        status (SUCCEEDED or FAILED) is determined by the final job status of the main node." A child node that
        exits, even non-zero, is left alone: per the MNP job lifecycle page
        (https://docs.aws.amazon.com/batch/latest/userguide/job-lifecycle.html) Batch takes no action on the other
        nodes when a child node dies, and child node failures don't cause more attempts; an application that cannot
        go on with fewer nodes must end (or fail) its main node itself, as a torch.distributed rank does when a peer
        drops out of a collective. The main node starts first, then the children; the attempt timeout, TerminateJob
        and a stopped rehearsal stop every node. The main node's stdout carries the job's progress lines; each node
        of a job with more than one node logs to ``<job>.attempt-N.node-I.log`` (else ``<job>.attempt-N.log``).
        """
        started = datetime.now()
        try:
            nodes, main = self._nodes(job)
        except ValueError as exc:
            return AttemptResult(None, str(exc), started, datetime.now(), status_reason=str(exc))
        multinode = job.job_definition.type == "multinode"
        blocked = self.network.rendezvous_problem(job.job_queue.name) if self.network and multinode else None
        if blocked:
            return self._unreachable_nodes(job, attempt, started, blocked)
        ordered = sorted(nodes, key=lambda n: n.index != main)  # the main node first
        port = free_port() if multinode else None  # the same on every node of the attempt
        launches, reason = self._launches(job, ordered, main, attempt, port)
        if reason is not None:
            return AttemptResult(None, reason, started, datetime.now(), status_reason=reason)
        logs: list[TextIO] = []
        procs: dict[int, subprocess.Popen[str]] = {}
        try:
            reason = start_nodes([(node.index, command, env) for node, command, env in launches], main=main,
                                 job_name=job.job_name, attempt=attempt, log_dir=self.log_dir,
                                 several_nodes=len(nodes) > 1, logs=logs, procs=procs,
                                 note=lambda kind, data: self._note(job, kind, data))
            if reason is not None:
                return AttemptResult(None, reason, started, datetime.now(), status_reason=reason)
            with self._lock:
                self._procs[job.job_id] = list(procs.values())
            proc = procs[main]
            duration = attempt_duration_s(job)
            deadline = None if duration is None else time.monotonic() + int(duration) / self.time_scale
            timed_out, reported = threading.Event(), set[int]()
            watcher = threading.Thread(target=self._watch,
                                       args=(job, procs, main, deadline, timed_out, attempt, reported), daemon=True)
            watcher.start()
            assert proc.stdout is not None
            main_log = logs[0] if logs else None
            for line in proc.stdout:
                if main_log:
                    main_log.write(line)
                self._forward(job, attempt, line)
            code = proc.wait()
            watcher.join()
            self._report_exits(job, procs, main, reported, attempt)
            # The main node has exited: the attempt is over and the child nodes are stopped.
            stop_nodes([p for index, p in procs.items() if index != main], self.terminate_grace_s)
        finally:
            if procs:
                stop_nodes(list(procs.values()), 0.0)  # nothing outlives its attempt (an error above)
            with self._lock:
                self._procs.pop(job.job_id, None)
            for log in logs:
                log.close()
            for started_proc in procs.values():  # the main node's progress pipe: closed, not left to the collector
                if started_proc.stdout is not None:
                    started_proc.stdout.close()
        exit_code = code if code >= 0 else 128 - code
        if timed_out.is_set():
            return AttemptResult(exit_code, f"exit {exit_code}", started, datetime.now(), status_reason=TIMED_OUT,
                                 timed_out=True)
        reason = "" if code == 0 else (f"terminated: {job.job_stopped_reason}" if job.stop else f"exit {code}")
        return AttemptResult(exit_code, reason, started, datetime.now())

    def _node_command(self, job: Job, node: _Node) -> tuple[ImageConfig | None, list[str], str]:
        """The node's image and command, or why its container cannot start (else an empty reason)."""
        uri = str(node.props.get("image", ""))
        image = self.images.get(uri)
        if image is None:
            # What ECS reports when an image cannot be pulled; the container never starts, so no exit code.
            return None, [], (f"CannotPullContainerError: pull image manifest has been retried 1 time(s): failed to "
                              f"resolve ref {uri}: not found (no image config declared to the local runner)")
        try:
            command = substitute_parameters(self._command(image, node.props, node.overrides),
                                            {**job.job_definition.parameters, **(job.parameters or {})})
        except ValueError as exc:
            return image, [], str(exc)
        return image, command, ""

    def _launches(self, job: Job, ordered: list[_Node], main: int, attempt: int, port: int | None
                  ) -> tuple[list[tuple[_Node, list[str], dict[str, str]]], str | None]:
        """Each node's command and environment, main node first; with why the main node cannot start, if so.

        A child node that cannot start is a failed child node (reported, left out): the others go on.
        """
        launches: list[tuple[_Node, list[str], dict[str, str]]] = []
        for node in ordered:
            image, command, reason = self._node_command(job, node)
            if reason and node.index == main:
                return launches, reason
            if reason:
                self._note(job, "node_exit", {"node": node.index, "exit_code": None, "reason": reason,
                                              "attempt": attempt})
                continue
            assert image is not None
            env = self._environment(job, image, node.props, node.overrides, node.env, attempt, port)
            # Each node's attempt is an ECS task, whose process holds a session of the job role named after it.
            which = node.index if job.job_definition.type == "multinode" else None
            env.update(task_credentials(job, which, assign_task(job, which)))
            launches.append((node, command, env))
        return launches, None

    def _unreachable_nodes(self, job: Job, attempt: int, started: datetime, problem: str) -> AttemptResult:
        """The nodes cannot reach each other: on AWS every node starts and the rendezvous waits for peers that never
        connect until it times out, and the main node's launcher exits 1. Here the same end comes without starting
        processes that cannot meet, after the network's scaled connect timeout."""
        assert self.network is not None
        self.network.refuse(job.job_name, "rendezvous", problem)
        self._note(job, "network", {"message": f"the nodes cannot reach each other: {problem}", "attempt": attempt})
        time.sleep(self.network.connect_timeout_s / self.network.time_scale)
        return AttemptResult(FAILURE_EXIT_CODE, f"exit {FAILURE_EXIT_CODE}", started, datetime.now())

    def _watch(self, job: Job, procs: Mapping[int, subprocess.Popen[str]], main: int, deadline: float | None,
               timed_out: threading.Event, attempt: int, reported: set[int]) -> None:
        """Until the main node exits: stop every node on TerminateJob or at the attempt timeout (which covers the
        whole job, not each node); report the child nodes that exit meanwhile (Batch leaves the others running)."""
        proc = procs[main]
        while proc.poll() is None:
            if job.stop:
                stop_nodes(list(procs.values()), self.terminate_grace_s)
                return
            if deadline is not None and time.monotonic() >= deadline:
                timed_out.set()
                self._note(job, "timeout", {"message": TIMED_OUT})
                stop_nodes(list(procs.values()), self.terminate_grace_s)
                return
            self._report_exits(job, procs, main, reported, attempt)
            time.sleep(0.05)

    def _report_exits(self, job: Job, procs: Mapping[int, subprocess.Popen[str]], main: int, reported: set[int],
                      attempt: int) -> None:
        for index, child in procs.items():
            code = child.poll()
            if index != main and index not in reported and code is not None:
                reported.add(index)
                self._note(job, "node_exit", {"node": index, "exit_code": code if code >= 0 else 128 - code,
                                              "attempt": attempt})

    def _forward(self, job: Job, attempt: int, line: str) -> None:
        line = line.strip()
        if not line.startswith("{"):
            return
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            return
        if isinstance(record, dict):
            self._note(job, str(record.get("event", "log")), {**record, "attempt": attempt})

    def _note(self, job: Job, kind: str, data: JsonObject) -> None:
        if self.progress:
            self.progress(job.job_name, {"event": kind, **data})
