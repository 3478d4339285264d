"""The control stack: functions, API, event routing, topic, monitoring and the state machine's settings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aws_cdk.assertions import Match, Template

from infra.constructs.trial_api import ROUTES
from tests.stacks.conftest import props, resources

HANDLERS = {"on_trial_api", "resolve_compile_cache", "on_batch_job_state", "on_artifact_created",
            "close_trial_costs", "build_trial_report", "set_trial_status", "scheduled_cost_report",
            "vend_job_credentials", "reconcile_trials"}
ASYNC = {"on_batch_job_state", "on_artifact_created", "scheduled_cost_report", "reconcile_trials"}


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
    assert len(rules) == 5
    by_kind = {}
    for rule in rules:
        if "ScheduleExpression" in rule:
            kind = "gc" if "Input" in rule["Targets"][0] else (
                "reconcile" if rule["ScheduleExpression"].startswith("rate(") else "schedule")
            by_kind[kind] = rule
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
    assert by_kind["reconcile"]["ScheduleExpression"] == "rate(5 minutes)"


def test_pending_stops_are_swept_on_a_schedule_and_alarm_when_overdue(control: dict[str, Any]) -> None:
    """The reconciler reaches what a stop needs: StopExecution/DescribeExecution on the workflow's executions,
    TerminateJob on Batch jobs (resource type "job": Service Authorization Reference, "Actions defined by AWS
    Batch"), the trials and usage tables; and an alarm fires while a stop stays pending past its deadline."""
    logical_id, fn = _functions(control)["reconcile_trials"]
    (rule,) = [r for r in props(control, "AWS::Events::Rule") if r.get("ScheduleExpression") == "rate(5 minutes)"]
    assert rule["Targets"][0]["Arn"] == {"Fn::GetAtt": [logical_id, "Arn"]}
    assert {"STATE_MACHINE_ARN", "USAGE_TABLE", "TRIALS_TABLE"} <= set(fn["Environment"]["Variables"])
    role = fn["Role"]["Fn::GetAtt"][0]
    actions = set()
    for policy in resources(control, "AWS::IAM::Policy").values():
        if {"Ref": role} in policy["Properties"].get("Roles", []):
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                found = statement["Action"]
                actions |= {found} if isinstance(found, str) else set(found)
    assert {"batch:TerminateJob", "states:StopExecution", "states:DescribeExecution", "dynamodb:UpdateItem",
            "dynamodb:Query"} <= actions
    (alarm,) = [a for a in props(control, "AWS::CloudWatch::Alarm") if a.get("MetricName") == "StopsOverdue"]
    assert alarm["Threshold"] == 1 and alarm["AlarmActions"]


def test_only_the_reconciler_and_the_run_events_function_may_terminate_jobs(control: dict[str, Any]) -> None:
    """TerminateJob takes the job ARN as its resource ("Actions defined by AWS Batch", Service Authorization
    Reference, https://docs.aws.amazon.com/service-authorization/latest/reference/list_awsbatch.html): the
    reconciler ends a stopped trial's jobs still running, and the run-events function ends a job first seen after
    its trial closed. No other function may."""
    functions = _functions(control)
    roles = {name: fn["Role"]["Fn::GetAtt"][0] for name, (_, fn) in functions.items()}
    allowed: dict[str, list[Any]] = {}
    for policy in resources(control, "AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            found = statement["Action"]
            if "batch:TerminateJob" in ([found] if isinstance(found, str) else found):
                for role in policy["Properties"].get("Roles", []):
                    allowed.setdefault(role.get("Ref", ""), []).append(statement["Resource"])
    terminating = sorted(name for name, role in roles.items() if role in allowed)
    assert terminating == ["on_batch_job_state", "reconcile_trials"]
    for name in terminating:
        assert ":job/*" in json.dumps(allowed[roles[name]])


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


def _role_statements(control: dict[str, Any], module: str) -> list[dict[str, Any]]:
    """Every statement of the policies attached to ``module``'s role, with Action always a list."""
    role = _functions(control)[module][1]["Role"]["Fn::GetAtt"][0]
    out = []
    for policy in props(control, "AWS::IAM::Policy"):
        if {"Ref": role} in policy["Roles"]:
            for statement in policy["PolicyDocument"]["Statement"]:
                action = statement["Action"]
                out.append({**statement, "Action": action if isinstance(action, list) else [action]})
    return out


def test_the_api_function_starts_reads_and_stops_only_its_state_machines_executions(control: dict[str, Any]) -> None:
    """The API calls StartExecution (resource type stateMachine), DescribeExecution and StopExecution (resource type
    execution) and nothing else of Step Functions (Service Authorization Reference, "Actions, resources, and
    condition keys for AWS Step Functions":
    https://docs.aws.amazon.com/service-authorization/latest/reference/list_awsstepfunctions.html), so its role names
    those actions on that state machine and its executions only: no DescribeStateMachine, DescribeActivity or
    ListActivities, and no Step Functions action on ``*``."""
    (machine,) = resources(control, "AWS::StepFunctions::StateMachine")
    states = [s for s in _role_statements(control, "on_trial_api") if any(a.startswith("states:") for a in s["Action"])]
    granted = {a for s in states for a in s["Action"]}
    assert granted == {"states:StartExecution", "states:DescribeExecution", "states:StopExecution"}, granted
    for statement in states:
        assert statement["Resource"] != "*" and machine in json.dumps(statement["Resource"]), statement
        if "states:StartExecution" in statement["Action"]:
            assert statement["Resource"] == {"Ref": machine} and statement["Action"] == ["states:StartExecution"]
        else:
            assert ":execution:" in json.dumps(statement["Resource"]), statement


def test_the_api_function_writes_only_the_trials_table_and_reads_the_ledger_and_registry(
        control: dict[str, Any]) -> None:
    """The API stores trials; it reads the ledger (a run's facts and cost) and the compile-cache registry, and makes
    no idempotency records. DynamoDB's write actions are PutItem, UpdateItem, DeleteItem and BatchWriteItem (Service
    Authorization Reference, "Actions, resources, and condition keys for Amazon DynamoDB":
    https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazondynamodb.html)."""
    writes = {"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem"}
    statements = _role_statements(control, "on_trial_api")

    def on(table: str) -> set[str]:
        return {a for s in statements if table in json.dumps(s["Resource"]) for a in s["Action"]
                if a.startswith("dynamodb:")}

    assert writes <= on("TrialsTable")
    for table in ("LedgerTable", "CacheRegistryTable"):
        assert {"dynamodb:GetItem", "dynamodb:Query"} <= on(table) and not on(table) & writes, (table, on(table))
    assert on("IdempotencyTable") == set()


def test_every_lambda_function_in_every_stack_logs_to_a_group_that_expires(
        templates: dict[str, dict[str, Any]]) -> None:
    """A function writes to ``/aws/lambda/<function name>``, a group created on its first invocation, unless its
    LoggingConfig names another (Lambda developer guide, "Configuring CloudWatch log groups":
    https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs-loggroups.html); a group created so has
    no retention, and "by default, log data is stored in CloudWatch Logs indefinitely" (CloudWatch Logs user guide,
    "Change log data retention in CloudWatch Logs":
    https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/Working-with-log-groups-and-streams.html). So every
    function, CDK's own helpers (bucket notifications, custom-resource providers) included, names a group of its
    stack that has a RetentionInDays."""
    seen = 0
    for stack, template in templates.items():
        groups = resources(template, "AWS::Logs::LogGroup")
        for logical_id, fn in resources(template, "AWS::Lambda::Function").items():
            seen += 1
            group = fn["Properties"].get("LoggingConfig", {}).get("LogGroup")
            assert isinstance(group, dict) and group.get("Ref") in groups, (stack, logical_id, group)
            assert groups[group["Ref"]]["Properties"].get("RetentionInDays") == 30, (stack, logical_id)
    assert seen > len(HANDLERS)  # the helpers were checked too
