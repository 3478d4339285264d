"""The control plane: functions, the trial workflow, the API, event routing, reports topic and monitoring."""

from __future__ import annotations

import json
from typing import Unpack

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from infra.config import StageConfig, Track
from infra.constructs.event_rules import TrialEventRules
from infra.constructs.functions import FunctionFactory
from infra.constructs.monitoring import TrialMonitoring
from infra.constructs.nag import GrantFindings, acknowledge, arn_prefix, arn_ref
from infra.constructs.retention import log_key, retention_days
from infra.constructs.storage import TrialStorage
from infra.constructs.trial_api import TrialApi
from infra.constructs.trial_workflow import TrialWorkflow
from infra.stacks import StackOptions
from lambdas.domain import job_access
from lambdas.domain.trial.job_targets import JobTarget, job_targets_json

# Domains reserved for documentation (RFC 2606): an address there is a placeholder, never read.
PLACEHOLDER_DOMAINS = frozenset({"example.com", "example.net", "example.org"})


class ControlStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str, *, config: StageConfig, storage: TrialStorage,
                 targets: dict[Track, dict[str, JobTarget]],
                 image_versions: dict[Track, dict[str, str]] | None = None,
                 **kwargs: Unpack[StackOptions]) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.config = config
        retention = retention_days(config.log_retention_days)
        self.log_key = log_key(self, "LogsKey", f"dualtrack {config.name}: control-plane logs and queues")
        queue_names = sorted({name for by_type in targets.values() for t in by_type.values()
                              for name in (t.queue, t.compile_queue) if name})
        definition_names = sorted({name for by_type in targets.values() for t in by_type.values()
                                   for name in (t.single_node, *t.multi_node.values())})
        key = kms.Key(self, "TopicKey", enable_key_rotation=True, description="dualtrack report topic")
        # Only this account's alarms in this region may have CloudWatch act for them (confused-deputy conditions), on
        # the key as on the topic.
        alarms_of_this_account = {
            "StringEquals": {"aws:SourceAccount": cdk.Aws.ACCOUNT_ID},
            "ArnLike": {"aws:SourceArn": f"arn:{cdk.Aws.PARTITION}:cloudwatch:{cdk.Aws.REGION}:"
                                         f"{cdk.Aws.ACCOUNT_ID}:alarm:*"},
        }
        # CloudWatch alarms publish to the encrypted topic, so the service must be able to use its key.
        key.add_to_resource_policy(iam.PolicyStatement(
            sid="CloudWatchAlarmsUseTheTopicKey",
            actions=["kms:Decrypt", "kms:GenerateDataKey*"],
            principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")], resources=["*"],
            conditions=alarms_of_this_account,
        ))
        self.topic = sns.Topic(self, "Reports", master_key=key, enforce_ssl=True,
                               display_name="dualtrack trial and cost reports")
        # A topic's policy replaces SNS's default one, and enforce_ssl gives it a policy holding only the TLS Deny:
        # without this statement not one alarm could publish (CloudWatch "Using Amazon CloudWatch alarms", "SNS
        # topic policy"). The functions publish with their own IAM grants (same account).
        self.topic.add_to_resource_policy(iam.PolicyStatement(
            sid="CloudWatchAlarmsPublish",
            principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")], actions=["sns:Publish"],
            resources=[self.topic.topic_arn],
            conditions=alarms_of_this_account,
        ))
        if config.alarm_email:
            subscription = self.topic.add_subscription(subscriptions.EmailSubscription(config.alarm_email))
            acknowledge(subscription, "Serverless-SNSRedrivePolicy",
                        "an email subscription for the alarms: a notification SNS cannot deliver would sit in a "
                        "queue no one reads, while the alarm itself stays in ALARM state in CloudWatch")

        environment = {
            "TRIALS_TABLE": storage.trials.table_name,
            "USAGE_TABLE": storage.usage.table_name,
            "LEDGER_TABLE": storage.ledger.table_name,
            "CACHE_REGISTRY_TABLE": storage.cache_registry.table_name,
            "IDEMPOTENCY_TABLE": storage.idempotency.table_name,
            "ARTIFACTS_BUCKET": storage.artifacts.bucket_name,
            "CACHE_BUCKET": storage.compile_cache.bucket_name,
            "REPORT_TOPIC_ARN": self.topic.topic_arn,
            # The stage's own region (a stage that names none: the region it is deployed to), never another's.
            "PRICE_REGION": config.pricing_region or cdk.Aws.REGION,
            "CACHE_RETENTION_DAYS": str(config.cache_retention_days),
        }
        # Where the API sends each run: per track and instance type, the queue and job definitions (by name).
        api_environment = {
            "JOB_TARGETS": json.dumps(job_targets_json({str(t): by_type for t, by_type in targets.items()}),
                                     sort_keys=True),
            "ATTEMPT_TIMEOUT_S": str(config.attempt_timeout_s),
            "COMPILE_TIMEOUT_S": str(config.compile_timeout_s),
            "DATA_BUCKETS": ",".join(config.data_buckets),
            "MAX_ATTEMPTS": str(config.max_attempts),
            "GOVERNANCE": config.governance.model_dump_json(exclude_defaults=True),
            "IMAGE_VERSIONS": json.dumps(image_versions or {}, sort_keys=True),
        }
        overrides = config.priced_overrides()  # with each held or Spot type's capacity, so queue time is billed
        if overrides:
            environment["PRICE_OVERRIDES"] = json.dumps(overrides, sort_keys=True)
        self.functions = FunctionFactory(self, "Functions", environment=environment, log_retention=retention,
                                         log_key=self.log_key)
        make = self.functions.function
        resolve = make("resolve_compile_cache", description="workflow: compile-cache URL and warm/cold state",
                       environment={"IMAGE_VERSIONS": json.dumps(image_versions or {}, sort_keys=True)})
        close = make("close_trial_costs", timeout_s=120, memory_mib=1024, description="workflow: per-run costs")
        report = make("build_trial_report", timeout_s=300, memory_mib=1024, description="workflow: trial report")
        status = make("set_trial_status", description="workflow: trial status")
        on_job = make("on_batch_job_state", asynchronous=True, timeout_s=60,
                      description="Batch Job State Change → run ledger")
        on_artifact = make("on_artifact_created", asynchronous=True, timeout_s=60,
                           description="S3 Object Created → ledger and compile-cache registry")
        cost_report = make("scheduled_cost_report", asynchronous=True, timeout_s=300, memory_mib=1024,
                           description="scheduled cost report → S3 and SNS",
                           environment={"COST_REPORT_PERIOD": config.cost_report_period,
                                        "GOVERNANCE": api_environment["GOVERNANCE"]})
        api_fn = make("on_trial_api", timeout_s=29, description="trial API", environment=api_environment)
        reconciler = make("reconcile_trials", asynchronous=True, timeout_s=300,
                          description="schedule → finish pending stops and cut-short starts")
        self.writer_role, self.credentials_function = self._job_credentials(config, storage, self.functions)

        self._grant_data_access(storage, resolve=resolve, close=close, report=report, status=status,
                                on_job=on_job, on_artifact=on_artifact, cost_report=cost_report, api_fn=api_fn)

        self.workflow = TrialWorkflow(
            self, "Workflow",
            resolve_compile_cache=resolve, close_trial_costs=close, build_trial_report=report,
            set_trial_status=status,
            queue_names=queue_names, job_definition_names=definition_names, tracks=config.tracks(),
            timeout=cdk.Duration.seconds(int(config.workflow_timeout_hours * 3600)),
            log_retention=retention, log_key=self.log_key,
        )
        machine = self.workflow.state_machine
        self.workflow.acknowledge_role_findings()
        # Only what the API calls: grant_read would add DescribeStateMachine, DescribeActivity and ListActivities
        # on "*"; describing and stopping its executions is granted with the other stoppers below.
        machine.grant_start_execution(api_fn)
        machine.grant_start_execution(reconciler)  # an approved trial whose start was cut short
        # The API cancels trials; the event functions stop a trial that crosses one of its limits.
        self._grant_bookings(storage, booking=(api_fn, status, on_job, on_artifact, reconciler),
                             reconciler=reconciler, on_job=on_job)
        for stopper in (api_fn, on_job, on_artifact, reconciler):
            stopper.add_environment("STATE_MACHINE_ARN", machine.state_machine_arn)
            machine.grant_execution(stopper, "states:StopExecution", "states:DescribeExecution")
            assert stopper.role is not None
            acknowledge(stopper.role.node.find_child("DefaultPolicy"),
                        f"AwsSolutions-IAM5[Resource::{arn_prefix(self, 'states')}:"
                        'execution:{"Fn::Select":[6,{"Fn::Split":[":",{"Ref":"' + self.resolve(
                            (machine.node.default_child).logical_id) + '"}]}]}:*]',  # type: ignore[union-attr]
                        "CDK grant_execution: describe/stop executions of this one state machine (ids are trial "
                        "ids)")

        self.api = TrialApi(self, "TrialApi", handler=api_fn, principals=config.api_principals,
                            rate_limit=config.api_rate_limit, burst_limit=config.api_burst_limit,
                            log_retention=retention, log_key=self.log_key,
                            cloudwatch_role=config.api_gateway_cloudwatch_role)
        self.events = TrialEventRules(
            self, "Events", on_batch_job_state=on_job, on_artifact_created=on_artifact,
            scheduled_cost_report=cost_report,
            queue_arns=[self.format_arn(service="batch", resource="job-queue", resource_name=name)
                        for name in queue_names],
            queue_key=self.log_key,
            buckets=[storage.artifacts, storage.compile_cache], cost_report_schedule=config.cost_report_schedule,
            compile_cache=resolve, cache_gc_schedule=config.cache_gc_schedule,
            reconcile_trials=reconciler, reconcile_schedule=config.reconcile_schedule,
        )
        self.monitoring = TrialMonitoring(
            self, "Monitoring", topic=self.topic, functions=self.functions.functions,
            dead_letter_queues={"AsyncFailures": self.functions.async_failures,
                                "DeliveryFailures": self.events.dead_letters},
            state_machine=machine,
        )
        self._warn_unread_alarms(config, len(self.monitoring.alarms))
        cdk.CfnOutput(self, "ApiUrl", value=self.api.api.url)
        cdk.CfnOutput(self, "StateMachineArn", value=machine.state_machine_arn)
        cdk.CfnOutput(self, "ReportTopicArn", value=self.topic.topic_arn)

    def _job_credentials(self, config: StageConfig, s: TrialStorage,
                         functions: FunctionFactory) -> tuple[iam.Role, lambda_.Function]:
        """The trial writer role and the function that issues its credentials to training jobs (see
        lambdas/domain/job_access.py). The job roles (compute stack) have no access to trials/ of their own: they
        may only invoke this function, which has a fixed name so they can name it without a cross-stack reference.
        """
        placeholder = "arn:aws:iam::000000000000:role/placeholder"
        vend = functions.function(
            "vend_job_credentials", timeout_s=10, function_name=job_access.function_name(config.name),
            description="training job → credentials for its own trial and run",
            # The response is credentials: never copy it into a trace.
            environment={"WRITER_ROLE_ARN": placeholder, "POWERTOOLS_TRACER_CAPTURE_RESPONSE": "false"})
        assert vend.role is not None
        writer = iam.Role(
            self, "TrialWriterRole",
            description="dualtrack training job: its own trial's prefix (issued with trial and run session tags)",
            assumed_by=iam.SessionTagsPrincipal(iam.ArnPrincipal(vend.role.role_arn)),
            max_session_duration=cdk.Duration.hours(1),
        )
        vend.add_environment("WRITER_ROLE_ARN", writer.role_arn)
        # A session is issued only with both tags, so every policy variable below has a value.
        trust = writer.assume_role_policy
        assert trust is not None
        trust.add_statements(iam.PolicyStatement(
            effect=iam.Effect.DENY, actions=["sts:AssumeRole", "sts:TagSession"],
            principals=[iam.ArnPrincipal(vend.role.role_arn)],
            conditions={"Null": {f"aws:RequestTag/{job_access.TRIAL_TAG}": "true",
                                 f"aws:RequestTag/{job_access.RUN_TAG}": "true"}}))
        trial = f"${{aws:PrincipalTag/{job_access.TRIAL_TAG}}}"
        run = f"${{aws:PrincipalTag/{job_access.RUN_TAG}}}"
        bucket = s.artifacts.bucket_arn
        writer.add_to_principal_policy(iam.PolicyStatement(
            actions=["s3:PutObject"], resources=[f"{bucket}/trials/{trial}/{run}/*"]))
        writer.add_to_principal_policy(iam.PolicyStatement(
            actions=["s3:GetObject"], resources=[f"{bucket}/trials/{trial}/*"]))
        writer.add_to_principal_policy(iam.PolicyStatement(
            actions=["s3:ListBucket"], resources=[bucket],
            conditions={"StringLike": {"s3:prefix": [f"trials/{trial}/*"]}}))
        # The one compile-cache entry the session was issued to build (only that run's session carries the tag; a
        # policy variable naming a tag the session lacks matches nothing, so every other session writes no entry).
        entry = f"neuron/*/*/${{aws:PrincipalTag/{job_access.CACHE_TAG}}}/*"
        writer.add_to_principal_policy(iam.PolicyStatement(
            actions=["s3:PutObject"], resources=[f"{s.compile_cache.bucket_arn}/{entry}"]))
        s.key.grant(writer, "kms:Decrypt", "kms:GenerateDataKey")  # the buckets' SSE-KMS key
        reason = ("objects under the one trial (and, for writes, run) that the session is tagged with: STS session "
                  "tags the credentials function sets after it has verified the job")
        (GrantFindings(writer)
         .wildcard(f"Resource::{arn_ref(writer, s.artifacts)}/trials/<aws:PrincipalTag/{job_access.TRIAL_TAG}>/"
                   f"<aws:PrincipalTag/{job_access.RUN_TAG}>/*", reason)
         .wildcard(f"Resource::{arn_ref(writer, s.artifacts)}/trials/<aws:PrincipalTag/{job_access.TRIAL_TAG}>/*",
                   reason)
         .wildcard(f"Resource::{arn_ref(writer, s.compile_cache)}/neuron/*/*/"
                   f"<aws:PrincipalTag/{job_access.CACHE_TAG}>/*",
                   "objects of the one compile-cache entry the session is tagged with (its 64-hex key): the run the "
                   "workflow sent to compile it; the model and compiler segments are fixed by that key"))
        vend.role.add_to_principal_policy(iam.PolicyStatement(
            actions=["sts:AssumeRole", "sts:TagSession"], resources=[writer.role_arn]))
        s.trials.grant_read_data(vend)
        GrantFindings(vend.role).xray().table_indexes(s.trials)
        self._grant_batch_describe(vend)
        return writer, vend

    def _grant_data_access(self, s: TrialStorage, *, resolve: lambda_.Function, close: lambda_.Function,
                           report: lambda_.Function, status: lambda_.Function, on_job: lambda_.Function,
                           on_artifact: lambda_.Function, cost_report: lambda_.Function,
                           api_fn: lambda_.Function) -> None:
        """Least privilege per function; each grant's wildcard findings are acknowledged next to it."""

        def findings(fn: lambda_.Function) -> GrantFindings:
            assert fn.role is not None
            return GrantFindings(fn.role).xray().kms().table_indexes(s.trials)

        s.trials.grant_read_data(resolve)
        s.cache_registry.grant_read_write_data(resolve)
        s.artifacts.grant_read(resolve, "trials/*")
        s.compile_cache.grant_read(resolve, "neuron/*")
        s.compile_cache.grant_delete(resolve, "neuron/*")  # garbage collection of expired entries
        findings(resolve).s3_read(s.artifacts, "trials/*").s3_read(s.compile_cache, "neuron/*").s3_delete(
            s.compile_cache, "neuron/*")

        for fn in (close, report, cost_report):
            s.ledger.grant_read_write_data(fn)
            s.trials.grant_read_write_data(fn)
            s.cache_registry.grant_read_data(fn)
            s.artifacts.grant_read(fn, "trials/*")
        s.artifacts.grant_put(report, "trials/*")
        s.artifacts.grant_put(cost_report, "reports/*")
        for fn in (report, cost_report):
            self.topic.grant_publish(fn)
        findings(close).s3_read(s.artifacts, "trials/*")
        findings(report).s3_read(s.artifacts, "trials/*").s3_put(s.artifacts, "trials/*")
        findings(cost_report).s3_read(s.artifacts, "trials/*").s3_put(s.artifacts, "reports/*")

        s.trials.grant_read_write_data(status)
        findings(status)

        for fn in (on_job, close):
            self._grant_batch_describe(fn)
        # Settling reads phase seconds for attempts whose summary never arrived; the API reads live step and loss.
        for fn in (on_job, on_artifact, close, api_fn):
            self._grant_metric_reads(fn)

        for fn in (on_job, on_artifact):
            s.ledger.grant_read_write_data(fn)
            s.trials.grant_read_write_data(fn)
            s.cache_registry.grant_read_write_data(fn)
            s.idempotency.grant_read_write_data(fn)
            s.artifacts.grant_read(fn, "trials/*")
        s.compile_cache.grant_read(on_artifact, "neuron/*")
        findings(on_job).s3_read(s.artifacts, "trials/*")
        findings(on_artifact).s3_read(s.artifacts, "trials/*").s3_read(s.compile_cache, "neuron/*")

        # A trial's GPU baseline logs live with its data: the report (and the API, which writes the report of a
        # stopped trial) reads them from the stage's data buckets, never writes there.
        for fn in (report, api_fn):
            self._grant_baseline_reads(fn, findings(fn))

        # The API stores trials; it only reads the ledger (a run's facts and cost) and the compile-cache registry,
        # and keeps no idempotency records (a submission is idempotent by its trial id).
        s.trials.grant_read_write_data(api_fn)
        for table in (s.ledger, s.cache_registry):
            table.grant_read_data(api_fn)
        s.artifacts.grant_read(api_fn, "trials/*")
        s.artifacts.grant_put(api_fn, "trials/*")
        s.compile_cache.grant_read(api_fn, "neuron/*")
        findings(api_fn).s3_read(s.artifacts, "trials/*").s3_put(s.artifacts, "trials/*").s3_read(
            s.compile_cache, "neuron/*")

    def _grant_bookings(self, s: TrialStorage, *, booking: tuple[lambda_.Function, ...],
                        reconciler: lambda_.Function, on_job: lambda_.Function) -> None:
        """The usage table for every function that books or releases a trial's quotas (admission, the end of a
        trial, a stop, a write counted once); the reconciler's reach: trials, the ledger's jobs, and Batch to
        terminate a stopped trial's jobs still running. The run-events function may terminate a job too: one of
        a closed trial, first seen after the stop looked at the trial's jobs."""
        for fn in booking:
            s.usage.grant_read_write_data(fn)
        s.trials.grant_read_write_data(reconciler)
        s.ledger.grant_read_data(reconciler)
        GrantFindings(reconciler.role).xray().kms().table_indexes(s.trials)  # type: ignore[arg-type]
        self._grant_batch_describe(reconciler)
        for fn in (reconciler, on_job):
            policy = iam.Policy(fn, "TerminateJobs", statements=[iam.PolicyStatement(
                actions=["batch:TerminateJob"],
                resources=[self.format_arn(service="batch", resource="job", resource_name="*")])])
            assert fn.role is not None
            fn.role.attach_inline_policy(policy)
            acknowledge(policy, f"AwsSolutions-IAM5[Resource::{arn_prefix(self, 'batch')}:job/*]",
                        "job ids are generated by Batch: a stopped or closed trial's jobs are known only by the ids "
                        "its events reported; terminating changes nothing for a job that has ended")

    def _grant_baseline_reads(self, fn: lambda_.Function, found: GrantFindings) -> None:
        if not self.config.data_buckets:
            return
        fn.add_to_role_policy(iam.PolicyStatement(
            actions=["s3:GetObject"],
            resources=[f"arn:{cdk.Aws.PARTITION}:s3:::{bucket}/*" for bucket in self.config.data_buckets]))
        for bucket in self.config.data_buckets:
            found.wildcard(f"Resource::arn:<AWS::Partition>:s3:::{bucket}/*",
                           "read-only: a trial's GPU baseline logs in a data bucket the stage lists in data_buckets")
        if self.config.data_kms_key_arns:
            fn.add_to_role_policy(iam.PolicyStatement(actions=["kms:Decrypt"],
                                                      resources=list(self.config.data_kms_key_arns)))

    @staticmethod
    def _grant_metric_reads(fn: lambda_.Function) -> None:
        """GetMetricData over the trainer's metrics (it takes no resource-level permissions)."""
        policy = iam.Policy(fn, "MetricReads", statements=[iam.PolicyStatement(
            actions=["cloudwatch:GetMetricData"], resources=["*"],
        )])
        assert fn.role is not None
        fn.role.attach_inline_policy(policy)
        acknowledge(policy, "AwsSolutions-IAM5[Resource::*]",
                    "cloudwatch:GetMetricData supports no resource-level permissions; read-only, used for a run's "
                    "phase seconds and live step/loss")

    @staticmethod
    def _grant_batch_describe(fn: lambda_.Function) -> None:
        """Read a job's own record (attempts, timestamps) and the instance type its queue runs."""
        policy = iam.Policy(fn, "BatchDescribe", statements=[iam.PolicyStatement(
            actions=["batch:DescribeJobs", "batch:DescribeJobQueues", "batch:DescribeComputeEnvironments"],
            resources=["*"],
        )])
        assert fn.role is not None
        fn.role.attach_inline_policy(policy)
        acknowledge(policy, "AwsSolutions-IAM5[Resource::*]",
                    "Batch Describe* actions support no resource-level permissions; read-only, used to settle a "
                    "run from its job's own attempt record")

    def _warn_unread_alarms(self, config: StageConfig, alarms: int) -> None:
        """A stage whose alarms reach no one says so at synth (a warning: ``cdk synth --strict`` fails on it); a
        stage with ``require_alarm_subscriber`` never gets here without a subscriber (infra.config)."""
        if not config.alarm_email:
            cdk.Annotations.of(self.topic).add_warning_v2(
                "dualtrack:alarms-unsubscribed",
                f"the report topic has no subscriber: the stage's {alarms} alarms (failed runs and trials, overdue "
                "stops, function errors, dead letters) notify no one. Set dualtrack:stages."
                f"{config.name}.alarm_email in cdk.json (SNS emails it a confirmation link), or subscribe to the "
                "ReportTopicArn output yourself.")
        elif config.alarm_email.rsplit("@", 1)[-1].lower() in PLACEHOLDER_DOMAINS:
            cdk.Annotations.of(self.topic).add_warning_v2(
                "dualtrack:alarms-placeholder-address",
                f"alarm_email {config.alarm_email} is at a domain reserved for examples (RFC 2606): the stage's "
                f"{alarms} alarms reach no one. Set dualtrack:stages.{config.name}.alarm_email to a real address.")
