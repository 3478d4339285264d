"""The GPU baseline a trial declares (``baseline_logs_uri``): the logs a team already has from training the same
model on GPUs, read in the formats teams have, and the check that this trial's GPU track reproduces it.

Formats, told apart by content (never by file name alone):

- the Hugging Face Trainer's ``trainer_state.json``: ``log_history`` entries with ``step`` and ``loss`` (training)
  or ``eval_loss`` (evaluation);
- this product's own ``metrics.jsonl``: one JSON record per line, ``kind`` ``step`` (``loss``) or ``eval``
  (``loss``);
- a CSV with a header naming ``step`` and ``loss``, and optionally ``eval_loss`` (empty cells are skipped).

The GPU track reproduces the baseline when, at the steps both logged, the training loss agrees within the trial's
``loss_tolerance`` as a relative gap (the same margin, measured the same way, as the Trainium2 comparison's), and so
does the validation loss where both have it. Only then does the Trainium2-against-GPU comparison mean what it says.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping
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


def _from_trainer_state(document: JsonMapping) -> Baseline:
    history = document.get("log_history")
    if not isinstance(history, list):
        raise BaselineInvalid("trainer_state.json: log_history is not a list")
    train: dict[int, float] = {}
    evaluation: dict[int, float] = {}
    for index, entry in enumerate(history):
        if not isinstance(entry, Mapping) or "step" not in entry:
            continue
        where = f"log_history[{index}]"
        step = _step(entry["step"], where)
        if "loss" in entry:
            train[step] = _finite(entry["loss"], f"{where}.loss")
        if "eval_loss" in entry:
            evaluation[step] = _finite(entry["eval_loss"], f"{where}.eval_loss")
    return Baseline(format="trainer_state", train=train, eval=evaluation)


def _from_jsonl(text: str) -> Baseline:
    train: dict[int, float] = {}
    evaluation: dict[int, float] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BaselineInvalid(f"metrics.jsonl line {number}: not JSON ({exc.msg})") from None
        if not isinstance(record, Mapping) or record.get("kind") not in ("step", "eval"):
            continue
        where = f"metrics.jsonl line {number}"
        target = train if record["kind"] == "step" else evaluation
        target[_step(record.get("step"), where)] = _finite(record.get("loss"), f"{where} loss")
    return Baseline(format="metrics_jsonl", train=train, eval=evaluation)


def _from_csv(text: str) -> Baseline:
    rows = csv.DictReader(io.StringIO(text))
    fields = {(name or "").strip().lower(): name for name in rows.fieldnames or []}
    if "step" not in fields or "loss" not in fields:
        raise BaselineInvalid(f"CSV header {list(rows.fieldnames or [])}: needs columns step and loss (and "
                              "optionally eval_loss)")
    train: dict[int, float] = {}
    evaluation: dict[int, float] = {}
    for number, row in enumerate(rows, start=2):
        where = f"CSV line {number}"
        step = _step(row[fields["step"]], where)
        if (row[fields["loss"]] or "").strip():
            train[step] = _finite(row[fields["loss"]], f"{where} loss")
        if "eval_loss" in fields and (row[fields["eval_loss"]] or "").strip():
            evaluation[step] = _finite(row[fields["eval_loss"]], f"{where} eval_loss")
    return Baseline(format="csv", train=train, eval=evaluation)


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
    """The GPU track's losses (by global step) against the baseline's, within ``tolerance`` (relative)."""
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

