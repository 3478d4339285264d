"""The synthesized trial workflow, executed on moto with fake task handlers and scripted Batch jobs."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from moto import mock_aws

from dualtrack.local.aws.moto_shims import MOTO_CONFIG, InProcessLambdas, ScriptedJobs, job_environment, moto_shims
from dualtrack.local.aws.template import LocalDeployment, deploy_locally
from infra.config import batch_name
from infra.synth import Assembly
from lambdas.domain.trial.job_targets import JobTarget
from lambdas.domain.trial.spec import TrialSpec
from lambdas.domain.vocabulary import track_of
from lambdas.services.trial_submission import execution_input, job_targets
from tests import fakes
from tests.json_access import obj

if TYPE_CHECKING:
    from mypy_boto3_stepfunctions.type_defs import DescribeExecutionOutputTypeDef

pytestmark = pytest.mark.slow
# moto's task-token listener thread of a .sync state raises when its execution is stopped (or fails while the job
# runs); the stop itself works.
STOPPED_THREAD_NOISE = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
TRIAL = "llama-lora-0123456789"
RUN_DIRS = {run: f"s3://artifacts/trials/{TRIAL}/{run}" for run in ("gpu", "trn2", "gpu-fallback", "trn2-compile")}


# The dev stage's queues and job definitions, by the names the API puts in the input (JOB_TARGETS).
JOBS = {"gpu": {"queue": batch_name("dev", "gpu", "g6e.48xlarge"),
                "definition": batch_name("dev", "gpu", "g6e.48xlarge", "single")},
        "trn2": {"queue": batch_name("dev", "trn2", "trn2.48xlarge"),
                 "definition": batch_name("dev", "trn2", "trn2.48xlarge", "single")}}


COMPILE_QUEUE = batch_name("dev", "trn2", "trn2.48xlarge", "compile")


def workflow_input(tracks: list[str] | None = None, *, compile_stage: bool = False,
                   scaling: Sequence[str] = ()) -> dict[str, Any]:
    """The input the API sends; ``scaling`` names scaling runs (``gpu-n1``), placed on their track's single-node
    definition (the dev stage has no multi-node one). ``scaling`` is always a list, as ``ExecutionInput.payload``
    sends it: the Map state's ItemsPath must find an array."""
    tracks = tracks or ["gpu", "trn2"]
    jobs = {track: JOBS[track] for track in tracks}
    run_dirs = {run: RUN_DIRS[run] for run in tracks}
    if "trn2" in tracks:
        run_dirs["trn2-compile"] = RUN_DIRS["trn2-compile"]
        if compile_stage:
            jobs["compile"] = {**JOBS["trn2"], "queue": COMPILE_QUEUE}
    if "gpu" in tracks and "trn2" in tracks:
        jobs["fallback"] = JOBS["gpu"]
        run_dirs["gpu-fallback"] = RUN_DIRS["gpu-fallback"]
    items = [{"run": run, "track": track_of(run), "run_dir": f"s3://artifacts/trials/{TRIAL}/{run}",
              "job": JOBS[track_of(run)]} for run in scaling]
    run_dirs.update({str(item["run"]): str(item["run_dir"]) for item in items})
    return {"trial_id": TRIAL, "spec_uri": f"s3://artifacts/trials/{TRIAL}/spec.json", "tracks": tracks,
            "run_dirs": run_dirs, "jobs": jobs, "scaling": items, "attempt_timeout_s": 3600,
            "compile_timeout_s": 900}


def flat(runs: list[Any]) -> list[dict[str, Any]]:
    """The branches' outcomes in order: the Trainium2 branch gives a list (compile stage, then training), the
    scaling branch a list with one outcome per scaling run (empty without any)."""
    return [run for item in runs for run in (item if isinstance(item, list) else [item])]


def fake_handlers(warm: bool = False) -> InProcessLambdas:
    def resolve(event: dict[str, Any], _: Any) -> dict[str, Any]:
        prefix = "neuron/llama/2.26/abc/"
        return {"cache_url": f"s3://cache/{prefix}", "cache_key": "abc", "prefix": prefix, "warm": warm,
                "failed_before": False}

    def close(event: dict[str, Any], _: Any) -> dict[str, Any]:
        return {"trial_id": event["trial_id"], "runs": {r["run"]: {"total_usd": "0"} for r in flat(event["runs"])},
                "total_usd": "0"}

    return InProcessLambdas({
        "resolve_compile_cache": resolve,
        "close_trial_costs": close,
        "build_trial_report": lambda event, _: {"report_uri": f"s3://artifacts/trials/{event['trial_id']}/report/",
                                                "verdict": "inconclusive"},
        "set_trial_status": lambda event, _: {"trial_id": event["trial_id"], "status": event["status"]},
    })


class Harness:
    def __init__(self, deployment: LocalDeployment, lambdas: InProcessLambdas, jobs: ScriptedJobs):
        self.deployment, self.lambdas, self.jobs = deployment, lambdas, jobs
        self.sfn = boto3.client("stepfunctions", region_name=deployment.region)

    def start(self, payload: dict[str, Any], name: str = TRIAL) -> str:
        return self.sfn.start_execution(stateMachineArn=self.deployment.state_machine_arn, name=name,
                                        input=json.dumps(payload))["executionArn"]  # type: ignore[no-any-return]

    def wait(self, arn: str, timeout_s: float = 60) -> DescribeExecutionOutputTypeDef:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            described = self.sfn.describe_execution(executionArn=arn)
            if described["status"] != "RUNNING":
                return described
            time.sleep(0.2)
        raise AssertionError(f"execution {arn} still RUNNING after {timeout_s} s")

    def wait_for_job(self, run: str, timeout_s: float = 30) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for job in self.jobs.submitted:
                if job_environment(job).get("DUALTRACK_RUN") == run:
                    return job
            time.sleep(0.1)
        raise AssertionError(f"no {run} job was submitted within {timeout_s} s")

    def calls(self, module: str) -> list[Any]:
        return [event for handler, event in self.lambdas.calls if handler == f"lambdas.handlers.{module}.handler"]


@pytest.fixture
def harness(request: pytest.FixtureRequest, assembly: Assembly) -> Iterator[Harness]:
    exit_codes = getattr(request, "param", {})
    jobs = ScriptedJobs(dict(exit_codes))
    lambdas = fake_handlers()
    with mock_aws(config=MOTO_CONFIG), moto_shims(lambdas=lambdas, batch=jobs):
        yield Harness(deploy_locally(assembly), lambdas, jobs)


def test_happy_path_runs_both_tracks_and_settles(harness: Harness) -> None:
    """The Trainium2 branch ends in a Pass that builds its list of two outcomes with ``States.Array`` and selects it
    with ``OutputPath`` (Step Functions' intrinsic functions page: "States.Array ... takes zero or more arguments
    ... and returns a JSON array"; Pass states support ``OutputPath``, "Processing input and output")."""
    done = harness.wait(harness.start(workflow_input()))
    assert done["status"] == "SUCCEEDED", done
    output = json.loads(done["output"])
    assert [(r["run"], r["status"], r["fallback"]) for r in flat(output["runs"])] == [
        ("gpu", "SUCCEEDED", False), ("trn2-compile", "SKIPPED", False), ("trn2", "SUCCEEDED", False)]
    assert {r["job_id"] for r in flat(output["runs"]) if r["job_id"]} == {job.job_id for job in harness.jobs.submitted}
    assert sorted(harness.jobs.runs()) == ["gpu", "trn2"]
    trn2 = next(job for job in harness.jobs.submitted if job_environment(job)["DUALTRACK_RUN"] == "trn2")
    env = job_environment(trn2)
    assert env["NEURON_COMPILE_CACHE_URL"] == "s3://cache/neuron/llama/2.26/abc/"
    assert env["DUALTRACK_RUN_DIR"] == RUN_DIRS["trn2"] and env["DUALTRACK_TRIAL_ID"] == TRIAL
    # From the job definition, under the overrides: the shipped Trainium2 image pins Neuron SDK 2.33, whose training
    # stack is TorchNeuron (lambdas.domain.vocabulary.trn2_backend).
    assert env["DUALTRACK_BACKEND"] == "neuron"
    assert trn2.job_name == f"{TRIAL}-trn2"
    assert trn2.job_queue.arn.endswith("/" + JOBS["trn2"]["queue"])
    assert trn2.job_definition.name == JOBS["trn2"]["definition"]
    tags = boto3.client("batch", region_name="us-east-1").list_tags_for_resource(resourceArn=trn2.arn)["tags"]
    assert tags == {"dualtrack:trial": TRIAL, "dualtrack:run": "trn2"}
    assert harness.calls("resolve_compile_cache") == [{"trial_id": TRIAL, "spec_uri": workflow_input()["spec_uri"]}]
    assert harness.calls("close_trial_costs")[0]["runs"] == output["runs"]
    # The cost step's total goes with the status, so the trial's booking is corrected to its settled cost.
    assert harness.calls("set_trial_status") == [{"trial_id": TRIAL, "status": "SUCCEEDED", "settled_usd": "0"}]
    assert output["report"]["verdict"] == "inconclusive"


@pytest.mark.parametrize("harness", [{"trn2": 76}], indirect=True)
def test_failing_trn2_job_falls_back_to_gpu(harness: Harness) -> None:
    done = harness.wait(harness.start(workflow_input()))
    assert done["status"] == "SUCCEEDED", done
    runs = json.loads(done["output"])["runs"]
    assert [(r["run"], r["status"], r["fallback"]) for r in flat(runs)] == [
        ("gpu", "SUCCEEDED", False), ("trn2-compile", "SKIPPED", False), ("gpu-fallback", "SUCCEEDED", True)]
    assert sorted(harness.jobs.runs()) == ["gpu", "gpu-fallback", "trn2"]
    fallback = next(j for j in harness.jobs.submitted if job_environment(j)["DUALTRACK_RUN"] == "gpu-fallback")
    env = job_environment(fallback)
    assert env["DUALTRACK_RESUME_FROM"] == RUN_DIRS["trn2"]
    assert env["DUALTRACK_RUN_DIR"] == RUN_DIRS["gpu-fallback"] and env["DUALTRACK_TRACK"] == "gpu"
    assert fallback.job_queue.arn.endswith("/" + JOBS["gpu"]["queue"])
    assert harness.calls("close_trial_costs")[0]["runs"] == runs


@pytest.mark.parametrize("harness", [{"trn2": 1, "gpu-fallback": 1}], indirect=True)
def test_failed_fallback_is_reported_not_fatal(harness: Harness) -> None:
    done = harness.wait(harness.start(workflow_input()))
    assert done["status"] == "SUCCEEDED", done
    runs = json.loads(done["output"])["runs"]
    assert runs[1][1] == {"run": "gpu-fallback", "status": "FAILED", "job_id": "", "fallback": True}


def test_gpu_only_trial_skips_trn2_and_the_cache(harness: Harness) -> None:
    done = harness.wait(harness.start(workflow_input(["gpu"])))
    assert done["status"] == "SUCCEEDED", done
    runs = json.loads(done["output"])["runs"]
    assert runs[1] == {"run": "trn2", "status": "SKIPPED", "job_id": "", "fallback": False}
    assert harness.jobs.runs() == ["gpu"]
    assert harness.calls("resolve_compile_cache") == []


@pytest.mark.parametrize("harness", [{"trn2": 1}], indirect=True)
def test_trn2_only_trial_fails_without_a_fallback(harness: Harness) -> None:
    """A trial without a GPU track has no ``jobs.fallback`` in its input: the branch records the Trainium2 failure
    and the trial still settles. Reading a missing path would raise ``States.Runtime``, which a ``States.ALL``
    catcher does not catch (https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html),
    so the definition checks the path is present first."""
    done = harness.wait(harness.start(workflow_input(["trn2"])))
    assert done["status"] == "SUCCEEDED", done
    runs = json.loads(done["output"])["runs"]
    assert runs == [{"run": "gpu", "status": "SKIPPED", "job_id": "", "fallback": False},
                    [{"run": "trn2-compile", "status": "SKIPPED", "job_id": "", "fallback": False},
                     {"run": "trn2", "status": "FAILED", "job_id": "", "fallback": False}],
                    []]
    assert harness.jobs.runs() == ["trn2"]
    assert harness.calls("close_trial_costs")[0]["runs"] == runs


@pytest.mark.parametrize("harness", [{"trn2": 76}], indirect=True)
def test_failure_recovery_none_runs_no_fallback_when_trn2_fails(harness: Harness,
                                                                  example_trial: dict[str, Any]) -> None:
    """The input the API builds for a trial with both tracks that declares failure_recovery none has no
    ``jobs.fallback``: the HasGpuFallback choice (an ``IsPresent`` test, Step Functions' Choice state rules,
    https://docs.aws.amazon.com/step-functions/latest/dg/state-choice.html) ends the failed Trainium2 run there,
    no fallback job is submitted, and the trial still settles the runs that ran."""
    doc = example_trial
    doc["failure_recovery"] = "none"
    doc["tracks"]["gpu"]["instance_type"] = "g6e.48xlarge"  # the dev stage's GPU type
    spec = TrialSpec.model_validate(doc)
    targets = {track: {spec.track(track).instance_type: JobTarget(queue=JOBS[track]["queue"],  # type: ignore[arg-type]
                                                                  single_node=JOBS[track]["definition"])}
               for track in ("gpu", "trn2")}
    payload = execution_input(spec, fakes.InMemoryObjects(), attempt_timeout_s=3600,
                              jobs=job_targets(spec, targets)).payload()
    assert "fallback" not in obj(payload["jobs"])
    done = harness.wait(harness.start(payload, name=spec.trial_id))
    assert done["status"] == "SUCCEEDED", done
    runs = json.loads(done["output"])["runs"]
    assert [(r["run"], r["status"], r["fallback"]) for r in flat(runs)] == [
        ("gpu", "SUCCEEDED", False), ("trn2-compile", "SKIPPED", False), ("trn2", "FAILED", False)]
    assert sorted(harness.jobs.runs()) == ["gpu", "trn2"]
    assert harness.calls("close_trial_costs")[0]["runs"] == runs


@STOPPED_THREAD_NOISE
@pytest.mark.parametrize("harness", [{"trn2": None}], indirect=True)
def test_repeated_start_is_one_execution(harness: Harness) -> None:
    first = harness.start(workflow_input())
    assert harness.start(workflow_input()) == first  # running, same name and input: the same execution
    with pytest.raises(harness.sfn.exceptions.ExecutionAlreadyExists):
        harness.start(workflow_input(["gpu"]))  # same trial id, different input
    harness.wait_for_job("trn2")
    harness.sfn.stop_execution(executionArn=first)
    harness.wait(first)
    with pytest.raises(harness.sfn.exceptions.ExecutionAlreadyExists):
        harness.start(workflow_input())  # finished: the API answers "already submitted"
    executions = harness.sfn.list_executions(stateMachineArn=harness.deployment.state_machine_arn)["executions"]
    assert [e["name"] for e in executions] == [TRIAL]
    assert sorted(harness.jobs.runs()) == ["gpu", "trn2"]


@STOPPED_THREAD_NOISE
@pytest.mark.parametrize("harness", [{"trn2": None}], indirect=True)
def test_cancelled_execution_terminates_its_jobs(harness: Harness) -> None:
    arn = harness.start(workflow_input())
    trn2 = harness.wait_for_job("trn2")
    deadline = time.monotonic() + 30
    assert trn2.status == "RUNNING"
    harness.sfn.stop_execution(executionArn=arn, error="Cancelled", cause="cancelled by its owner")
    assert harness.wait(arn)["status"] == "ABORTED"
    while not harness.jobs.terminated and time.monotonic() < deadline:
        time.sleep(0.1)
    assert harness.jobs.terminated == [(trn2.job_id, "Step Functions execution stopped")]
    described = boto3.client("batch", region_name="us-east-1").describe_jobs(jobs=[trn2.job_id])["jobs"][0]
    assert described["status"] == "FAILED"
    assert "gpu-fallback" not in harness.jobs.runs()  # a cancelled trial does not fall back


def test_multi_node_trial_submits_the_definition_for_its_node_count(prod_assembly: Assembly) -> None:
    """prod pins Trainium2 to one zone, so it has a multi-node definition per node count: an input with
    ``jobs.trn2.nodes`` runs the multi-node submit state with the run's settings as job parameters, which Batch
    merges over the definition's defaults (https://docs.aws.amazon.com/batch/latest/APIReference/API_SubmitJob.html)."""
    jobs = ScriptedJobs({})
    lambdas = fake_handlers()
    with mock_aws(config=MOTO_CONFIG), moto_shims(lambdas=lambdas, batch=jobs):
        harness = Harness(deploy_locally(prod_assembly, region="us-east-2"), lambdas, jobs)
        payload = workflow_input(["trn2"])
        payload["jobs"] = {"trn2": {"queue": batch_name("prod", "trn2", "trn2.48xlarge"),
                                    "definition": batch_name("prod", "trn2", "trn2.48xlarge", "multi-2"), "nodes": 2}}
        done = harness.wait(harness.start(payload))
        assert done["status"] == "SUCCEEDED", done
        (job,) = jobs.submitted
        assert job.job_definition.type == "multinode"
        assert job.job_definition.name == "dualtrack-prod-trn2-trn2-48xlarge-multi-2"
        assert (job.job_definition.node_properties or {}).get("numNodes") == 2
        assert job.parameters == {"spec_uri": payload["spec_uri"], "run_dir": RUN_DIRS["trn2"], "run": "trn2",
                                  "trial_id": TRIAL, "compile_cache_url": "s3://cache/neuron/llama/2.26/abc/",
                                  "resume_from": "none"}


def test_cold_cache_runs_the_warm_up_compile_stage_before_training(harness: Harness) -> None:
    """A cold key with a compile queue in the input: a compile-only job (run ``trn2-compile``) on the compile queue,
    with the training job's definition, the cache URL, its own run prefix and the compile timeout, finishes before
    the training job is submitted. ``Timeout.attemptDurationSeconds`` on SubmitJob overrides the definition's
    (https://docs.aws.amazon.com/batch/latest/APIReference/API_SubmitJob.html)."""
    done = harness.wait(harness.start(workflow_input(compile_stage=True)))
    assert done["status"] == "SUCCEEDED", done
    runs = json.loads(done["output"])["runs"]
    assert [(r["run"], r["status"]) for r in flat(runs)] == [
        ("gpu", "SUCCEEDED"), ("trn2-compile", "SUCCEEDED"), ("trn2", "SUCCEEDED")]
    by_run = {job_environment(job)["DUALTRACK_RUN"]: job for job in harness.jobs.submitted}
    compile_job, trn2 = by_run["trn2-compile"], by_run["trn2"]
    assert harness.jobs.submitted.index(compile_job) < harness.jobs.submitted.index(trn2)
    assert compile_job.job_queue.arn.endswith("/" + COMPILE_QUEUE)
    assert compile_job.job_definition.name == JOBS["trn2"]["definition"]
    assert compile_job.job_name == f"{TRIAL}-trn2-compile"
    env = job_environment(compile_job)
    assert env["NEURON_COMPILE_CACHE_URL"] == "s3://cache/neuron/llama/2.26/abc/"
    assert env["DUALTRACK_RUN_DIR"] == RUN_DIRS["trn2-compile"] and env["DUALTRACK_TRACK"] == "trn2"
    assert compile_job.timeout == {"attemptDurationSeconds": 900}
    assert trn2.timeout == {"attemptDurationSeconds": 3600}
    assert {r["job_id"] for r in flat(runs) if r["job_id"]} == {j.job_id for j in harness.jobs.submitted}


def test_warm_cache_skips_the_compile_stage(assembly: Assembly) -> None:
    jobs, lambdas = ScriptedJobs({}), fake_handlers(warm=True)
    with mock_aws(config=MOTO_CONFIG), moto_shims(lambdas=lambdas, batch=jobs):
        harness = Harness(deploy_locally(assembly), lambdas, jobs)
        done = harness.wait(harness.start(workflow_input(compile_stage=True)))
        assert done["status"] == "SUCCEEDED", done
        assert sorted(jobs.runs()) == ["gpu", "trn2"]
        assert flat(json.loads(done["output"])["runs"])[1]["status"] == "SKIPPED"


@pytest.mark.parametrize("harness", [{"trn2-compile": 1}], indirect=True)
def test_a_failed_compile_falls_back_at_once(harness: Harness) -> None:
    """The compile job fails: no training job is submitted on Trainium2, the GPU fallback runs, and the compile
    run is recorded FAILED for settlement (the training run never started)."""
    done = harness.wait(harness.start(workflow_input(compile_stage=True)))
    assert done["status"] == "SUCCEEDED", done
    runs = flat(json.loads(done["output"])["runs"])
    assert [(r["run"], r["status"], r["fallback"]) for r in runs] == [
        ("gpu", "SUCCEEDED", False), ("trn2-compile", "FAILED", False), ("gpu-fallback", "SUCCEEDED", True)]
    assert sorted(harness.jobs.runs()) == ["gpu", "gpu-fallback", "trn2-compile"]


def test_multi_node_compile_stage_uses_the_training_definition(prod_assembly: Assembly) -> None:
    """A multi-node trial's compile job runs its training job's multi-node definition (same node count, the same
    graphs) with the run's settings as job parameters, ``run`` naming the compile stage."""
    jobs = ScriptedJobs({})
    lambdas = fake_handlers()
    with mock_aws(config=MOTO_CONFIG), moto_shims(lambdas=lambdas, batch=jobs):
        harness = Harness(deploy_locally(prod_assembly, region="us-east-2"), lambdas, jobs)
        payload = workflow_input(["trn2"])
        target = {"queue": batch_name("prod", "trn2", "trn2.48xlarge"),
                  "definition": batch_name("prod", "trn2", "trn2.48xlarge", "multi-2"), "nodes": 2}
        payload["jobs"] = {"trn2": target,
                           "compile": {**target, "queue": batch_name("prod", "trn2", "trn2.48xlarge", "compile")}}
        done = harness.wait(harness.start(payload))
        assert done["status"] == "SUCCEEDED", done
        first, second = jobs.submitted
        assert first.parameters["run"] == "trn2-compile" and second.parameters["run"] == "trn2"
        assert first.parameters["run_dir"] == RUN_DIRS["trn2-compile"]
        assert first.job_definition.name == second.job_definition.name
        assert first.job_queue.arn.endswith("-compile")


# ---- scaling runs: the Map state over the input's ``scaling`` list ---------------------------------------------


def test_a_scaling_run_is_submitted_beside_the_main_runs_and_settled_with_them(harness: Harness) -> None:
    """An Inline Map over ``$.scaling`` (https://docs.aws.amazon.com/step-functions/latest/dg/state-map-inline.html)
    submits each scaling run as its own Batch job: named ``<trial>-<run>``, tagged with its run, on its placement's
    queue and definition, with its own run name, track and run directory in the job's environment. Its outcome is
    the scaling branch's list, which CloseTrialCosts receives among ``runs`` like the main runs' outcomes."""
    payload = workflow_input(scaling=["gpu-n1"])
    done = harness.wait(harness.start(payload))
    assert done["status"] == "SUCCEEDED", done
    output = json.loads(done["output"])
    job = harness.wait_for_job("gpu-n1")
    assert output["runs"][2] == [{"run": "gpu-n1", "status": "SUCCEEDED", "job_id": job.job_id, "fallback": False}]
    assert sorted(harness.jobs.runs()) == ["gpu", "gpu-n1", "trn2"]
    env = job_environment(job)
    assert env["DUALTRACK_RUN"] == "gpu-n1" and env["DUALTRACK_TRACK"] == "gpu"
    assert env["DUALTRACK_RUN_DIR"] == f"s3://artifacts/trials/{TRIAL}/gpu-n1"
    assert env["DUALTRACK_TRIAL_ID"] == TRIAL and env["DUALTRACK_SPEC_URI"] == payload["spec_uri"]
    # No secret in a job's settings: it proves who it is with its own task's credentials.
    assert not [name for name in env if "TOKEN" in name]
    assert job.job_name == f"{TRIAL}-gpu-n1" and job.timeout == {"attemptDurationSeconds": 3600}
    assert job.job_queue.arn.endswith("/" + JOBS["gpu"]["queue"])
    assert job.job_definition.name == JOBS["gpu"]["definition"]
    tags = boto3.client("batch", region_name="us-east-1").list_tags_for_resource(resourceArn=job.arn)["tags"]
    assert tags == {"dualtrack:trial": TRIAL, "dualtrack:run": "gpu-n1"}
    (closed,) = harness.calls("close_trial_costs")
    assert closed["runs"] == output["runs"]
    assert [r["run"] for r in flat(closed["runs"])] == ["gpu", "trn2-compile", "trn2", "gpu-n1"]


def test_a_trial_without_scaling_runs_maps_over_nothing(harness: Harness) -> None:
    """An empty ``scaling`` list runs no iteration and the branch's output is an empty list; no extra job."""
    done = harness.wait(harness.start(workflow_input(["gpu"])))
    assert done["status"] == "SUCCEEDED", done
    assert json.loads(done["output"])["runs"][2] == []
    assert harness.jobs.runs() == ["gpu"]


@STOPPED_THREAD_NOISE
def test_an_input_without_a_scaling_list_fails_the_execution(harness: Harness) -> None:
    """Why the API always sends ``scaling`` (``ExecutionInput.payload``), even empty: a Map state's ItemsPath must
    evaluate to a JSON array ("ItemsPath (Map, JSONPath only)",
    https://docs.aws.amazon.com/step-functions/latest/dg/input-output-itemspath.html); a path the input lacks is a
    ``States.Runtime`` error, which fails the execution (no ``States.ALL`` catcher catches it:
    https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html)."""
    payload = workflow_input(["gpu"])
    del payload["scaling"]
    done = harness.wait(harness.start(payload))
    assert done["status"] == "FAILED", done
    assert done.get("error") == "States.Runtime"


@pytest.mark.parametrize("harness", [{"gpu-n1": 1}], indirect=True)
def test_a_failed_scaling_run_is_reported_failed_and_the_trial_still_settles(harness: Harness) -> None:
    """The scaling job's failure (Batch reports the job FAILED; ``.sync`` raises ``States.TaskFailed``) is caught
    in the iteration and recorded as the run's outcome; the main runs and the settle steps go on."""
    done = harness.wait(harness.start(workflow_input(["gpu"], scaling=["gpu-n1"])))
    assert done["status"] == "SUCCEEDED", done
    runs = json.loads(done["output"])["runs"]
    assert runs[0] == {"run": "gpu", "status": "SUCCEEDED", "job_id": runs[0]["job_id"], "fallback": False}
    assert runs[2] == [{"run": "gpu-n1", "status": "FAILED", "job_id": "", "fallback": False}]
    assert sorted(harness.jobs.runs()) == ["gpu", "gpu-n1"]
    assert harness.calls("close_trial_costs")[0]["runs"] == runs
    assert harness.calls("set_trial_status")[0]["status"] == "SUCCEEDED"


def test_scaling_runs_placed_by_the_api_run_on_the_definition_for_their_node_count(
        prod_assembly: Assembly, example_trial: dict[str, Any]) -> None:
    """The whole path from the trial to the jobs: a Trainium2 track with ``nodes: [1, 2, 4]`` is placed by
    ``job_targets`` (main run on the 4-node definition, ``trn2-n2`` on the 2-node one, ``trn2-n1`` single-node)
    and given to the workflow by ``execution_input``; each scaling item's Choice submits a multi-node job (its
    settings as job parameters, which Batch substitutes into the command:
    https://docs.aws.amazon.com/batch/latest/userguide/job_definition_parameters.html#parameters) when its
    placement carries ``nodes``, else a single-node one (environment overrides)."""
    doc = example_trial
    del doc["tracks"]["gpu"]
    doc["failure_recovery"] = "none"
    doc["tracks"]["trn2"]["nodes"] = [1, 2, 4]
    doc["triage_override"] = {"route": "trn2_trial", "reason": "scaling runs of a Trainium2 pilot"}
    spec = TrialSpec.model_validate(doc)
    targets = {"trn2": {"trn2.48xlarge": JobTarget(
        queue=batch_name("prod", "trn2", "trn2.48xlarge"),
        single_node=batch_name("prod", "trn2", "trn2.48xlarge", "single"),
        multi_node={n: batch_name("prod", "trn2", "trn2.48xlarge", f"multi-{n}") for n in (2, 4)})}}
    payload = execution_input(spec, fakes.InMemoryObjects(), attempt_timeout_s=3600,
                              jobs=job_targets(spec, targets)).payload()
    jobs = ScriptedJobs({})
    lambdas = fake_handlers(warm=True)
    with mock_aws(config=MOTO_CONFIG), moto_shims(lambdas=lambdas, batch=jobs):
        harness = Harness(deploy_locally(prod_assembly, region="us-east-2"), lambdas, jobs)
        done = harness.wait(harness.start(payload, name=spec.trial_id))
        assert done["status"] == "SUCCEEDED", done
        runs = json.loads(done["output"])["runs"]
        assert [(r["run"], r["status"]) for r in runs[2]] == [("trn2-n1", "SUCCEEDED"), ("trn2-n2", "SUCCEEDED")]
        by_run = {job.parameters.get("run") or job_environment(job)["DUALTRACK_RUN"]: job for job in jobs.submitted}
        assert sorted(by_run) == ["trn2", "trn2-n1", "trn2-n2"]
        assert by_run["trn2"].job_definition.name.endswith("-multi-4")
        n2, n1 = by_run["trn2-n2"], by_run["trn2-n1"]
        assert n2.job_definition.type == "multinode" and n2.job_definition.name.endswith("-multi-2")
        assert (n2.job_definition.node_properties or {}).get("numNodes") == 2
        assert n2.job_name == f"{spec.trial_id}-trn2-n2"
        assert {k: n2.parameters[k] for k in ("spec_uri", "run", "trial_id", "run_dir")} == {
            "spec_uri": payload["spec_uri"], "run": "trn2-n2", "trial_id": spec.trial_id,
            "run_dir": f"s3://artifacts/trials/{spec.trial_id}/trn2-n2"}
        assert "run_token" not in n2.parameters
        assert n1.job_definition.type == "container" and n1.job_definition.name.endswith("-single")
        env = job_environment(n1)
        assert (env["DUALTRACK_RUN"], env["DUALTRACK_TRACK"]) == ("trn2-n1", "trn2")
        assert env["DUALTRACK_RUN_DIR"] == f"s3://artifacts/trials/{spec.trial_id}/trn2-n1"
