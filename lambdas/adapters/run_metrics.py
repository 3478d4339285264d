"""The trainer's CloudWatch metrics for one run attempt (fallback and cross-check for its summary.json)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from lambdas.adapters.aws import client

NAMESPACE = "Dualtrack"
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


class CloudWatchRunMetrics:
    def phases(
        self, trial_id: str, run: str, attempt: int, start: datetime, end: datetime
    ) -> tuple[dict[str, float], int | None]:
        """Summed phase seconds and the highest global step the attempt published (empty when it published none)."""
        dims = [
            {"Name": "TrialId", "Value": trial_id},
            {"Name": "Run", "Value": run},
            {"Name": "Attempt", "Value": str(attempt)},
        ]
        queries: list[dict[str, Any]] = []
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
