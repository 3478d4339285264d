"""A cold request, as users feel it: a fresh interpreter imports a Lambda function's module (INIT) and serves one
request (the first invocation), against a loopback moto server. Side by side, a bare function: a fresh interpreter
imports Powertools, pydantic and boto3 and makes exactly the AWS calls the real function made for that request
(recorded from it, replayed with the same parameters), and nothing else. The ratio is what the function's own code
costs on a cold request; target <= 1.3.

Runs are interleaved (bare, then the function, per request, repeated); each repeat uses a request the function has
not seen (a new job id, object version or trial), so every run is a first delivery. Medians are reported.

Import alone (INIT without the request) is measured for every function the same way: a fresh interpreter imports
the function's module, and beside it a bare one imports the same Powertools utilities the function loaded (Logger,
Metrics and Tracer always, made at module level as every function makes them; the REST resolver, idempotency and
the parser where the function loads them), pydantic with its model machinery, and boto3. Target <= 1.3 for every
function.

    python bench/bench_cold_request.py [--repeats 5] [--imports-only]
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from stage_env import ENV, REGION  # bench/ is the script directory, first on sys.path

from dualtrack.local.aws.tables import create_tables

ROOT = Path(__file__).resolve().parents[1]
EVENTS = ROOT / "tests" / "events"

# The child: INIT (import) and the first invocation, timed together; the AWS calls it made recorded for the bare
# side. ``record`` is off when timing (recording costs a little).
FUNCTION = """
import json, sys, time
t = time.perf_counter()
import importlib
module = importlib.import_module(sys.argv[1])
init = time.perf_counter() - t
calls = []
if sys.argv[3] == "record":
    from botocore.client import BaseClient
    original = BaseClient._make_api_call
    def recorded(client, operation, params):
        calls.append([client.meta.service_model.service_name, operation, params])
        return original(client, operation, params)
    BaseClient._make_api_call = recorded
class Context:
    function_name = "bench"; memory_limit_in_mb = 512; aws_request_id = "bench"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:bench"
    def get_remaining_time_in_millis(self): return 60000
event = json.loads(open(sys.argv[2]).read())
out = module.handler(event, Context())
total = time.perf_counter() - t
if sys.argv[3] == "record":
    import base64
    def plain(v):
        if isinstance(v, bytes): return {"__bytes__": base64.b64encode(v).decode()}
        if isinstance(v, dict): return {k: plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)): return [plain(x) for x in v]
        if hasattr(v, "read"): return {"__bytes__": base64.b64encode(v.read()).decode()}
        return v if isinstance(v, (str, int, float, bool, type(None))) else str(v)
    print(json.dumps({"calls": plain(calls), "result": str(out)[:300]}))
else:
    print(json.dumps({"init_s": init, "total_s": total}))
"""

# The bare function: a handler under the decorator stack every function has (Powertools' Logger, Metrics and Tracer),
# pydantic and boto3 loaded, making the same calls, with no project code. "pydantic loaded" means its model machinery:
# `import pydantic` alone defers it to the first model class (about 40 ms here), so the bare handler parses each
# recorded call with one model, as any handler that uses pydantic does. A Powertools utility a function uses
# beyond those (idempotency, the parser, the API resolver) counts as the function's own cost.
BARE = """
import json, sys, time
t = time.perf_counter()
from aws_lambda_powertools import Logger, Metrics, Tracer
from pydantic import BaseModel
import boto3, base64
class Call(BaseModel):  # the bare handler parses its event with pydantic, which loads its model machinery
    service: str
    operation: str
    params: dict
from botocore.exceptions import ClientError
logger, metrics, tracer = Logger(), Metrics(namespace="Bench"), Tracer()
def value(v):
    if isinstance(v, dict) and set(v) == {"__bytes__"}: return base64.b64decode(v["__bytes__"])
    if isinstance(v, dict): return {k: value(x) for k, x in v.items()}
    if isinstance(v, list): return [value(x) for x in v]
    return v
@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event, context):
    clients = {}
    for service, operation, params in event:
        Call(service=service, operation=operation, params=params)
        client = clients.get(service) or clients.setdefault(service, boto3.client(service))
        try:
            client._make_api_call(operation, value(params))
        except ClientError:
            pass  # a conditional write that lost: the round trip was made all the same
    return {"calls": len(event)}
class Context:
    function_name = "bench"; memory_limit_in_mb = 512; aws_request_id = "bench"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:bench"
    def get_remaining_time_in_millis(self): return 60000
import warnings
warnings.filterwarnings("ignore", message="No application metrics to publish")
handler(json.loads(open(sys.argv[1]).read()), Context())
print(json.dumps({"total_s": time.perf_counter() - t}))
"""


# Import alone: the function's module, and the utilities it loaded (named for the bare side).
IMPORT_FUNCTION = """
import json, sys, time
t = time.perf_counter()
import importlib
importlib.import_module(sys.argv[1])
took = time.perf_counter() - t
utilities = [name for name, module in (("resolver", "aws_lambda_powertools.event_handler"),
                                       ("idempotency", "aws_lambda_powertools.utilities.idempotency"),
                                       ("parser", "aws_lambda_powertools.utilities.parser")) if module in sys.modules]
print(json.dumps({"import_s": took, "utilities": utilities}))
"""

IMPORT_BARE = """
import json, sys, time
t = time.perf_counter()
from aws_lambda_powertools import Logger, Metrics, Tracer
logger, metrics, tracer = Logger(), Metrics(namespace="Bench"), Tracer()  # module-level, as every function has them
wanted = sys.argv[1].split(",") if sys.argv[1] else []
if "resolver" in wanted:
    from aws_lambda_powertools.event_handler import APIGatewayRestResolver
if "idempotency" in wanted:
    from aws_lambda_powertools.utilities.idempotency import idempotent_function
if "parser" in wanted:
    from aws_lambda_powertools.utilities.parser import parse
from pydantic import BaseModel
class Event(BaseModel):  # the model machinery, which the first model class loads
    name: str
import boto3
print(json.dumps({"import_s": time.perf_counter() - t}))
"""

HANDLERS = sorted(p.stem for p in (ROOT / "lambdas" / "handlers").glob("*.py") if p.stem != "__init__")


def imports(env: dict[str, str], repeats: int) -> float:
    """Import alone, per function against a bare import of what it loaded; prints the table, returns the worst."""
    function_s: dict[str, list[float]] = {}
    bare_s: dict[str, list[float]] = {}
    loaded: dict[str, list[str]] = {}
    for _ in range(repeats):
        for name in HANDLERS:
            module = f"lambdas.handlers.{name}"
            got = _child(IMPORT_FUNCTION, [module], env)
            loaded[name] = got["utilities"]
            function_s.setdefault(name, []).append(got["import_s"])
            bare_s.setdefault(name, []).append(_child(IMPORT_BARE, [",".join(got["utilities"])], env)["import_s"])
    print(f"{'function (import alone)':30} {'utilities beyond Logger/Metrics/Tracer':40} {'bare_ms':>8} "
          f"{'import_ms':>9} {'ratio':>6}")
    worst = 0.0
    for name in HANDLERS:
        bare, took = statistics.median(bare_s[name]), statistics.median(function_s[name])
        worst = max(worst, took / bare)
        print(f"{name:30} {', '.join(loaded[name]) or '-':40} {bare * 1000:8.1f} {took * 1000:9.1f} "
              f"{took / bare:6.2f}")
    print(f"import / bare import of the same utilities (worst function) = {worst:.3f}  "
          f"(target <= 1.3; median of {repeats})")
    return worst


def _server() -> tuple[Any, str]:
    import logging

    from moto.moto_server.threaded_moto_server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no access log line per request

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, f"http://{host}:{port}"


def _set_up(endpoint: str) -> dict[str, str]:
    import boto3

    kw = {"region_name": REGION, "endpoint_url": endpoint}
    ddb = boto3.client("dynamodb", **kw)
    create_tables(ddb)
    s3 = boto3.client("s3", **kw)
    for bucket in ("artifacts", "compile-cache"):
        s3.create_bucket(Bucket=bucket)
    role = boto3.client("iam", **kw).create_role(RoleName="sfn", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    machine = boto3.client("stepfunctions", **kw).create_state_machine(
        name="trial-workflow", roleArn=role,
        definition=json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}}))
    return {"STATE_MACHINE_ARN": machine["stateMachineArn"]}


def _trial(endpoint: str, trial_id: str) -> None:
    """A submitted trial, as the API leaves it (the item and the frozen spec), for the requests that read one."""
    import boto3

    spec = json.loads((ROOT / "examples" / "trial-llama31-8b-lora.json").read_text())
    kw = {"region_name": REGION, "endpoint_url": endpoint}
    boto3.client("s3", **kw).put_object(Bucket="artifacts", Key=f"trials/{trial_id}/spec.json",
                                        Body=json.dumps(spec).encode())
    item = {"trial_id": {"S": trial_id}, "name": {"S": spec["name"]}, "owner": {"S": spec["owner"]},
            "status": {"S": "SUBMITTED"}, "spec_uri": {"S": f"s3://artifacts/trials/{trial_id}/spec.json"},
            "execution_arn": {"S": f"arn:aws:states:{REGION}:123456789012:execution:trial-workflow:{trial_id}"},
            "max_steps": {"N": str(spec["max_steps"])}, "created_at": {"S": "2026-12-04T10:00:00Z"},
            "team": {"S": spec["owner"]},  # the API's caller is a member of the trial's team (stage_env.GOVERNANCE)
            "tracks": {"M": {"gpu": {"M": {"instance_type": {"S": "p5.48xlarge"}, "nodes": {"N": "1"}}}}},
            # The limits a submission freezes on the item: the event functions project spend against them.
            "run_limits": {"M": {"max_usd": {"M": {"value": {"S": str(spec["limits"]["max_usd"])},
                                                   "source": {"S": "trial limits.max_usd"}}}}}}
    boto3.client("dynamodb", **kw).put_item(TableName="trials", Item=item)


def _requests(endpoint: str, n: int) -> dict[str, dict[str, Any]]:
    """One request per function, as a first delivery: a Batch state change, a checkpoint manifest written, a trial
    status read, a workflow status update."""
    import boto3

    trial_id = f"bench-{n}-{uuid.uuid4().hex[:8]}"
    _trial(endpoint, trial_id)
    batch = json.loads((EVENTS / "batch_job_state_change.json").read_text())
    batch["detail"].update(jobId=f"job-{trial_id}", jobName=f"{trial_id}-gpu", status="RUNNING", attempts=[])
    batch["detail"]["container"]["environment"] = [{"name": "DUALTRACK_TRIAL_ID", "value": trial_id},
                                                   {"name": "DUALTRACK_RUN", "value": "gpu"}]
    key = f"trials/{trial_id}/gpu/checkpoints/step-100/manifest.json"
    manifest = {"step": 100, "shards": [{"name": "model.safetensors", "bytes": 1000, "sha256": "0" * 64}],
                "save_s": 1.5}
    s3_client = boto3.client("s3", region_name=REGION, endpoint_url=endpoint)
    s3_client.put_object(Bucket="artifacts", Key=key.replace("manifest.json", "model.safetensors"), Body=b"x" * 1000)
    s3_client.put_object(Bucket="artifacts", Key=key, Body=json.dumps(manifest).encode())
    s3 = json.loads((EVENTS / "s3_object_created.json").read_text())
    s3["detail"]["bucket"]["name"] = "artifacts"
    s3["detail"]["object"].update(key=key, size=200, etag=uuid.uuid4().hex)
    api = json.loads((EVENTS / "api_gateway_rest.json").read_text())
    api.update(httpMethod="GET", path=f"/trials/{trial_id}", resource="/trials/{id}", body=None,
               queryStringParameters=None, pathParameters={"id": trial_id})
    api["requestContext"].update(httpMethod="GET", path=f"/trials/{trial_id}")
    return {"lambdas.handlers.on_batch_job_state": batch, "lambdas.handlers.on_artifact_created": s3,
            "lambdas.handlers.on_trial_api": api,
            "lambdas.handlers.set_trial_status": {"trial_id": trial_id, "status": "SUCCEEDED", "cause": None}}


def _child(code: str, args: list[str], env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{args[0]}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--imports-only", action="store_true", help="measure import alone, not cold requests")
    args = parser.parse_args()
    os.environ.update({k: ENV[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")})
    server, endpoint = _server()
    try:
        env = {**os.environ, **ENV, "AWS_ENDPOINT_URL": endpoint,
               "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "containers")])}
        env.update(_set_up(endpoint))
        imports(env, args.repeats)
        if args.imports_only:
            return 0
        function_s: dict[str, list[float]] = {}
        bare_s: dict[str, list[float]] = {}
        calls_per_request: dict[str, int] = {}
        with tempfile.TemporaryDirectory() as tmp:
            for n in range(args.repeats):
                # Record on one fresh request, replay those calls bare, then time the function on another fresh one.
                recorded_on, timed_on = _requests(endpoint, 2 * n), _requests(endpoint, 2 * n + 1)
                for module in recorded_on:
                    event_file, calls_file = Path(tmp) / "event.json", Path(tmp) / "calls.json"
                    event_file.write_text(json.dumps(recorded_on[module]))
                    calls = _child(FUNCTION, [module, str(event_file), "record"], env)["calls"]
                    calls_per_request[module] = len(calls)
                    calls_file.write_text(json.dumps(calls))
                    bare_s.setdefault(module, []).append(_child(BARE, [str(calls_file)], env)["total_s"])
                    event_file.write_text(json.dumps(copy.deepcopy(timed_on[module])))
                    function_s.setdefault(module, []).append(
                        _child(FUNCTION, [module, str(event_file), "time"], env)["total_s"])
        print(f"{'function':42} {'AWS calls':>9} {'bare_ms':>8} {'cold_ms':>8} {'ratio':>6}")
        worst = 0.0
        for module in function_s:
            bare, cold = statistics.median(bare_s[module]), statistics.median(function_s[module])
            worst = max(worst, cold / bare)
            print(f"{module:42} {calls_per_request[module]:9d} {bare * 1000:8.1f} {cold * 1000:8.1f} "
                  f"{cold / bare:6.2f}")
        print(f"cold request / bare function with the same AWS calls (worst function) = {worst:.3f}  "
              f"(target <= 1.3; median of {args.repeats})")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    _ = base64  # the child scripts decode recorded bytes with it
    raise SystemExit(main())
