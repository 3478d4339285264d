"""Run AWS Batch jobs as local subprocesses inside moto, the way Batch would.

moto's Docker-less Batch marks every submitted job SUCCEEDED at once, ignores retry strategies and emits no
"Batch Job State Change" events. :class:`LocalBatch` replaces that one step: a submitted job walks the real status
sequence (SUBMITTED, PENDING, RUNNABLE, STARTING, RUNNING, then SUCCEEDED or FAILED), each attempt runs the job
definition's command with its environment plus the submission's overrides as a subprocess, the retry strategy's
``evaluateOnExit`` rules decide between RETRY and EXIT exactly as Batch documents them (first match wins; no match
retries while attempts remain), ``TerminateJob`` stops the process, and every transition is published as a
real-shaped EventBridge event.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TERMINAL = ("SUCCEEDED", "FAILED")
ESSENTIAL_EXITED = "Essential container in task exited"

ProgressFn = Callable[[str, dict[str, Any]], None]
EventSink = Callable[[dict[str, Any]], None]


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


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _env_list_to_dict(items: list[Mapping[str, str]] | None) -> dict[str, str]:
    return {e.get("name") or e["Name"]: e.get("value", e.get("Value", "")) for e in items or []}


@dataclass
class AttemptResult:
    exit_code: int | None
    reason: str
    started_at: datetime
    stopped_at: datetime


@dataclass
class LocalBatch:
    """Executes moto Batch jobs locally: a ``BatchJobRunner`` for :func:`dualtrack.local.moto_shims.moto_shims`."""

    events: EventSink
    progress: ProgressFn | None = None
    log_dir: Path | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    # Per-job additions on top of the job's own environment (e.g. breaking one track on purpose).
    job_env: Callable[[Mapping[str, str]], Mapping[str, str]] | None = None
    python: str = sys.executable
    terminate_grace_s: float = 10.0
    _threads: list[threading.Thread] = field(default_factory=list)
    _procs: dict[str, subprocess.Popen[str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # ---- moto integration ---------------------------------------------------------------------------------
    @contextlib.contextmanager
    def install(self) -> Iterator[LocalBatch]:
        """Own the jobs' statuses while the block runs; pass this runner to ``moto_shims(batch=...)``."""
        from moto.batch.models import Job
        from moto.moto_api import state_manager

        original = Job._get_container_property

        def container_property(job: Any, name: str, default: Any) -> Any:
            # moto appends AWS_BATCH_JOB_ID to the submitted overrides on every DescribeJobs; with Step Functions
            # polling a running job that list (and every describe) grows without bound. Describe a copy instead.
            overrides = job.container_overrides.get("environment")
            if name != "environment" or overrides is None:
                return original(job, name, default)
            job.container_overrides["environment"] = list(overrides)
            try:
                return original(job, name, default)
            finally:
                job.container_overrides["environment"] = overrides

        # Statuses are ours to set: stop moto advancing them on every DescribeJobs.
        state_manager.set_transition("batch::job", {"progression": "manual", "times": 10**9})
        Job._get_container_property = container_property  # type: ignore[method-assign,assignment]
        try:
            yield self
        finally:
            Job._get_container_property = original  # type: ignore[method-assign]
            state_manager.unset_transition("batch::job")
            self.stop_all("rehearsal stopped")

    def terminate(self, job: Any, reason: str) -> None:
        """TerminateJob: moto has set ``job.stop``; stop the attempt's process now (SIGTERM, then SIGKILL)."""
        job.stop = True
        job.job_stopped_reason = job.job_stopped_reason or reason
        with self._lock:
            proc = self._procs.get(job.job_id)
        if proc is not None:
            threading.Thread(target=_terminate, args=(proc, self.terminate_grace_s), daemon=True).start()

    def start(self, job: Any) -> None:
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
            procs = list(self._procs.values())
        for proc in procs:
            _terminate(proc, self.terminate_grace_s)

    # ---- one job --------------------------------------------------------------------------------------------
    def _set(self, job: Any, status: str, reason: str | None = None) -> None:
        job.status = status
        if reason is not None:
            job.job_stopped_reason = reason
        try:
            self.events(self._event(job))
        except Exception as exc:  # publishing must never take the job down; EventBridge is best-effort here too
            self._note(job, "error", {"message": f"publishing {status} event failed: {exc!r}"})

    def _event(self, job: Any) -> dict[str, Any]:
        detail = job.describe()
        detail["status"] = job._status
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

    def _run_job(self, job: Any) -> None:
        props = job.job_definition.container_properties or {}
        strategy = job.job_definition.retry_strategy or {}
        attempts = int(strategy.get("attempts") or 1)
        rules = strategy.get("evaluateOnExit") or []
        for status in ("SUBMITTED", "PENDING", "RUNNABLE"):
            self._set(job, status)
        success, last = False, None
        for attempt in range(1, attempts + 1):
            if attempt > 1:
                self._set(job, "RUNNABLE")
            job.job_started_at = datetime.now()
            self._set(job, "STARTING")
            self._set(job, "RUNNING")
            last = self._run_attempt(job, props, attempt)
            # Batch lists an attempt once it has finished: the running one is never in `attempts`.
            job.latest_attempt = {
                "container": {"exitCode": last.exit_code, "reason": last.reason,
                              "logStreamName": f"{job.job_definition.name}/default/{job.job_id}",
                              "networkInterfaces": []},
                "startedAt": _ms(last.started_at), "stoppedAt": _ms(last.stopped_at),
                "statusReason": ESSENTIAL_EXITED,
            }
            job.attempts.append(job.latest_attempt)
            if last.exit_code == 0:
                success = True
                break
            if job.stop:
                break
            action = evaluate_on_exit(rules, last.exit_code, ESSENTIAL_EXITED, last.reason)
            if action == "EXIT" or attempt == attempts:
                break
            self._note(job, "retry", {"attempt": attempt, "exit_code": last.exit_code, "action": action or "RETRY"})
        job.exit_code = last.exit_code if last else None
        reason = job.job_stopped_reason if job.stop else (None if success else ESSENTIAL_EXITED)
        job.job_stopped = True
        job.job_stopped_at = datetime.now()
        if reason:
            job.job_stopped_reason = reason
        self._set(job, "SUCCEEDED" if success else "FAILED")

    def _environment(self, job: Any, props: Mapping[str, Any], attempt: int) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.extra_env)
        env.update(_env_list_to_dict(props.get("environment")))
        env.update(_env_list_to_dict(job.container_overrides.get("environment")))
        if self.job_env is not None:
            env.update(self.job_env(env))
        env.update({
            "AWS_BATCH_JOB_ID": job.job_id,
            "AWS_BATCH_JOB_ATTEMPT": str(attempt),
            "AWS_BATCH_JQ_NAME": job.job_queue.name,
            "AWS_BATCH_CE_NAME": "local",
            "DUALTRACK_IMDS_ENDPOINT": "off",  # not an EC2 instance: no metadata service to ask
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "containers"), env.get("PYTHONPATH", "")]),
        })
        return env

    def _command(self, job: Any, props: Mapping[str, Any]) -> list[str]:
        command = list(job.container_overrides.get("command") or props.get("command") or [])
        if not command:
            raise ValueError(f"job definition {job.job_definition.name} has no command")
        if command[0] in ("python", "python3") or command[0].endswith("/python"):
            command[0] = self.python
        return command

    def _run_attempt(self, job: Any, props: Mapping[str, Any], attempt: int) -> AttemptResult:
        started = datetime.now()
        try:
            command = self._command(job, props)
        except ValueError as exc:
            return AttemptResult(None, str(exc), started, datetime.now())
        log = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log = (self.log_dir / f"{job.job_name}.attempt-{attempt}.log").open("a", buffering=1)
        try:
            proc = subprocess.Popen(command, cwd=ROOT, env=self._environment(job, props, attempt),
                                    stdout=subprocess.PIPE, stderr=log or subprocess.DEVNULL, text=True,
                                    start_new_session=True)
        except OSError as exc:
            if log:
                log.close()
            return AttemptResult(None, f"CannotStartContainerError: {exc}", started, datetime.now())
        with self._lock:
            self._procs[job.job_id] = proc
        watcher = threading.Thread(target=self._watch_terminate, args=(job, proc), daemon=True)
        watcher.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if log:
                    log.write(line)
                self._forward(job, attempt, line)
            code = proc.wait()
        finally:
            with self._lock:
                self._procs.pop(job.job_id, None)
            if log:
                log.close()
        reason = "" if code == 0 else (f"terminated: {job.job_stopped_reason}" if job.stop else f"exit {code}")
        return AttemptResult(code if code >= 0 else 128 - code, reason, started, datetime.now())

    def _watch_terminate(self, job: Any, proc: subprocess.Popen[str]) -> None:
        while proc.poll() is None:
            if job.stop:
                _terminate(proc, self.terminate_grace_s)
                return
            time.sleep(0.2)

    def _forward(self, job: Any, attempt: int, line: str) -> None:
        line = line.strip()
        if not line.startswith("{"):
            return
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            return
        if isinstance(record, dict):
            self._note(job, str(record.get("event", "log")), {**record, "attempt": attempt})

    def _note(self, job: Any, kind: str, data: dict[str, Any]) -> None:
        if self.progress:
            self.progress(job.job_name, {"event": kind, **data})


def _terminate(proc: subprocess.Popen[str], grace_s: float) -> None:
    """SIGTERM (the trainer checkpoints if it can), then SIGKILL after the grace period, like ECS's stop timeout."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
