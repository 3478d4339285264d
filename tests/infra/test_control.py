"""The control stack: functions, API, event routing, topic, monitoring and the state machine's settings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aws_cdk.assertions import Match, Template

from infra.constructs.trial_api import ROUTES
from tests.infra.conftest import props, resources

HANDLERS = {"on_trial_api", "resolve_compile_cache", "on_batch_job_state", "on_artifact_created",
            "close_trial_costs", "build_trial_report", "set_trial_status", "scheduled_cost_report",
            "vend_job_credentials"}
ASYNC = {"on_batch_job_state", "on_artifact_created", "scheduled_cost_report"}


def _functions(control: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    out = {}
    for logical_id, fn in resources(control, "AWS::Lambda::Function").items():
        handler = fn["Properties"].get("Handler", "")
        if handler.startswith("lambdas.handlers."):
            out[handler.split(".")[2]] = (logical_id, fn["Properties"])
    return out


def test_every_handler_from_one_factory(control: dict[str, Any]) -> None:
    functions = _functions(control)
    assert set(functions) == HANDLERS
    for module, (_, fn) in functions.items():
        assert fn["Runtime"] == "python3.12" and fn["Architectures"] == ["arm64"], module
        assert fn["Handler"] == f"lambdas.handlers.{module}.handler"
        assert fn["TracingConfig"] == {"Mode": "Active"}
        assert len(fn["Layers"]) == 1
        assert fn["LoggingConfig"]["LogFormat"] == "JSON"
        env = fn["Environment"]["Variables"]
        assert env["POWERTOOLS_METRICS_NAMESPACE"] == "Dualtrack"
        assert env["PYDANTIC_DISABLE_PLUGINS"] == "__all__"  # the cold start skips pydantic's plugin scan
        for name in ("TRIALS_TABLE", "LEDGER_TABLE", "CACHE_REGISTRY_TABLE", "IDEMPOTENCY_TABLE",
                     "ARTIFACTS_BUCKET", "CACHE_BUCKET", "PRICE_REGION", "REPORT_TOPIC_ARN"):
            assert name in env, (module, name)
        if module == "vend_job_credentials":
            assert fn["FunctionName"] == "dualtrack-dev-job-credentials"  # named by the job definitions
        else:
            assert "FunctionName" not in fn
    assert "STATE_MACHINE_ARN" in functions["on_trial_api"][1]["Environment"]["Variables"]


def test_log_groups_have_retention(control: dict[str, Any]) -> None:
    for group in props(control, "AWS::Logs::LogGroup"):
        assert group["RetentionInDays"] == 30


def test_async_functions_have_a_failure_destination(control: dict[str, Any]) -> None:
    functions = _functions(control)
    configs = {c["FunctionName"]["Ref"]: c for c in props(control, "AWS::Lambda::EventInvokeConfig")}
    for module in ASYNC:
        config = configs[functions[module][0]]
        assert config["MaximumRetryAttempts"] == 2
        assert "OnFailure" in config["DestinationConfig"]
    for module in HANDLERS - ASYNC:
        assert functions[module][0] not in configs


def test_api_uses_iam_on_every_method_and_validates(control: dict[str, Any]) -> None:
    methods = [m for m in props(control, "AWS::ApiGateway::Method") if m["HttpMethod"] != "OPTIONS"]
    assert len(methods) == len(ROUTES)
    for method in methods:
        assert method["AuthorizationType"] == "AWS_IAM"
        assert "RequestValidatorId" in method
        assert method["Integration"]["Type"] == "AWS_PROXY"
    post_trials = [m for m in methods if m["HttpMethod"] == "POST" and "RequestModels" in m]
    assert len(post_trials) == 1
    validator = props(control, "AWS::ApiGateway::RequestValidator")[0]
    assert validator["ValidateRequestBody"] is True and validator["ValidateRequestParameters"] is True
    model = props(control, "AWS::ApiGateway::Model")[0]
    assert {"schema_version", "name", "tracks", "model", "data"} <= set(model["Schema"]["required"])


def test_every_route_the_function_answers_is_a_method_of_the_api() -> None:
    """API Gateway answers a path or method it has no resource for itself (403 "Missing Authentication Token") and
    never invokes the function ("Troubleshoot ... Missing Authentication Token", API Gateway developer guide:
    https://repost.aws/knowledge-center/api-gateway-authentication-token-errors), so each route of the function's
    OpenAPI document must be a method of the REST API, and nothing else."""
    document = json.loads((Path(__file__).resolve().parents[2] / "lambdas" / "openapi.json").read_text())
    answered = {(method.upper(), path.replace("{trial_id}", "{id}")) for path, methods in document["paths"].items()
                for method in methods}
    assert answered == set(ROUTES)


def test_api_resource_policy_allows_only_the_account(control: dict[str, Any]) -> None:
    api = props(control, "AWS::ApiGateway::RestApi")[0]
    (statement,) = api["Policy"]["Statement"]
    assert statement["Action"] == "execute-api:Invoke" and statement["Effect"] == "Allow"
    assert statement["Resource"] == "execute-api:/*"
    assert ":root" in json.dumps(statement["Principal"])


def test_api_stage_logs_traces_and_throttles(control: dict[str, Any]) -> None:
    stage = props(control, "AWS::ApiGateway::Stage")[0]
    assert stage["TracingEnabled"] is True
    assert "DestinationArn" in stage["AccessLogSetting"]
    (settings,) = stage["MethodSettings"]
    assert settings["ThrottlingRateLimit"] == 10 and settings["ThrottlingBurstLimit"] == 20
    assert settings["LoggingLevel"] == "ERROR" and settings["MetricsEnabled"] is True


def test_event_rules_patterns_dlqs_and_retries(control: dict[str, Any]) -> None:
    rules = props(control, "AWS::Events::Rule")
    assert len(rules) == 4
    by_kind = {}
    for rule in rules:
        if "ScheduleExpression" in rule:
            by_kind["gc" if "Input" in rule["Targets"][0] else "schedule"] = rule
        else:
            by_kind[rule["EventPattern"]["source"][0]] = rule
        (target,) = rule["Targets"]
        assert target["RetryPolicy"] == {"MaximumEventAgeInSeconds": 6 * 3600, "MaximumRetryAttempts": 8}
        assert "Arn" in target["DeadLetterConfig"]
    batch = by_kind["aws.batch"]["EventPattern"]
    assert batch["detail-type"] == ["Batch Job State Change"]
    assert len(batch["detail"]["jobQueue"]) == 3  # gpu, trn2 and the warm-up compile stage's queue
    s3 = by_kind["aws.s3"]["EventPattern"]
    assert s3["detail-type"] == ["Object Created"]
    assert s3["detail"]["object"]["key"] == [{"prefix": "trials/"}, {"prefix": "neuron/"}]
    assert len(s3["detail"]["bucket"]["name"]) == 2
    assert by_kind["schedule"]["ScheduleExpression"] == "cron(0 6 ? * MON *)"


def test_compile_cache_garbage_collection_runs_on_a_schedule_with_delete_rights(control: dict[str, Any]) -> None:
    (rule,) = [r for r in props(control, "AWS::Events::Rule") if "Input" in r["Targets"][0]]
    assert rule["ScheduleExpression"] == "cron(0 5 * * ? *)"
    (target,) = rule["Targets"]
    assert json.loads(target["Input"]) == {"action": "collect_garbage"}
    logical_id, fn = _functions(control)["resolve_compile_cache"]
    assert target["Arn"] == {"Fn::GetAtt": [logical_id, "Arn"]}
    assert fn["Environment"]["Variables"]["CACHE_RETENTION_DAYS"] == "30"
    role = fn["Role"]["Fn::GetAtt"][0]
    statements = [s for policy in props(control, "AWS::IAM::Policy")
                  if {"Ref": role} in policy["Roles"] for s in policy["PolicyDocument"]["Statement"]]
    deletes = [s for s in statements if "s3:DeleteObject*" in json.dumps(s["Action"])]
    assert len(deletes) == 1 and json.dumps(deletes[0]["Resource"]).endswith('/neuron/*"]]}')


def test_queues_and_topic_are_encrypted_and_tls_only(control: dict[str, Any]) -> None:
    for queue in props(control, "AWS::SQS::Queue"):
        assert queue["KmsMasterKeyId"] == {"Fn::GetAtt": [_logs_key(control), "Arn"]}
    topic = props(control, "AWS::SNS::Topic")[0]
    assert "KmsMasterKeyId" in topic
    Template.from_json(control).has_resource_properties("AWS::SNS::TopicPolicy", {
        "PolicyDocument": {"Statement": Match.array_with([Match.object_like({
            "Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}})])},
    })


def test_alarms_cover_failed_runs_dlqs_and_lambda_errors(control: dict[str, Any]) -> None:
    alarms = props(control, "AWS::CloudWatch::Alarm")
    metrics = [(a.get("Namespace"), a.get("MetricName")) for a in alarms]
    assert ("AWS/States", "ExecutionsFailed") in metrics
    assert metrics.count(("AWS/SQS", "ApproximateNumberOfMessagesVisible")) == 2
    assert metrics.count(("AWS/Lambda", "Errors")) == len(HANDLERS)
    assert all(a["AlarmActions"] for a in alarms)
    # RunsFailed is published by each function that can record a run's end first; the alarm sums their series.
    runs_failed = next(a for a in alarms if "RunsFailed" in json.dumps(a.get("Metrics", [])))
    series = [m["MetricStat"]["Metric"] for m in runs_failed["Metrics"] if "MetricStat" in m]
    assert {(m["Namespace"], m["MetricName"]) for m in series} == {("Dualtrack", "RunsFailed")}
    assert sorted(d["Value"] for m in series for d in m["Dimensions"]) == [
        "dualtrack-close-trial-costs", "dualtrack-on-batch-job-state"]
    (expression,) = [m for m in runs_failed["Metrics"] if "Expression" in m]
    assert expression["ReturnData"] is True and expression["Expression"].count("FILL(") == 2
    dashboard = props(control, "AWS::CloudWatch::Dashboard")[0]
    body = json.dumps(dashboard["DashboardBody"])
    for title in ("Runs", "Trial cost (USD)", "Compile-cache hit rate (%)", "Lambda errors", "Dead-letter depth"):
        assert title in body


def test_state_machine_logs_all_traces_and_times_out(control: dict[str, Any]) -> None:
    (machine,) = props(control, "AWS::StepFunctions::StateMachine")
    assert machine["StateMachineType"] == "STANDARD"
    assert machine["TracingConfiguration"] == {"Enabled": True}
    assert machine["LoggingConfiguration"]["Level"] == "ALL"
    assert machine["LoggingConfiguration"]["IncludeExecutionData"] is True
    assert "StateMachineName" not in machine


def test_state_machine_can_terminate_its_jobs(control: dict[str, Any]) -> None:
    role_policies = [p for k, p in ((k, v["Properties"]) for k, v in resources(control, "AWS::IAM::Policy").items())
                     if k.startswith("WorkflowStateMachineRole")]
    statements = [s for p in role_policies for s in p["PolicyDocument"]["Statement"]]
    def actions(statement: dict[str, Any]) -> list[str]:
        return statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]

    terminate = [s for s in statements if "batch:TerminateJob" in actions(s)]
    assert len(terminate) == 1 and ":job/*" in json.dumps(terminate[0]["Resource"])
    submit = next(s for s in statements if actions(s) == ["batch:SubmitJob"])
    resources_ = json.dumps(submit["Resource"])
    # SubmitJob only on this stage's queues and job definitions, named (no import of a revisioned ARN).
    assert "Fn::ImportValue" not in resources_
    assert resources_.count(":job-queue/dualtrack-dev-") == 3  # the trn2 compile queue too
    assert ":job-queue/dualtrack-dev-trn2-trn2-48xlarge-compile" in resources_
    assert resources_.count(":job-definition/dualtrack-dev-") == 2 * 2  # name and name:* per definition


def test_no_physical_names_anywhere(templates: dict[str, dict[str, Any]]) -> None:
    """Two stages deploy side by side in one account: every name is generated by CloudFormation, except Batch queues
    and job definitions, whose names carry the stage (``dualtrack-<stage>-...``) so the control plane can submit by
    name across redeploys, and the job-credentials function, which the job roles and job definitions (compute
    stack) name without a reference to the control stack that depends on them."""
    named = ("BucketName", "TableName", "FunctionName", "QueueName", "TopicName", "RoleName", "StateMachineName",
             "JobQueueName", "JobDefinitionName", "ComputeEnvironmentName", "LogGroupName", "Name")
    for stack, template in templates.items():
        assert stack.startswith("Dualtrack-dev-")
        for logical_id, resource in template["Resources"].items():
            if resource["Type"].startswith("Custom::") or resource["Type"] in (
                    "AWS::Lambda::EventInvokeConfig", "AWS::Lambda::Permission", "AWS::ApiGateway::Model"):
                continue
            for field in named:
                value = resource.get("Properties", {}).get(field)
                if (field in ("JobQueueName", "JobDefinitionName") or (
                        field == "FunctionName" and logical_id.startswith("FunctionsVendJobCredentials"))
                        ) and isinstance(value, str):
                    assert value.startswith("dualtrack-dev-"), (stack, logical_id, value)
                    continue
                assert not isinstance(value, str) or resource["Type"] == "AWS::ApiGateway::RestApi", (
                    stack, logical_id, field, value)


def _logs_key(control: dict[str, Any]) -> str:
    return next(k for k in resources(control, "AWS::KMS::Key") if k.startswith("LogsKey"))
