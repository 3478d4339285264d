"""Stand a synthesized dualtrack app up on moto: resolve the templates' tokens, create the resources by API.

moto's CloudFormation cannot create the Batch stack, so :func:`deploy_locally` reads the templates itself. It gives
every supported resource a deterministic physical name (``<stack>-<logical id>``), resolves the intrinsic
functions CDK emits (``Ref``, ``Fn::GetAtt``, ``Fn::Join``, ``Fn::Sub``, ``Fn::ImportValue``, ``Fn::Select``,
``Fn::Split``) against those names, and creates buckets, tables, roles, Batch environments/queues/job definitions,
queues, topics, functions, EventBridge rules and the state machine through boto3 (call it inside ``mock_aws``).
Encryption, logging and network settings are not reproduced: they do not change what the workflow does.
"""

from __future__ import annotations

import enum
import hashlib
import io
import json
import re
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NotRequired, Protocol, TypedDict, TypeGuard

import boto3

from dualtrack.local.json_shapes import integer, json_object, mapping, optional_text, sequence, text
from infra.synth import Assembly
from lambdas.domain.json_types import JsonIn, JsonMapping, JsonObject, JsonValue

if TYPE_CHECKING:
    from mypy_boto3_batch import BatchClient
    from mypy_boto3_batch.type_defs import (
        ComputeEnvironmentOrderTypeDef,
        CreateJobQueueRequestTypeDef,
        JobStateTimeLimitActionTypeDef,
    )
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.literals import KeyTypeType, ProjectionTypeType, ScalarAttributeTypeType
    from mypy_boto3_dynamodb.type_defs import (
        AttributeDefinitionTypeDef,
        CreateTableInputTypeDef,
        GlobalSecondaryIndexTypeDef,
        KeySchemaElementTypeDef,
        ProjectionTypeDef,
    )
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.literals import BucketLocationConstraintType
    from mypy_boto3_sns import SNSClient
    from mypy_boto3_stepfunctions import SFNClient
    from mypy_boto3_stepfunctions.literals import StateMachineTypeType

ACCOUNT = "123456789012"  # moto's default account
PSEUDO = {"AWS::Partition": "aws", "AWS::URLSuffix": "amazonaws.com", "AWS::AccountId": ACCOUNT}


class _NoValue(enum.Enum):
    """``AWS::NoValue``: the property (or list item) it stands for is left out."""

    NO_VALUE = "AWS::NoValue"


NO_VALUE = _NoValue.NO_VALUE
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


# ---- IAM, SQS, Lambda and EventBridge as the deployer calls them: what it sends and what it reads back ---------
class _Role(TypedDict):
    Arn: str


class _CreatedRole(TypedDict):
    Role: _Role


class IamClient(Protocol):
    def create_role(self, *, RoleName: str, AssumeRolePolicyDocument: str) -> _CreatedRole: ...


class _CreatedQueue(TypedDict):
    QueueUrl: str


class SqsClient(Protocol):
    def create_queue(self, *, QueueName: str) -> _CreatedQueue: ...


class _FunctionCode(TypedDict):
    ZipFile: bytes


class _FunctionEnvironment(TypedDict):
    Variables: Mapping[str, str]


class _ConfiguredEnvironment(TypedDict):
    Variables: NotRequired[dict[str, str]]


class _FunctionConfiguration(TypedDict):
    FunctionArn: str
    Environment: NotRequired[_ConfiguredEnvironment]


class LambdaClient(Protocol):
    def create_function(self, *, FunctionName: str, Runtime: str, Role: str, Handler: str, Code: _FunctionCode,
                        Timeout: int, MemorySize: int, Environment: _FunctionEnvironment) -> _FunctionConfiguration: ...

    def get_function_configuration(self, *, FunctionName: str) -> _FunctionConfiguration: ...


class _PutRule(TypedDict):
    Name: str
    State: str
    EventPattern: NotRequired[str]
    ScheduleExpression: NotRequired[str]


class _PutRuleResponse(TypedDict):
    RuleArn: str


class _PutTargetsResponse(TypedDict):
    FailedEntryCount: int


class EventsClient(Protocol):
    def put_rule(self, *, Name: str, State: str, EventPattern: str = ...,
                 ScheduleExpression: str = ...) -> _PutRuleResponse: ...

    def put_targets(self, *, Rule: str, Targets: Sequence[JsonObject]) -> _PutTargetsResponse: ...


@dataclass(frozen=True)
class LocalRule:
    """An EventBridge rule as deployed: its pattern or schedule, and its resolved targets."""

    logical_id: str
    name: str
    event_pattern: JsonObject | None
    schedule: str | None
    targets: list[JsonObject]


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
    job_state_time_limit_actions: dict[str, list[JsonObject]] = field(default_factory=dict)
    queue_instance_types: dict[str, list[str]] = field(default_factory=dict)
    rules: list[LocalRule] = field(default_factory=list)
    topics: dict[str, str] = field(default_factory=dict)
    queues: dict[str, str] = field(default_factory=dict)  # logical id → queue URL
    # Role name → its identity policies' statements, for the roles whose sessions carry tags (sts:TagSession in
    # their trust policy): the local runtime holds those sessions' S3 access to them (session_policies.py).
    role_policies: dict[str, list[JsonObject]] = field(default_factory=dict)
    resolver: TemplateResolver | None = None

    def function_environment(self, module: str) -> dict[str, str]:
        client: LambdaClient = boto3.client("lambda", region_name=self.region)
        config = client.get_function_configuration(FunctionName=self.functions[module])
        return dict(config.get("Environment", {}).get("Variables", {}))


class TemplateResolver:
    """Physical ids and attributes of the app's resources, and the intrinsic-function evaluator over them."""

    def __init__(self, templates: Mapping[str, JsonObject], *, region: str):
        self.templates = templates
        self.region = region
        self.refs: dict[tuple[str, str], str] = {}
        self.attributes: dict[tuple[str, str], dict[str, str]] = {}
        self._exports: dict[str, tuple[str, JsonValue]] = {}  # export name -> (its stack, its value expression)
        for stack, template in templates.items():
            for output in map(json_object, json_object(template.get("Outputs") or {}).values()):
                export = output.get("Export")
                if export:
                    name = text(self.resolve(stack, json_object(export)["Name"]))
                    self._exports[name] = (stack, output["Value"])
            for logical_id, resource in self._resources(stack).items():
                kind = json_object(resource)["Type"]
                if isinstance(kind, str) and kind in _NAMED_TYPES:
                    self._name(stack, logical_id, kind)

    def _resources(self, stack: str) -> JsonObject:
        return json_object(self.templates[stack].get("Resources", {}))

    def _kind(self, stack: str, logical_id: str) -> JsonValue:
        """The type of a resource (for a message)."""
        return json_object(self._resources(stack).get(logical_id, {})).get("Type", "unknown")

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
        properties = json_object(json_object(self._resources(stack)[logical_id]).get("Properties") or {})
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
    def resolve(self, stack: str, value: JsonValue) -> JsonValue:
        """``value`` with every intrinsic function in it evaluated (``AWS::NoValue`` drops what it stands for; in
        place of the whole value it has nothing to stand for)."""
        resolved = self._resolve(stack, value)
        if resolved is NO_VALUE:
            raise UnresolvableToken(f"{stack}: AWS::NoValue where a value is needed ({json.dumps(value)[:200]})")
        return resolved

    def _resolve(self, stack: str, value: JsonValue) -> JsonValue | _NoValue:
        if isinstance(value, list):
            return [item for item in (self._resolve(stack, v) for v in value) if not isinstance(item, _NoValue)]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            (fn, arg), = value.items()
            if fn == "Ref":
                return self._ref(stack, text(arg))
            if fn.startswith("Fn::"):
                return self._function(stack, fn, arg, value)
        return {key: item for key, item in ((k, self._resolve(stack, v)) for k, v in value.items())
                if not isinstance(item, _NoValue)}

    def _function(self, stack: str, fn: str, arg: JsonValue, value: JsonObject) -> JsonValue:
        """``{fn: arg}`` (``value``) evaluated."""
        if fn == "Fn::GetAtt":
            logical_id, attribute = arg if isinstance(arg, list) else text(arg).split(".", 1)
            return self._get_att(stack, text(logical_id), text(attribute))
        if fn == "Fn::Join":
            separator, parts = _pair(arg)
            return text(separator).join(str(part) for part in _items(self.resolve(stack, parts)))
        if fn == "Fn::Sub":
            return self._sub(stack, arg)
        if fn == "Fn::ImportValue":
            name = self.resolve(stack, arg)
            if not isinstance(name, str) or name not in self._exports:
                raise UnresolvableToken(f"{stack}: no stack exports {name!r}")
            producer, expression = self._exports[name]
            return self.resolve(producer, expression)
        if fn == "Fn::Select":
            index, items = _pair(arg)
            return _items(self.resolve(stack, items))[integer(self.resolve(stack, index))]
        if fn == "Fn::Split":
            separator, source = _pair(arg)
            return list(str(self.resolve(stack, source)).split(text(separator)))
        if fn == "Fn::GetAZs":
            return [f"{self.region}a", f"{self.region}b", f"{self.region}c"]
        raise UnresolvableToken(f"{stack}: {fn} is not supported locally ({json.dumps(value)[:200]})")

    def _ref(self, stack: str, name: str) -> JsonValue | _NoValue:
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
        parameter = json_object(self.templates[stack].get("Parameters") or {}).get(name)
        if isinstance(parameter, dict) and "Default" in parameter:
            return parameter["Default"]
        raise UnresolvableToken(f"{stack}: Ref {name} ({self._kind(stack, name)}) has no local equivalent")

    def _get_att(self, stack: str, logical_id: str, attribute: str) -> str:
        found = self.attributes.get((stack, logical_id), {}).get(attribute)
        if found is None:
            raise UnresolvableToken(f"{stack}: Fn::GetAtt {logical_id}.{attribute} ({self._kind(stack, logical_id)}) "
                                    "has no local value")
        return found

    def _sub(self, stack: str, arg: JsonValue) -> str:
        if isinstance(arg, str):
            source, variables = arg, {}
        else:
            items = _items(arg)
            source, variables = text(items[0]), json_object(items[1])
        values = {k: self._resolve(stack, v) for k, v in variables.items()}

        def replace(match: re.Match[str]) -> str:
            token = match.group(1)
            if token in values:
                return str(values[token])
            if "." in token:
                logical_id, attribute = token.split(".", 1)
                return self._get_att(stack, logical_id, attribute)
            return str(self._ref(stack, token))

        return re.sub(r"\$\{([^!}][^}]*)\}", replace, source)

    def resources(self, kind: str) -> list[tuple[str, str, JsonObject]]:
        """(stack, logical id, properties) of every resource of type ``kind``."""
        return [(stack, logical_id, json_object(resource.get("Properties", {})))
                for stack in self.templates
                for logical_id, resource in ((i, json_object(r)) for i, r in self._resources(stack).items())
                if resource["Type"] == kind]


def _items(value: JsonValue) -> list[JsonValue]:
    """A JSON array of the template."""
    if not isinstance(value, list):
        raise TypeError(f"expected a JSON array, got {value!r}")
    return value


def _pair(value: JsonValue) -> tuple[JsonValue, JsonValue]:
    """An intrinsic function's two arguments."""
    first, second = _items(value)
    return first, second


def _camel(value: JsonValue, keep: frozenset[str] = frozenset({"Tags", "Options", "Parameters"})) -> JsonValue:
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
                   templates: Mapping[str, JsonObject] | None = None) -> LocalDeployment:
    """Create the app's resources on the active moto backend and return where they are (from ``templates`` when
    given: the assembly's, already read)."""
    resolver = TemplateResolver(templates if templates is not None else assembly.templates(), region=region)
    machines = resolver.resources("AWS::StepFunctions::StateMachine")
    if len(machines) != 1:
        raise ValueError(f"expected one state machine in the app, found {len(machines)}")
    out = LocalDeployment(region=region, state_machine_arn=resolver.refs[(machines[0][0], machines[0][1])],
                          resolver=resolver)
    iam: IamClient = boto3.client("iam", region_name=region)
    sqs: SqsClient = boto3.client("sqs", region_name=region)
    lambda_client: LambdaClient = boto3.client("lambda", region_name=region)
    events: EventsClient = boto3.client("events", region_name=region)
    steps: list[Callable[[], None]] = [
        lambda: _roles(resolver, iam, out),
        lambda: _buckets(resolver, boto3.client("s3", region_name=region), region, out),
        lambda: _tables(resolver, boto3.client("dynamodb", region_name=region), out),
        lambda: _queues_and_topics(resolver, sqs, boto3.client("sns", region_name=region), out),
        lambda: _batch(resolver, boto3.client("batch", region_name=region), iam, out),
        lambda: _functions(resolver, lambda_client, out),
        lambda: _state_machine(resolver, boto3.client("stepfunctions", region_name=region), machines[0]),
        lambda: _rules(resolver, events, out),
    ]
    for step in steps:
        step()
    return out


def _actions(statement: JsonMapping) -> Sequence[JsonIn]:
    """A policy statement's ``Action``: one action or a list of them."""
    action = statement.get("Action")
    return [action] if isinstance(action, str) else sequence(statement.get("Action", []))


def _roles(resolver: TemplateResolver, iam: IamClient, out: LocalDeployment) -> None:
    tagged: dict[tuple[str, str], str] = {}
    for stack, logical_id, props in resolver.resources("AWS::IAM::Role"):
        policy = json_object(resolver.resolve(stack, props.get("AssumeRolePolicyDocument", {})))
        name = resolver.refs[(stack, logical_id)]
        iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(policy))
        actions = {a for st in map(mapping, sequence(policy.get("Statement", []))) if st.get("Effect") == "Allow"
                   for a in _actions(st)}
        if "sts:TagSession" in actions:
            tagged[(stack, logical_id)] = name
    for stack, _, props in resolver.resources("AWS::IAM::Policy"):
        for role in _items(props.get("Roles", [])):
            ref = role.get("Ref", "") if isinstance(role, dict) else None
            role_name = tagged.get((stack, ref)) if isinstance(ref, str) else None
            if role_name:
                document = json_object(resolver.resolve(stack, props["PolicyDocument"]))
                out.role_policies.setdefault(role_name, []).extend(
                    map(json_object, _items(document.get("Statement", []))))


def _location_constraint(region: str) -> TypeGuard[BucketLocationConstraintType]:
    """Whether CreateBucket names ``region`` as its location: every region but S3's default, us-east-1."""
    return region != "us-east-1"


def _buckets(resolver: TemplateResolver, s3: S3Client, region: str, out: LocalDeployment) -> None:
    for stack, logical_id, _ in resolver.resources("AWS::S3::Bucket"):
        name = resolver.refs[(stack, logical_id)]
        if _location_constraint(region):
            s3.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": region})
        else:
            s3.create_bucket(Bucket=name)
        s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        out.buckets[logical_id] = name


# ---- a table's key schema and indexes, as the CreateTable request types them ---------------------------------
def _is_key_type(value: JsonValue) -> TypeGuard[KeyTypeType]:
    return value in ("HASH", "RANGE")


def _is_attribute_type(value: JsonValue) -> TypeGuard[ScalarAttributeTypeType]:
    return value in ("B", "N", "S")


def _is_projection_type(value: JsonValue) -> TypeGuard[ProjectionTypeType]:
    return value in ("ALL", "INCLUDE", "KEYS_ONLY")


def _key_schema(value: JsonValue) -> list[KeySchemaElementTypeDef]:
    schema: list[KeySchemaElementTypeDef] = []
    for element in map(json_object, _items(value)):
        key_type = element["KeyType"]
        if not _is_key_type(key_type):
            raise ValueError(f"KeyType {key_type!r} is not HASH or RANGE")
        schema.append({"AttributeName": text(element["AttributeName"]), "KeyType": key_type})
    return schema


def _attribute_definitions(value: JsonValue) -> list[AttributeDefinitionTypeDef]:
    definitions: list[AttributeDefinitionTypeDef] = []
    for definition in map(json_object, _items(value)):
        attribute_type = definition["AttributeType"]
        if not _is_attribute_type(attribute_type):
            raise ValueError(f"AttributeType {attribute_type!r} is not B, N or S")
        definitions.append({"AttributeName": text(definition["AttributeName"]), "AttributeType": attribute_type})
    return definitions


def _global_index(value: JsonValue) -> GlobalSecondaryIndexTypeDef:
    """A global secondary index: its name, key schema and projection (the template's other settings are not
    reproduced)."""
    index = json_object(value)
    source = json_object(index["Projection"])
    projection: ProjectionTypeDef = {}
    if "ProjectionType" in source:
        projection_type = source["ProjectionType"]
        if not _is_projection_type(projection_type):
            raise ValueError(f"ProjectionType {projection_type!r} is not ALL, INCLUDE or KEYS_ONLY")
        projection["ProjectionType"] = projection_type
    if "NonKeyAttributes" in source:
        projection["NonKeyAttributes"] = [text(name) for name in _items(source["NonKeyAttributes"])]
    return {"IndexName": text(index["IndexName"]), "KeySchema": _key_schema(index["KeySchema"]),
            "Projection": projection}


def _tables(resolver: TemplateResolver, dynamodb: DynamoDBClient, out: LocalDeployment) -> None:
    for stack, logical_id, props in resolver.resources("AWS::DynamoDB::Table"):
        name = resolver.refs[(stack, logical_id)]
        request: CreateTableInputTypeDef = {
            "TableName": name, "KeySchema": _key_schema(props["KeySchema"]),
            "AttributeDefinitions": _attribute_definitions(props["AttributeDefinitions"]),
            "BillingMode": "PAY_PER_REQUEST"}
        indexes = [_global_index(index) for index in _items(props.get("GlobalSecondaryIndexes", []))]
        if indexes:
            request["GlobalSecondaryIndexes"] = indexes
        dynamodb.create_table(**request)
        ttl = props.get("TimeToLiveSpecification")
        if ttl and json_object(ttl).get("Enabled"):
            spec = json_object(ttl)
            dynamodb.update_time_to_live(TableName=name, TimeToLiveSpecification={
                "AttributeName": text(spec["AttributeName"]), "Enabled": bool(spec["Enabled"])})
        out.tables[logical_id] = name


def _queues_and_topics(resolver: TemplateResolver, sqs: SqsClient, sns: SNSClient, out: LocalDeployment) -> None:
    for stack, logical_id, _ in resolver.resources("AWS::SQS::Queue"):
        out.queues[logical_id] = sqs.create_queue(QueueName=resolver.attributes[(stack, logical_id)]["QueueName"])[
            "QueueUrl"]
    for stack, logical_id, _ in resolver.resources("AWS::SNS::Topic"):
        out.topics[logical_id] = sns.create_topic(Name=resolver.attributes[(stack, logical_id)]["TopicName"])[
            "TopicArn"]


def _batch(resolver: TemplateResolver, batch: BatchClient, iam: IamClient, out: LocalDeployment) -> None:
    """Batch environments, queues and job definitions, refusing what the Batch API refuses.

    Unmanaged environments: no instances, no VPC; the local job runner decides what a job does.
    """
    service_role = iam.create_role(RoleName="dualtrack-local-batch-service", AssumeRolePolicyDocument=json.dumps(
        {"Statement": [{"Effect": "Allow", "Principal": {"Service": "batch.amazonaws.com"},
                        "Action": "sts:AssumeRole"}]}))["Role"]["Arn"]
    instance_types: dict[str, list[str]] = {}
    for stack, logical_id, props in resolver.resources("AWS::Batch::ComputeEnvironment"):
        arn = resolver.refs[(stack, logical_id)]
        batch.create_compute_environment(computeEnvironmentName=arn.rsplit("/", 1)[1], type="UNMANAGED",
                                         state="ENABLED", serviceRole=service_role)
        resources = json_object(props.get("ComputeResources") or {})
        instance_types[arn] = [str(t) for t in _items(resources.get("InstanceTypes", []))]
    for stack, logical_id, props in resolver.resources("AWS::Batch::JobQueue"):
        _job_queue(resolver, batch, stack, logical_id, props, instance_types, out)
    for stack, logical_id, props in resolver.resources("AWS::Batch::JobDefinition"):
        _job_definition(resolver, batch, stack, logical_id, props, out)


def _job_queue(resolver: TemplateResolver, batch: BatchClient, stack: str, logical_id: str, props: JsonObject,
               instance_types: Mapping[str, list[str]], out: LocalDeployment) -> None:
    from dualtrack.local.batch_rules import BatchClientError, time_limit_actions_problem

    arn = resolver.refs[(stack, logical_id)]
    name = arn.rsplit("/", 1)[1]
    order: list[ComputeEnvironmentOrderTypeDef] = [
        {"order": integer(item["Order"]),
         "computeEnvironment": text(resolver.resolve(stack, item["ComputeEnvironment"]))}
        for item in map(json_object, _items(props["ComputeEnvironmentOrder"]))]
    request: CreateJobQueueRequestTypeDef = {"jobQueueName": name, "state": "ENABLED",
                                             "priority": integer(props.get("Priority", 1)),
                                             "computeEnvironmentOrder": order}
    actions = _time_limit_actions(resolver.resolve(stack, props.get("JobStateTimeLimitActions") or []))
    problem = time_limit_actions_problem(actions)
    if problem:
        raise BatchClientError(f"{stack}/{logical_id}: CreateJobQueue ClientException: {problem}")
    if actions:
        # moto ignores it; the local runner reads it from `out`
        request["jobStateTimeLimitActions"] = _checked_actions(actions)
        out.job_state_time_limit_actions[name] = actions
    batch.create_job_queue(**request)
    out.job_queues[logical_id] = arn
    out.queue_instance_types[name] = [t for item in sorted(order, key=lambda i: i["order"])
                                      for t in instance_types.get(item["computeEnvironment"], [])]


def _job_definition(resolver: TemplateResolver, batch: BatchClient, stack: str, logical_id: str, props: JsonObject,
                    out: LocalDeployment) -> None:
    from dualtrack.local.batch_rules import BatchClientError, timeout_problem

    resolved = json_object(resolver.resolve(stack, props))
    name = resolved.get("JobDefinitionName") or resolver.physical_name(stack, logical_id, 128)
    # The template's JSON is the request as it stands (container and node properties, retry strategy, ...): the
    # API (moto here, Batch in AWS) checks each member.
    request: dict[str, Any] = {"jobDefinitionName": name, "type": resolved["Type"]}
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


def _time_limit_actions(items: JsonValue) -> list[JsonObject]:
    """CloudFormation's ``JobStateTimeLimitActions`` → the API's ``jobStateTimeLimitActions``."""
    actions = [json_object(action) for action in _items(_camel(items))]
    for action in actions:
        if "maxTimeSeconds" in action:
            action["maxTimeSeconds"] = integer(action["maxTimeSeconds"])
    return actions


def _checked_actions(actions: Sequence[JsonObject]) -> list[JobStateTimeLimitActionTypeDef]:
    """Time-limit actions ``time_limit_actions_problem`` found nothing wrong with (each one's state is RUNNABLE and
    its action CANCEL), as the CreateJobQueue request types them."""
    return [{"reason": text(action["reason"]), "state": "RUNNABLE", "maxTimeSeconds": integer(action["maxTimeSeconds"]),
             "action": "CANCEL"} for action in actions]


def _functions(resolver: TemplateResolver, lambda_client: LambdaClient, out: LocalDeployment) -> None:
    code = _empty_zip()
    for stack, logical_id, props in resolver.resources("AWS::Lambda::Function"):
        name = resolver.refs[(stack, logical_id)]
        environment = json_object(props.get("Environment", {}))
        variables = json_object(resolver.resolve(stack, environment.get("Variables", {})))
        handler = text(props["Handler"])
        lambda_client.create_function(
            FunctionName=name, Runtime=text(props.get("Runtime", "python3.12")),
            Role=text(resolver.resolve(stack, props["Role"])), Handler=handler, Code={"ZipFile": code},
            Timeout=integer(props.get("Timeout", 30)), MemorySize=integer(props.get("MemorySize", 128)),
            Environment={"Variables": {key: text(value) for key, value in variables.items()}},
        )
        module = handler.rsplit(".", 1)[0]
        out.functions[module.removeprefix("lambdas.handlers.") if module.startswith("lambdas.handlers.")
                      else logical_id] = name


def _is_machine_type(value: JsonValue) -> TypeGuard[StateMachineTypeType]:
    return value in ("STANDARD", "EXPRESS")


def _state_machine(resolver: TemplateResolver, sfn: SFNClient, machine: tuple[str, str, JsonObject]) -> None:
    stack, logical_id, props = machine
    definition = text(resolver.resolve(stack, props["DefinitionString"]))
    machine_type = props.get("StateMachineType", "STANDARD")
    if not _is_machine_type(machine_type):
        raise ValueError(f"{stack}/{logical_id}: StateMachineType {machine_type!r} is not STANDARD or EXPRESS")
    sfn.create_state_machine(name=resolver.attributes[(stack, logical_id)]["Name"], definition=definition,
                             roleArn=text(resolver.resolve(stack, props["RoleArn"])), type=machine_type)


def _rules(resolver: TemplateResolver, events: EventsClient, out: LocalDeployment) -> None:
    for stack, logical_id, props in resolver.resources("AWS::Events::Rule"):
        name = resolver.refs[(stack, logical_id)]
        pattern = json_object(resolver.resolve(stack, props["EventPattern"])) if props.get("EventPattern") else None
        schedule = optional_text(props.get("ScheduleExpression"))
        request: _PutRule = {"Name": name, "State": text(props.get("State", "ENABLED"))}
        if pattern is not None:
            request["EventPattern"] = json.dumps(pattern)
        if schedule:
            request["ScheduleExpression"] = schedule
        events.put_rule(**request)
        targets = [json_object(resolver.resolve(stack, target)) for target in _items(props.get("Targets", []))]
        if targets:
            events.put_targets(Rule=name, Targets=targets)
        out.rules.append(LocalRule(logical_id, name, pattern, schedule, targets))
