"""The GPU baseline a trial declares (``baseline_logs_uri``): the logs a team already has from training the same
model on GPUs, read in the formats teams have, and the check that this trial's GPU track reproduces it.

Formats, told apart by content (never by file name alone):

- the Hugging Face Trainer's ``trainer_state.json``: ``log_history`` entries with ``step`` and ``loss`` (training)
  or ``eval_loss`` (evaluation); its closing entry's ``train_runtime``, ``train_steps_per_second``,
  ``train_samples_per_second`` (and ``train_tokens_per_second`` where the Trainer was asked for it), where present;
- this product's own ``metrics.jsonl``: one JSON record per line, ``kind`` ``step`` (``loss``, and as the trainer
  writes them ``step_time_s``, ``tokens``, ``samples``) or ``eval`` (``loss``), and the ``phases`` record's
  ``memory_peak_mib``;
- a CSV with a header naming ``step`` and ``loss``, and optionally ``eval_loss``, ``step_time_s``, ``tokens_per_s``
  and ``memory_mib`` (empty cells are skipped).

Per-step time, throughput and memory are optional: a log without them still gives the losses, and a figure it does
not carry is None (never estimated here). A per-step time is the median of the logged steps' times (compile and
warm-up steps do not move a median much), or the run's runtime over its steps where only that was logged.

The GPU track reproduces the baseline when, at the steps both logged, the training loss agrees within the trial's
``loss_tolerance`` as a relative gap (the same margin, measured the same way, as the Trainium2 comparison's), and so
does the validation loss where both have it. Only then does the Trainium2-against-GPU comparison mean what it says.
A Trainium2 pilot (a trn2 run and no GPU track) is compared with the baseline itself, the same way
(``lambdas.domain.report.pilot``).

Where a baseline may be read from (``baseline_refusal``): teams have no data locations of their own (the stage's
governance gives a team members, approvers and quotas, never buckets), so the stage's data buckets are shared by its
teams and a baseline there is the submitting team's to name. The artifacts bucket holds every team's trials: a
baseline there is read only from one of the same team's own trials (``trials/<trial_id>/...``), never from another
team's, whose losses would otherwise appear in this team's report.
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from lambdas.domain.json_types import JsonMapping

Format = Literal["trainer_state", "metrics_jsonl", "csv"]
MAX_BASELINE_BYTES = 64 * 2**20  # a log, not a checkpoint
MIN_SHARED_STEPS = 3  # fewer common steps than this prove nothing either way


class BaselineInvalid(ValueError):
    """The baseline could not be read; the message names where and what would be accepted."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class Baseline(_Model):
    format: Format
    train: dict[int, float] = Field(description="training loss by global step")
    eval: dict[int, float] = Field(default_factory=dict, description="validation loss by global step")
    step_time_s: float | None = Field(default=None, description="seconds per training step, where the log has it")
    tokens_per_s: float | None = Field(default=None, description="training tokens per second, where logged")
    samples_per_s: float | None = Field(default=None, description="training samples per second, where logged")
    memory_mib: float | None = Field(default=None, description="peak accelerator memory in MiB, where logged")
    throughput_basis: str = Field(default="", description="where the per-step time and throughput were read from")


def _finite(value: Any, where: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise BaselineInvalid(f"{where}: {value!r} is not a number") from None
    if not math.isfinite(number):
        raise BaselineInvalid(f"{where}: {value!r} is not a finite number")
    return number


def _step(value: Any, where: str) -> int:
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and value.strip().isdigit():
        number = int(value.strip())
    if number is None or number < 0:
        raise BaselineInvalid(f"{where}: step {value!r} is not a non-negative whole number")
    return number


def _positive(value: Any, where: str) -> float | None:
    """An optional rate or duration: None when absent or zero (the Trainer rounds a slow rate to 0.0)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    number = _finite(value, where)
    if number < 0:
        raise BaselineInvalid(f"{where}: {value!r} is negative")
    return number or None


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _from_trainer_state(document: JsonMapping) -> Baseline:
    history = document.get("log_history")
    if not isinstance(history, list):
        raise BaselineInvalid("trainer_state.json: log_history is not a list")
    train: dict[int, float] = {}
    evaluation: dict[int, float] = {}
    closing: dict[str, float | None] = {}
    steps: int | None = None
    for index, entry in enumerate(history):
        if not isinstance(entry, Mapping) or "step" not in entry:
            continue
        where = f"log_history[{index}]"
        step = _step(entry["step"], where)
        if "loss" in entry:
            train[step] = _finite(entry["loss"], f"{where}.loss")
        if "eval_loss" in entry:
            evaluation[step] = _finite(entry["eval_loss"], f"{where}.eval_loss")
        if "train_runtime" in entry:  # the closing entry: the whole run's figures
            steps = step
            closing = {key: _positive(entry.get(key), f"{where}.{key}") for key in (
                "train_runtime", "train_steps_per_second", "train_samples_per_second", "train_tokens_per_second")}
    per_second = closing.get("train_steps_per_second")
    runtime = closing.get("train_runtime")
    step_time: float | None = None
    basis = ""
    if per_second:
        step_time, basis = 1 / per_second, "1 / train_steps_per_second of the closing log_history entry"
    elif runtime and steps:
        step_time, basis = runtime / steps, f"train_runtime over its {steps} steps (the closing log_history entry)"
    return Baseline(format="trainer_state", train=train, eval=evaluation, step_time_s=step_time,
                    tokens_per_s=closing.get("train_tokens_per_second"),
                    samples_per_s=closing.get("train_samples_per_second"), throughput_basis=basis)


def _from_jsonl(text: str) -> Baseline:
    train: dict[int, float] = {}
    evaluation: dict[int, float] = {}
    times: list[float] = []
    tokens = samples = timed = 0.0  # totals over the steps that logged their time and count
    memory: list[float] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BaselineInvalid(f"metrics.jsonl line {number}: not JSON ({exc.msg})") from None
        if not isinstance(record, Mapping):
            continue
        where = f"metrics.jsonl line {number}"
        if record.get("kind") == "phases":
            peak = _positive(record.get("memory_peak_mib"), f"{where} memory_peak_mib")
            memory += [peak] if peak else []
        if record.get("kind") not in ("step", "eval"):
            continue
        target = train if record["kind"] == "step" else evaluation
        target[_step(record.get("step"), where)] = _finite(record.get("loss"), f"{where} loss")
        seconds = _positive(record.get("step_time_s"), f"{where} step_time_s") if record["kind"] == "step" else None
        if seconds:
            times.append(seconds)
            count = _positive(record.get("tokens"), f"{where} tokens")
            if count:  # throughput only over the steps that logged both their time and their tokens
                timed += seconds
                tokens += count
                samples += _positive(record.get("samples"), f"{where} samples") or 0.0
    return Baseline(format="metrics_jsonl", train=train, eval=evaluation, step_time_s=_median(times),
                    tokens_per_s=tokens / timed if timed else None, samples_per_s=samples / timed if samples else None,
                    memory_mib=max(memory, default=None),
                    throughput_basis=f"median step_time_s of {len(times)} step records" if times else "")


def _from_csv(text: str) -> Baseline:
    rows = csv.DictReader(io.StringIO(text))
    fields = {(name or "").strip().lower(): name for name in rows.fieldnames or []}
    if "step" not in fields or "loss" not in fields:
        raise BaselineInvalid(f"CSV header {list(rows.fieldnames or [])}: needs columns step and loss (and "
                              "optionally eval_loss)")
    train: dict[int, float] = {}
    evaluation: dict[int, float] = {}
    optional: dict[str, list[float]] = {"step_time_s": [], "tokens_per_s": [], "memory_mib": []}
    for number, row in enumerate(rows, start=2):
        where = f"CSV line {number}"
        step = _step(row[fields["step"]], where)
        if (row[fields["loss"]] or "").strip():
            train[step] = _finite(row[fields["loss"]], f"{where} loss")
        if "eval_loss" in fields and (row[fields["eval_loss"]] or "").strip():
            evaluation[step] = _finite(row[fields["eval_loss"]], f"{where} eval_loss")
        for column, values in optional.items():
            value = _positive(row[fields[column]], f"{where} {column}") if column in fields else None
            values += [value] if value else []
    times = optional["step_time_s"]
    return Baseline(format="csv", train=train, eval=evaluation, step_time_s=_median(times),
                    tokens_per_s=_median(optional["tokens_per_s"]),
                    memory_mib=max(optional["memory_mib"], default=None),
                    throughput_basis=f"median step_time_s of {len(times)} CSV rows" if times else "")


def parse_baseline(data: bytes, name: str = "") -> Baseline:
    """Read a baseline log in any of the three formats. Raises BaselineInvalid naming what is wrong."""
    if len(data) > MAX_BASELINE_BYTES:
        raise BaselineInvalid(f"{name or 'baseline'}: {len(data)} bytes, over the {MAX_BASELINE_BYTES} a log may be")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise BaselineInvalid(f"{name or 'baseline'}: not UTF-8 text") from None
    stripped = text.lstrip()
    baseline: Baseline | None = None
    if stripped.startswith("{"):
        try:
            document = json.loads(text)
        except json.JSONDecodeError:
            document = None  # one JSON object per line: metrics.jsonl
        if isinstance(document, Mapping):
            if "log_history" in document:
                baseline = _from_trainer_state(document)
            elif document.get("kind") in ("step", "eval"):
                baseline = _from_jsonl(text)
            else:
                raise BaselineInvalid(f"{name or 'baseline'}: a JSON object without log_history; give the Hugging "
                                      "Face Trainer's trainer_state.json, a metrics.jsonl, or a CSV of step,loss")
        else:
            baseline = _from_jsonl(text)
    else:
        baseline = _from_csv(text)
    if not baseline.train and not baseline.eval:
        raise BaselineInvalid(f"{name or 'baseline'} ({baseline.format}): no loss at any step")
    return baseline


class BaselineComparison(_Model):
    """How the trial's GPU track compares with the baseline at the steps both logged."""

    format: Format
    shared_train_steps: int
    shared_eval_steps: int
    max_train_delta: float | None = Field(description="largest relative training-loss gap at a shared step")
    max_eval_delta: float | None = Field(description="largest relative validation-loss gap at a shared step")
    tolerance: float
    reproduced: bool | None = Field(description="None: too few shared steps to tell")
    detail: str


def _worst(ours: Mapping[int, float], theirs: Mapping[int, float]) -> tuple[int, float | None]:
    """Steps both logged, and the largest relative gap there (|ours - theirs| / |theirs|)."""
    shared = sorted(s for s in set(ours) & set(theirs) if theirs[s] != 0)
    return len(shared), (max(abs(ours[s] - theirs[s]) / abs(theirs[s]) for s in shared) if shared else None)


def compare(baseline: Baseline, train: Mapping[int, float], evaluation: Mapping[int, float],
            tolerance: float) -> BaselineComparison:
    """A track's losses (by global step) against the baseline's, within ``tolerance`` (relative): the GPU track's,
    or a Trainium2 pilot's trn2 run's."""
    train_n, train_delta = _worst(train, baseline.train)
    eval_n, eval_delta = _worst(evaluation, baseline.eval)
    if train_n + eval_n < MIN_SHARED_STEPS:
        reproduced = None
        detail = (f"only {train_n + eval_n} step(s) in common with the baseline (at least {MIN_SHARED_STEPS} "
                  "needed): log at the baseline's steps (the same logging and eval intervals)")
    else:
        deltas = [d for d in (train_delta, eval_delta) if d is not None]
        reproduced = all(d <= tolerance for d in deltas)
        shown = ", ".join(f"{kind} {d:.2%} over {n} steps" for kind, d, n in
                          (("train", train_delta, train_n), ("eval", eval_delta, eval_n)) if d is not None)
        detail = (f"largest relative loss gap to the baseline: {shown}; "
                  f"{'within' if reproduced else 'outside'} loss_tolerance {tolerance}")
    return BaselineComparison(format=baseline.format, shared_train_steps=train_n, shared_eval_steps=eval_n,
                              max_train_delta=train_delta, max_eval_delta=eval_delta, tolerance=tolerance,
                              reproduced=reproduced, detail=detail)



def baseline_refusal(uri: str, team: str, *, artifacts_root: str, team_of: Callable[[str], str | None],
                     data_buckets: Iterable[str] | None = None) -> str | None:
    """Why a trial of ``team`` may not read its baseline at ``uri`` (None: it may).

    ``artifacts_root`` is the artifacts bucket's URI (``s3://<bucket>/``); ``team_of`` gives the team of a trial id
    (None: no such trial, or one of no team); ``data_buckets``, where known, are named in the refusal. A URI outside
    the artifacts bucket is not this check's: the stage's data buckets are shared, and any other bucket is the
    readability check's to refuse (``lambdas.domain.trial.rules.unreadable_inputs``)."""
    if not uri.startswith(artifacts_root):
        return None
    parts = uri.removeprefix(artifacts_root).split("/")
    trial_id = parts[1] if len(parts) > 2 and parts[0] == "trials" else ""
    # "." and ".." are only characters to S3, but a reader that normalises paths would leave the trial's folder.
    if trial_id and not any(p in (".", "..") for p in parts) and team_of(trial_id) == team:
        return None
    shared = (", ".join(f"s3://{b}/" for b in data_buckets) or "none on this stage") if data_buckets is not None \
        else None
    places = (f"the stage's data buckets ({shared}), which its teams share, " if shared is not None
              else "the stage's data buckets, which its teams share, ")
    # One answer whether the trial is another team's or none at all: a refusal never says which trial ids exist.
    where = f"trial {trial_id} is not a trial of team {team}" if trial_id else "it is not under trials/<trial_id>/"
    return (f"{uri}: {where}; a baseline is read only from {places}or from the files of one of team {team}'s own "
            f"trials ({artifacts_root}trials/<trial_id>/...)")
