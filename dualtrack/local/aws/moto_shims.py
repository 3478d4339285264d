"""What moto 5.2.5 lacks to execute the trial workflow, added back as small, reversible patches.

Use ``with moto_shims(lambdas=..., batch=...):`` inside an active ``mock_aws(config=MOTO_CONFIG)``:

* **Batch parameter casing** - moto's Step Functions Batch integration passes the state's PascalCase
  ``Parameters`` straight to boto and reads PascalCase keys from camelCase responses: its Batch integration's
  ``_normalise_parameters/_normalise_response`` are no-ops. The shim fills them with moto's own model-guided casing
  helpers (``_to_boto_request`` / ``_from_boto_response``), given botocore's Batch operation model.
* **Lambda invoke** - without Docker moto's Lambda echoes its payload. The invoke seam looks the function up and
  calls a Python handler in-process (``InProcessLambdas``: the function's own ``Handler`` by default, or a fake
  registered for a module), with the function's environment variables applied for the call.
* **Batch jobs** - moto's simple Batch marks every job SUCCEEDED on submit. A ``BatchJobRunner`` decides instead:
  it is told about each job when it is submitted and ends it with :func:`finish_job` (now or later, from any
  thread); ``TerminateJob`` on a job that is still running ends it FAILED, as AWS Batch does.
* **Stopping an execution** - Step Functions terminates the Batch job of a running ``submitJob.sync`` state when
  the execution is stopped; moto only stops polling. The shim calls ``TerminateJob`` for that job.
* **Batch requests AWS refuses** - moto accepts a job timeout under 60 seconds (SubmitJob, RegisterJobDefinition)
  and any ``jobStateTimeLimitActions`` (CreateJobQueue); the shim refuses them with ``ClientException`` as Batch
  does. moto drops SubmitJob's ``retryStrategy`` and ``nodeOverrides`` and CreateJobQueue's time-limit actions;
  the shim hands them to the runner (``start(job, submitted)``, ``queue_created``).
* **DescribeJobs** - describes a copy of the submitted environment overrides: moto appends ``AWS_BATCH_JOB_ID`` to
  the job's own list on every describe, so it grows without bound while Step Functions polls a running job.
* **Each job's ECS task** - Batch runs every job (every node of a multi-node job) as an ECS task whose role
  session is named after the task, and DescribeJobs reports the task (``container.taskArn``) and the role
  (``container.jobRoleArn``); a node is described as ``<job id>#<node index>``. moto reports the job definition's ARN
  as the task and no role, and knows no node ids. A runner calls :func:`assign_task` for each node's attempt (the
  session's credentials for that node's process come from :func:`task_credentials`), and DescribeJobs reports them.
* **GetCallerIdentity signed in the query string** - AWS accepts a SigV4 signature in the query string (a presigned
  request, as a job proves who it is to the credentials function); moto reads the caller only from an
  ``Authorization`` header, checks no signature, and answers an unknown key with a made-up user. The shim verifies
  the presigned signature with the key's secret (an assumed role's or an IAM user's), its expiry and its session
  token, and answers with the key's own identity or STS's 403.
* **EventBridge Lambda targets** - moto matches events against rules but cannot deliver to a Lambda target
  without Docker, and matches a scheduled rule (no pattern) to every event on the bus. ``deliver_rule_targets``
  hands each matching Lambda target to the caller (the local event router) and leaves the others to moto.

What the local runtime reads or resets in moto's own state is here too: ``emit_service_event`` (AWS services put
their events on the default bus; PutEvents refuses ``aws.*`` sources to callers, so they go through moto's events
backend), ``lambda_function``, ``moto_settings`` and ``reset_moto``.

``tests/stacks/test_moto_shims.py`` checks each gap still exists in plain moto, so a moto upgrade that closes one
fails a test that names the patch to delete.
"""

from __future__ import annotations

import copy
import importlib
import json
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

from dualtrack.local.batch_rules import time_limit_actions_problem, timeout_problem
from dualtrack.local.environment import overlay
from lambdas.domain.json_types import JsonMapping, JsonObject, JsonValue
from lambdas.domain.vocabulary import SIGTERM_EXIT_CODE

if TYPE_CHECKING:
    from botocore.model import OperationModel
    from moto.awslambda.models import LambdaBackend, LambdaFunction
    from moto.batch.models import BatchBackend, Job
    from moto.batch.responses import BatchResponse
    from moto.batch_simple.models import BatchSimpleBackend
    from moto.core.config import DefaultConfig
    from moto.events.models import Rule
    from moto.events.utils import EventMessageType
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.credentials import StateCredentials
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.resource import ResourceRuntimePart
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_batch import (
        StateTaskServiceBatch,
    )
    from moto.stepfunctions.parser.asl.eval.callback.callback import (
        CallbackEndpoint,
        CallbackOutcome,
        HeartbeatEndpoint,
    )
    from moto.stepfunctions.parser.asl.eval.environment import Environment
    from moto.sts.responses import TokenResponse

MOTO_CONFIG: DefaultConfig = {
    "stepfunctions": {"execute_state_machine": True},
    "batch": {"use_docker": False},
    "lambda": {"use_docker": False},
}
_ENV_LOCK = threading.RLock()


# ---- generic patching --------------------------------------------------------------------------------------
@contextmanager
def _patched(owner: type, name: str, replacement: Callable[..., object]) -> Iterator[None]:
    had_own = name in owner.__dict__
    original = owner.__dict__.get(name)
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        if had_own:
            setattr(owner, name, original)
        else:
            delattr(owner, name)


# ---- 1. Batch casing through botocore's service model -------------------------------------------------------
def _batch_operation(api_action: str) -> OperationModel:
    import botocore.session

    model = botocore.session.get_session().get_service_model("batch")
    name = api_action[0].upper() + api_action[1:]
    if "_" in name:
        name = "".join(part.capitalize() for part in api_action.split("_"))
    return model.operation_model(name)


# moto's signatures: the parameters and the response are whatever the state and the API hold (moto checks the
# response is a dict itself).
def _normalise_parameters(self: StateTaskServiceBatch, parameters: dict[str, Any],
                          boto_service_name: str | None = None, service_action_name: str | None = None) -> None:
    """PascalCase ASL parameters -> the API's member names (camelCase for Batch), in place, by moto's own
    model-guided helper, which its Batch integration leaves unused (its ``_normalise_parameters`` is a no-op)."""
    shape = _batch_operation(service_action_name or self.resource.api_action).input_shape
    if shape is not None:  # every Batch operation has one
        self._to_boto_request(parameters, shape)


def _normalise_response(self: StateTaskServiceBatch, response: Any, boto_service_name: str | None = None,
                        service_action_name: str | None = None) -> None:
    """The API's response -> PascalCase, in place (moto keeps references to its nested objects), by moto's own
    helper."""
    shape = _batch_operation(service_action_name or self.resource.api_action).output_shape
    if shape is not None:  # every Batch operation has one
        self._from_boto_response(response, shape)


# ---- 2. Lambda invoke in-process ----------------------------------------------------------------------------
@dataclass
class LambdaContext:
    """The parts of the Lambda context object that Powertools and handlers read."""

    function_name: str
    invoked_function_arn: str
    memory_limit_in_mb: int = 512
    timeout_s: int = 30
    function_version: str = "$LATEST"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    log_group_name: str = ""
    log_stream_name: str = "local"
    _deadline: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        self._deadline = time.monotonic() + self.timeout_s
        self.log_group_name = self.log_group_name or f"/aws/lambda/{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


# A handler takes the invocation's event and returns what the invoke answers (serialized as JSON).
Handler = Callable[[JsonObject, LambdaContext], JsonValue]
# Runs one function (as moto's Lambda holds it) on an event.
Invoker = Callable[["LambdaFunction", JsonObject], JsonValue]


class InProcessLambdas:
    """Runs a function's handler in this process. ``register(module, fake)`` replaces one handler module
    (``"resolve_compile_cache"`` or a full handler string); others import the function's own ``Handler``."""

    def __init__(self, handlers: dict[str, Handler] | None = None, *, apply_environment: bool = True):
        self._handlers: dict[str, Handler] = dict(handlers or {})
        self._apply_environment = apply_environment
        self.calls: list[tuple[str, JsonObject]] = []

    def register(self, module_or_handler: str, handler: Handler) -> None:
        self._handlers[module_or_handler] = handler

    def resolve(self, handler_string: str) -> Handler:
        module_name, _, attribute = handler_string.rpartition(".")
        short = module_name.rsplit(".", 1)[-1]
        for key in (handler_string, module_name, short):
            if key in self._handlers:
                return self._handlers[key]
        return getattr(importlib.import_module(module_name), attribute)  # type: ignore[no-any-return]

    def __call__(self, function: LambdaFunction, event: JsonObject) -> JsonValue:
        handler_string = function.handler
        if not isinstance(handler_string, str):
            raise TypeError(f"{function.function_name} has no handler to run in this process")
        handler = self.resolve(handler_string)
        context = LambdaContext(function_name=function.function_name, invoked_function_arn=function.function_arn,
                                memory_limit_in_mb=int(function.memory_size or 512),
                                timeout_s=int(function.timeout or 30))
        self.calls.append((handler_string, event))
        if not self._apply_environment:  # the caller set one environment for every function: run concurrently
            return handler(event, context)
        with _ENV_LOCK, overlay(function.environment_vars):
            return handler(event, context)


def _lambda_invoke(invoker: Invoker) -> Callable[..., bytes]:
    def invoke(self: LambdaBackend, function_name: str, qualifier: str | None, body: str | bytes | None,
               headers: Mapping[str, str], response_headers: dict[str, str]) -> bytes:
        function = self.get_function(function_name, qualifier)
        event = json.loads(body) if body else {}
        try:
            result = invoker(function, event)
        except Exception as exc:  # the Lambda runtime reports a raised error as an "Unhandled" function error
            response_headers["x-amz-function-error"] = "Unhandled"
            return json.dumps({"errorMessage": str(exc), "errorType": type(exc).__name__,
                               "stackTrace": traceback.format_exception(exc)[-5:]}).encode()
        return json.dumps(result, default=str).encode()

    return invoke


# ---- 3. Batch jobs decided by a runner ----------------------------------------------------------------------
class SubmittedFields(TypedDict, total=False):
    """What SubmitJob sent that moto drops (as sent: None when the request has none)."""

    retryStrategy: JsonObject | None
    nodeOverrides: JsonObject | None


class BatchJobRunner(Protocol):
    """Decides what a submitted moto Batch job does. ``start`` must return quickly; end the job with
    :func:`finish_job` now or from another thread. ``submitted`` holds the SubmitJob fields moto drops
    (``retryStrategy``, ``nodeOverrides``). ``terminate`` is called for TerminateJob on a running job;
    ``queue_created`` for CreateJobQueue, with the ``jobStateTimeLimitActions`` moto drops."""

    def start(self, job: Job, submitted: SubmittedFields) -> None: ...

    def terminate(self, job: Job, reason: str) -> None: ...

    def queue_created(self, name: str, time_limit_actions: list[JsonObject]) -> None: ...


def job_environment(job: Job) -> dict[str, str]:
    """The job's environment: job-definition variables overlaid with the submit-time overrides."""
    props = job.job_definition.container_properties or {}
    env = {item["name"]: item["value"] for item in props.get("environment", [])}
    env.update({item["name"]: item["value"] for item in job.container_overrides.get("environment", [])})
    return env


def start_attempt(job: Job) -> None:
    from datetime import datetime

    job.job_started_at = datetime.now()
    job.log_stream_name = job._stream_name
    job._start_attempt()
    job.status = "RUNNING"


def job_status(job: Job) -> str:
    """The status a runner set, read without moto's ``ManagedState`` property (which may advance it on read)."""
    return str(job._status)


def attempt_duration_s(job: Job) -> int | None:
    """The attempt timeout in seconds: the submission's, else the job definition's (moto keeps both)."""
    duration = job._get_attempt_duration()
    return None if duration is None else int(duration)


def finish_job(job: Job, *, exit_code: int, reason: str | None = None) -> None:
    """End the job's current attempt: exit code 0 → SUCCEEDED, anything else → FAILED."""
    if job.job_stopped:
        return
    job.exit_code = exit_code
    if job.latest_attempt is not None:
        job.latest_attempt["container"]["exitCode"] = exit_code
        if reason:
            job.latest_attempt["statusReason"] = reason
    if reason:
        job.job_stopped_reason = reason
    job._mark_stopped(success=exit_code == 0)


@dataclass
class ScriptedJobs:
    """A runner for workflow tests: the exit code for each run (``DUALTRACK_RUN``); ``None`` keeps the job
    RUNNING until it is terminated. Runs not listed succeed."""

    exit_codes: dict[str, int | None] = field(default_factory=dict)
    submitted: list[Job] = field(default_factory=list)
    terminated: list[tuple[str, str]] = field(default_factory=list)

    def start(self, job: Job, submitted: SubmittedFields) -> None:
        self.submitted.append(job)
        start_attempt(job)
        if job.job_definition.type == "multinode":
            for node in range(int((job.job_definition.node_properties or {}).get("numNodes", 1))):
                assign_task(job, node)
        else:
            assign_task(job, None)
        code = self.exit_codes.get(job_environment(job).get("DUALTRACK_RUN", ""), 0)
        if code is not None:
            finish_job(job, exit_code=code, reason=None if code == 0 else f"Essential container exited {code}")

    def terminate(self, job: Job, reason: str) -> None:
        self.terminated.append((job.job_id, reason))
        finish_job(job, exit_code=SIGTERM_EXIT_CODE, reason=reason)

    def queue_created(self, name: str, time_limit_actions: list[JsonObject]) -> None:
        pass

    def runs(self) -> list[str]:
        return [job_environment(job).get("DUALTRACK_RUN", "") for job in self.submitted]


def _mark_job_as_finished(runner: BatchJobRunner) -> Callable[..., None]:
    def mark(self: BatchSimpleBackend, include_start_attempt: bool, job: Job) -> None:
        self.backend._jobs[job.job_id] = job
        fields = _submitted.fields
        runner.start(job, fields.copy() if fields else SubmittedFields())

    return mark


# ---- 5. Batch requests: what AWS refuses, and the fields moto drops ------------------------------------------
class _Submitted(threading.local):
    fields: SubmittedFields | None = None


_submitted = _Submitted()  # SubmitJob's fields moto drops, from the request to runner.start (same thread)


def _refuse(problem: str | None) -> None:
    if problem:
        from moto.batch.exceptions import ClientException

        raise ClientException(problem)


def _submit_job(original: Callable[[BatchResponse], str]) -> Callable[[BatchResponse], str]:
    def submitjob(response: BatchResponse) -> str:
        _refuse(timeout_problem(response._get_param("timeout")))
        _submitted.fields = {"retryStrategy": response._get_param("retryStrategy"),
                             "nodeOverrides": response._get_param("nodeOverrides")}
        try:
            return original(response)
        finally:
            _submitted.fields = None

    return submitjob


def _register_job_definition(original: Callable[[BatchResponse], str]) -> Callable[[BatchResponse], str]:
    def registerjobdefinition(response: BatchResponse) -> str:
        _refuse(timeout_problem(response._get_param("timeout")))
        return original(response)

    return registerjobdefinition


def _create_job_queue(original: Callable[[BatchResponse], str],
                      runner: BatchJobRunner) -> Callable[[BatchResponse], str]:
    def createjobqueue(response: BatchResponse) -> str:
        actions = response._get_param("jobStateTimeLimitActions")
        _refuse(time_limit_actions_problem(actions))
        result = original(response)
        runner.queue_created(response._get_param("jobQueueName"), list(actions or []))
        return result

    return createjobqueue


# ---- 6. DescribeJobs describes a copy of the overrides -------------------------------------------------------
# Job._get_container_property: a container property of the job (as the request sent it), else the default.
_ContainerProperty = Callable[["Job", str, JsonValue], JsonValue]


def _container_property(original: _ContainerProperty) -> _ContainerProperty:
    def container_property(job: Job, name: str, default: JsonValue) -> JsonValue:
        # moto appends AWS_BATCH_JOB_ID to the submitted overrides on every DescribeJobs; with Step Functions
        # polling a running job that list (and every describe) grows without bound. Describe a copy instead.
        overrides = job.container_overrides.get("environment")
        if name != "environment" or overrides is None:
            return original(job, name, default)
        job.container_overrides["environment"] = list(overrides)
        try:
            return original(job, name, default)
        finally:
            job.container_overrides["environment"] = overrides

    return container_property


# ---- 7. EventBridge rules' Lambda targets --------------------------------------------------------------------
# (rule name, its Lambda targets as moto holds them, the event)
RuleTargets = Callable[[str, list[JsonObject], "EventMessageType"], None]


def _is_lambda(arn: str) -> bool:
    return ":lambda:" in arn and ":function:" in arn


_SendToTargets = Callable[["Rule", "EventMessageType", bool], None]


def _send_to_targets(original: _SendToTargets, deliver: RuleTargets) -> _SendToTargets:
    def send_to_targets(rule: Rule, original_event: EventMessageType, transform_input: bool = True) -> None:
        lambdas = [t for t in rule.targets if _is_lambda(str(t["Arn"]))]
        if len(lambdas) < len(rule.targets):
            # moto raises on target types it cannot deliver to, so it only sees the ones it can.
            others = copy.copy(rule)
            others.targets = [t for t in rule.targets if not _is_lambda(str(t["Arn"]))]
            original(others, original_event, transform_input)
        # A scheduled rule has no pattern (which moto would match to every event) and fires only on its
        # schedule, never for an event on the bus.
        if not lambdas or rule.scheduled_expression or not rule.event_pattern.matches_event(original_event):
            return
        deliver(rule.name, lambdas, original_event)

    return send_to_targets


@contextmanager
def deliver_rule_targets(deliver: RuleTargets) -> Iterator[None]:
    """While the block runs, every EventBridge rule that matches an event hands its Lambda targets to ``deliver``
    (rule name, the targets as moto holds them, the event)."""
    from moto.events.models import Rule

    with _patched(Rule, "send_to_targets", _send_to_targets(Rule.send_to_targets, deliver)):
        yield


# ---- moto's own state, read and reset in one place -----------------------------------------------------------
def emit_service_event(event: JsonMapping) -> None:
    """An AWS service's event onto the account's default bus (as Batch and S3 put theirs), where the rules route it."""
    from moto.events.models import events_backends

    backend = events_backends[str(event["account"])][str(event["region"])]
    backend.put_events([{"Source": event["source"], "DetailType": event["detail-type"],
                         "Detail": json.dumps(event["detail"]), "Resources": event["resources"]}])


def lambda_function(account: str, region: str, name: str) -> LambdaFunction:
    """The function as moto's Lambda holds it (its handler string and environment)."""
    from moto.awslambda.utils import get_backend

    return get_backend(account, region).get_function(name)


@contextmanager
def moto_settings(settings: Mapping[str, JsonMapping]) -> Iterator[None]:
    """moto's process-wide configuration (``mock_aws(config=...)`` for a server run in this process)."""
    from moto.core.config import default_user_config

    config: Any = default_user_config  # moto's TypedDict; treated as the plain dict it is
    saved = {k: dict(v) for k, v in config.items() if isinstance(v, dict)}
    for key, value in settings.items():
        config.setdefault(key, {}).update(value)
    try:
        yield
    finally:
        config.update(saved)


def reset_moto() -> None:
    """Empty every backend (a fresh account for the next rehearsal on the same server)."""
    from moto.moto_api._internal.models import moto_api_backend

    moto_api_backend.reset()


_TerminateJob = Callable[["BatchBackend", str, str], None]


def _terminate_job(original: _TerminateJob, runner: BatchJobRunner) -> _TerminateJob:
    def terminate_job(self: BatchBackend, job_id: str, reason: str) -> None:
        original(self, job_id, reason)
        job = self.get_job_by_id(job_id)
        if job is not None and not job.job_stopped:
            runner.terminate(job, reason)

    return terminate_job


# ---- 4. stopping an execution terminates its .sync job ------------------------------------------------------
# moto's .sync Batch integration polls a resolver: the described job once it has ended, None while it runs.
_SyncResolver = Callable[[], JsonObject | None]
_BuildSyncResolver = Callable[["StateTaskServiceBatch", "Environment", "ResourceRuntimePart", JsonObject,
                               "StateCredentials"], _SyncResolver | None]
_EvalSync = Callable[["StateTaskServiceBatch", "Environment", _SyncResolver | None, int | None,
                      "CallbackEndpoint | None", "HeartbeatEndpoint | None"], "CallbackOutcome | JsonObject | None"]


@dataclass(frozen=True)
class _JobResolver:
    """moto's resolver for one submitted job, with what terminating that job takes."""

    resolve: _SyncResolver
    job_id: str
    region: str
    credentials: StateCredentials

    def __call__(self) -> JsonObject | None:
        return self.resolve()


def _build_sync_resolver(original: _BuildSyncResolver) -> _BuildSyncResolver:
    def build(self: StateTaskServiceBatch, env: Environment, resource_runtime_part: ResourceRuntimePart,
              normalised_parameters: JsonObject, state_credentials: StateCredentials) -> _SyncResolver | None:
        job_id = str(env.stack[-1]["JobId"])
        resolver = original(self, env, resource_runtime_part, normalised_parameters, state_credentials)
        if resolver is None:
            return None
        return _JobResolver(resolver, job_id, resource_runtime_part.region, state_credentials)

    return build


def _eval_sync(original: _EvalSync) -> _EvalSync:
    def eval_sync(self: StateTaskServiceBatch, env: Environment, sync_resolver: _SyncResolver | None,
                  timeout_seconds: int | None, callback_endpoint: CallbackEndpoint | None,
                  heartbeat_endpoint: HeartbeatEndpoint | None) -> CallbackOutcome | JsonObject | None:
        result = original(self, env, sync_resolver, timeout_seconds, callback_endpoint, heartbeat_endpoint)
        if isinstance(sync_resolver, _JobResolver) and not env.is_running():
            from moto.stepfunctions.parser.asl.utils.boto_client import boto_client_for

            # botocore builds a client's operations at runtime: BaseClient declares none of them.
            client: Any = boto_client_for(service="batch", region=sync_resolver.region,
                                          state_credentials=sync_resolver.credentials)
            client.terminate_job(jobId=sync_resolver.job_id, reason="Step Functions execution stopped")
        return result

    return eval_sync


# ---- 8. each job's ECS task -----------------------------------------------------------------------------------
_TASKS = "_dualtrack_tasks"  # on a moto Job: node index (None for a single-node job) -> its current task ARN


def job_role(job: Job, node: int | None) -> str | None:
    """The job role of the job's container (a multi-node job: of the node range that names ``node``)."""
    definition = job.job_definition
    if node is None or definition.type != "multinode":
        return (definition.container_properties or {}).get("jobRoleArn")
    role = None
    for node_range in (definition.node_properties or {}).get("nodeRangeProperties", []):
        start, _, end = str(node_range.get("targetNodes", "0:")).partition(":")
        if int(start or 0) <= node and (not end or node <= int(end)):
            role = (node_range.get("container") or {}).get("jobRoleArn", role)
    return role


def assign_task(job: Job, node: int | None) -> str:
    """A new ECS task for this attempt of the job (``node`` of a multi-node job): its ARN, reported by DescribeJobs
    from now on (each attempt gets a task of its own when it reaches STARTING: Batch API reference,
    "ContainerDetail", ``taskArn``)."""
    task = f"arn:aws:ecs:{job.backend.region_name}:{job.backend.account_id}:task/dualtrack-local/{uuid.uuid4().hex}"
    job.__dict__.setdefault(_TASKS, {})[node] = task
    return task


def task_credentials(job: Job, node: int | None, task_arn: str) -> dict[str, str]:
    """The environment that gives the task's process its role's credentials, as ECS does: a session of the job role
    named after the task ("tasks assume the task role and the session ID is the task ID", aws/amazon-ecs-agent#3498).
    Empty for a job without a role."""
    from moto.sts.models import sts_backends

    role = job_role(job, node)
    if not role:
        return {}
    backend = sts_backends[job.backend.account_id]["aws"]
    session = backend.assume_role(region_name=job.backend.region_name, role_session_name=task_arn.rsplit("/", 1)[-1],
                                  role_arn=role, policy="", duration=12 * 3600, external_id="")
    # botocore reads AWS_SECURITY_TOKEN before AWS_SESSION_TOKEN: both, so no older token of the parent wins.
    return {"AWS_ACCESS_KEY_ID": session.access_key_id, "AWS_SECRET_ACCESS_KEY": session.secret_access_key,
            "AWS_SESSION_TOKEN": session.session_token, "AWS_SECURITY_TOKEN": session.session_token}


def _node_view(job: Job, node: int, task: str | None) -> JsonObject:
    container: JsonObject = {"jobRoleArn": job_role(job, node)}
    if task:
        container["taskArn"] = task
    return {"jobId": f"{job.job_id}#{node}", "jobName": job.job_name, "jobArn": f"{job.arn}#{node}",
            "status": job.status or "SUBMITTED", "container": container, "nodeDetails": {"nodeIndex": node}}


_Describe = Callable[["Job"], dict[str, Any]]
_DescribeJobs = Callable[["BatchBackend", "list[str] | None"], "list[dict[str, Any]]"]


def _describe(original: _Describe) -> _Describe:
    def describe(job: Job) -> dict[str, Any]:
        result = original(job)
        if job.job_definition.type != "multinode":
            container = result.setdefault("container", {})
            container["jobRoleArn"] = job_role(job, None)
            task = job.__dict__.get(_TASKS, {}).get(None)
            if task:
                container["taskArn"] = task
        return result

    return describe


def _describe_jobs(original: _DescribeJobs) -> _DescribeJobs:
    def describe_jobs(self: BatchBackend, jobs: list[str] | None) -> list[dict[str, Any]]:
        nodes = [j for j in jobs or [] if "#" in j]
        found = original(self, [j for j in jobs or [] if "#" not in j]) if jobs is None or len(nodes) < len(jobs) \
            else []
        for node_id in nodes:
            parent, _, index = node_id.partition("#")
            job = self.get_job_by_id(parent)
            if job is not None and index.isdigit() and job.job_definition.type == "multinode":
                found.append(_node_view(job, int(index), job.__dict__.get(_TASKS, {}).get(int(index))))
        return found

    return describe_jobs


# ---- 9. GetCallerIdentity signed in the query string ---------------------------------------------------------
_STS_ERROR = "https://sts.amazonaws.com/doc/2011-06-15/"


def presigned_caller(query: Mapping[str, list[str]], host: str, now: float | None = None) -> tuple[str, str]:
    """The access key a presigned STS GET was signed with, and the host it was signed for, once its SigV4 query
    signature, expiry and session token check out against the key's secret; STSClientError (403) otherwise, as STS
    answers (``SignatureDoesNotMatch``, ``ExpiredToken``, ``InvalidClientTokenId``)."""
    from datetime import UTC, datetime
    from urllib.parse import quote, urlencode

    from botocore.auth import SigV4QueryAuth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    from moto.sts.exceptions import STSClientError

    plain = {name: values[0] for name, values in query.items()}
    scope = plain.get("X-Amz-Credential", "").split("/")
    if len(scope) != 5 or scope[3] != "sts":
        raise STSClientError("IncompleteSignature", "the request's X-Amz-Credential is not an STS scope")
    key, region = scope[0], scope[2]
    secret, token = _secret_of(key)
    if secret is None:
        raise STSClientError("InvalidClientTokenId", "The security token included in the request is invalid.")
    if token is not None and plain.get("X-Amz-Security-Token") != token:
        raise STSClientError("InvalidClientTokenId", "The security token included in the request is invalid.")
    signed_at = datetime.strptime(plain.get("X-Amz-Date", "19700101T000000Z"), "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    expires = int(plain.get("X-Amz-Expires", "0") or 0)
    if (now if now is not None else time.time()) > signed_at.timestamp() + expires:
        raise STSClientError("ExpiredToken", "The security token included in the request is expired")
    rest = [(name, value) for name, value in plain.items() if name != "X-Amz-Signature"]
    auth = SigV4QueryAuth(Credentials(key, secret, token), "sts", region, expires=expires)
    # The proof was signed for STS's regional (or global) host; the request may reach this server under its own.
    for signed_host in (f"sts.{region}.amazonaws.com", "sts.amazonaws.com", host):
        request = AWSRequest(method="GET", url=f"https://{signed_host}/?{urlencode(rest, quote_via=quote)}",
                             headers={"host": signed_host})
        request.context["timestamp"] = plain.get("X-Amz-Date", "")
        expected = auth.signature(auth.string_to_sign(request, auth.canonical_request(request)), request)
        if expected == plain.get("X-Amz-Signature"):
            return key, signed_host
    raise STSClientError("SignatureDoesNotMatch", "The request signature we calculated does not match the "
                         "signature you provided.")


def _secret_of(key: str) -> tuple[str | None, str | None]:
    """(secret, session token) of a key moto issued: an assumed role's, or an IAM user's (no token)."""
    from moto.iam.models import iam_backends
    from moto.sts.models import sts_backends

    for account in list(sts_backends):
        for backend in list(sts_backends[account].values()):
            role = backend.get_assumed_role_from_access_key(key)
            if role is not None:
                return role.secret_access_key, role.session_token
    for account in list(iam_backends):
        for iam in list(iam_backends[account].values()):
            for user in list(iam.users.values()):
                for access_key in iam.list_access_keys(user.name):
                    if access_key.access_key_id == key:
                        return access_key.secret_access_key, None
    return None, None


_CallerIdentity = Callable[["TokenResponse"], Any]


def _get_caller_identity(original: _CallerIdentity) -> _CallerIdentity:
    def get_caller_identity(self: TokenResponse) -> Any:
        if "X-Amz-Credential" not in self.querystring:
            return original(self)
        from moto.core.responses import ActionResult

        key, _ = presigned_caller(self.querystring, str(self.headers.get("Host", "")))
        user_id, arn, account_id = self.backend.get_caller_identity(key, self.region)
        return ActionResult({"UserId": user_id, "Account": account_id, "Arn": arn})

    return get_caller_identity


# ---- the bundle ---------------------------------------------------------------------------------------------
@dataclass
class Shims:
    lambdas: Invoker
    batch: BatchJobRunner


@contextmanager
def moto_shims(*, lambdas: Invoker | None = None,
               batch: BatchJobRunner | None = None) -> Iterator[Shims]:
    """Install every shim for the duration of the block (inside ``mock_aws(config=MOTO_CONFIG)``)."""
    from moto.awslambda_simple.models import LambdaSimpleBackend
    from moto.batch.models import BatchBackend, Job
    from moto.batch.responses import BatchResponse
    from moto.batch_simple.models import BatchSimpleBackend
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_batch import (
        StateTaskServiceBatch,
    )
    from moto.sts.responses import TokenResponse

    invoker = lambdas or InProcessLambdas()
    runner = batch or ScriptedJobs()
    with ExitStack() as stack:
        stack.enter_context(_patched(StateTaskServiceBatch, "_normalise_parameters", _normalise_parameters))
        stack.enter_context(_patched(StateTaskServiceBatch, "_normalise_response", _normalise_response))
        stack.enter_context(_patched(StateTaskServiceBatch, "_build_sync_resolver",
                                     _build_sync_resolver(StateTaskServiceBatch._build_sync_resolver)))
        stack.enter_context(_patched(StateTaskServiceBatch, "_eval_sync",
                                     _eval_sync(StateTaskServiceBatch._eval_sync)))
        stack.enter_context(_patched(LambdaSimpleBackend, "invoke", _lambda_invoke(invoker)))
        stack.enter_context(_patched(BatchSimpleBackend, "_mark_job_as_finished", _mark_job_as_finished(runner)))
        stack.enter_context(_patched(BatchBackend, "terminate_job",
                                     _terminate_job(BatchBackend.terminate_job, runner)))
        stack.enter_context(_patched(BatchResponse, "submitjob", _submit_job(BatchResponse.submitjob)))
        stack.enter_context(_patched(BatchResponse, "registerjobdefinition",
                                     _register_job_definition(BatchResponse.registerjobdefinition)))
        stack.enter_context(_patched(BatchResponse, "createjobqueue",
                                     _create_job_queue(BatchResponse.createjobqueue, runner)))
        stack.enter_context(_patched(Job, "_get_container_property",
                                     _container_property(Job._get_container_property)))
        stack.enter_context(_patched(Job, "describe", _describe(Job.describe)))
        stack.enter_context(_patched(BatchBackend, "describe_jobs", _describe_jobs(BatchBackend.describe_jobs)))
        stack.enter_context(_patched(TokenResponse, "get_caller_identity",
                                     _get_caller_identity(TokenResponse.get_caller_identity)))
        yield Shims(lambdas=invoker, batch=runner)
