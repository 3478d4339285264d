"""EventBridge routing: Batch job state changes, new artifacts, the cost-report schedule and the compile-cache
garbage-collection schedule, each to one function, with retries and a dead-letter queue for events the target
could not take."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.constructs.functions import dead_letter_queue

# Object keys worth an event: run artefacts (manifests, summaries) and compile-cache entries.
ARTIFACT_PREFIXES = ("trials/", "neuron/")


class TrialEventRules(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, on_batch_job_state: lambda_.IFunction,
                 on_artifact_created: lambda_.IFunction, scheduled_cost_report: lambda_.IFunction,
                 queue_arns: list[str], buckets: list[s3.IBucket], cost_report_schedule: str,
                 compile_cache: lambda_.IFunction, cache_gc_schedule: str, queue_key: kms.IKey,
                 reconcile_trials: lambda_.IFunction, reconcile_schedule: str) -> None:
        super().__init__(scope, construct_id)
        self.dead_letters = dead_letter_queue(self, "DeliveryFailures", queue_key)

        def target(fn: lambda_.IFunction, event: events.RuleTargetInput | None = None) -> targets.LambdaFunction:
            return targets.LambdaFunction(fn, event=event, dead_letter_queue=self.dead_letters, retry_attempts=8,
                                          max_event_age=cdk.Duration.hours(6))

        self.batch_job_state = events.Rule(
            self, "BatchJobState",
            description="Batch Job State Change for dualtrack queues → run ledger",
            event_pattern=events.EventPattern(
                source=["aws.batch"], detail_type=["Batch Job State Change"],
                detail={"jobQueue": list(queue_arns)},
            ),
            targets=[target(on_batch_job_state)],
        )
        self.artifact_created = events.Rule(
            self, "ArtifactCreated",
            description="S3 Object Created under trials/ and neuron/ → ledger and compile-cache registry",
            event_pattern=events.EventPattern(
                source=["aws.s3"], detail_type=["Object Created"],
                detail={"bucket": {"name": [bucket.bucket_name for bucket in buckets]},
                        "object": {"key": [{"prefix": prefix} for prefix in ARTIFACT_PREFIXES]}},
            ),
            targets=[target(on_artifact_created)],
        )
        self.cost_report = events.Rule(
            self, "CostReportSchedule",
            description="periodic cost report",
            schedule=events.Schedule.expression(cost_report_schedule),
            targets=[target(scheduled_cost_report)],
        )
        # Entries unused for CACHE_RETENTION_DAYS are deleted (objects, then the registry item); the function never
        # touches an entry an active trial uses.
        self.cache_gc = events.Rule(
            self, "CompileCacheGcSchedule",
            description="compile-cache garbage collection",
            schedule=events.Schedule.expression(cache_gc_schedule),
            targets=[target(compile_cache, events.RuleTargetInput.from_object({"action": "collect_garbage"}))],
        )

        # A stop left pending (its execution or jobs still running) or a start cut short is finished here.
        self.reconcile = events.Rule(
            self, "ReconcileSchedule",
            description="finish pending trial stops and cut-short starts",
            schedule=events.Schedule.expression(reconcile_schedule),
            targets=[target(reconcile_trials)],
        )

    @property
    def rules(self) -> list[events.Rule]:
        return [self.batch_job_state, self.artifact_created, self.cost_report, self.cache_gc, self.reconcile]
