"""Progress lines on stdout, the per-step metrics file, and CloudWatch publishing off the training hot path.

CloudWatch metrics go to namespace ``Dualtrack`` with dimensions TrialId / Run / Attempt (what the cost Lambdas
query when a summary is missing). A background thread batches ``put_metric_data`` calls; publishing is disabled
when ``DUALTRACK_METRICS=off`` or no AWS region or credentials are configured, and a publishing error never stops
training.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TextIO

from lambdas.domain import telemetry
from trainer.json_types import JsonObject, JsonValue

if TYPE_CHECKING:
    from mypy_boto3_cloudwatch import CloudWatchClient
    from mypy_boto3_cloudwatch.literals import StandardUnitType
    from mypy_boto3_cloudwatch.type_defs import DimensionTypeDef, MetricDatumTypeDef

NAMESPACE = telemetry.NAMESPACE
MAX_DATA_PER_CALL = 1000
PHASE_METRICS = {"environment_s": "EnvironmentSeconds", "data_load_s": "DataLoadSeconds",
                 "compile_s": "CompileSeconds", "train_s": "TrainSeconds",
                 "checkpoint_save_s": "CheckpointSaveSeconds", "checkpoint_restore_s": "CheckpointRestoreSeconds",
                 "eval_s": "EvalSeconds"}


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Progress:
    """JSON lines on stdout (``{"event": "step", ...}``) that the local runtime shows as progress."""

    def __init__(self, stream: TextIO | None = None, enabled: bool = True):
        self.stream = stream or sys.stdout
        self.enabled = enabled

    def emit(self, event: str, **fields: JsonValue) -> None:
        if self.enabled:
            self.stream.write(json.dumps({"event": event, **fields}, default=str) + "\n")
            self.stream.flush()


def publishing_enabled() -> bool:
    if os.environ.get("DUALTRACK_METRICS", "").lower() in ("off", "0", "false", "no"):
        return False
    try:
        import boto3

        session = boto3.session.Session()
        return bool(session.region_name) and session.get_credentials() is not None
    except Exception:
        return False


class CloudWatchPublisher:
    """Queue of metric data flushed by a daemon thread in batches of up to 1000 per call."""

    def __init__(self, trial_id: str, run: str, attempt: int, *, flush_every: int = 200,
                 client: CloudWatchClient | None = None):
        self.dimensions: list[DimensionTypeDef] = [{"Name": "TrialId", "Value": trial_id},
                                                   {"Name": "Run", "Value": run},
                                                   {"Name": "Attempt", "Value": str(attempt)}]
        self.flush_every = flush_every
        self._client = client
        self._queue: queue.Queue[MetricDatumTypeDef | None] = queue.Queue()
        self._thread = threading.Thread(target=self._drain, name="cloudwatch-metrics", daemon=True)
        self.sent = 0
        self.errors: list[str] = []
        self._thread.start()

    def put(self, name: str, value: float, unit: StandardUnitType = "None") -> None:
        self._queue.put({"MetricName": name, "Value": float(value), "Unit": unit, "Dimensions": self.dimensions,
                         "Timestamp": datetime.now(UTC)})

    def close(self, timeout: float = 10.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

    def _send(self, batch: list[MetricDatumTypeDef]) -> None:
        if not batch:
            return
        try:
            if self._client is None:
                import boto3

                self._client = boto3.client("cloudwatch")
            for i in range(0, len(batch), MAX_DATA_PER_CALL):
                self._client.put_metric_data(Namespace=NAMESPACE, MetricData=batch[i:i + MAX_DATA_PER_CALL])
            self.sent += len(batch)
        except Exception as exc:  # metrics are best-effort; the summary in S3 is the record
            self.errors.append(repr(exc)[:200])

    def _drain(self) -> None:
        batch: list[MetricDatumTypeDef] = []
        while True:
            try:
                item = self._queue.get(timeout=5.0)
            except queue.Empty:
                self._send(batch)
                batch = []
                continue
            if item is None:
                self._send(batch)
                return
            batch.append(item)
            if len(batch) >= self.flush_every:
                self._send(batch)
                batch = []


class NullPublisher:
    sent = 0
    errors: list[str] = []

    def put(self, name: str, value: float, unit: StandardUnitType = "None") -> None:
        pass

    def close(self, timeout: float = 10.0) -> None:
        pass


class MetricsLog:
    """Every metric record of the attempt, kept in memory and written as ``metrics.jsonl``."""

    def __init__(self, publisher: CloudWatchPublisher | NullPublisher):
        self.records: list[JsonObject] = []
        self.publisher = publisher

    def step(self, step: int, loss: float, step_time_s: float, tokens: int, samples: int, lr: float) -> None:
        self.records.append({"kind": "step", "step": step, "loss": loss, "step_time_s": step_time_s,
                             "tokens": tokens, "samples": samples, "lr": lr, "at": utc_now()})
        self.publisher.put("Loss", loss)
        self.publisher.put("StepTime", step_time_s, "Seconds")
        self.publisher.put("TokensPerSecond", tokens / step_time_s if step_time_s > 0 else 0.0, "Count/Second")
        self.publisher.put("GlobalStep", step, "Count")

    def eval(self, step: int, loss: float, seconds: float) -> None:
        self.records.append({"kind": "eval", "step": step, "loss": loss, "eval_s": seconds, "at": utc_now()})
        self.publisher.put("EvalLoss", loss)

    def checkpoint(self, step: int, bytes_: int, files: int, save_s: float, uri: str) -> None:
        self.records.append({"kind": "checkpoint", "step": step, "bytes": bytes_, "files": files,
                             "save_s": save_s, "uri": uri, "at": utc_now()})
        self.publisher.put("CheckpointBytes", bytes_, "Bytes")

    def final(self, phases: dict[str, float], memory_peak_mib: float | None, cache: str) -> None:
        self.records.append({"kind": "phases", **phases, "memory_peak_mib": memory_peak_mib, "at": utc_now()})
        for field, metric in PHASE_METRICS.items():
            self.publisher.put(metric, phases.get(field, 0.0), "Seconds")
        if memory_peak_mib is not None:
            self.publisher.put("MemoryPeakMiB", memory_peak_mib, "Megabytes")
        self.publisher.put("CompileCacheHits", 1.0 if cache == "hit" else 0.0, "Count")
        self.publisher.put("CompileCacheMisses", 1.0 if cache == "miss" else 0.0, "Count")

    def jsonl(self) -> bytes:
        return "".join(json.dumps(r, sort_keys=True) + "\n" for r in self.records).encode()


def read_step_losses(text: str) -> dict[int, float]:
    out: dict[int, float] = {}
    for line in text.splitlines():
        if line.strip():
            record = json.loads(line)
            if record.get("kind") == "step":
                out[int(record["step"])] = float(record["loss"])
    return out
