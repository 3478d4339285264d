"""The trial workflow (Step Functions Standard): resolve cache → run the tracks → settle costs, report, status.

```
PlanTracks → HasTrn2Track? ─yes→ ResolveCompileCache ─┐
                           └no──→ NoCompileCache ─────┴→ RunTracks (Parallel)
   GPU branch : GpuTrack?  → SubmitGpuJob (.sync)                        → {run: gpu, ...}
   Trn2 branch: Trn2Track? → CacheCold? ─yes→ SubmitTrn2CompileJob (.sync, compile queue) ─┐
                                        └no──→ CompileStageNotNeeded ──────────────────────┴→ SubmitTrn2Job (.sync)
                the compile job's or the training job's failure → HasGpuFallback? → SubmitGpuFallbackJob (.sync,
                resumes trn2's run dir) | Trn2RunFailed;  every path → Trn2Runs: [compile outcome, trn2 outcome]
   Scaling branch: ScalingRuns (Inline Map over the input's scaling list, always a list) → SubmitScalingJob (.sync)
                   → ScalingRunSucceeded | ScalingRunFailed → [outcome per scaling run]
   (each Submit*Job behind a *Nodes choice: Submit*MultiNodeJob when the input's jobs.<target>.nodes is present, or
   for a scaling run its item's job.nodes)
→ CloseTrialCosts → BuildTrialReport → SetTrialStatus (SUCCEEDED)     any settle failure → SetTrialStatus (FAILED)
```
Each run's outcome is ``{"run", "status": SUCCEEDED|FAILED|SKIPPED, "job_id", "fallback"}``; the GPU branch outputs
one, the Trainium2 branch a list of two (the warm-up compile stage's, then the training's or the fallback's), the
scaling branch a list with one per scaling run (empty when the trial declares none). A
track the trial does not have is SKIPPED (the Choice reads the execution input's ``tracks``); a trial without a GPU
track has no ``jobs.fallback`` and its Trainium2 failure ends the branch (a path the input lacks would be a
``States.Runtime`` error, which no ``States.ALL`` catcher catches).

The warm-up compile stage runs only when the resolver found no complete cache entry for the trial's key and the
stage has a compile queue (``jobs.compile``): the training job's definition and node count on the compile queue,
with the run name ``trn2-compile`` (the trainer then compiles over a few steps and keeps nothing but the cache
entry) and the stage's compile timeout. A compile failure goes straight to the GPU fallback.

Jobs are submitted by queue and job-definition *name* from the execution input's ``jobs`` (the API picks them for
the trial's instance types from the stage's targets): the job definition's retry strategy (exit 75 and Spot reclaim
retry, everything else exits) stays in force because the submission sends no ``RetryStrategy`` (SubmitJob's would
replace it), and the attempt timeout the input carries is the stage's, or the trial's when that is shorter.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from infra.config import Track
from infra.constructs.nag import acknowledge, arn_prefix
from lambdas.domain.vocabulary import COMPILE_RUN, COMPILE_TARGET

# SubmitJob errors worth another try: Batch's transient server errors, and its throttle. Batch allows 50 SubmitJob
# calls a second per account, a fixed limit, and answers over it with 429 TooManyRequestsException ("How do I
# resolve the Too Many Requests error when I submit an AWS Batch job", AWS Knowledge Center), which Step Functions
# names Batch.TooManyRequestsException: a burst of submissions (docs/capacity.md) backs off instead of failing.
BATCH_RETRY_ERRORS = ["Batch.AWSBatchException", "Batch.ServerException", "Batch.TooManyRequestsException"]
JsonPath = sfn.JsonPath
# The rule Step Functions manages to learn when a .sync Batch job ends (Step Functions' Batch IAM page).
SYNC_EVENTS_RULE = "StepFunctionsGetEventsForBatchJobsRule"


class TrialWorkflow(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, resolve_compile_cache: lambda_.IFunction,
                 close_trial_costs: lambda_.IFunction, build_trial_report: lambda_.IFunction,
                 set_trial_status: lambda_.IFunction, queue_names: list[str], job_definition_names: list[str],
                 tracks: list[Track], timeout: cdk.Duration, log_retention: logs.RetentionDays,
                 log_key: kms.IKey) -> None:
        super().__init__(scope, construct_id)
        self._tracks = tracks
        self._job_definition_names = job_definition_names
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
        run_tracks.branch(self._scaling_branch())
        # Both branches always exist so the output keeps its shape; a track the stage lacks is never planned (the API
        # refuses such trials), and its submit state is replaced by a skip.

        close = self._invoke("CloseTrialCosts", close_trial_costs, "$.costs", {
            "trial_id": JsonPath.string_at("$.trial_id"), "runs": JsonPath.list_at("$.runs"),
        })
        report = self._invoke("BuildTrialReport", build_trial_report, "$.report", {
            "trial_id": JsonPath.string_at("$.trial_id"),
        })
        completed = self._invoke("SetTrialStatus", set_trial_status, "$.status", {
            "trial_id": JsonPath.string_at("$.trial_id"), "status": "SUCCEEDED",
            "settled_usd": JsonPath.string_at("$.costs.total_usd"),
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
        self.log_group = logs.LogGroup(self, "Logs", retention=log_retention, encryption_key=log_key)
        self.state_machine = sfn.StateMachine(
            self, "StateMachine",
            definition_body=sfn.DefinitionBody.from_chainable(definition),
            state_machine_type=sfn.StateMachineType.STANDARD,
            timeout=timeout,
            tracing_enabled=True,
            logs=sfn.LogOptions(destination=self.log_group, level=sfn.LogLevel.ALL, include_execution_data=True),
        )
        self._grant_batch(queue_names, job_definition_names)

    def _grant_batch(self, queue_names: list[str], job_definition_names: list[str]) -> None:
        """What ``batch:submitJob.sync`` needs (Step Functions' Batch IAM page), plus TagResource for the tags the
        submission sends; SubmitJob is limited to this stage's queues and job definitions (by name, any revision)."""
        stack = cdk.Stack.of(self)

        def arn(resource: str, name: str) -> str:
            return stack.format_arn(service="batch", resource=resource, resource_name=name)

        machine = self.state_machine
        machine.add_to_role_policy(iam.PolicyStatement(
            actions=["batch:SubmitJob"],
            resources=[arn("job-queue", name) for name in queue_names]
            + [arn("job-definition", f"{name}{revision}") for name in job_definition_names
               for revision in ("", ":*")],
        ))
        # Tags on SubmitJob are applied by tag-on-create, which Batch authorizes as batch:TagResource on the job.
        machine.add_to_role_policy(iam.PolicyStatement(actions=["batch:TagResource"], resources=[arn("job", "*")]))
        # .sync polls the job and stops it when the execution is stopped or times out (else a cancelled trial would
        # keep its instances); Describe has no resource-level permissions, TerminateJob targets run-time job ids.
        machine.add_to_role_policy(iam.PolicyStatement(actions=["batch:DescribeJobs"], resources=["*"]))
        machine.add_to_role_policy(iam.PolicyStatement(actions=["batch:TerminateJob"], resources=[arn("job", "*")]))
        machine.add_to_role_policy(iam.PolicyStatement(
            actions=["events:PutTargets", "events:PutRule", "events:DescribeRule"],
            resources=[stack.format_arn(service="events", resource="rule", resource_name=SYNC_EVENTS_RULE)],
        ))

    def acknowledge_role_findings(self) -> None:
        policy = self.state_machine.role.node.find_child("DefaultPolicy")
        stack = cdk.Stack.of(self)
        acknowledge(policy, "AwsSolutions-IAM5[Resource::*]",
                    "log delivery (logging ALL) and X-Ray tracing actions have no resource-level permissions")
        batch_arn = arn_prefix(self, "batch")
        acknowledge(policy, f"AwsSolutions-IAM5[Resource::{batch_arn}:job/*]",
                    "TerminateJob and TagResource target job ids that exist only at run time; they stop a "
                    "cancelled trial's instances and tag its jobs")
        for name in self._job_definition_names:
            acknowledge(policy, f"AwsSolutions-IAM5[Resource::{batch_arn}:job-definition/{name}:*]",
                        "SubmitJob by job-definition name runs its latest revision; every deploy may add one")
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

    def _submit(self, construct_id: str, *, run: str, track: str, target: str, run_dir: str,
                fallback: bool, extra_env: dict[str, str] | None = None, result_path: str | None = None,
                timeout: str = "$.attempt_timeout_s",
                job: str | None = None) -> tuple[sfn.Choice, list[sfn.CustomState]]:
        """``batch:submitJob.sync`` to the queue and job definition the input names for ``target``.

        Written as the states' JSON because queue and definition come from the input (CDK's BatchSubmitJob takes
        fixed ARNs); deliberately no ``RetryStrategy`` (it would replace the job definition's exit-code rules). A
        single-node job gets the run's settings as container environment overrides. A multi-node job (the input
        gives ``nodes``; its definition has that node count) gets them as job parameters, which Batch substitutes
        into its command: Step Functions' Batch integration passes neither node overrides nor anything that would
        reach every node otherwise. Returns the choice to enter and both submit states (for catchers).

        ``run`` and ``track`` may be paths into the state's input (a scaling run's, inside the Map state), and
        ``job`` the path of the placement (default ``$.jobs.<target>``); a dynamic run's outcome then leaves its
        ``run`` to the state after (a ResultSelector sees only the job's description).
        """
        job = job or f"$.jobs.{target}"
        dynamic_run = _dynamic(run)
        environment = {
            "DUALTRACK_TRIAL_ID": "$.trial_id",
            "DUALTRACK_RUN": run,
            "DUALTRACK_TRACK": track,
            "DUALTRACK_SPEC_URI": "$.spec_uri",
            "DUALTRACK_RUN_DIR": run_dir,
            # No secret: a job proves it is this job with its own task's role credentials, which no job setting
            # holds (lambdas/domain/job_access.py), so reading job descriptions grants nothing.
            **(extra_env or {}),
        }
        job_parameters = {"spec_uri": "$.spec_uri", "run_dir": run_dir, "run": run, "trial_id": "$.trial_id",
                          **({"resume_from": extra_env["DUALTRACK_RESUME_FROM"]}
                             if extra_env and "DUALTRACK_RESUME_FROM" in extra_env else {}),
                          **({"compile_cache_url": extra_env["NEURON_COMPILE_CACHE_URL"]}
                             if extra_env and "NEURON_COMPILE_CACHE_URL" in extra_env else {})}
        common = {
            "JobName.$": (f"States.Format('{{}}-{{}}', $.trial_id, {run})" if dynamic_run
                          else f"States.Format('{{}}-{run}', $.trial_id)"),
            "JobQueue.$": f"{job}.queue",
            "JobDefinition.$": f"{job}.definition",
            "Timeout": {"AttemptDurationSeconds.$": timeout},
            "Tags": {"dualtrack:trial.$": "$.trial_id", **({"dualtrack:run.$": run} if dynamic_run
                                                             else {"dualtrack:run": run})},
        }
        parameters = {
            "single": {**common, "ContainerOverrides": {"Environment": [
                {"Name": name, "Value.$": value} if _dynamic(value) else {"Name": name, "Value": value}
                for name, value in environment.items()
            ]}},
            "multi": {**common, "Parameters": {
                (f"{name}.$" if _dynamic(value) else name): value for name, value in job_parameters.items()
            }},
        }
        states: dict[str, sfn.CustomState] = {}
        for kind, suffix in (("single", ""), ("multi", "MultiNode")):
            state = sfn.CustomState(self, construct_id.replace("Job", f"{suffix}Job"), state_json={
                "Type": "Task",
                "Resource": f"arn:{cdk.Aws.PARTITION}:states:::batch:submitJob.sync",
                "Parameters": parameters[kind],
                "ResultSelector": {**({} if dynamic_run else {"run": run}), "status": "SUCCEEDED",
                                   "job_id.$": "$.JobId", "fallback": fallback},
                **({"ResultPath": result_path} if result_path else {}),
            })
            state.add_retry(errors=BATCH_RETRY_ERRORS, interval=cdk.Duration.seconds(5), max_attempts=6,
                            backoff_rate=2, max_delay=cdk.Duration.minutes(2), jitter_strategy=sfn.JitterType.FULL)
            states[kind] = state
        choice = (sfn.Choice(self, construct_id.replace("Submit", "").replace("Job", "Nodes"))
                  .when(sfn.Condition.is_present(f"{job}.nodes"), states["multi"])
                  .otherwise(states["single"]))
        return choice, [states["single"], states["multi"]]

    def _outcome(self, construct_id: str, run: str, status: str, fallback: bool,
                 result_path: str | None = None) -> sfn.Pass:
        # No job to name: skipped, or the failure came before/without a job description.
        return sfn.Pass(self, construct_id, parameters={"run": run, "status": status, "job_id": "",
                                                        "fallback": fallback}, result_path=result_path)

    def _gpu_branch(self) -> sfn.IChainable:
        skipped = self._outcome("GpuSkipped", "gpu", "SKIPPED", False)
        if "gpu" not in self._tracks:
            return skipped
        submit, states = self._submit("SubmitGpuJob", run="gpu", track="gpu", target="gpu",
                                      run_dir="$.run_dirs.gpu", fallback=False)
        failed = self._outcome("GpuRunFailed", "gpu", "FAILED", False)
        for state in states:
            state.add_catch(failed, errors=["States.ALL"], result_path="$.error")
        return (sfn.Choice(self, "GpuTrack")
                .when(sfn.Condition.boolean_equals("$.plan.gpu", True), submit)
                .otherwise(skipped))

    def _trn2_branch(self) -> sfn.IChainable:
        """Warm-up compile stage when the cache is cold, then the training job; either failing hands over to the GPU
        fallback. Every path past the skip ends in ``Trn2Runs``, which outputs both runs' outcomes as a list."""
        skipped = self._outcome("Trn2Skipped", "trn2", "SKIPPED", False)
        if "trn2" not in self._tracks:
            return skipped
        runs = sfn.Pass(self, "Trn2Runs", parameters={"runs.$": "States.Array($.compile, $.result)"},
                        output_path="$.runs")
        trn2, trn2_states = self._submit("SubmitTrn2Job", run="trn2", track="trn2", target="trn2",
                                         run_dir="$.run_dirs.trn2", fallback=False,
                                         extra_env={"NEURON_COMPILE_CACHE_URL": "$.cache.cache_url"},
                                         result_path="$.result")
        for state in trn2_states:
            state.next(runs)
        failed = self._outcome("Trn2RunFailed", "trn2", "FAILED", False, result_path="$.result").next(runs)
        if "gpu" in self._tracks:
            # Same spec on the GPU queue, resuming from the newest verified checkpoint the Trn2 run left behind.
            fallback, fallback_states = self._submit(
                "SubmitGpuFallbackJob", run="gpu-fallback", track="gpu", target="fallback",
                run_dir="$.run_dirs['gpu-fallback']", fallback=True,
                extra_env={"DUALTRACK_RESUME_FROM": "$.run_dirs.trn2"}, result_path="$.result")
            fallback_failed = self._outcome("GpuFallbackFailed", "gpu-fallback", "FAILED", True,
                                            result_path="$.result").next(runs)
            for state in fallback_states:
                state.add_catch(fallback_failed, errors=["States.ALL"], result_path="$.error")
                state.next(runs)
            after_failure: sfn.IChainable = (
                sfn.Choice(self, "HasGpuFallback")
                .when(sfn.Condition.is_present("$.jobs.fallback"), fallback)
                .otherwise(failed))
        else:
            after_failure = failed
        for state in trn2_states:
            state.add_catch(after_failure, errors=["States.ALL"], result_path="$.trn2_error")

        # The warm-up compile stage: a compile-only job on the compile queue, same definition and node count as the
        # training job, when the resolver found no complete entry for the key. Its failure fails fast to the
        # fallback (the training job would only fail the same compile again, at training's price).
        compile_, compile_states = self._submit(
            "SubmitTrn2CompileJob", run=COMPILE_RUN, track="trn2", target=COMPILE_TARGET,
            run_dir=f"$.run_dirs['{COMPILE_RUN}']", fallback=False,
            extra_env={"NEURON_COMPILE_CACHE_URL": "$.cache.cache_url"}, result_path="$.compile",
            timeout="$.compile_timeout_s")
        compile_failed = self._outcome("Trn2CompileFailed", COMPILE_RUN, "FAILED", False,
                                       result_path="$.compile").next(after_failure)
        for state in compile_states:
            state.add_catch(compile_failed, errors=["States.ALL"], result_path="$.compile_error")
            state.next(trn2)
        not_needed = self._outcome("CompileStageNotNeeded", COMPILE_RUN, "SKIPPED", False,
                                   result_path="$.compile").next(trn2)
        cold = sfn.Condition.and_(sfn.Condition.is_present(f"$.jobs.{COMPILE_TARGET}"),
                                  sfn.Condition.boolean_equals("$.cache.warm", False))
        stage = sfn.Choice(self, "CacheCold").when(cold, compile_).otherwise(not_needed)
        return (sfn.Choice(self, "Trn2Track")
                .when(sfn.Condition.boolean_equals("$.plan.trn2", True), stage)
                .otherwise(skipped))

    def _scaling_branch(self) -> sfn.IChainable:
        """Each scaling run (the input's ``scaling``: a track at another node count, ``gpu-n1``) as one Batch job,
        all at once beside the main runs; none without scaling runs (an empty list). No fallback and no compile
        stage: a failed scaling run is reported failed, and a Trainium2 scaling run compiles its own graphs in its
        job (its data-parallel degree is part of the compile-cache key, so the main run's entry is not its)."""
        item = "$.scaling"
        submit, states = self._submit("SubmitScalingJob", run=f"{item}.run", track=f"{item}.track",
                                      target="scaling", run_dir=f"{item}.run_dir", fallback=False,
                                      result_path="$.result", job=f"{item}.job")
        done = sfn.Pass(self, "ScalingRunSucceeded", parameters={
            "run.$": f"{item}.run", "status": "SUCCEEDED", "job_id.$": "$.result.job_id", "fallback": False})
        failed = sfn.Pass(self, "ScalingRunFailed", parameters={
            "run.$": f"{item}.run", "status": "FAILED", "job_id": "", "fallback": False})
        for state in states:
            state.add_catch(failed, errors=["States.ALL"], result_path="$.error")
            state.next(done)
        runs = sfn.Map(self, "ScalingRuns", items_path=JsonPath.string_at("$.scaling"), item_selector={
            "trial_id": JsonPath.string_at("$.trial_id"), "spec_uri": JsonPath.string_at("$.spec_uri"),
            "attempt_timeout_s": JsonPath.number_at("$.attempt_timeout_s"),
            "scaling": JsonPath.string_at("$$.Map.Item.Value"),
        })
        runs.item_processor(submit)
        return runs


def _dynamic(value: str) -> bool:
    """A value Step Functions evaluates (a JSONPath or an intrinsic function): its key takes the ``.$`` suffix."""
    return value.startswith("$") or value.startswith("States.")
