"""The dashboard (runs, cost, compile-cache hit rate, failures) and the alarms that page the report topic."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

NAMESPACE = "Dualtrack"
# The metrics this dashboard and the alarms read, and the function that publishes each (Powertools Metrics adds
# the dimension service=<POWERTOOLS_SERVICE_NAME>, i.e. "dualtrack-<module>", so the emitter is part of the name).
RUNS_SUCCEEDED, RUNS_FAILED = "RunsSucceeded", "RunsFailed"
TRIAL_COST_USD = "TrialCostUSD"
CACHE_HITS, CACHE_MISSES = "CompileCacheHits", "CompileCacheMisses"
EMITTERS = {
    RUNS_SUCCEEDED: "on_batch_job_state", RUNS_FAILED: "on_batch_job_state",
    TRIAL_COST_USD: "close_trial_costs",
    CACHE_HITS: "resolve_compile_cache", CACHE_MISSES: "resolve_compile_cache",
}
PERIOD = cdk.Duration.minutes(5)


def _metric(name: str, statistic: str = "Sum", period: cdk.Duration = PERIOD) -> cw.Metric:
    service = "dualtrack-" + EMITTERS[name].replace("_", "-")
    return cw.Metric(namespace=NAMESPACE, metric_name=name, statistic=statistic, period=period,
                     dimensions_map={"service": service})


class TrialMonitoring(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, topic: sns.ITopic,
                 functions: dict[str, lambda_.Function], dead_letter_queues: dict[str, sqs.IQueue],
                 state_machine: sfn.StateMachine) -> None:
        super().__init__(scope, construct_id)
        action = cw_actions.SnsAction(topic)
        self.alarms: list[cw.Alarm] = []

        def alarm(construct_id: str, metric: cw.IMetric, description: str) -> cw.Alarm:
            created = cw.Alarm(self, construct_id, metric=metric, threshold=1, evaluation_periods=1,
                               comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                               treat_missing_data=cw.TreatMissingData.NOT_BREACHING, alarm_description=description)
            created.add_alarm_action(action)
            self.alarms.append(created)
            return created

        alarm("FailedRuns", _metric(RUNS_FAILED), "a trial run ended FAILED")
        alarm("FailedTrials", state_machine.metric_failed(period=PERIOD), "a trial workflow execution failed")
        for name, queue in dead_letter_queues.items():
            alarm(f"{name}Depth", queue.metric_approximate_number_of_messages_visible(period=PERIOD,
                                                                                        statistic="Maximum"),
                  f"events are waiting in the {name} dead-letter queue")
        for module, fn in functions.items():
            alarm(f"{fn.node.id}Errors", fn.metric_errors(period=PERIOD), f"{module} raised errors")

        hit_rate = cw.MathExpression(
            expression="100 * hits / (hits + misses)", label="compile-cache hit rate (%)",
            using_metrics={"hits": _metric(CACHE_HITS, period=cdk.Duration.hours(1)),
                           "misses": _metric(CACHE_MISSES, period=cdk.Duration.hours(1))},
            period=cdk.Duration.hours(1),
        )
        self.dashboard = cw.Dashboard(self, "Dashboard", default_interval=cdk.Duration.days(7))
        self.dashboard.add_widgets(
            cw.GraphWidget(title="Runs", left=[_metric(RUNS_SUCCEEDED), _metric(RUNS_FAILED)], width=8),
            cw.GraphWidget(title="Trial cost (USD)", left=[_metric(TRIAL_COST_USD, period=cdk.Duration.hours(1))],
                           width=8),
            cw.GraphWidget(title="Compile-cache hit rate (%)", left=[hit_rate], width=8),
        )
        self.dashboard.add_widgets(
            cw.GraphWidget(title="Workflow failures",
                           left=[state_machine.metric_failed(period=PERIOD),
                                 state_machine.metric_timed_out(period=PERIOD),
                                 state_machine.metric_aborted(period=PERIOD)], width=8),
            cw.GraphWidget(title="Lambda errors", left=[fn.metric_errors(period=PERIOD) for fn in functions.values()],
                           width=8),
            cw.GraphWidget(title="Dead-letter depth",
                           left=[q.metric_approximate_number_of_messages_visible(period=PERIOD)
                                 for q in dead_letter_queues.values()], width=8),
            cw.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms), width=24),
        )
