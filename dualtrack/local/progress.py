"""What the rehearsal prints while it runs: workflow states, each track's steps, checkpoints, faults, resumes."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Protocol

from dualtrack.local.json_shapes import mapping, sequence, text
from lambdas.domain.json_types import JsonIn, JsonMapping
from lambdas.domain.vocabulary import COMPILE_RUN, SCALING_RUN
from lambdas.domain.vocabulary import RUNS as RUN_NAMES

if TYPE_CHECKING:
    from mypy_boto3_stepfunctions.type_defs import HistoryEventTypeDef
    from rich.console import Console
    from rich.progress import TaskID

RUNS = tuple(sorted(RUN_NAMES, key=len, reverse=True))  # longest suffix first: "-trn2-compile" before "-trn2"


class Outcome(Protocol):
    """What the closing lines tell of a rehearsal (a ``RehearsalResult``; ``out`` and ``network_denied`` are read
    when it has them)."""

    @property
    def trial_id(self) -> str: ...

    @property
    def status(self) -> str: ...

    @property
    def wall_s(self) -> float: ...

    @property
    def report(self) -> JsonMapping | None: ...

    @property
    def files(self) -> Sequence[Path]: ...


def run_of(job_name: str) -> str:
    """The run of a job named ``<trial_id>-<run>``: a scaling run (``-gpu-n1``, a row of its own) or a fixed run."""
    head, *tail = job_name.rsplit("-", 2)
    if head and len(tail) == 2 and SCALING_RUN.match("-".join(tail)):
        return "-".join(tail)
    for run in RUNS:
        if job_name.endswith(f"-{run}"):
            return run
    return job_name


class Progress:
    def __init__(self, stream: IO[str] | None = None, *, quiet: bool = False, step_every: int = 5,
                 max_steps: int | None = None):
        self.stream = stream or sys.stdout
        self.max_steps = max_steps
        self.quiet = quiet
        self.step_every = step_every
        self.started = time.monotonic()
        self._lock = threading.Lock()

    def _print(self, who: str, text: str, *, force: bool = False) -> None:
        if self.quiet and not force:
            return
        elapsed = time.monotonic() - self.started
        with self._lock:
            print(f"[{int(elapsed) // 60:02d}:{int(elapsed) % 60:02d}] {who:<12} {text}", file=self.stream,
                  flush=True)

    def phase(self, text: str) -> None:
        self._print("rehearsal", text)

    def close(self) -> None:
        """Release the terminal (bars); plain lines hold nothing."""

    def warn(self, text: str) -> None:
        self._print("warning", text, force=True)

    def workflow(self, event: HistoryEventTypeDef) -> None:
        kind = event.get("type", "")
        if kind.endswith("StateEntered"):
            entered = event.get("stateEnteredEventDetails")
            name = entered.get("name", "?") if entered else "?"
            self._print("workflow", f"-> {name}")
        elif kind in ("ExecutionFailed", "ExecutionAborted", "ExecutionTimedOut", "ExecutionSucceeded"):
            self._print("workflow", kind.removeprefix("Execution").lower())
        elif kind == "TaskFailed":
            details = event.get("taskFailedEventDetails")
            error = details.get("error", "") if details else ""
            self._print("workflow", f"task failed: {error} (caught by the workflow if it has a "
                                    "Catch: the Trainium2 track falls back to GPU)")

    def job(self, job_name: str, record: JsonMapping) -> None:
        run, kind = run_of(job_name), record.get("event")
        if kind in ("step", "eval") and run == COMPILE_RUN:
            return  # the warm-up compile stage's few steps only build graphs: its "compiled" line says how it went
        text = self._step_text(record) if kind == "step" else _event_text(kind, record)
        if text is not None:
            self._print(run, text, force=kind in ("checkpoint_skipped", "error", "failed"))

    def _step_text(self, record: JsonMapping) -> str | None:
        """A step's line, for every ``step_every``-th step and the last one (None for the others)."""
        step, total = record.get("step"), record.get("max_steps") or self.max_steps
        if not isinstance(step, int) or (step % self.step_every and step != total):
            return None
        loss, tps = record.get("loss"), record.get("tokens_per_s")
        text = f"step {step}/{total}" if total else f"step {step}"
        if isinstance(loss, int | float):
            text += f"  loss {loss:.4f}"
        if isinstance(tps, int | float):
            text += f"  {tps:,.0f} tok/s"
        return text

    def summary(self, result: Outcome) -> None:
        report: JsonMapping = result.report or {}
        lines = [f"trial {result.trial_id}: workflow {result.status} in {result.wall_s:.0f} s"]
        for run, value in mapping(report.get("tracks") or {}).items():
            track = mapping(value)
            cost = mapping(track.get("cost") or {}).get("total_usd")
            compile_ = mapping(track.get("compile") or {})
            lines.append(
                f"  {run:<12} {track.get('status', '?'):<9} backend {track.get('backend', '?')}"
                f"{' (stand-in)' if track.get('stand_in') else ''}, {track.get('steps_completed', '?')} steps, "
                f"{track.get('attempts', '?')} attempt(s), compile cache {compile_.get('cache', '-')}"
                f"{_seconds(compile_.get('total_s'))}, cost {cost} USD at the declared instance's rate")
        compiled = mapping(report.get("compile") or {})
        stage = compiled.get("stage")
        if stage:
            stage = mapping(stage)
            caches = [text(cache) for cache in sequence(stage.get("cache_by_attempt") or [])]
            lines.append(f"  {stage['run']:<12} {stage.get('status', '?'):<9} warm-up compile stage, "
                         f"{_seconds(stage.get('compile_s')).strip(' ()') or 'no compile time'}, cache "
                         f"{', '.join(caches) or '-'}, cost "
                         f"{mapping(stage.get('cost') or {}).get('total_usd')} USD (compile)")
        rate = compiled.get("hit_rate")
        if rate is not None:
            lines.append(f"  compile cache hit rate {rate:.0%} ({compiled['hits']} of "
                         f"{compiled['lookups']} lookups)")
        comparison = mapping(report.get("comparison") or {})
        if comparison:
            lines.append(f"  {comparison.get('headline') or 'verdict: ' + str(comparison.get('verdict'))}")
        denied = getattr(result, "network_denied", None) or []
        if denied:
            lines.append(f"  REHEARSAL FAILED: the network refused {len(denied)} request(s), as AWS would:")
            lines += [f"    {job} -> {service}: {reason}" for job, service, reason in denied]
        lines.append(f"  reports: {', '.join(str(p) for p in result.files) or 'none written'}")
        out = getattr(result, "out", None)
        plane_log = out / "plane.log" if out is not None else None
        if plane_log is not None and plane_log.exists() and plane_log.stat().st_size:
            lines.append(f"  the emulated plane's own output (library logs, metric lines, warnings): {plane_log}")
        with self._lock:
            print("\n".join(lines), file=self.stream, flush=True)


def _event_text(kind: JsonIn, record: JsonMapping) -> str | None:
    """The line a job's event other than a step prints (None for an event that prints none)."""
    attempt = record.get("attempt")
    if kind == "checkpoint":
        size = record.get("bytes")
        mb = f"{size / 1e6:.2f} MB" if isinstance(size, int | float) else ""
        secs = record.get("save_s")
        return (f"checkpoint step {record.get('step')} {mb}"
                + (f" in {secs:.2f} s" if isinstance(secs, int | float) else ""))
    if kind in ("compiling", "compiled", "compile"):
        return _compile_text(kind, record)
    if kind == "fault":
        node = record.get("node")
        where = f" on node {node}, seen by the main node as a lost peer" if isinstance(node, int) else ""
        return (f"fault injected after step {record.get('step', record.get('at_step'))}{where} "
                f"(exit {record.get('exit_code', '')}) on attempt {attempt}")
    if kind == "retry":
        return f"attempt {attempt} exited {record.get('exit_code')}: Batch {record.get('action')}"
    if kind == "resume":
        return (f"attempt {attempt} resumed from checkpoint step {record.get('from_step')}"
                f" ({record.get('samples_consumed')} samples consumed, none repeated)")
    if kind == "eval":
        loss = record.get("loss", record.get("eval_loss"))
        if not isinstance(loss, int | float):
            return None
        return f"eval at step {record.get('step')}: validation loss {loss:.4f}"
    if kind == "done":
        return f"done: {record.get('status', 'finished')} at step {record.get('global_step', '')}"
    if kind == "checkpoint_skipped":
        return f"skipped checkpoint step {record.get('step')}: {record.get('reason')}"
    if kind in ("error", "failed"):
        return f"error: {record.get('message', record.get('error', ''))}"
    return None


def _compile_text(kind: JsonIn, record: JsonMapping) -> str:
    """The line of a compile event: the step's compilation starting, the warm-up stage's, the first step's."""
    if kind == "compiling":
        cached = record.get("cached_files")
        return ("compiling the training step "
                + ("(the cache holds earlier graphs: seconds if this one is among them)"
                   if isinstance(cached, int) and cached > 0 else "(first time, about a minute)"))
    if kind == "compiled":
        secs = record.get("compile_s")
        return (f"warm-up compile stage: {record.get('steps')} steps compiled"
                + (f" in {secs:.1f} s" if isinstance(secs, int | float) else "")
                + f", cache {record.get('cache')}; the entry is published for the training job")
    secs = record.get("first_step_s", record.get("seconds"))
    return "first step with graph compilation" + (f": {secs:.1f} s" if isinstance(secs, int | float) else "")


def _seconds(value: object) -> str:
    """`` (12.3 s compiling)`` for a compile time in seconds; nothing when there is none."""
    return f" ({float(value):.1f} s compiling)" if isinstance(value, int | float) and value > 0 else ""


class TerminalProgress(Progress):
    """The same events on a terminal: a bar per run (steps done of the trial's steps), a spinner while a graph
    compiles, and every other line printed above the bars (rich)."""

    def __init__(self, stream: IO[str] | None = None, *, quiet: bool = False, step_every: int = 5,
                 max_steps: int | None = None, console: Console | None = None):
        super().__init__(stream, quiet=quiet, step_every=step_every, max_steps=max_steps)
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as Bars

        self.console = console or Console(file=self.stream)
        self.bars = Bars(SpinnerColumn(finished_text=" "), TextColumn("{task.description:<14}"), BarColumn(),
                         MofNCompleteColumn(), TextColumn("{task.fields[note]}"), TimeElapsedColumn(),
                         console=self.console, transient=False)
        self.tasks: dict[str, TaskID] = {}
        self.bars.start()

    def _print(self, who: str, text: str, *, force: bool = False) -> None:
        if self.quiet and not force:
            return
        elapsed = time.monotonic() - self.started
        with self._lock:
            self.console.print(f"[{int(elapsed) // 60:02d}:{int(elapsed) % 60:02d}] {who:<12} {text}",
                               markup=False, highlight=False)

    def _task(self, run: str) -> TaskID:
        if run not in self.tasks:
            # The warm-up compile stage has no training steps to count: a spinner with a note.
            total = None if run == COMPILE_RUN else self.max_steps or None
            self.tasks[run] = self.bars.add_task(run, total=total, note="")
        return self.tasks[run]

    def job(self, job_name: str, record: JsonMapping) -> None:
        run, kind, step = run_of(job_name), record.get("event"), record.get("step")
        if kind == "compiling":
            self.bars.update(self._task(run), note="compiling…")
        elif kind == "step" and run == COMPILE_RUN:
            return
        elif kind == "step" and isinstance(step, int):
            loss, tps = record.get("loss"), record.get("tokens_per_s")
            note = " ".join([*([f"loss {loss:.4f}"] if isinstance(loss, int | float) else []),
                             *([f"{tps:,.0f} tok/s"] if isinstance(tps, int | float) else [])])
            self.bars.update(self._task(run), completed=step, note=note)
            return  # the bar is the step line
        elif kind == "compiled" and run == COMPILE_RUN:
            self._finish(run, "compiled")
        elif kind == "done":
            self._finish(run, str(record.get("status", "done")))
        super().job(job_name, record)

    def _finish(self, run: str, note: str) -> None:
        """The run's row stops where the run did: its spinner and elapsed time freeze (the warm-up compile stage's
        row, which counts no steps, is marked complete)."""
        task = self._task(run)
        if run == COMPILE_RUN:
            self.bars.update(task, total=1, completed=1, note=note)
        else:
            self.bars.update(task, note=note)
        self.bars.stop_task(task)

    def close(self) -> None:
        self.bars.stop()

    def summary(self, result: Outcome) -> None:
        self.close()
        super().summary(result)


def progress_for(stream: IO[str] | None = None, *, quiet: bool = False, max_steps: int | None = None) -> Progress:
    """Bars on a terminal, plain lines otherwise (a pipe, a file, CI)."""
    out = stream or sys.stdout
    if not quiet and getattr(out, "isatty", lambda: False)():
        return TerminalProgress(out, max_steps=max_steps)
    return Progress(out, quiet=quiet, max_steps=max_steps)
