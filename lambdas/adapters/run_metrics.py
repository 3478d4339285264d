"""The trainer's CloudWatch metrics for one run attempt (fallback and cross-check for its summary.json)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from lambdas.adapters.aws import client
from lambdas.domain import telemetry

if TYPE_CHECKING:
    from mypy_boto3_cloudwatch.type_defs import DimensionTypeDef, MetricDataQueryTypeDef

NAMESPACE = telemetry.NAMESPACE  # where the trainer publishes its per-attempt metrics
PHASE_METRICS = {
    "environment_s": "EnvironmentSeconds",
    "data_load_s": "DataLoadSeconds",
    "compile_s": "CompileSeconds",
    "train_s": "TrainSeconds",
    "checkpoint_save_s": "CheckpointSaveSeconds",
    "checkpoint_restore_s": "CheckpointRestoreSeconds",
    "eval_s": "EvalSeconds",
}
STEP_METRIC = "GlobalStep"


def _dimensions(trial_id: str, run: str, attempt: int) -> list[DimensionTypeDef]:
    return [
        {"Name": "TrialId", "Value": trial_id},
        {"Name": "Run", "Value": run},
        {"Name": "Attempt", "Value": str(attempt)},
    ]


class CloudWatchRunMetrics:
    def progress(
        self, trial_id: str, run: str, attempt: int, start: datetime, end: datetime
    ) -> tuple[int | None, float | None]:
        """The newest global step and loss a running attempt has published (None, None before its first step)."""
        dims = _dimensions(trial_id, run, attempt)
        queries = [
            {
                "Id": f"m{i}",
                "Label": label,
                "ReturnData": True,
                "MetricStat": {
                    "Metric": {"Namespace": NAMESPACE, "MetricName": metric, "Dimensions": dims},
                    "Period": 60,
                    "Stat": stat,
                },
            }
            for i, (label, metric, stat) in enumerate([("step", STEP_METRIC, "Maximum"), ("loss", "Loss", "Average")])
        ]
        got = client("cloudwatch").get_metric_data(
            MetricDataQueries=queries,
            StartTime=start - timedelta(minutes=5),
            EndTime=end + timedelta(minutes=1),
            ScanBy="TimestampDescending",
        )
        newest: dict[str, float] = {}
        for result in got.get("MetricDataResults", []):
            pairs = sorted(zip(result.get("Timestamps", []), result.get("Values", []), strict=False), reverse=True)
            if pairs:
                newest[result["Label"]] = float(pairs[0][1])
        step = newest.get("step")
        return (int(step) if step is not None else None), newest.get("loss")

    def phases(
        self, trial_id: str, run: str, attempt: int, start: datetime, end: datetime
    ) -> tuple[dict[str, float], int | None]:
        """Summed phase seconds and the highest global step the attempt published (empty when it published none)."""
        dims = _dimensions(trial_id, run, attempt)
        queries: list[MetricDataQueryTypeDef] = []
        for i, (field, metric) in enumerate([*PHASE_METRICS.items(), ("global_step", STEP_METRIC)]):
            queries.append(
                {
                    "Id": f"m{i}",
                    "Label": field,
                    "ReturnData": True,
                    "MetricStat": {
                        "Metric": {"Namespace": NAMESPACE, "MetricName": metric, "Dimensions": dims},
                        "Period": 60,
                        "Stat": "Maximum" if field == "global_step" else "Sum",
                    },
                }
            )
        got = client("cloudwatch").get_metric_data(
            MetricDataQueries=queries, StartTime=start - timedelta(minutes=5), EndTime=end + timedelta(minutes=5)
        )
        phases: dict[str, float] = {}
        step: int | None = None
        for result in got.get("MetricDataResults", []):
            values = result.get("Values", [])
            if not values:
                continue
            if result["Label"] == "global_step":
                step = int(max(values))
            else:
                phases[result["Label"]] = float(sum(values))
        return phases, step
