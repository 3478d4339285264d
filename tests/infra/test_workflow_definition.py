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
    gpu, trn2 = _definition(control)["States"]["RunTracks"]["Branches"]
    return gpu["States"], trn2["States"]


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
        # Evaluated per submission: each job's own token for its trial's credentials.
        {"Name": "DUALTRACK_RUN_TOKEN", "Value.$": "States.UUID()"},
    ]
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
                   "DUALTRACK_RUN_TOKEN": "States.UUID()", "DUALTRACK_RESUME_FROM": "$.run_dirs.trn2"}
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
                                       "run_token.$": "States.UUID()", **extra}
        assert {k: v for k, v in multi.items() if k != "Parameters"} == {
            k: v for k, v in single.items() if k != "ContainerOverrides"}
