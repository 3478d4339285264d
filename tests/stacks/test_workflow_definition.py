"""The trial workflow's definition, asserted as JSON."""

from __future__ import annotations

import json
from typing import Any

from aws_cdk.assertions import Capture, Match, Template

# Batch throttles SubmitJob at 50 calls a second per account (fixed) with 429 TooManyRequestsException
# (https://repost.aws/knowledge-center/aws-batch-requests-error); a .sync task surfaces it as
# Batch.TooManyRequestsException, so a burst of trials must retry it with jittered backoff, not fail.
BATCH_RETRY = {"ErrorEquals": ["Batch.AWSBatchException", "Batch.ServerException", "Batch.TooManyRequestsException"],
               "IntervalSeconds": 5, "MaxAttempts": 6, "BackoffRate": 2, "MaxDelaySeconds": 120,
               "JitterStrategy": "FULL"}


def _definition(control: dict[str, Any]) -> dict[str, Any]:
    capture = Capture()
    Template.from_json(control).has_resource_properties("AWS::StepFunctions::StateMachine",
                                                        {"DefinitionString": capture})
    parts = capture.as_object()["Fn::Join"][1]
    # Tokens (queue/job-definition imports, function ARNs) become readable placeholders.
    text = "".join(p if isinstance(p, str) else json.dumps(json.dumps(p))[1:-1] for p in parts)
    return json.loads(text)  # type: ignore[no-any-return]


def test_top_level_flow(control: dict[str, Any]) -> None:
    states = _definition(control)["States"]
    assert _definition(control)["StartAt"] == "PlanTracks"
    assert states["PlanTracks"]["Parameters"] == {"gpu.$": "States.ArrayContains($.tracks, 'gpu')",
                                                  "trn2.$": "States.ArrayContains($.tracks, 'trn2')"}
    assert states["HasTrn2Track"]["Choices"][0] == {"Variable": "$.plan.trn2", "BooleanEquals": True,
                                                    "Next": "ResolveCompileCache"}
    assert states["ResolveCompileCache"]["Next"] == "RunTracks"
    assert states["ResolveCompileCache"]["Parameters"] == {"trial_id.$": "$.trial_id", "spec_uri.$": "$.spec_uri"}
    assert states["RunTracks"]["Type"] == "Parallel" and states["RunTracks"]["ResultPath"] == "$.runs"
    assert states["RunTracks"]["Next"] == "CloseTrialCosts"
    assert states["CloseTrialCosts"]["Parameters"] == {"trial_id.$": "$.trial_id", "runs.$": "$.runs"}
    assert states["CloseTrialCosts"]["Next"] == "BuildTrialReport"
    assert states["BuildTrialReport"]["Next"] == "SetTrialStatus"
    assert states["SetTrialStatus"]["Parameters"]["status"] == "SUCCEEDED"
    for step in ("ResolveCompileCache", "CloseTrialCosts", "BuildTrialReport"):
        assert states[step]["Catch"] == [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error",
                                          "Next": "SetTrialStatusFailed"}]
    assert states["SetTrialStatusFailed"]["Parameters"]["status"] == "FAILED"


def test_definition_serialized_matches(control: dict[str, Any]) -> None:
    # The same contract through Match.serialized_json on the rendered (token-free) definition.
    definition = json.dumps(_definition(control))
    Template.from_json({"Resources": {"D": {"Type": "Test::Definition", "Properties": {"Body": definition}}}}) \
        .has_resource_properties("Test::Definition", {"Body": Match.serialized_json(Match.object_like({
            "StartAt": "PlanTracks",
            "States": Match.object_like({"TrialSettled": {"Type": "Succeed"},
                                         "TrialFailed": Match.object_like({"Type": "Fail"})}),
        }))})


def _environment(state: dict[str, Any]) -> dict[str, str]:
    overrides = state["Parameters"]["ContainerOverrides"]["Environment"]
    return {e["Name"]: e.get("Value.$", e.get("Value")) for e in overrides}


def _branches(control: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    gpu, trn2, _scaling = _definition(control)["States"]["RunTracks"]["Branches"]
    return gpu["States"], trn2["States"]


def _scaling_map(control: dict[str, Any]) -> dict[str, Any]:
    *_, scaling = _definition(control)["States"]["RunTracks"]["Branches"]
    assert scaling["StartAt"] == "ScalingRuns" and list(scaling["States"]) == ["ScalingRuns"]
    return scaling["States"]["ScalingRuns"]  # type: ignore[no-any-return]


def test_gpu_branch(control: dict[str, Any]) -> None:
    gpu, _ = _branches(control)
    assert gpu["GpuTrack"]["Choices"][0]["Variable"] == "$.plan.gpu"
    assert gpu["GpuSkipped"]["Parameters"] == {"run": "gpu", "status": "SKIPPED", "job_id": "", "fallback": False}
    submit = gpu["SubmitGpuJob"]
    assert submit["Resource"].endswith(":states:::batch:submitJob.sync")
    assert submit["Retry"] == [BATCH_RETRY]
    assert submit["ResultSelector"] == {"run": "gpu", "status": "SUCCEEDED", "job_id.$": "$.JobId",
                                        "fallback": False}
    params = submit["Parameters"]
    assert params["JobName.$"] == "States.Format('{}-gpu', $.trial_id)"
    # No RetryStrategy: SubmitJob's would replace the job definition's exit-code rules.
    assert "RetryStrategy" not in params
    assert params["Timeout"] == {"AttemptDurationSeconds.$": "$.attempt_timeout_s"}
    assert params["Tags"] == {"dualtrack:trial.$": "$.trial_id", "dualtrack:run": "gpu"}
    assert params["JobQueue.$"] == "$.jobs.gpu.queue" and params["JobDefinition.$"] == "$.jobs.gpu.definition"
    assert params["ContainerOverrides"]["Environment"] == [
        {"Name": "DUALTRACK_TRIAL_ID", "Value.$": "$.trial_id"},
        {"Name": "DUALTRACK_RUN", "Value": "gpu"},
        {"Name": "DUALTRACK_TRACK", "Value": "gpu"},
        {"Name": "DUALTRACK_SPEC_URI", "Value.$": "$.spec_uri"},
        {"Name": "DUALTRACK_RUN_DIR", "Value.$": "$.run_dirs.gpu"},
    ]  # no secret: a job proves who it is with its own task's credentials (lambdas/domain/job_access.py)
    assert submit["Catch"][0]["Next"] == "GpuRunFailed"


def test_trn2_branch_falls_back_to_gpu(control: dict[str, Any]) -> None:
    _, trn2 = _branches(control)
    submit = trn2["SubmitTrn2Job"]
    env = _environment(submit)
    assert env["NEURON_COMPILE_CACHE_URL"] == "$.cache.cache_url" and env["DUALTRACK_TRACK"] == "trn2"
    assert submit["Parameters"]["JobQueue.$"] == "$.jobs.trn2.queue"
    assert submit["Catch"] == [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.trn2_error",
                                "Next": "HasGpuFallback"}]
    # A trial without a GPU track has no jobs.fallback: reading it would be an uncatchable States.Runtime.
    assert trn2["HasGpuFallback"]["Choices"] == [{"Variable": "$.jobs.fallback", "IsPresent": True,
                                                  "Next": "GpuFallbackNodes"}]
    assert trn2["SubmitTrn2MultiNodeJob"]["Catch"] == submit["Catch"]
    assert trn2["HasGpuFallback"]["Default"] == "Trn2RunFailed"
    fallback = trn2["SubmitGpuFallbackJob"]
    env = _environment(fallback)
    assert env == {"DUALTRACK_TRIAL_ID": "$.trial_id", "DUALTRACK_RUN": "gpu-fallback", "DUALTRACK_TRACK": "gpu",
                   "DUALTRACK_SPEC_URI": "$.spec_uri", "DUALTRACK_RUN_DIR": "$.run_dirs['gpu-fallback']",
                   "DUALTRACK_RESUME_FROM": "$.run_dirs.trn2"}
    assert fallback["Parameters"]["JobQueue.$"] == "$.jobs.fallback.queue"
    assert fallback["Parameters"]["JobDefinition.$"] == "$.jobs.fallback.definition"
    assert fallback["ResultSelector"]["fallback"] is True and fallback["Retry"] == [BATCH_RETRY]
    assert trn2["GpuFallbackFailed"]["Parameters"] == {"run": "gpu-fallback", "status": "FAILED", "job_id": "",
                                                       "fallback": True}
    assert trn2["Trn2Skipped"]["Parameters"]["status"] == "SKIPPED"


def test_multi_node_runs_pass_their_settings_as_job_parameters(control: dict[str, Any]) -> None:
    """A multi-node run goes to the definition for its node count; Step Functions' Batch integration passes
    SubmitJob's ``Parameters`` (https://docs.aws.amazon.com/step-functions/latest/dg/connect-batch.html), which
    Batch substitutes for ``Ref::name`` in the command (https://docs.aws.amazon.com/batch/latest/userguide/job_definition_parameters.html#parameters)."""
    gpu, trn2 = _branches(control)
    for states, prefix, target, extra in ((gpu, "Gpu", "gpu", {}),
                                          (trn2, "Trn2", "trn2", {"compile_cache_url.$": "$.cache.cache_url"}),
                                          (trn2, "GpuFallback", "fallback", {"resume_from.$": "$.run_dirs.trn2"})):
        choice = states[f"{prefix}Nodes"]
        assert choice["Choices"] == [{"Variable": f"$.jobs.{target}.nodes", "IsPresent": True,
                                      "Next": f"Submit{prefix}MultiNodeJob"}]
        assert choice["Default"] == f"Submit{prefix}Job"
        single, multi = states[f"Submit{prefix}Job"]["Parameters"], states[f"Submit{prefix}MultiNodeJob"]["Parameters"]
        run = single["Tags"]["dualtrack:run"]
        assert multi["Parameters"] == {"spec_uri.$": "$.spec_uri", "run": run, "trial_id.$": "$.trial_id",
                                       "run_dir.$": _environment(states[f"Submit{prefix}Job"])["DUALTRACK_RUN_DIR"],
                                       **extra}
        assert {k: v for k, v in multi.items() if k != "Parameters"} == {
            k: v for k, v in single.items() if k != "ContainerOverrides"}


# ---- the scaling branch: a Map state over the input's scaling runs --------------------------------------------
def test_the_scaling_branch_maps_over_the_inputs_scaling_list(control: dict[str, Any]) -> None:
    """An Inline Map state (Step Functions developer guide, "Using Map state in Inline mode",
    https://docs.aws.amazon.com/step-functions/latest/dg/state-map-inline.html): ``ItemProcessor`` with
    ``ProcessorConfig.Mode`` INLINE, ``StartAt`` and ``States``; no ``MaxConcurrency``, which is 0 (no limit; an
    Inline Map runs up to 40 iterations at once, and a trial has at most 6 scaling runs). ``ItemsPath`` is a
    reference path that must evaluate to a JSON array ("ItemsPath (Map, JSONPath only)",
    https://docs.aws.amazon.com/step-functions/latest/dg/input-output-itemspath.html); the API always sends one
    (``ExecutionInput.payload``). ``ItemSelector`` (not the deprecated ``Parameters`` or ``Iterator``) builds each
    iteration's input from the Map's input and the Context object's ``$$.Map.Item.Value``, each such key ending in
    ``.$`` ("ItemSelector (Map)", https://docs.aws.amazon.com/step-functions/latest/dg/input-output-itemselector.html).
    The branch's output is the Map's: the list of each iteration's outcome, empty for no scaling runs."""
    runs = _scaling_map(control)
    assert runs["Type"] == "Map" and runs["End"] is True
    assert runs["ItemsPath"] == "$.scaling"
    assert runs["ItemSelector"] == {"trial_id.$": "$.trial_id", "spec_uri.$": "$.spec_uri",
                                    "attempt_timeout_s.$": "$.attempt_timeout_s",
                                    "scaling.$": "$$.Map.Item.Value"}
    assert not {"Parameters", "Iterator", "MaxConcurrency", "MaxConcurrencyPath", "ResultPath", "OutputPath",
                "ResultSelector", "InputPath"} & set(runs)
    processor = runs["ItemProcessor"]
    assert processor["ProcessorConfig"] == {"Mode": "INLINE"} and processor["StartAt"] == "ScalingNodes"
    assert set(processor["States"]) == {"ScalingNodes", "SubmitScalingJob", "SubmitScalingMultiNodeJob",
                                        "ScalingRunSucceeded", "ScalingRunFailed"}


def _scaling_states(control: dict[str, Any]) -> dict[str, Any]:
    return _scaling_map(control)["ItemProcessor"]["States"]  # type: ignore[no-any-return]


def test_each_scaling_run_is_submitted_under_its_own_run_name(control: dict[str, Any]) -> None:
    """Each iteration sees only what the ItemSelector gave it (the Inline Map page above), so every path reads the
    item's ``scaling`` or the trial's fields copied beside it. The job is named ``<trial>-<run>`` with ``States.Format``
    and two path arguments (Step Functions' intrinsic functions page,
    https://docs.aws.amazon.com/step-functions/latest/dg/intrinsic-functions.html), tagged with the run through a
    ``.$`` key inside ``Tags`` (a nested object's keys may select paths: "Manipulate parameters in Step Functions
    workflows", https://docs.aws.amazon.com/step-functions/latest/dg/input-output-inputpath-params.html), and
    submitted with no ``RetryStrategy``: SubmitJob's would replace the job definition's exit-code rules
    (https://docs.aws.amazon.com/batch/latest/APIReference/API_SubmitJob.html)."""
    states = _scaling_states(control)
    single, multi = states["SubmitScalingJob"], states["SubmitScalingMultiNodeJob"]
    for state in (single, multi):
        assert state["Type"] == "Task" and state["Resource"].endswith(":states:::batch:submitJob.sync")
        params = state["Parameters"]
        assert params["JobName.$"] == "States.Format('{}-{}', $.trial_id, $.scaling.run)"
        assert params["JobQueue.$"] == "$.scaling.job.queue"
        assert params["JobDefinition.$"] == "$.scaling.job.definition"
        assert params["Timeout"] == {"AttemptDurationSeconds.$": "$.attempt_timeout_s"}
        assert params["Tags"] == {"dualtrack:trial.$": "$.trial_id", "dualtrack:run.$": "$.scaling.run"}
        assert not {"RetryStrategy", "NodeOverrides", "ArrayProperties", "DependsOn"} & set(params)
        assert state["Retry"] == [BATCH_RETRY]
        assert state["ResultPath"] == "$.result" and state["Next"] == "ScalingRunSucceeded"
    assert _environment(single) == {
        "DUALTRACK_TRIAL_ID": "$.trial_id", "DUALTRACK_RUN": "$.scaling.run", "DUALTRACK_TRACK": "$.scaling.track",
        "DUALTRACK_SPEC_URI": "$.spec_uri", "DUALTRACK_RUN_DIR": "$.scaling.run_dir"}
    # Every value is evaluated: a static "Value" here would give each scaling run the same literal.
    assert all("Value.$" in e for e in single["Parameters"]["ContainerOverrides"]["Environment"])
    assert multi["Parameters"]["Parameters"] == {"spec_uri.$": "$.spec_uri", "run_dir.$": "$.scaling.run_dir",
                                                 "run.$": "$.scaling.run", "trial_id.$": "$.trial_id"}
    assert "ContainerOverrides" not in multi["Parameters"] and "Parameters" not in single["Parameters"]


def test_a_scaling_runs_node_count_picks_the_single_or_multi_node_submission(control: dict[str, Any]) -> None:
    """The item's placement carries ``nodes`` only for a multi-node job definition (``JobPlacement``, dumped
    without None): an ``IsPresent`` Choice rule (https://docs.aws.amazon.com/step-functions/latest/dg/state-choice.html)
    picks the submission, and never reads a path the item lacks (a ``States.Runtime`` error otherwise)."""
    choice = _scaling_states(control)["ScalingNodes"]
    assert choice == {"Type": "Choice", "Choices": [{"Variable": "$.scaling.job.nodes", "IsPresent": True,
                                                     "Next": "SubmitScalingMultiNodeJob"}],
                      "Default": "SubmitScalingJob"}


def test_a_scaling_runs_outcome_names_its_run_and_a_failure_is_reported_not_fatal(control: dict[str, Any]) -> None:
    """A ResultSelector selects only from the task's result, here Batch's job description, never from the
    state's input ("Manipulate parameters in Step Functions workflows",
    https://docs.aws.amazon.com/step-functions/latest/dg/input-output-inputpath-params.html#input-output-resultselector):
    the run name comes from the item, so the outcome is built by a Pass after the task (``ResultPath: $.result``
    keeps the input beside the result). Every error of either submission (``States.ALL``) goes to a Pass that
    records the run FAILED, with the error beside the input, so one failed scaling run fails neither the Map nor the
    trial (an iteration's failure would fail the Map state, the Inline Map page)."""
    states = _scaling_states(control)
    for name in ("SubmitScalingJob", "SubmitScalingMultiNodeJob"):
        assert states[name]["ResultSelector"] == {"status": "SUCCEEDED", "job_id.$": "$.JobId", "fallback": False}
        assert states[name]["Catch"] == [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error",
                                          "Next": "ScalingRunFailed"}]
    assert states["ScalingRunSucceeded"] == {"Type": "Pass", "End": True, "Parameters": {
        "run.$": "$.scaling.run", "status": "SUCCEEDED", "job_id.$": "$.result.job_id", "fallback": False}}
    assert states["ScalingRunFailed"] == {"Type": "Pass", "End": True, "Parameters": {
        "run.$": "$.scaling.run", "status": "FAILED", "job_id": "", "fallback": False}}

