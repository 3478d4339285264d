"""Every AWS call the deployed code makes is granted, by the synthesized IAM policies, to the role that makes it.

A missing grant otherwise shows up only in AWS, as AccessDenied at run time. The inventory of calls, the reach of
each Lambda handler and the operation -> action mapping live in ``tests.stacks.iam_calls``; this module pairs them
with the roles of the synthesized dev stage:

* Lambda functions (Control template): the calls reachable from ``lambdas.handlers.<module>.handler``, plus what
  the Lambda platform does with the function's role: CloudWatch Logs
  (https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs.html), X-Ray when tracing is Active
  (https://docs.aws.amazon.com/lambda/latest/dg/services-xray.html) and the on-failure destination of
  asynchronous invocations (https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-retain-records.html).
* Batch job roles (Compute template, the ``JobRoleArn`` of each job definition): the calls of
  ``containers/trainer``.
* The state machine role: for each Task state, the actions of its service integration.
  Batch ``submitJob.sync``: batch:SubmitJob, batch:DescribeJobs, batch:TerminateJob, events:PutTargets,
  events:PutRule, events:DescribeRule (https://docs.aws.amazon.com/step-functions/latest/dg/batch-iam.html);
  Tags on SubmitJob also need batch:TagResource
  (https://docs.aws.amazon.com/batch/latest/userguide/tag-resources.html); ``lambda:invoke`` or a function ARN
  as Resource: lambda:InvokeFunction (https://docs.aws.amazon.com/step-functions/latest/dg/lambda-iam.html);
  logging (https://docs.aws.amazon.com/step-functions/latest/dg/cw-logs.html) and X-Ray tracing
  (https://docs.aws.amazon.com/step-functions/latest/dg/xray-iam.html) when configured.

Action names: ``<prefix>:<OperationName>`` except where the Service Authorization Reference says otherwise (S3:
https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazons3.html, ListObjectsV2 ->
s3:ListBucket, HeadObject -> s3:GetObject, ...). Objects in SSE-KMS buckets also need kms:Decrypt to read and
kms:GenerateDataKey to write (https://docs.aws.amazon.com/AmazonS3/latest/userguide/UsingKMSEncryption.html);
publishing to an SSE-KMS topic needs both
(https://docs.aws.amazon.com/sns/latest/dg/sns-key-management.html#sns-what-permissions-for-sse).

Out of scope: resources (a grant on the wrong table or prefix passes), condition keys (a conditional Allow counts
as granted), key policies, resource policies, permission boundaries and SCPs, and KMS use through DynamoDB. AWS
managed policies grant what ``AWS_MANAGED`` lists (the AWS Managed Policy Reference,
https://docs.aws.amazon.com/aws-managed-policy/latest/reference/policy-list.html) and nothing otherwise.
"""

from __future__ import annotations

import copy
import fnmatch
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.stacks import iam_calls
from tests.stacks.conftest import resources

LAMBDA_LOGS = "https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs.html"
LAMBDA_XRAY = "https://docs.aws.amazon.com/lambda/latest/dg/services-xray.html"
LAMBDA_DESTINATIONS = "https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-retain-records.html"
SFN_BATCH = "https://docs.aws.amazon.com/step-functions/latest/dg/batch-iam.html"
SFN_LAMBDA = "https://docs.aws.amazon.com/step-functions/latest/dg/lambda-iam.html"
SFN_LOGS = "https://docs.aws.amazon.com/step-functions/latest/dg/cw-logs.html"
SFN_XRAY = "https://docs.aws.amazon.com/step-functions/latest/dg/xray-iam.html"
BATCH_TAGS = "https://docs.aws.amazon.com/batch/latest/userguide/tag-resources.html"

# What the AWS managed policies the templates attach grant (AWS Managed Policy Reference, one page per policy,
# e.g. https://docs.aws.amazon.com/aws-managed-policy/latest/reference/AWSLambdaBasicExecutionRole.html).
AWS_MANAGED = {
    "AWSLambdaBasicExecutionRole": ("logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"),
    "AWSXRayDaemonWriteAccess": ("xray:PutTraceSegments", "xray:PutTelemetryRecords", "xray:GetSamplingRules",
                                 "xray:GetSamplingTargets", "xray:GetSamplingStatisticSummaries"),
}

# Actions the reachability over-approximation requires of a principal that it truly never needs:
# (principal, action) -> why. Empty: method-level reachability keeps every handler's set exact today.
NOT_NEEDED: dict[tuple[str, str], str] = {}

# Grants the synthesized templates lack today: (principal, action) -> call site. Each entry must still be missing
# (test_known_missing_grants_are_still_missing), so it is removed here when infra adds the grant.
KNOWN_MISSING: dict[tuple[str, str], str] = {}

# Task Resource "arn:<partition>:states:::<service>:<api>[.sync|.sync:2|.waitForTaskToken]" -> actions.
INTEGRATIONS: dict[tuple[str, str, str], tuple[tuple[str, ...], str]] = {
    ("batch", "submitJob", ".sync"): (("batch:SubmitJob", "batch:DescribeJobs", "batch:TerminateJob",
                                       "events:PutTargets", "events:PutRule", "events:DescribeRule"), SFN_BATCH),
    ("batch", "submitJob", ""): (("batch:SubmitJob",), SFN_BATCH),
    ("lambda", "invoke", ""): (("lambda:InvokeFunction",), SFN_LAMBDA),
    ("lambda", "invoke", ".waitForTaskToken"): (("lambda:InvokeFunction",), SFN_LAMBDA),
}
INTEGRATION = re.compile(
    r":states:::(?P<service>[a-z0-9-]+):(?P<api>[A-Za-z]+)(?P<pattern>\.sync(?::2)?|\.waitForTaskToken)?$")


@dataclass(frozen=True)
class Need:
    principal: str  # "function on_trial_api", "job role GpuJobsJobRole...", "state machine ..."
    template: str  # stack name of the template holding the role
    role: str  # logical id of the role
    action: str
    site: str  # file:line of the call, or the template element
    what: str  # operation or integration
    doc: str

    def describe(self) -> str:
        return f"{self.principal}: {self.what} at {self.site} needs {self.action} ({self.doc})"


# --- templates -------------------------------------------------------------------------------------------------

def _stack(templates: dict[str, dict[str, Any]], suffix: str) -> str:
    (name,) = [n for n in templates if n.endswith(f"-{suffix}")]
    return name


def _tokens(value: Any) -> Iterator[tuple[str, str]]:
    """("ref", id) / ("import", export name) for every Ref, Fn::GetAtt and Fn::ImportValue inside ``value``."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "Ref" and isinstance(inner, str):
                yield "ref", inner
            elif key == "Fn::GetAtt":
                yield "ref", inner[0] if isinstance(inner, list) else inner.split(".")[0]
            elif key == "Fn::ImportValue" and isinstance(inner, str):
                yield "import", inner
            else:
                yield from _tokens(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _tokens(inner)


def _resolve(templates: dict[str, dict[str, Any]], stack: str, value: Any) -> list[tuple[str, dict[str, Any]]]:
    """The resources (type, resource) that ``value`` refers to, following exports across stacks."""
    exports = {out["Export"]["Name"]: (name, out["Value"]) for name, template in templates.items()
               for out in template.get("Outputs", {}).values() if "Export" in out}
    found = []
    for kind, ref in _tokens(value):
        target_stack, target = stack, ref
        if kind == "import":
            if ref not in exports:
                continue
            target_stack, exported = exports[ref]
            inner = list(_tokens(exported))
            if not inner:
                continue
            target = inner[0][1]
        resource = templates[target_stack]["Resources"].get(target)
        if resource is not None:
            found.append((resource["Type"], resource))
    return found


def _kms_bucket(resource: dict[str, Any]) -> bool:
    rules = resource.get("Properties", {}).get("BucketEncryption", {}).get("ServerSideEncryptionConfiguration", [])
    return any(r.get("ServerSideEncryptionByDefault", {}).get("SSEAlgorithm", "").startswith("aws:kms")
               for r in rules)


def _kms_topic(resource: dict[str, Any]) -> bool:
    return bool(resource.get("Properties", {}).get("KmsMasterKeyId"))


def _role_statements(templates: dict[str, dict[str, Any]], stack: str, role: str) -> list[dict[str, Any]]:
    template = templates[stack]
    statements: list[dict[str, Any]] = []
    for kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
        for policy in resources(template, kind).values():
            if {"Ref": role} in policy["Properties"].get("Roles", []):
                statements += policy["Properties"]["PolicyDocument"]["Statement"]
    props = template["Resources"][role]["Properties"]
    for inline in props.get("Policies", []):
        statements += inline["PolicyDocument"]["Statement"]
    for arn in props.get("ManagedPolicyArns", []):
        for kind, ref in _tokens(arn):
            managed = template["Resources"].get(ref) if kind == "ref" else None
            if managed is not None and managed["Type"] == "AWS::IAM::ManagedPolicy":
                statements += managed["Properties"]["PolicyDocument"]["Statement"]
        rendered = json.dumps(arn)
        for name, actions in AWS_MANAGED.items():
            if re.search(rf"policy/(service-role/)?{name}\b", rendered):
                statements.append({"Effect": "Allow", "Action": list(actions), "Resource": "*"})
    return statements


def _actions(statement: dict[str, Any], key: str) -> list[str]:
    value = statement.get(key, [])
    return [value] if isinstance(value, str) else list(value)


def _matches(action: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(action.lower(), p.lower()) for p in patterns)


def allows(statements: list[dict[str, Any]], action: str) -> bool:
    """Action-level evaluation: some Allow matches and no unconditional Deny on every resource does."""
    allowed = False
    for s in statements:
        matched = _matches(action, _actions(s, "Action")) if "Action" in s else (
            not _matches(action, _actions(s, "NotAction")))
        if not matched:
            continue
        if s.get("Effect") == "Deny" and "Condition" not in s and s.get("Resource") in ("*", ["*"]):
            return False
        allowed = allowed or s.get("Effect") == "Allow"
    return allowed


# --- what each role needs --------------------------------------------------------------------------------------

def _role_of(value: Any) -> str:
    (ref,) = [r for kind, r in _tokens(value) if kind == "ref"]
    return ref


def function_needs(templates: dict[str, dict[str, Any]]) -> list[Need]:
    stack = _stack(templates, "Control")
    control = templates[stack]
    configs = {c["Properties"]["FunctionName"].get("Ref"): c["Properties"]
               for c in resources(control, "AWS::Lambda::EventInvokeConfig").values()}
    needs: list[Need] = []
    for logical_id, fn in resources(control, "AWS::Lambda::Function").items():
        props = fn["Properties"]
        if not props.get("Handler", "").startswith("lambdas.handlers."):
            continue
        module = props["Handler"].split(".")[2]
        principal, role = f"function {module}", _role_of(props["Role"])
        env = props.get("Environment", {}).get("Variables", {})
        touched = _resolve(templates, stack, [env, _role_statements(templates, stack, role)])
        kms_buckets = any(_kms_bucket(r) for t, r in touched if t == "AWS::S3::Bucket")
        kms_topic = any(_kms_topic(r) for t, r in touched if t == "AWS::SNS::Topic")
        for call in iam_calls.handler_calls(module):
            for req in iam_calls.required_actions(call, kms_buckets=kms_buckets, kms_topic=kms_topic):
                needs.append(Need(principal, stack, role, req.action, call.site,
                                  f"{call.service}.{call.operation} ({call.via})", req.doc))
        platform = [("logs:CreateLogStream", "Lambda logs", LAMBDA_LOGS),
                    ("logs:PutLogEvents", "Lambda logs", LAMBDA_LOGS)]
        if props.get("TracingConfig", {}).get("Mode") == "Active":
            platform += [("xray:PutTraceSegments", "active tracing", LAMBDA_XRAY),
                         ("xray:PutTelemetryRecords", "active tracing", LAMBDA_XRAY)]
        on_failure = configs.get(logical_id, {}).get("DestinationConfig", {}).get("OnFailure", {})
        for kind, _ in _resolve(templates, stack, on_failure.get("Destination")):
            destination = {"AWS::SQS::Queue": "sqs:SendMessage", "AWS::SNS::Topic": "sns:Publish",
                           "AWS::Lambda::Function": "lambda:InvokeFunction",
                           "AWS::Events::EventBus": "events:PutEvents"}[kind]
            platform.append((destination, "on-failure destination", LAMBDA_DESTINATIONS))
        for action, what, doc in platform:
            needs.append(Need(principal, stack, role, action, f"{stack}/{logical_id}", what, doc))
    return needs


def job_role_needs(templates: dict[str, dict[str, Any]]) -> list[Need]:
    stack = _stack(templates, "Compute")
    compute = templates[stack]
    roles: set[str] = set()
    for definition in resources(compute, "AWS::Batch::JobDefinition").values():
        roles |= {_role_of(v) for k, v in _walk_keys(definition["Properties"]) if k in ("JobRoleArn", "TaskRoleArn")}
    needs: list[Need] = []
    calls = iam_calls.trainer_calls()
    # The trainer writes only with its own credentials (trainer.storage._writer): a session of the trial writer role
    # (lambdas/domain/job_access.py), so its writes are that role's to grant, never the job role's.
    control = _stack(templates, "Control")
    (writer,) = [k for k in resources(templates[control], "AWS::IAM::Role") if k.startswith("TrialWriterRole")]
    for role in sorted(roles):
        touched = _resolve(templates, stack, _role_statements(templates, stack, role))
        kms_buckets = any(_kms_bucket(r) for t, r in touched if t == "AWS::S3::Bucket")
        for call in calls:
            for req in iam_calls.required_actions(call, kms_buckets=kms_buckets, kms_topic=False):
                if call.service == "s3" and call.operation == "PutObject":
                    needs.append(Need(f"trial writer role (for job role {role})", control, writer, req.action,
                                      call.site, f"{call.service}.{call.operation} ({call.via})", req.doc))
                    continue
                needs.append(Need(f"job role {role}", stack, role, req.action, call.site,
                                  f"{call.service}.{call.operation} ({call.via})", req.doc))
    return needs


def _walk_keys(value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, inner in value.items():
            yield key, inner
            yield from _walk_keys(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _walk_keys(inner)


def _definition(machine: dict[str, Any]) -> dict[str, Any]:
    body = machine["Properties"]["DefinitionString"]
    if isinstance(body, str):
        return json.loads(body)  # type: ignore[no-any-return]
    parts = body["Fn::Join"][1]
    # Tokens become their JSON text inside the string, as test_workflow_definition renders them.
    return json.loads("".join(p if isinstance(p, str) else json.dumps(json.dumps(p))[1:-1] for p in parts))  # type: ignore[no-any-return]


def _tasks(states: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, state in states.items():
        if state.get("Type") == "Task":
            yield name, state
        for branch in state.get("Branches", []):
            yield from _tasks(branch["States"])
        for key in ("Iterator", "ItemProcessor"):
            if key in state:
                yield from _tasks(state[key]["States"])


def task_actions(state: dict[str, Any], control: dict[str, Any]) -> list[tuple[str, str]]:
    """(action, doc) for one Task state; KeyError for an integration without a mapping."""
    resource = state["Resource"]
    try:
        token = json.loads(resource)
    except ValueError:
        token = None
    if isinstance(token, dict):  # a function ARN token (Fn::GetAtt of a function) as the Resource
        (kind,) = {control["Resources"][r]["Type"] for k, r in _tokens(token) if r in control["Resources"]}
        if kind != "AWS::Lambda::Function":
            raise KeyError(f"Task Resource refers to a {kind}")
        return [("lambda:InvokeFunction", SFN_LAMBDA)]
    if ":lambda:" in resource and ":function:" in resource:
        return [("lambda:InvokeFunction", SFN_LAMBDA)]
    found = INTEGRATION.search(resource)
    if not found:
        raise KeyError(f"unknown Task Resource {resource!r}")
    actions, doc = INTEGRATIONS[(found["service"], found["api"], (found["pattern"] or "").removesuffix(":2"))]
    out = [(a, doc) for a in actions]
    parameters = state.get("Parameters", {})
    if found["service"] == "batch" and ("Tags" in parameters or "Tags.$" in parameters):
        out.append(("batch:TagResource", BATCH_TAGS))
    return out


def state_machine_needs(templates: dict[str, dict[str, Any]]) -> list[Need]:
    stack = _stack(templates, "Control")
    control = templates[stack]
    needs: list[Need] = []
    for logical_id, machine in resources(control, "AWS::StepFunctions::StateMachine").items():
        principal, role = f"state machine {logical_id}", _role_of(machine["Properties"]["RoleArn"])
        for name, state in _tasks(_definition(machine)["States"]):
            for action, doc in task_actions(state, control):
                needs.append(Need(principal, stack, role, action, f"{stack}/{logical_id}/{name}",
                                  f"Task {state['Resource']}", doc))
        props = machine["Properties"]
        if props.get("LoggingConfiguration", {}).get("Destinations"):
            for action in ("logs:CreateLogDelivery", "logs:GetLogDelivery", "logs:UpdateLogDelivery",
                           "logs:DeleteLogDelivery", "logs:ListLogDeliveries", "logs:PutResourcePolicy",
                           "logs:DescribeResourcePolicies", "logs:DescribeLogGroups"):
                needs.append(Need(principal, stack, role, action, f"{stack}/{logical_id}", "logging", SFN_LOGS))
        if props.get("TracingConfiguration", {}).get("Enabled"):
            for action in ("xray:PutTraceSegments", "xray:PutTelemetryRecords", "xray:GetSamplingRules",
                           "xray:GetSamplingTargets"):
                needs.append(Need(principal, stack, role, action, f"{stack}/{logical_id}", "tracing", SFN_XRAY))
    return needs


def missing(templates: dict[str, dict[str, Any]], needs: list[Need]) -> list[Need]:
    statements: dict[tuple[str, str], list[dict[str, Any]]] = {}
    out = []
    for need in needs:
        key = (need.template, need.role)
        if key not in statements:
            statements[key] = _role_statements(templates, *key)
        if not allows(statements[key], need.action) and (need.principal, need.action) not in NOT_NEEDED:
            out.append(need)
    return out


def _report(gaps: list[Need]) -> str:
    return "missing IAM grants:\n" + "\n".join(sorted({n.describe() for n in gaps}))


def _unexpected(gaps: list[Need]) -> list[Need]:
    return [n for n in gaps if (n.principal, n.action) not in KNOWN_MISSING]


# --- tests -----------------------------------------------------------------------------------------------------

def test_inventory_finds_every_client_call() -> None:
    calls = {(c.service, c.operation, c.via) for c in iam_calls.inventory()}
    assert calls >= {
        ("dynamodb", "PutItem", "client"), ("dynamodb", "GetItem", "client"), ("dynamodb", "UpdateItem", "client"),
        ("dynamodb", "Query", "pages"), ("dynamodb", "Scan", "pages"),
        ("dynamodb", "PutItem", "library"),
        ("s3", "PutObject", "client"), ("s3", "GetObject", "client"), ("s3", "HeadObject", "client"),
        ("s3", "ListObjectsV2", "pages"), ("s3", "GetObject", "presign"),
        ("stepfunctions", "StartExecution", "client"), ("stepfunctions", "StopExecution", "client"),
        ("batch", "DescribeJobs", "client"), ("batch", "DescribeJobQueues", "client"),
        ("cloudwatch", "GetMetricData", "client"), ("cloudwatch", "PutMetricData", "client"),
        ("sns", "Publish", "client"),
    }, sorted(calls)
    assert iam_calls.unresolved() == [], "calls that look like AWS operations on a client the scan cannot name"
    assert iam_calls.resource_uses() == [], "boto3.resource(...) calls: extend iam_calls to map them"


def test_every_call_maps_to_actions() -> None:
    for call in iam_calls.inventory():
        for kms in (False, True):
            required = iam_calls.required_actions(call, kms_buckets=kms, kms_topic=kms)
            assert required or (call.service, call.operation) == ("sts", "GetCallerIdentity"), call.site
            assert all(re.fullmatch(r"[a-z0-9-]+:[A-Za-z0-9]+", r.action) for r in required), (call, required)


def test_mapping_exceptions() -> None:
    def actions(service: str, op: str, keywords: frozenset[str] = frozenset(), **kms: bool) -> set[str]:
        call = iam_calls.Call(service, op, "x.py", 1, "client", keywords)
        flags = {"kms_buckets": False, "kms_topic": False, **kms}
        return {r.action for r in iam_calls.required_actions(call, **flags)}

    assert actions("s3", "ListObjectsV2") == {"s3:ListBucket"}
    assert actions("sts", "GetCallerIdentity") == set()  # needs no permission (STS API reference)
    assert actions("s3", "HeadObject", kms_buckets=True) == {"s3:GetObject"}
    assert actions("s3", "GetObject", frozenset({"VersionId"})) == {"s3:GetObjectVersion"}
    assert actions("s3", "GetObject", kms_buckets=True) == {"s3:GetObject", "kms:Decrypt"}
    assert actions("s3", "PutObject", kms_buckets=True) == {"s3:PutObject", "kms:GenerateDataKey"}
    assert actions("s3", "DeleteObjects") == {"s3:DeleteObject"}
    assert actions("s3", "CopyObject") == {"s3:GetObject", "s3:PutObject"}
    assert actions("dynamodb", "TransactWriteItems") == {"dynamodb:PutItem", "dynamodb:UpdateItem",
                                                         "dynamodb:DeleteItem", "dynamodb:ConditionCheckItem"}
    assert actions("stepfunctions", "StartExecution") == {"states:StartExecution"}
    assert actions("sns", "Publish", kms_topic=True) == {"sns:Publish", "kms:GenerateDataKey", "kms:Decrypt"}
    assert actions("lambda", "Invoke") == {"lambda:InvokeFunction"}
    assert actions("sts", "AssumeRole", frozenset({"RoleArn", "Tags"})) == {"sts:AssumeRole", "sts:TagSession"}


def test_handlers_reach_only_what_they_use() -> None:
    def ops(module: str) -> set[str]:
        return {f"{c.service}:{c.operation}" for c in iam_calls.handler_calls(module)}

    assert {"stepfunctions:StartExecution", "stepfunctions:StopExecution", "s3:GetObject"} <= ops("on_trial_api")
    assert "sns:Publish" in ops("scheduled_cost_report")
    assert {"batch:DescribeJobs", "cloudwatch:GetMetricData"} <= ops("close_trial_costs")
    assert "dynamodb:PutItem" in ops("on_batch_job_state")  # the idempotency layer's record
    # Following imports name by name keeps a small task from reaching every adapter through wiring.
    assert not {"stepfunctions:StartExecution", "sns:Publish", "s3:PutObject"} & ops("set_trial_status")
    trainer = {f"{c.service}:{c.operation}" for c in iam_calls.trainer_calls()}
    assert {"s3:GetObject", "s3:PutObject", "s3:ListObjectsV2", "cloudwatch:PutMetricData", "lambda:Invoke"} <= trainer
    assert {"batch:DescribeJobs", "sts:AssumeRole", "dynamodb:GetItem"} <= ops("vend_job_credentials")
    assert not {"s3:PutObject", "stepfunctions:StartExecution"} & ops("vend_job_credentials")


def test_lambda_roles_grant_every_call(templates: dict[str, dict[str, Any]]) -> None:
    needs = function_needs(templates)
    assert len({n.principal for n in needs}) == 10
    gaps = _unexpected(missing(templates, needs))
    assert not gaps, _report(gaps)


def test_job_roles_grant_every_trainer_call(templates: dict[str, dict[str, Any]]) -> None:
    needs = job_role_needs(templates)
    assert {n.role.split("JobRole")[0] for n in needs} >= {"GpuJobs", "Trn2Jobs"}
    assert any(n.action == "kms:GenerateDataKey" for n in needs)  # the data buckets are SSE-KMS
    gaps = _unexpected(missing(templates, needs))
    assert not gaps, _report(gaps)


def test_state_machine_role_grants_every_integration(templates: dict[str, dict[str, Any]]) -> None:
    needs = state_machine_needs(templates)
    actions = {n.action for n in needs}
    assert {"batch:SubmitJob", "batch:DescribeJobs", "events:PutRule", "lambda:InvokeFunction"} <= actions
    gaps = _unexpected(missing(templates, needs))
    assert not gaps, _report(gaps)


def test_known_missing_grants_are_still_missing(templates: dict[str, dict[str, Any]]) -> None:
    needs = function_needs(templates) + job_role_needs(templates) + state_machine_needs(templates)
    gaps = {(n.principal, n.action) for n in missing(templates, needs)}
    fixed = set(KNOWN_MISSING) - gaps
    assert not fixed, f"granted now, remove from KNOWN_MISSING: {sorted(fixed)}"


def _without(templates: dict[str, dict[str, Any]], stack: str, role: str, action: str) -> dict[str, dict[str, Any]]:
    """A copy of ``templates`` whose policies on ``role`` no longer name ``action`` (or a wildcard covering it)."""
    out = copy.deepcopy(templates)
    for policy in resources(out[stack], "AWS::IAM::Policy").values():
        if {"Ref": role} not in policy["Properties"]["Roles"]:
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            kept = [a for a in _actions(statement, "Action") if not _matches(action, [a])]
            statement["Action"] = kept or ["none:Nothing"]
    return out


@pytest.mark.parametrize(("principal", "action"), [
    ("function close_trial_costs", "cloudwatch:GetMetricData"),
    ("function on_trial_api", "states:StartExecution"),
    ("function scheduled_cost_report", "kms:GenerateDataKey"),
    ("function on_batch_job_state", "xray:PutTraceSegments"),
])
def test_checker_flags_a_removed_function_grant(templates: dict[str, dict[str, Any]], principal: str,
                                                action: str) -> None:
    need = next(n for n in function_needs(templates) if n.principal == principal and n.action == action)
    mutated = _without(templates, need.template, need.role, action)
    flagged = [n for n in missing(mutated, function_needs(mutated)) if n.principal == principal]
    assert {n.action for n in flagged} >= {action}
    assert any(n.site.startswith("lambdas/") or n.site.startswith(need.template) for n in flagged)


@pytest.mark.parametrize("action", ["batch:TagResource", "batch:SubmitJob", "events:PutTargets",
                                    "lambda:InvokeFunction"])
def test_checker_flags_a_removed_state_machine_grant(templates: dict[str, dict[str, Any]], action: str) -> None:
    need = next(n for n in state_machine_needs(templates) if n.action == action)
    mutated = _without(templates, need.template, need.role, action)
    assert action in {n.action for n in missing(mutated, state_machine_needs(mutated))}


@pytest.mark.parametrize(("action", "operation"), [("s3:ListBucket", "ListObjectsV2"),
                                                   ("lambda:InvokeFunction", "Invoke")])
def test_checker_flags_a_removed_job_role_grant(templates: dict[str, dict[str, Any]], action: str,
                                                operation: str) -> None:
    need = next(n for n in job_role_needs(templates) if n.action == action)
    mutated = _without(templates, need.template, need.role, action)
    flagged = [n for n in missing(mutated, job_role_needs(mutated)) if n.role == need.role]
    assert {n.site for n in flagged if n.action == action} == {
        c.site for c in iam_calls.trainer_calls() if c.operation == operation}
