"""Stand a synthesized dualtrack app up on moto: resolve the templates' tokens, create the resources by API.

moto's CloudFormation cannot create the Batch stack, so :func:`deploy_locally` reads the templates itself. It gives
every supported resource a deterministic physical name (``<stack>-<logical id>``), resolves the intrinsic
functions CDK emits (``Ref``, ``Fn::GetAtt``, ``Fn::Join``, ``Fn::Sub``, ``Fn::ImportValue``, ``Fn::Select``,
``Fn::Split``) against those names, and creates buckets, tables, roles, Batch environments/queues/job definitions,
queues, topics, functions, EventBridge rules and the state machine through boto3 (call it inside ``mock_aws``).
Encryption, logging and network settings are not reproduced: they do not change what the workflow does.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import boto3

from infra.synth import Assembly

ACCOUNT = "123456789012"  # moto's default account
PSEUDO = {"AWS::Partition": "aws", "AWS::URLSuffix": "amazonaws.com", "AWS::AccountId": ACCOUNT}
NO_VALUE = object()
CREATED_TYPES = (
    "AWS::IAM::Role", "AWS::S3::Bucket", "AWS::DynamoDB::Table", "AWS::SQS::Queue", "AWS::SNS::Topic",
    "AWS::Batch::ComputeEnvironment", "AWS::Batch::JobQueue", "AWS::Batch::JobDefinition",
    "AWS::Lambda::Function", "AWS::StepFunctions::StateMachine", "AWS::Events::Rule",
)
_NAMED_TYPES = (*CREATED_TYPES, "AWS::Logs::LogGroup", "AWS::KMS::Key", "AWS::Lambda::LayerVersion")


_NAME_PROPERTY = {"AWS::Batch::JobQueue": "JobQueueName", "AWS::Batch::JobDefinition": "JobDefinitionName",
                  "AWS::Batch::ComputeEnvironment": "ComputeEnvironmentName", "AWS::Lambda::Function": "FunctionName"}


class UnresolvableToken(ValueError):
    pass


@dataclass(frozen=True)
class LocalRule:
    """An EventBridge rule as deployed: its pattern or schedule, and its resolved targets."""

    logical_id: str
    name: str
    event_pattern: dict[str, Any] | None
    schedule: str | None
    targets: list[dict[str, Any]]


@dataclass
class LocalDeployment:
    """What :func:`deploy_locally` created, by the names the rest of the local runtime needs."""

    region: str
    state_machine_arn: str
    functions: dict[str, str] = field(default_factory=dict)  # handler module (else logical id) → function name
    buckets: dict[str, str] = field(default_factory=dict)  # logical id → bucket name
    tables: dict[str, str] = field(default_factory=dict)  # logical id → table name
    job_queues: dict[str, str] = field(default_factory=dict)  # logical id → queue ARN
    job_definitions: dict[str, str] = field(default_factory=dict)  # logical id → ARN
    # Job queue name → its JobStateTimeLimitActions (API casing) and its compute environments' instance types:
    # moto's CreateJobQueue drops the actions and an unmanaged environment has no instance types.
    job_state_time_limit_actions: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    queue_instance_types: dict[str, list[str]] = field(default_factory=dict)
    rules: list[LocalRule] = field(default_factory=list)
    topics: dict[str, str] = field(default_factory=dict)
    queues: dict[str, str] = field(default_factory=dict)  # logical id → queue URL
    # Role name → its identity policies' statements, for the roles whose sessions carry tags (sts:TagSession in
    # their trust policy): the local runtime holds those sessions' S3 access to them (session_policies.py).
    role_policies: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    resolver: TemplateResolver | None = None

    def function_environment(self, module: str) -> dict[str, str]:
        config = boto3.client("lambda", region_name=self.region).get_function_configuration(
            FunctionName=self.functions[module])
        return dict(config.get("Environment", {}).get("Variables", {}))


class TemplateResolver:
    """Physical ids and attributes of the app's resources, and the intrinsic-function evaluator over them."""

    def __init__(self, templates: dict[str, dict[str, Any]], *, region: str):
        self.templates = templates
        self.region = region
        self.refs: dict[tuple[str, str], str] = {}
        self.attributes: dict[tuple[str, str], dict[str, str]] = {}
        self._exports: dict[str, tuple[str, Any]] = {}
        for stack, template in templates.items():
            for output in (template.get("Outputs") or {}).values():
                export = output.get("Export")
                if export:
                    self._exports[self.resolve(stack, export["Name"])] = (stack, output["Value"])
            for logical_id, resource in template.get("Resources", {}).items():
                if resource["Type"] in _NAMED_TYPES:
                    self._name(stack, logical_id, resource["Type"])

    # ---- physical ids -------------------------------------------------------------------------------------
    def physical_name(self, stack: str, logical_id: str, limit: int = 64) -> str:
        name = f"{stack}-{logical_id}"
        if len(name) > limit:
            name = f"{name[: limit - 9]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
        return name

    def _name(self, stack: str, logical_id: str, kind: str) -> None:
        name = self.physical_name(stack, logical_id)
        key = (stack, logical_id)
        # A name the template fixes is the name AWS uses (and what other stacks and functions refer to).
        properties = self.templates[stack]["Resources"][logical_id].get("Properties") or {}
        fixed = properties.get(_NAME_PROPERTY.get(kind, ""))
        if isinstance(fixed, str):
            name = fixed
        if kind == "AWS::S3::Bucket":
            name = re.sub(r"[^a-z0-9-]", "-", self.physical_name(stack, logical_id, 63).lower())
        attributes = self._name_ref_attributes(kind, name)
        if attributes is not None:
            self.refs[key], self.attributes[key] = name, attributes
            return
        ids = self._other_ref_ids(kind, name)
        if ids is not None:
            self.refs[key] = ids[0]
            if ids[1] is not None:
                self.attributes[key] = ids[1]

    def _name_ref_attributes(self, kind: str, name: str) -> dict[str, str] | None:
        """The attributes of a resource whose Ref is its name (None for the other kinds)."""
        r, a = self.region, ACCOUNT
        if kind == "AWS::S3::Bucket":
            return {"Arn": f"arn:aws:s3:::{name}", "DomainName": f"{name}.s3.amazonaws.com",
                    "RegionalDomainName": f"{name}.s3.{r}.amazonaws.com"}
        if kind == "AWS::DynamoDB::Table":
            return {"Arn": f"arn:aws:dynamodb:{r}:{a}:table/{name}"}
        if kind == "AWS::IAM::Role":
            return {"Arn": f"arn:aws:iam::{a}:role/{name}", "RoleId": name}
        if kind == "AWS::Lambda::Function":
            return {"Arn": f"arn:aws:lambda:{r}:{a}:function:{name}"}
        if kind == "AWS::Events::Rule":
            return {"Arn": f"arn:aws:events:{r}:{a}:rule/{name}"}
        if kind == "AWS::Logs::LogGroup":
            return {"Arn": f"arn:aws:logs:{r}:{a}:log-group:{name}:*"}
        return None

    def _other_ref_ids(self, kind: str, name: str) -> tuple[str, dict[str, str] | None] | None:
        """The Ref (a URL, an ARN, a key id) and the attributes, if any, of a resource whose Ref is not its name
        (None for the other kinds)."""
        r, a = self.region, ACCOUNT
        if kind == "AWS::SQS::Queue":
            url = f"https://sqs.{r}.amazonaws.com/{a}/{name}"
            return url, {"Arn": f"arn:aws:sqs:{r}:{a}:{name}", "QueueName": name, "QueueUrl": url}
        if kind == "AWS::SNS::Topic":
            arn = f"arn:aws:sns:{r}:{a}:{name}"
            return arn, {"TopicArn": arn, "TopicName": name}
        if kind == "AWS::Batch::ComputeEnvironment":
            arn = f"arn:aws:batch:{r}:{a}:compute-environment/{name}"
            return arn, {"ComputeEnvironmentArn": arn}
        if kind == "AWS::Batch::JobQueue":
            arn = f"arn:aws:batch:{r}:{a}:job-queue/{name}"
            return arn, {"JobQueueArn": arn}
        if kind == "AWS::Batch::JobDefinition":
            return f"arn:aws:batch:{r}:{a}:job-definition/{name}:1", None  # fixed up when registered
        if kind == "AWS::Lambda::LayerVersion":
            return f"arn:aws:lambda:{r}:{a}:layer:{name}:1", None
        if kind == "AWS::StepFunctions::StateMachine":
            arn = f"arn:aws:states:{r}:{a}:stateMachine:{name}"
            return arn, {"Arn": arn, "Name": name}
        if kind == "AWS::KMS::Key":
            key_id = hashlib.sha256(name.encode()).hexdigest()[:32]
            return key_id, {"Arn": f"arn:aws:kms:{r}:{a}:key/{key_id}", "KeyId": key_id}
        return None

    # ---- intrinsic functions ------------------------------------------------------------------------------
    def resolve(self, stack: str, value: Any) -> Any:
        if isinstance(value, list):
            return [item for item in (self.resolve(stack, v) for v in value) if item is not NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            (fn, arg), = value.items()
            if fn == "Ref":
                return self._ref(stack, arg)
            if fn == "Fn::GetAtt":
                logical_id, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
                return self._get_att(stack, logical_id, attribute)
            if fn == "Fn::Join":
                separator, parts = arg
                return separator.join(str(part) for part in self.resolve(stack, parts))
            if fn == "Fn::Sub":
                return self._sub(stack, arg)
            if fn == "Fn::ImportValue":
                name = self.resolve(stack, arg)
                if name not in self._exports:
                    raise UnresolvableToken(f"{stack}: no stack exports {name!r}")
                producer, expression = self._exports[name]
                return self.resolve(producer, expression)
            if fn == "Fn::Select":
                index, items = arg
                return self.resolve(stack, items)[int(self.resolve(stack, index))]
            if fn == "Fn::Split":
                separator, text = arg
                return str(self.resolve(stack, text)).split(separator)
            if fn == "Fn::GetAZs":
                return [f"{self.region}a", f"{self.region}b", f"{self.region}c"]
            if fn.startswith("Fn::"):
                raise UnresolvableToken(f"{stack}: {fn} is not supported locally ({json.dumps(value)[:200]})")
        return {key: item for key, item in ((k, self.resolve(stack, v)) for k, v in value.items())
                if item is not NO_VALUE}

    def _ref(self, stack: str, name: str) -> Any:
        if name == "AWS::Region":
            return self.region
        if name == "AWS::StackName":
            return stack
        if name == "AWS::NoValue":
            return NO_VALUE
        if name in PSEUDO:
            return PSEUDO[name]
        if (stack, name) in self.refs:
            return self.refs[(stack, name)]
        parameter = (self.templates[stack].get("Parameters") or {}).get(name)
        if parameter is not None and "Default" in parameter:
            return parameter["Default"]
        kind = self.templates[stack].get("Resources", {}).get(name, {}).get("Type", "unknown")
        raise UnresolvableToken(f"{stack}: Ref {name} ({kind}) has no local equivalent")

    def _get_att(self, stack: str, logical_id: str, attribute: str) -> str:
        found = self.attributes.get((stack, logical_id), {}).get(attribute)
        if found is None:
            kind = self.templates[stack].get("Resources", {}).get(logical_id, {}).get("Type", "unknown")
            raise UnresolvableToken(f"{stack}: Fn::GetAtt {logical_id}.{attribute} ({kind}) has no local value")
        return found

    def _sub(self, stack: str, arg: Any) -> str:
        text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])
        values = {k: self.resolve(stack, v) for k, v in variables.items()}

        def replace(match: re.Match[str]) -> str:
            token = match.group(1)
            if token in values:
                return str(values[token])
            if "." in token:
                logical_id, attribute = token.split(".", 1)
                return self._get_att(stack, logical_id, attribute)
            return str(self._ref(stack, token))

        return re.sub(r"\$\{([^!}][^}]*)\}", replace, text)

    def resources(self, kind: str) -> list[tuple[str, str, dict[str, Any]]]:
        return [(stack, logical_id, resource.get("Properties", {}))
                for stack, template in self.templates.items()
                for logical_id, resource in template.get("Resources", {}).items() if resource["Type"] == kind]


def _camel(value: Any, keep: frozenset[str] = frozenset({"Tags", "Options", "Parameters"})) -> Any:
    """CloudFormation's PascalCase Batch properties → the API's camelCase (user-keyed maps left alone)."""
    if isinstance(value, list):
        return [_camel(item) for item in value]
    if isinstance(value, dict):
        return {key[0].lower() + key[1:]: (item if key in keep else _camel(item)) for key, item in value.items()}
    return value


def _empty_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("README", "handlers run in-process; see dualtrack.local.aws.moto_shims")
    return buffer.getvalue()


def deploy_locally(assembly: Assembly, *, region: str = "us-east-1",
                   templates: dict[str, dict[str, Any]] | None = None) -> LocalDeployment:
    """Create the app's resources on the active moto backend and return where they are (from ``templates`` when
    given: the assembly's, already read)."""
    resolver = TemplateResolver(templates if templates is not None else assembly.templates(), region=region)
    machines = resolver.resources("AWS::StepFunctions::StateMachine")
    if len(machines) != 1:
        raise ValueError(f"expected one state machine in the app, found {len(machines)}")
    out = LocalDeployment(region=region, state_machine_arn=resolver.refs[(machines[0][0], machines[0][1])],
                          resolver=resolver)
    clients: dict[str, Any] = {}

    def client(service: str) -> Any:
        if service not in clients:
            clients[service] = boto3.client(service, region_name=region)  # type: ignore[call-overload]
        return clients[service]

    steps: list[Callable[[], None]] = [
        lambda: _roles(resolver, client("iam"), out),
        lambda: _buckets(resolver, client("s3"), region, out),
        lambda: _tables(resolver, client("dynamodb"), out),
        lambda: _queues_and_topics(resolver, client("sqs"), client("sns"), out),
        lambda: _batch(resolver, client("batch"), client("iam"), out),
        lambda: _functions(resolver, client("lambda"), out),
        lambda: _state_machine(resolver, client("stepfunctions"), machines[0]),
        lambda: _rules(resolver, client("events"), out),
    ]
    for step in steps:
        step()
    return out


def _roles(resolver: TemplateResolver, iam: Any, out: LocalDeployment) -> None:
    tagged: dict[tuple[str, str], str] = {}
    for stack, logical_id, props in resolver.resources("AWS::IAM::Role"):
        policy = resolver.resolve(stack, props.get("AssumeRolePolicyDocument", {}))
        name = resolver.refs[(stack, logical_id)]
        iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(policy))
        actions = {a for st in policy.get("Statement", []) if st.get("Effect") == "Allow"
                   for a in ([st["Action"]] if isinstance(st.get("Action"), str) else st.get("Action", []))}
        if "sts:TagSession" in actions:
            tagged[(stack, logical_id)] = name
    for stack, _, props in resolver.resources("AWS::IAM::Policy"):
        for role in props.get("Roles", []):
            role_name = tagged.get((stack, role.get("Ref", ""))) if isinstance(role, dict) else None
            if role_name:
                document = resolver.resolve(stack, props["PolicyDocument"])
                out.role_policies.setdefault(role_name, []).extend(document.get("Statement", []))


def _buckets(resolver: TemplateResolver, s3: Any, region: str, out: LocalDeployment) -> None:
    for stack, logical_id, _ in resolver.resources("AWS::S3::Bucket"):
        name = resolver.refs[(stack, logical_id)]
        extra = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
        s3.create_bucket(Bucket=name, **extra)
        s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        out.buckets[logical_id] = name


def _tables(resolver: TemplateResolver, dynamodb: Any, out: LocalDeployment) -> None:
    for stack, logical_id, props in resolver.resources("AWS::DynamoDB::Table"):
        name = resolver.refs[(stack, logical_id)]
        indexes = [{k: index[k] for k in ("IndexName", "KeySchema", "Projection")}
                   for index in props.get("GlobalSecondaryIndexes", [])]
        dynamodb.create_table(TableName=name, KeySchema=props["KeySchema"],
                              AttributeDefinitions=props["AttributeDefinitions"], BillingMode="PAY_PER_REQUEST",
                              **({"GlobalSecondaryIndexes": indexes} if indexes else {}))
        ttl = props.get("TimeToLiveSpecification")
        if ttl and ttl.get("Enabled"):
            dynamodb.update_time_to_live(TableName=name, TimeToLiveSpecification=ttl)
        out.tables[logical_id] = name


def _queues_and_topics(resolver: TemplateResolver, sqs: Any, sns: Any, out: LocalDeployment) -> None:
    for stack, logical_id, _ in resolver.resources("AWS::SQS::Queue"):
        out.queues[logical_id] = sqs.create_queue(QueueName=resolver.attributes[(stack, logical_id)]["QueueName"])[
            "QueueUrl"]
    for stack, logical_id, _ in resolver.resources("AWS::SNS::Topic"):
        out.topics[logical_id] = sns.create_topic(Name=resolver.attributes[(stack, logical_id)]["TopicName"])[
            "TopicArn"]


def _batch(resolver: TemplateResolver, batch: Any, iam: Any, out: LocalDeployment) -> None:
    """Batch environments, queues and job definitions, refusing what the Batch API refuses.

    Unmanaged environments: no instances, no VPC; the local job runner decides what a job does.
    """
    from dualtrack.local.batch_rules import BatchClientError, time_limit_actions_problem, timeout_problem

    service_role = iam.create_role(RoleName="dualtrack-local-batch-service", AssumeRolePolicyDocument=json.dumps(
        {"Statement": [{"Effect": "Allow", "Principal": {"Service": "batch.amazonaws.com"},
                        "Action": "sts:AssumeRole"}]}))["Role"]["Arn"]
    instance_types: dict[str, list[str]] = {}
    for stack, logical_id, props in resolver.resources("AWS::Batch::ComputeEnvironment"):
        arn = resolver.refs[(stack, logical_id)]
        batch.create_compute_environment(computeEnvironmentName=arn.rsplit("/", 1)[1], type="UNMANAGED",
                                         state="ENABLED", serviceRole=service_role)
        instance_types[arn] = [str(t) for t in (props.get("ComputeResources") or {}).get("InstanceTypes", [])]
    for stack, logical_id, props in resolver.resources("AWS::Batch::JobQueue"):
        arn = resolver.refs[(stack, logical_id)]
        name = arn.rsplit("/", 1)[1]
        order = [{"order": int(item["Order"]),
                  "computeEnvironment": resolver.resolve(stack, item["ComputeEnvironment"])}
                 for item in props["ComputeEnvironmentOrder"]]
        request: dict[str, Any] = {"jobQueueName": name, "state": "ENABLED",
                                   "priority": int(props.get("Priority", 1)), "computeEnvironmentOrder": order}
        actions = _time_limit_actions(resolver.resolve(stack, props.get("JobStateTimeLimitActions") or []))
        problem = time_limit_actions_problem(actions)
        if problem:
            raise BatchClientError(f"{stack}/{logical_id}: CreateJobQueue ClientException: {problem}")
        if actions:
            request["jobStateTimeLimitActions"] = actions  # moto ignores it; the local runner reads it from `out`
            out.job_state_time_limit_actions[name] = actions
        batch.create_job_queue(**request)
        out.job_queues[logical_id] = arn
        out.queue_instance_types[name] = [t for item in sorted(order, key=lambda i: i["order"])
                                          for t in instance_types.get(item["computeEnvironment"], [])]
    for stack, logical_id, props in resolver.resources("AWS::Batch::JobDefinition"):
        resolved = resolver.resolve(stack, props)
        name = resolved.get("JobDefinitionName") or resolver.physical_name(stack, logical_id, 128)
        request = {"jobDefinitionName": name, "type": resolved["Type"]}
        for source, target in (("ContainerProperties", "containerProperties"), ("NodeProperties", "nodeProperties"),
                               ("RetryStrategy", "retryStrategy"), ("Timeout", "timeout")):
            if source in resolved:
                request[target] = _camel(resolved[source])
        for source, target in (("PropagateTags", "propagateTags"), ("Parameters", "parameters"),
                               ("Tags", "tags")):
            if source in resolved:
                request[target] = resolved[source]
        problem = timeout_problem(request.get("timeout"))
        if problem:  # moto registers it; Batch refuses it
            raise BatchClientError(f"{stack}/{logical_id}: RegisterJobDefinition ClientException: {problem}")
        arn = batch.register_job_definition(**request)["jobDefinitionArn"]
        resolver.refs[(stack, logical_id)] = arn
        out.job_definitions[logical_id] = arn


def _time_limit_actions(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """CloudFormation's ``JobStateTimeLimitActions`` → the API's ``jobStateTimeLimitActions``."""
    actions: list[dict[str, Any]] = _camel(items)
    for action in actions:
        if "maxTimeSeconds" in action:
            action["maxTimeSeconds"] = int(action["maxTimeSeconds"])
    return actions


def _functions(resolver: TemplateResolver, lambda_client: Any, out: LocalDeployment) -> None:
    code = _empty_zip()
    for stack, logical_id, props in resolver.resources("AWS::Lambda::Function"):
        name = resolver.refs[(stack, logical_id)]
        variables = resolver.resolve(stack, props.get("Environment", {}).get("Variables", {}))
        lambda_client.create_function(
            FunctionName=name, Runtime=props.get("Runtime", "python3.12"), Role=resolver.resolve(stack, props["Role"]),
            Handler=props["Handler"], Code={"ZipFile": code}, Timeout=int(props.get("Timeout", 30)),
            MemorySize=int(props.get("MemorySize", 128)), Environment={"Variables": variables},
        )
        module = props["Handler"].rsplit(".", 1)[0]
        out.functions[module.removeprefix("lambdas.handlers.") if module.startswith("lambdas.handlers.")
                      else logical_id] = name


def _state_machine(resolver: TemplateResolver, sfn: Any, machine: tuple[str, str, dict[str, Any]]) -> None:
    stack, logical_id, props = machine
    definition = resolver.resolve(stack, props["DefinitionString"])
    sfn.create_state_machine(name=resolver.attributes[(stack, logical_id)]["Name"], definition=definition,
                             roleArn=resolver.resolve(stack, props["RoleArn"]),
                             type=props.get("StateMachineType", "STANDARD"))


def _rules(resolver: TemplateResolver, events: Any, out: LocalDeployment) -> None:
    for stack, logical_id, props in resolver.resources("AWS::Events::Rule"):
        name = resolver.refs[(stack, logical_id)]
        pattern = resolver.resolve(stack, props.get("EventPattern")) if props.get("EventPattern") else None
        schedule = props.get("ScheduleExpression")
        request: dict[str, Any] = {"Name": name, "State": props.get("State", "ENABLED")}
        if pattern is not None:
            request["EventPattern"] = json.dumps(pattern)
        if schedule:
            request["ScheduleExpression"] = schedule
        events.put_rule(**request)
        targets = [resolver.resolve(stack, target) for target in props.get("Targets", [])]
        if targets:
            events.put_targets(Rule=name, Targets=targets)
        out.rules.append(LocalRule(logical_id, name, pattern, schedule, targets))
