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

from lambdas.domain import telemetry

PERIOD = cdk.Duration.minutes(5)


def _metric(name: str, statistic: str = "Sum", period: cdk.Duration = PERIOD) -> cw.IMetric:
    """The metric as its emitters publish it: Powertools adds service=dualtrack-<function module>, so a metric
    published by several functions is several series, summed here (missing series count as 0)."""
    series = {
        f"{name.lower()}{index}": cw.Metric(
            namespace=telemetry.NAMESPACE, metric_name=name, statistic=statistic, period=period,
            dimensions_map={"service": "dualtrack-" + module.replace("_", "-")})
        for index, module in enumerate(telemetry.EMITTERS[name])
    }
    if len(series) == 1:
        return next(iter(series.values()))
    return cw.MathExpression(expression=" + ".join(f"FILL({key}, 0)" for key in series), using_metrics=series,
                             label=name, period=period)


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

        alarm("FailedRuns", _metric(telemetry.RUNS_FAILED), "a trial run ended FAILED")
        alarm("StopsPending", _metric(telemetry.STOPS_OVERDUE, statistic="Maximum"),
              "a trial's stop has been pending past its deadline: its execution or jobs may still be billing")
        alarm("FailedTrials", state_machine.metric_failed(period=PERIOD), "a trial workflow execution failed")
        for name, queue in dead_letter_queues.items():
            alarm(f"{name}Depth", queue.metric_approximate_number_of_messages_visible(period=PERIOD,
                                                                                        statistic="Maximum"),
                  f"events are waiting in the {name} dead-letter queue")
        for module, fn in functions.items():
            alarm(f"{fn.node.id}Errors", fn.metric_errors(period=PERIOD), f"{module} raised errors")

        hit_rate = cw.MathExpression(
            expression="100 * hits / (hits + misses)", label="compile-cache hit rate (%)",
            using_metrics={"hits": _metric(telemetry.CACHE_HITS, period=cdk.Duration.hours(1)),
                           "misses": _metric(telemetry.CACHE_MISSES, period=cdk.Duration.hours(1))},
            period=cdk.Duration.hours(1),
        )
        self.dashboard = cw.Dashboard(self, "Dashboard", default_interval=cdk.Duration.days(7))
        self.dashboard.add_widgets(
            cw.GraphWidget(title="Runs", left=[_metric(telemetry.RUNS_SUCCEEDED), _metric(telemetry.RUNS_FAILED)],
                           width=8),
            cw.GraphWidget(title="Trial cost (USD)",
                           left=[_metric(telemetry.TRIAL_COST_USD, period=cdk.Duration.hours(1))], width=8),
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
