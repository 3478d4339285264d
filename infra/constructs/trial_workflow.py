"""The trial workflow (Step Functions Standard): resolve cache → run the tracks → settle costs, report, status.

```
PlanTracks → HasTrn2Track? ─yes→ ResolveCompileCache ─┐
                           └no──→ NoCompileCache ─────┴→ RunTracks (Parallel)
   GPU branch : GpuTrack?  → SubmitGpuJob (.sync)                        → {run: gpu, ...}
   Trn2 branch: Trn2Track? → SubmitTrn2Job (.sync) ─Catch→ SubmitGpuFallbackJob (.sync, resumes trn2's run dir)
→ CloseTrialCosts → BuildTrialReport → SetTrialStatus (SUCCEEDED)     any settle failure → SetTrialStatus (FAILED)
```
Each branch outputs ``{"run", "status": SUCCEEDED|FAILED|SKIPPED, "job_id", "fallback"}``. A track the trial does
not have is SKIPPED (the Choice reads the execution input's ``tracks``).
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_batch as batch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from infra.config import Track
from infra.constructs.nag import acknowledge

BATCH_RETRY_ERRORS = ["Batch.AWSBatchException", "Batch.ServerException"]
JsonPath = sfn.JsonPath


class TrialWorkflow(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, resolve_compile_cache: lambda_.IFunction,
                 close_trial_costs: lambda_.IFunction, build_trial_report: lambda_.IFunction,
                 set_trial_status: lambda_.IFunction, queues: dict[Track, batch.IJobQueue],
                 job_definitions: dict[Track, batch.IJobDefinition], timeout: cdk.Duration,
                 log_retention: logs.RetentionDays) -> None:
        super().__init__(scope, construct_id)
        self._queues = queues
        self._job_definitions = job_definitions
        self._functions = [resolve_compile_cache, close_trial_costs, build_trial_report, set_trial_status]

        plan = sfn.Pass(self, "PlanTracks", result_path="$.plan", parameters={
            "gpu": JsonPath.array_contains(JsonPath.list_at("$.tracks"), "gpu"),
            "trn2": JsonPath.array_contains(JsonPath.list_at("$.tracks"), "trn2"),
        })
        resolve = self._invoke("ResolveCompileCache", resolve_compile_cache, "$.cache", {
            "trial_id": JsonPath.string_at("$.trial_id"), "spec_uri": JsonPath.string_at("$.spec_uri"),
        })
        no_cache = sfn.Pass(self, "NoCompileCache", result_path="$.cache", parameters={
            "cache_url": "", "cache_key": "", "prefix": "", "warm": False, "failed_before": False,
        })

        run_tracks = sfn.Parallel(self, "RunTracks", result_path="$.runs")
        run_tracks.branch(self._gpu_branch())
        run_tracks.branch(self._trn2_branch())

        close = self._invoke("CloseTrialCosts", close_trial_costs, "$.costs", {
            "trial_id": JsonPath.string_at("$.trial_id"), "runs": JsonPath.list_at("$.runs"),
        })
        report = self._invoke("BuildTrialReport", build_trial_report, "$.report", {
            "trial_id": JsonPath.string_at("$.trial_id"),
        })
        completed = self._invoke("SetTrialStatus", set_trial_status, "$.status", {
            "trial_id": JsonPath.string_at("$.trial_id"), "status": "SUCCEEDED",
        })
        failed = self._invoke("SetTrialStatusFailed", set_trial_status, "$.status", {
            "trial_id": JsonPath.string_at("$.trial_id"), "status": "FAILED",
            "cause": JsonPath.string_at("$.error.Cause"),
        }).next(sfn.Fail(self, "TrialFailed", error="TrialFailed", cause="a settle step failed; see SetTrialStatus"))
        for step in (resolve, close, report):
            step.add_catch(failed, errors=["States.ALL"], result_path="$.error")

        after_cache = run_tracks.next(close).next(report).next(completed).next(sfn.Succeed(self, "TrialSettled"))
        definition = plan.next(
            sfn.Choice(self, "HasTrn2Track")
            .when(sfn.Condition.boolean_equals("$.plan.trn2", True), resolve.next(after_cache))
            .otherwise(no_cache.next(after_cache))
        )
        self.log_group = logs.LogGroup(self, "Logs", retention=log_retention)
        self.state_machine = sfn.StateMachine(
            self, "StateMachine",
            definition_body=sfn.DefinitionBody.from_chainable(definition),
            state_machine_type=sfn.StateMachineType.STANDARD,
            timeout=timeout,
            tracing_enabled=True,
            logs=sfn.LogOptions(destination=self.log_group, level=sfn.LogLevel.ALL, include_execution_data=True),
        )
        # .sync stops the job when the execution is stopped or times out, which needs batch:TerminateJob;
        # BatchSubmitJob grants only SubmitJob and the events rule, so a cancelled trial would keep its instances.
        self.state_machine.add_to_role_policy(iam.PolicyStatement(
            actions=["batch:TerminateJob"],
            resources=[cdk.Stack.of(self).format_arn(service="batch", resource="job", resource_name="*")],
        ))

    def acknowledge_role_findings(self) -> None:
        policy = self.state_machine.role.node.find_child("DefaultPolicy")
        stack = cdk.Stack.of(self)
        acknowledge(policy, "AwsSolutions-IAM5[Resource::*]",
                    "log delivery (logging ALL) and X-Ray tracing actions have no resource-level permissions")
        acknowledge(policy, "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:batch:<AWS::Region>:"
                            "<AWS::AccountId>:job-definition/*]",
                    "BatchSubmitJob grants SubmitJob on job-definition/* because every update adds a revision; "
                    "where jobs run is fixed by the two queue ARNs in the same statement")
        acknowledge(policy, "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:batch:<AWS::Region>:"
                            "<AWS::AccountId>:job/*]",
                    "TerminateJob targets job ids that exist only at run time; it is what stops a cancelled "
                    "trial's instances")
        for fn in self._functions:
            logical_id = stack.resolve(fn.node.default_child.logical_id)  # type: ignore[union-attr]
            acknowledge(policy, f"AwsSolutions-IAM5[Resource::<{logical_id}.Arn>:*]",
                        "LambdaInvoke grants the function's versions and aliases (ARN:*) of this one function")

    # ---- steps ---------------------------------------------------------------------------------------------
    def _invoke(self, construct_id: str, fn: lambda_.IFunction, result_path: str,
                payload: dict[str, object]) -> tasks.LambdaInvoke:
        return tasks.LambdaInvoke(self, construct_id, lambda_function=fn,
                                  payload=sfn.TaskInput.from_object(payload),
                                  payload_response_only=True, result_path=result_path)

    def _submit(self, construct_id: str, *, run: str, track: Track, queue: Track, run_dir: str,
                fallback: bool, extra_env: dict[str, str] | None = None) -> tasks.BatchSubmitJob:
        environment = {
            "DUALTRACK_TRIAL_ID": JsonPath.string_at("$.trial_id"),
            "DUALTRACK_RUN": run,
            "DUALTRACK_TRACK": track,
            "DUALTRACK_SPEC_URI": JsonPath.string_at("$.spec_uri"),
            "DUALTRACK_RUN_DIR": JsonPath.string_at(run_dir),
            **(extra_env or {}),
        }
        submit = tasks.BatchSubmitJob(
            self, construct_id,
            job_name=JsonPath.format(f"{{}}-{run}", JsonPath.string_at("$.trial_id")),
            job_queue_arn=self._queues[queue].job_queue_arn,
            job_definition_arn=self._job_definitions[track].job_definition_arn,
            container_overrides=tasks.BatchContainerOverrides(environment=environment),
            attempts=JsonPath.number_at("$.max_attempts"),
            timeout=cdk.Duration.seconds(JsonPath.number_at("$.attempt_timeout_s")),
            tags={"dualtrack:trial": JsonPath.string_at("$.trial_id"), "dualtrack:run": run},
            integration_pattern=sfn.IntegrationPattern.RUN_JOB,
            result_selector={"run": run, "status": "SUCCEEDED", "job_id": JsonPath.string_at("$.JobId"),
                             "fallback": fallback},
        )
        submit.add_retry(errors=BATCH_RETRY_ERRORS, interval=cdk.Duration.seconds(5), max_attempts=6,
                         backoff_rate=2, max_delay=cdk.Duration.minutes(2), jitter_strategy=sfn.JitterType.FULL)
        return submit

    def _outcome(self, construct_id: str, run: str, status: str, fallback: bool) -> sfn.Pass:
        # No job to name: skipped, or the failure came before/without a job description.
        return sfn.Pass(self, construct_id, parameters={"run": run, "status": status, "job_id": "",
                                                        "fallback": fallback})

    def _gpu_branch(self) -> sfn.IChainable:
        submit = self._submit("SubmitGpuJob", run="gpu", track="gpu", queue="gpu", run_dir="$.run_dirs.gpu",
                              fallback=False)
        submit.add_catch(self._outcome("GpuRunFailed", "gpu", "FAILED", False), errors=["States.ALL"],
                         result_path="$.error")
        return (sfn.Choice(self, "GpuTrack")
                .when(sfn.Condition.boolean_equals("$.plan.gpu", True), submit)
                .otherwise(self._outcome("GpuSkipped", "gpu", "SKIPPED", False)))

    def _trn2_branch(self) -> sfn.IChainable:
        trn2 = self._submit("SubmitTrn2Job", run="trn2", track="trn2", queue="trn2", run_dir="$.run_dirs.trn2",
                            fallback=False,
                            extra_env={"NEURON_COMPILE_CACHE_URL": JsonPath.string_at("$.cache.cache_url")})
        # Same spec on the GPU queue, resuming from the newest verified checkpoint the Trn2 run left behind.
        fallback = self._submit("SubmitGpuFallbackJob", run="gpu-fallback", track="gpu", queue="gpu",
                                run_dir="$.run_dirs['gpu-fallback']", fallback=True,
                                extra_env={"DUALTRACK_RESUME_FROM": JsonPath.string_at("$.run_dirs.trn2")})
        fallback.add_catch(self._outcome("GpuFallbackFailed", "gpu-fallback", "FAILED", True),
                           errors=["States.ALL"], result_path="$.error")
        trn2.add_catch(fallback, errors=["States.ALL"], result_path="$.trn2_error")
        return (sfn.Choice(self, "Trn2Track")
                .when(sfn.Condition.boolean_equals("$.plan.trn2", True), trn2)
                .otherwise(self._outcome("Trn2Skipped", "trn2", "SKIPPED", False)))
