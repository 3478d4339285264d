"""State transitions and Lambda invocations per trial, read from executed workflow histories.

The synthesized state machine runs on moto (Step Functions execution on) with the four task functions answered in
process and Batch jobs finishing with scripted exit codes, for three trial shapes: both tracks succeed, the Trn2
job fails and the GPU fallback runs, and a GPU-only trial. Standard workflows bill per state transition, so the
figures are the workflow's cost driver; ``.sync`` Batch tasks mean no polling loop, which shows as every state
being entered at most once per branch.

    python bench/bench_workflow.py
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "containers")]
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
TRIAL = "bench-trial-0123456789"
SCENARIOS: dict[str, tuple[list[str], dict[str, int | None]]] = {
    "both tracks succeed": (["gpu", "trn2"], {}),
    "trn2 fails -> GPU fallback": (["gpu", "trn2"], {"trn2": 76}),
    "gpu only": (["gpu"], {}),
}


def _handlers() -> Any:
    from dualtrack.local.aws.moto_shims import InProcessLambdas

    def resolve(event: dict[str, Any], _: Any) -> dict[str, Any]:
        prefix = "neuron/bench/2.26/abc/"
        return {"cache_url": f"s3://cache/{prefix}", "cache_key": "abc", "prefix": prefix, "warm": False,
                "failed_before": False}

    return InProcessLambdas({
        "resolve_compile_cache": resolve,
        "close_trial_costs": lambda e, _: {"trial_id": e["trial_id"], "runs": {}, "total_usd": "0"},
        "build_trial_report": lambda e, _: {"report_uri": "s3://artifacts/report/", "verdict": "inconclusive"},
        "set_trial_status": lambda e, _: {"trial_id": e["trial_id"], "status": e["status"]},
    })


def _history(sfn: Any, arn: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"executionArn": arn, "maxResults": 1000}
    while True:
        page = sfn.get_execution_history(**kwargs)
        events += page["events"]
        if not page.get("nextToken"):
            return events
        kwargs["nextToken"] = page["nextToken"]


def run_scenario(assembly: Any, tracks: list[str], codes: dict[str, int | None]) -> dict[str, Any]:
    import boto3
    from moto import mock_aws

    from dualtrack.local.aws.moto_shims import MOTO_CONFIG, ScriptedJobs, moto_shims
    from dualtrack.local.aws.template import deploy_locally

    jobs, lambdas = ScriptedJobs(dict(codes)), _handlers()
    with mock_aws(config=MOTO_CONFIG), moto_shims(lambdas=lambdas, batch=jobs):
        deployment = deploy_locally(assembly)
        sfn = boto3.client("stepfunctions", region_name=deployment.region)
        from infra.config import batch_name

        run_dirs = {r: f"s3://artifacts/trials/{TRIAL}/{r}" for r in ("gpu", "trn2", "gpu-fallback")}
        # The dev stage's queues and job definitions, by name, as the API puts them in the input.
        types = {"gpu": "g6e.48xlarge", "trn2": "trn2.48xlarge"}
        targets = {t: {"queue": batch_name("dev", t, types[t]),  # type: ignore[arg-type]
                       "definition": batch_name("dev", t, types[t], "single")} for t in tracks}  # type: ignore[arg-type]
        if "gpu" in targets and "trn2" in targets:
            targets["fallback"] = targets["gpu"]
        payload = {"trial_id": TRIAL, "spec_uri": f"s3://artifacts/trials/{TRIAL}/spec.json", "tracks": tracks,
                   "run_dirs": run_dirs, "jobs": targets, "attempt_timeout_s": 3600}
        started = time.perf_counter()
        arn = sfn.start_execution(stateMachineArn=deployment.state_machine_arn, name=TRIAL,
                                  input=json.dumps(payload))["executionArn"]
        while sfn.describe_execution(executionArn=arn)["status"] == "RUNNING":
            if time.perf_counter() - started > 120:
                raise RuntimeError("execution did not finish in 120 s")
            time.sleep(0.1)
        status = sfn.describe_execution(executionArn=arn)["status"]
        history = _history(sfn, arn)
        definition = json.loads(sfn.describe_state_machine(stateMachineArn=deployment.state_machine_arn)
                                ["definition"])
    kinds = Counter(e["type"] for e in history)
    entered = Counter(e["stateEnteredEventDetails"]["name"] for e in history if "stateEnteredEventDetails" in e)
    scheduled = [e["taskScheduledEventDetails"] for e in history if "taskScheduledEventDetails" in e]
    lambda_calls = sum(1 for t in scheduled if t["resourceType"] == "lambda") + kinds["LambdaFunctionScheduled"]
    batch_calls = sum(1 for t in scheduled if t["resourceType"] == "batch")
    return {"status": status, "history_events": len(history), "transitions": sum(entered.values()),
            "lambda_invocations": lambda_calls, "batch_submits": batch_calls, "jobs": len(jobs.submitted),
            "most_entries_of_one_state": max(entered.values(), default=0),
            "states_in_definition": _count_states(definition), "handler_calls": len(lambdas.calls)}


def _count_states(definition: dict[str, Any]) -> int:
    total = 0
    for state in definition.get("States", {}).values():
        total += 1
        for branch in state.get("Branches", []):
            total += _count_states(branch)
        if "Iterator" in state or "ItemProcessor" in state:
            total += _count_states(state.get("ItemProcessor") or state["Iterator"])
    return total


def main() -> int:
    from infra.synth import synthesize

    assembly = synthesize("dev")
    results = {name: run_scenario(assembly, tracks, codes) for name, (tracks, codes) in SCENARIOS.items()}
    for name, r in results.items():
        print(f"  {name:28s} {r['status']:9s} transitions {r['transitions']:3d}  lambda {r['lambda_invocations']:2d}"
              f"  batch submits {r['batch_submits']}  jobs {r['jobs']}  history events {r['history_events']:3d}"
              f"  max entries of one state {r['most_entries_of_one_state']}")
    states = next(iter(results.values()))["states_in_definition"]
    for name, r in results.items():
        print(f"workflow     {name}: transitions / states in definition ({states}) = "
              f"{r['transitions'] / states:.2f}")
        print(f"workflow     {name}: lambda invocations / handler calls = "
              f"{r['lambda_invocations'] / max(1, r['handler_calls']):.2f}  ({r['lambda_invocations']} per trial)")
    loops = [n for n, r in results.items() if r["most_entries_of_one_state"] > 2]
    print(f"  polling loops: {loops or 'none'} (no state entered more than twice)")
    return 0 if all(r["status"] == "SUCCEEDED" for r in results.values()) and not loops else 1


if __name__ == "__main__":
    sys.exit(main())
