"""The local rehearsal: the real control plane, end to end, on one machine.

1. synthesize the CDK app (cached by source hash) and stand its resources up on a loopback moto server;
2. submit the trial through the real API handler, which stores it and starts the synthesized state machine;
3. the workflow's Lambda tasks and the EventBridge rules' Lambda targets run the real handlers in-process; Batch
   jobs run the real trainer as subprocesses (retry strategy honoured) and publish "Batch Job State Change"
   events; the trainer's S3 writes publish "Object Created" events;
4. when the execution ends: the report, the ledger and the execution history are written under ``--out``, and the
   compile cache with its registry is kept under ``--out/state`` for the next run.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dualtrack.local.aws.moto_shims import emit_service_event, lambda_function
from dualtrack.local.aws.session_policies import SessionPolicies, enforce_session_policies
from dualtrack.local.environment import overlay
from dualtrack.local.json_shapes import integer, json_object, optional_text
from dualtrack.local.progress import Progress, progress_for
from dualtrack.local.server import ACCOUNT as MOTO_ACCOUNT
from dualtrack.local.staging import REHEARSAL_STAGE, rehearsal_data_bucket, staged_trial
from lambdas.domain import telemetry
from lambdas.domain.cache.compile_cache import EntryRejected, entry_name
from lambdas.domain.job_access import RUN_TAG, TRIAL_TAG
from lambdas.domain.json_types import JsonObject, JsonValue
from lambdas.domain.trial.spec import TrialSpec
from lambdas.domain.vocabulary import COMPILE_RUN, EXECUTION_TERMINAL

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import ScanInputTableScanTypeDef, TableAttributeValueTypeDef
    from mypy_boto3_stepfunctions.type_defs import HistoryEventTypeDef

    from dualtrack.local.aws.template import LocalDeployment

CAPACITY_QUEUES = {"gpu": "GpuCapacity", "trn2": "Trn2Capacity"}  # track → its job queues' logical id part
QUEUE_TIME_SCALE = 200.0  # a queue's 600 s RUNNABLE time limit takes 3 s in a rehearsal
REPORT_FILES = ("report.json", "report.md", "report.html")
# What the emulated plane and the libraries print (Powertools' metric lines, moto's and botocore's logs, warnings,
# a handler's traceback) goes here, not to the console, which shows the rehearsal's own progress only.
PLANE_LOG = "plane.log"


@dataclass(frozen=True)
class RehearsalOptions:
    out: Path = Path("out/rehearsal")
    fresh: bool = False
    fail_trn2: str | None = None  # compile | step | save: break the Trainium2 track to exercise the fallback
    quiet: bool = False
    timeout_s: float = 1800
    stage: str = REHEARSAL_STAGE  # cdk.json stage the rehearsal stands up (its data_buckets hold the staged data)
    no_capacity: str | None = None  # gpu | trn2: that track's job queue gets no instances (jobs stay RUNNABLE)
    state_dir: Path | None = None  # the local plane's state; default: one place per machine (local_state_dir)


def local_state_dir() -> Path:
    """Where the local plane keeps what the deployed one keeps in its cache bucket and registry table: one place per
    machine (per user), so every rehearsal, whatever its --out, meets the same compile cache. DUALTRACK_STATE_DIR
    moves it; otherwise $XDG_STATE_HOME/dualtrack/local-plane (~/.local/state/...)."""
    explicit = os.environ.get("DUALTRACK_STATE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return base / "dualtrack" / "local-plane"


def run_directory(base: Path, name: str, now: float | None = None) -> Path:
    """A new directory for one rehearsal's reports under ``base``: ``<UTC time>-<trial name>``, never an earlier
    run's (a suffix keeps two runs in the same second apart)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    candidate, n = base / f"{stamp}-{name}", 1
    while candidate.exists():
        n += 1
        candidate = base / f"{stamp}-{name}-{n}"
    return candidate


def point_latest(base: Path, run_dir: Path) -> None:
    """``base/latest`` names the newest run (a relative symlink, replaced atomically)."""
    link, staging = base / "latest", base / f".latest-{os.getpid()}"
    staging.unlink(missing_ok=True)
    staging.symlink_to(run_dir.name)
    os.replace(staging, link)


@dataclass
class RehearsalResult:
    trial_id: str
    status: str
    out: Path
    wall_s: float
    # report.json as the plane wrote it.
    report: dict[str, Any] | None = None
    files: list[Path] = field(default_factory=list)
    # The (trial, run) of every credentials session the jobs were issued, and each S3 request a session's policy
    # refused (role, action, resource): a job reaches its own run's prefix only.
    write_sessions: list[tuple[str, str]] = field(default_factory=list)
    access_denied: list[tuple[str, str, str]] = field(default_factory=list)
    # What the app's network refused a job (job, service or "rendezvous", why): an AWS service its subnets and
    # groups do not reach, or nodes of a multi-node job that cannot reach each other (dualtrack.local.aws.network).
    network_denied: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def succeeded(self) -> bool:
        """The workflow succeeded and the network refused no job anything: on AWS such a job fails the same way
        (a workflow may still succeed around a failed run, reporting it inconclusive)."""
        return self.status == "SUCCEEDED" and not self.network_denied


class Rehearsal:
    def __init__(self, spec: TrialSpec, options: RehearsalOptions, progress: Progress | None = None):
        self.spec = spec
        self.options = options
        self.progress = progress or progress_for(quiet=options.quiet, max_steps=spec.max_steps)
        self.base = options.out
        # Named by the trial's name: its id is the hash of the spec the API receives (data staged to S3, staging.py).
        self.out = run_directory(options.out, spec.name)
        self.state_dir = options.state_dir or local_state_dir()
        self.session_policies: SessionPolicies | None = None

    # ---- the whole run ------------------------------------------------------------------------------------
    def run(self) -> RehearsalResult:
        from dualtrack.local.aws.event_router import EventRouter
        from dualtrack.local.aws.moto_shims import InProcessLambdas, moto_shims
        from dualtrack.local.aws.network import JobNetwork, VpcModel
        from dualtrack.local.aws.template import ACCOUNT, deploy_locally
        from dualtrack.local.batch_runner import LocalBatch
        from dualtrack.local.dockerfile import asset_image_configs
        from dualtrack.local.server import local_aws
        from infra.synth import synthesize

        started = time.monotonic()
        # Each rehearsal writes its own directory: the last one's reports are never overwritten.
        self.out.mkdir(parents=True, exist_ok=False)
        point_latest(self.base, self.out)
        if self.options.fresh and self.state_dir.exists():
            shutil.rmtree(self.state_dir)
        self.progress.phase(f"reports go to {self.out} ({self.base / 'latest'}); the local plane's state is "
                            f"{self.state_dir}")
        self.progress.phase("synthesizing the CDK app (cached by source hash)")
        assembly = synthesize(self.options.stage)
        status, execution_arn = "FAILED", None
        with _library_output_to(self.out / PLANE_LOG), local_aws() as aws, _fresh_handler_state():
            self._preflight(aws.region)
            self.progress.phase(f"deploying {len(assembly.stack_names())} stacks onto local AWS at {aws.endpoint_url}")
            templates = assembly.templates()
            deployment = deploy_locally(assembly, region=aws.region, templates=templates)
            # The jobs reach what the synthesized VPC lets them reach, nothing more.
            network = JobNetwork(VpcModel(templates, region=aws.region), local_endpoint=aws.endpoint_url,
                                 on_denied=lambda d: self.progress.warn(f"network: {d.job} -> {d.service}: {d.reason}"))
            self.env = self._handler_environment(deployment)
            with overlay(self.env):
                self._enable_bucket_events()
                self._restore_state()
                lambdas = InProcessLambdas(apply_environment=False)
                self.lambdas = lambdas
                no_capacity = self._no_capacity_queues(deployment)
                batch = LocalBatch(events=self._publish, progress=self.progress.job, log_dir=self.out / "logs",
                                   job_env=self._job_env,
                                   images=asset_image_configs(assembly.path, account=ACCOUNT, region=aws.region),
                                   no_capacity=no_capacity,
                                   state_time_limit_actions=dict(deployment.job_state_time_limit_actions),
                                   instance_types=deployment.queue_instance_types,
                                   queue_time_scale=QUEUE_TIME_SCALE, network=network)
                router = EventRouter(invoke=self._invoke_arn,
                                     on_failure=lambda d, e: self.progress.warn(f"{d.rule}: handler failed: {e}"))
                # A job's credentials are its own trial's: moto checks no policy, so the rehearsal holds the tagged
                # sessions to the writer role's, as IAM does.
                policies = SessionPolicies()
                for role, statements in deployment.role_policies.items():
                    policies.attach(role, statements)
                self.session_policies = policies
                with network.install(), batch.install(), moto_shims(lambdas=lambdas, batch=batch), \
                        router.install(), enforce_session_policies(policies):
                    try:
                        execution_arn = self._submit(deployment)
                        status = self._follow(execution_arn)
                    except KeyboardInterrupt:
                        self.progress.warn("interrupted: stopping the workflow and its jobs")
                        if execution_arn:
                            self._stop(execution_arn)
                        batch.stop_all("interrupted")
                        raise
                    finally:
                        router.join(timeout=60)
                        files = self._collect(execution_arn)
                        self._save_state()
        sessions = self.session_policies.sessions.values() if self.session_policies else []
        result = RehearsalResult(trial_id=self.spec.trial_id, status=status, out=self.out,
                                 wall_s=time.monotonic() - started, files=files,
                                 write_sessions=sorted((s.tags.get(TRIAL_TAG, ""), s.tags.get(RUN_TAG, ""))
                                                       for s in sessions),
                                 access_denied=list(self.session_policies.denied) if self.session_policies else [],
                                 network_denied=[(d.job, d.service, d.reason) for d in network.denials])
        report_path = self.out / "report.json"
        if report_path.exists():
            result.report = json.loads(report_path.read_text())
        self.progress.summary(result)
        return result

    def _preflight(self, region: str) -> None:
        """What `dualtrack stage preflight` checks before a deploy, read from the local plane before the stage is
        deployed onto it: the rows go to preflight.json, one line to the console."""
        from dualtrack.local.preflight import PREFLIGHT_FILE, rehearsal_preflight
        from infra.synth import REPO_ROOT

        try:
            report = rehearsal_preflight(self.options.stage, region, REPO_ROOT, self.out)
        except Exception as exc:  # the rehearsal does not depend on it
            self.progress.warn(f"preflight: not run ({exc})")
            return
        self.progress.phase(f"preflight of stage {report.stage} on the local plane: {report.summary()} "
                            f"({PREFLIGHT_FILE})")

    # ---- wiring ---------------------------------------------------------------------------------------------
    def _no_capacity_queues(self, deployment: LocalDeployment) -> set[str]:
        track = self.options.no_capacity
        if not track:
            return set()
        part = CAPACITY_QUEUES[track]
        names = {arn.rsplit("/", 1)[1] for logical_id, arn in deployment.job_queues.items() if part in logical_id}
        if not names:
            raise RuntimeError(f"--no-capacity {track}: no job queue with {part} in its logical id")
        for name in sorted(names):
            actions = deployment.job_state_time_limit_actions.get(name, [])
            limits = ", ".join(f"{a['reason']} after {a['maxTimeSeconds']} s (waits "
                               f"{integer(a['maxTimeSeconds']) / QUEUE_TIME_SCALE:.0f} s here: time scaled "
                               f"x{QUEUE_TIME_SCALE:.0f})" for a in actions)
            self.progress.phase(f"no capacity for {track}: jobs on {name} stay RUNNABLE; "
                                + (f"the queue cancels them on {limits}" if limits else
                                   "the queue has no time-limit action, so they wait until cancelled"))
        return names

    def _handler_environment(self, deployment: LocalDeployment) -> dict[str, str]:
        # Every function reads the same settings names (table and bucket names, the state machine); the union is
        # set once so handlers invoked from any thread see the same configuration.
        env: dict[str, str] = {"POWERTOOLS_TRACE_DISABLED": "true", "POWERTOOLS_METRICS_NAMESPACE": telemetry.NAMESPACE,
                               "POWERTOOLS_LOG_LEVEL": os.environ.get("POWERTOOLS_LOG_LEVEL", "WARNING")}
        for module in deployment.functions:
            for key, value in deployment.function_environment(module).items():
                env.setdefault(key, value)
        self.functions = dict(deployment.functions)
        return env

    def _job_env(self, env: Mapping[str, str]) -> dict[str, str]:
        # The job definitions name the production backends (cuda, neuron); here each track runs what this
        # machine has: cuda or cpu for GPU runs, neuron or the torch.compile stand-in for Trainium2.
        track = env.get("DUALTRACK_TRACK", "gpu")
        extra = {"DUALTRACK_METRICS": os.environ.get("DUALTRACK_METRICS", "on"),
                 "DUALTRACK_BACKEND": local_backend(track)}
        fail = self.options.fail_trn2 or os.environ.get("DUALTRACK_FORCE_FAIL_TRN2")
        # A forced compile failure breaks whichever Trainium2 job compiles first: the warm-up compile stage when the
        # cache is cold, else the training job; a step or save failure is the training job's.
        run = env.get("DUALTRACK_RUN")
        if fail and (run == "trn2" or (fail == "compile" and run == COMPILE_RUN)):
            extra["DUALTRACK_FORCE_FAIL"] = fail
        return extra

    def _enable_bucket_events(self) -> None:
        import boto3

        s3 = boto3.client("s3")
        for bucket in s3.list_buckets()["Buckets"]:
            s3.put_bucket_notification_configuration(Bucket=bucket["Name"], NotificationConfiguration={
                "EventBridgeConfiguration": {}})

    def _publish(self, event: JsonObject) -> None:
        """A Batch state-change event onto the default bus, where the synthesized rules' patterns route it."""
        emit_service_event(event)

    def _invoke_arn(self, function_arn: str, event: JsonObject) -> JsonValue:
        _, _, _, region, account, _, name = function_arn.split(":")[:7]
        return self.lambdas(lambda_function(account, region, name), event)

    def _invoke_module(self, module: str, event: JsonObject) -> JsonValue:
        function = lambda_function(MOTO_ACCOUNT, os.environ["AWS_REGION"], self.functions[module])
        return self.lambdas(function, event)

    # ---- the trial ------------------------------------------------------------------------------------------
    def _stage_data(self) -> None:
        """Upload local data files to the stage's data bucket: the API, like production, takes only s3:// URIs in
        buckets the job role may read (the stage's ``data_buckets``)."""
        import boto3

        bucket = rehearsal_data_bucket(self.options.stage)
        staged = staged_trial(self.spec, bucket)  # the trial id `validate --local` shows comes from here too
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket=bucket)
        for upload in staged.uploads:
            s3.put_object(Bucket=upload.bucket, Key=upload.key, Body=upload.path.read_bytes())
            self.progress.phase(f"staged {upload.path} -> {upload.uri}")
        self.spec = staged.spec

    def _submit(self, deployment: LocalDeployment) -> str:
        self._stage_data()
        body = self.spec.model_dump(mode="json", exclude_none=True)
        self.progress.phase(f"submitting trial {self.spec.trial_id} through the API handler (POST /trials)")
        response = json_object(self._invoke_module("on_trial_api", api_event("POST", "/trials", body)))
        payload = json.loads(optional_text(response.get("body")) or "{}")
        if response.get("statusCode") not in (200, 201):
            raise RuntimeError(f"the API refused the trial ({response.get('statusCode')}): {json.dumps(payload)}")
        self.progress.phase(f"accepted ({response['statusCode']}): route {payload.get('triage', {}).get('route')}")
        return str(deployment.state_machine_arn).replace(":stateMachine:", ":execution:") + f":{self.spec.trial_id}"

    def _follow(self, execution_arn: str) -> str:
        import boto3

        sfn = boto3.client("stepfunctions")
        deadline = time.monotonic() + self.options.timeout_s
        seen = 0
        while True:
            history = sfn.get_execution_history(executionArn=execution_arn, maxResults=1000)["events"]
            for event in history[seen:]:
                self.progress.workflow(event)
            seen = len(history)
            status = sfn.describe_execution(executionArn=execution_arn)["status"]
            if status in EXECUTION_TERMINAL:
                return str(status)
            if time.monotonic() > deadline:
                self.progress.warn(f"gave up after {self.options.timeout_s:.0f} s; stopping the workflow")
                self._stop(execution_arn)
                return "TIMED_OUT"
            time.sleep(0.5)

    def _stop(self, execution_arn: str) -> None:
        import boto3

        try:
            boto3.client("stepfunctions").stop_execution(executionArn=execution_arn, cause="rehearsal interrupted")
        except Exception as exc:  # the execution may have ended meanwhile
            self.progress.warn(f"stop execution: {exc}")

    # ---- outputs and state ----------------------------------------------------------------------------------
    def _collect(self, execution_arn: str | None) -> list[Path]:
        import boto3

        files: list[Path] = []
        s3 = boto3.client("s3")
        bucket, prefix = self.env["ARTIFACTS_BUCKET"], f"trials/{self.spec.trial_id}/report/"
        for name in REPORT_FILES:
            try:
                body = s3.get_object(Bucket=bucket, Key=prefix + name)["Body"].read()
            except s3.exceptions.NoSuchKey:
                continue
            except Exception as exc:  # keep collecting what exists
                self.progress.warn(f"report {name}: {exc}")
                continue
            (self.out / name).write_bytes(body)
            files.append(self.out / name)
        ledger = _scan(self.env["LEDGER_TABLE"])
        _write_json(self.out / "ledger.json", ledger)
        files.append(self.out / "ledger.json")
        if execution_arn:
            try:
                history = boto3.client("stepfunctions").get_execution_history(executionArn=execution_arn,
                                                                             maxResults=1000)["events"]
            except Exception as exc:
                self.progress.warn(f"execution history: {exc}")
            else:
                _write_json(self.out / "execution-history.json", history)
                files.append(self.out / "execution-history.json")
        return files

    def _save_state(self) -> None:
        """Keep the compile cache and its registry for the next rehearsal (moto's state lives in memory)."""
        import boto3

        s3 = boto3.client("s3")
        cache_dir = self.state_dir / "compile-cache"
        bucket = self.env.get("CACHE_BUCKET")
        if bucket:
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
                for obj in page.get("Contents", []):
                    try:  # a key is any string to S3: one naming '..' or empty segments would land elsewhere
                        target = cache_dir / entry_name(obj["Key"])
                    except EntryRejected:
                        self.progress.warn(f"compile cache: {obj['Key']!r} is not a path under the cache; not kept")
                        continue
                    target.parent.mkdir(parents=True, exist_ok=True)
                    staging = target.with_name(f".{target.name}.{os.getpid()}")
                    staging.write_bytes(s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read())
                    os.replace(staging, target)
        table = self.env.get("CACHE_REGISTRY_TABLE")
        if table:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            items = boto3.client("dynamodb").scan(TableName=table).get("Items", [])
            staging = self.state_dir / f".registry-{os.getpid()}.json"
            staging.write_text(json.dumps(items, indent=1))
            os.replace(staging, self.state_dir / "registry.json")  # a concurrent rehearsal reads all or nothing

    def _restore_state(self) -> None:
        import boto3

        cache_dir = self.state_dir / "compile-cache"
        bucket = self.env.get("CACHE_BUCKET")
        if bucket and cache_dir.exists():
            s3 = boto3.client("s3")
            for path in sorted(p for p in cache_dir.rglob("*") if p.is_file() and not p.name.startswith(".")):
                s3.put_object(Bucket=bucket, Key=path.relative_to(cache_dir).as_posix(), Body=path.read_bytes())
        registry = self.state_dir / "registry.json"
        table = self.env.get("CACHE_REGISTRY_TABLE")
        if table and registry.exists():
            dynamodb = boto3.client("dynamodb")
            items = json.loads(registry.read_text())
            for item in items:
                dynamodb.put_item(TableName=table, Item=item)
            if items:
                self.progress.phase(f"restored {len(items)} compile-cache registry entries from {registry}")


class _StepFunctionsProbes:
    """A ``logging`` filter dropping moto's ERROR for a JSONPath that is absent where the state machine only asks
    whether it is there: a Choice rule's ``IsPresent`` evaluates the path, and moto logs the miss before the rule
    turns it into ``false``. Step Functions records nothing for it (an absent path is ``IsPresent: false``,
    https://docs.aws.amazon.com/step-functions/latest/dg/state-choice.html). A path missing where a state needs it
    still fails the execution: moto turns the same miss into ``States.Runtime`` and logs that as a
    ``FailureEventException``, which this filter keeps, as the execution history keeps the failure."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name.startswith("moto.stepfunctions.parser")
                    and record.getMessage().startswith("Exception=NoSuchJsonPathError"))


@contextlib.contextmanager
def _library_output_to(path: Path) -> Iterator[None]:
    """Send everything but the rehearsal's own progress (which holds the console stream it was given) to ``path``:
    the process's stdout and stderr, Python warnings and every log record, less what AWS itself would not log (an
    ``IsPresent`` probe, Powertools' empty-metrics warning, which the functions filter)."""
    import warnings

    from lambdas.runtime.observability import quiet_empty_metrics

    root = logging.getLogger()
    with path.open("a", encoding="utf-8") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log), \
            warnings.catch_warnings():
        handler = logging.StreamHandler(log)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler.addFilter(_StepFunctionsProbes())
        consoles = [h for h in root.handlers if isinstance(h, logging.StreamHandler)
                    and not isinstance(h, logging.FileHandler) and getattr(h, "stream", None) in (sys.__stdout__,
                                                                                                  sys.__stderr__)]
        for console in consoles:
            root.removeHandler(console)
        root.addHandler(handler)
        logging.captureWarnings(True)
        warnings.simplefilter("default")
        quiet_empty_metrics()  # after "default", which would otherwise show it again
        try:
            yield
        finally:
            logging.captureWarnings(False)
            root.removeHandler(handler)
            for console in consoles:
                root.addHandler(console)


@contextlib.contextmanager
def _fresh_handler_state() -> Iterator[None]:
    """Handlers cache clients, settings and idempotency stores per container; this process is a new "container"
    for each rehearsal, and must not leave clients bound to the loopback server behind for whatever runs next."""
    from lambdas.runtime.composition import reset_environment

    reset_environment()
    try:
        yield
    finally:
        reset_environment()


def local_backend(track: str) -> str:
    if track == "trn2":
        return "neuron" if any(Path("/dev").glob("neuron*")) else "compiled"
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def api_event(method: str, path: str, body: JsonValue = None) -> JsonObject:
    """An API Gateway REST proxy event as the AWS_IAM-authorised API delivers it."""
    request_id = str(uuid.uuid4())
    return {
        "resource": path, "path": path, "httpMethod": method,
        "headers": {"Content-Type": "application/json", "Host": "local"},
        "multiValueHeaders": {"Content-Type": ["application/json"]},
        "queryStringParameters": None, "multiValueQueryStringParameters": None, "pathParameters": None,
        "stageVariables": None, "isBase64Encoded": False,
        "body": None if body is None else json.dumps(body),
        "requestContext": {
            "resourcePath": path, "httpMethod": method, "path": f"/local{path}", "stage": "local",
            "requestId": request_id, "accountId": "123456789012", "apiId": "local",
            "identity": {"sourceIp": "127.0.0.1", "userArn": "arn:aws:iam::123456789012:user/rehearsal",
                         "caller": "rehearsal", "user": "rehearsal"},
        },
    }


def _scan(table: str) -> list[dict[str, TableAttributeValueTypeDef]]:
    import boto3

    items: list[dict[str, TableAttributeValueTypeDef]] = []
    kwargs: ScanInputTableScanTypeDef = {}
    resource = boto3.resource("dynamodb").Table(table)
    while True:
        page = resource.scan(**kwargs)
        items.extend(page.get("Items", []))
        if "LastEvaluatedKey" not in page:
            return sorted(items, key=lambda i: (str(i.get("run_key", "")), str(i.get("entry_key", ""))))
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _write_json(path: Path, value: Sequence[Mapping[str, TableAttributeValueTypeDef]] | Sequence[HistoryEventTypeDef]
                ) -> None:
    path.write_text(json.dumps(value, indent=2, default=str) + "\n")
