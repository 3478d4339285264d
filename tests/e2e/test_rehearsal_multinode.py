"""End to end: a trial whose GPU track declares 2 nodes runs as a Batch multi-node parallel job.

The local stage pins its tracks to one zone, so it has a multi-node job definition per node count; the workflow
submits the 2-node definition with the run's settings as job parameters, the local Batch starts both nodes, and
the ranks form one process group over gloo on loopback, training the layout's 16 data-parallel ranks. The example's
planned fault is on node 1 only, after step 6: Batch takes the job's status from its main node, whose process finds
its peer gone at the next collective and exits with the resumable code (the step-4 checkpoint exists), so Batch
retries the 2-node job, which resumes from that checkpoint: two attempts and a resume.

The example's GPU track declares ``"nodes": [1, 2]``: beside the 2-node main run, the workflow's scaling branch (a Map
state) submits one scaling run, ``gpu-n1``, on the single-node job definition. It trains the same trial on one node,
with no fault, is costed like any run, and the report's scaling section compares the two counts.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from dualtrack.local.progress import Progress
from dualtrack.local.rehearsal import Rehearsal, RehearsalOptions
from lambdas.domain.trial.rules import parse_trial

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]


def test_a_two_node_gpu_run_trains_on_both_nodes_resumes_is_billed_for_both_and_scales_against_one_node(
        tmp_path: Path) -> None:
    doc = json.loads((ROOT / "examples" / "trial-rehearsal-2node.json").read_text())
    doc.update(max_steps=8)
    doc["tracks"].pop("trn2")
    for key in ("train_uri", "validation_uri"):
        doc["data"][key] = str(ROOT / doc["data"][key])
    spec = parse_trial(doc, allow_local_paths=True)
    stream = io.StringIO()
    result = Rehearsal(spec, RehearsalOptions(out=tmp_path, fresh=True, timeout_s=800,
                                                         state_dir=tmp_path / "plane-state"),
                       progress=Progress(stream, max_steps=spec.max_steps)).run()
    printed = stream.getvalue()
    assert result.succeeded, printed[-3000:]
    assert "-> SubmitGpuMultiNodeJob" in printed
    gpu = result.report["tracks"]["gpu"] if result.report else {}
    assert gpu["status"] == "succeeded" and gpu["steps_completed"] == 8, printed[-3000:]
    assert "fault injected after step 6 on node 1, seen by the main node as a lost peer" in printed
    assert gpu["attempts"] == 2
    resume = gpu["resume"]
    assert (resume["injected_at_step"], resume["resumed_from_step"], resume["rerun_steps"]) == (6, 4, 2), resume
    assert resume["global_step_continuous"] is True and resume["loss_continuous"] is True
    checks = {c["check"]: c["status"] for c in result.report["acceptance"]} if result.report else {}
    assert checks["checkpoints load"] == checks["failure recovery as declared (resume_same_track)"] == "pass", checks
    assert gpu["parallel"]["description"] == (
        "2 nodes x 8 devices, world size 2 (one process per node on the CPU stand-in, simulating 16 data-parallel "
        "ranks), process group gloo (NCCL on the GPU)")
    for attempt in (1, 2):
        logs = sorted(p.name for p in (result.out / "logs").glob(f"*-gpu.attempt-{attempt}.node-*.log"))
        assert logs == [f"{result.trial_id}-gpu.attempt-{attempt}.node-{node}.log" for node in (0, 1)]
    ledger = json.loads((result.out / "ledger.json").read_text())
    nodes = {json.loads(e["body"])["nodes"] if isinstance(e["body"], str) else e["body"]["nodes"]
             for e in ledger if e["run_key"].endswith("#gpu") and e["kind"] == "transition"}
    assert nodes == {2}  # the ledger prices both nodes the job held
    _assert_the_one_node_scaling_run(result.trial_id, result.out, result.report or {}, ledger, printed)
    # The scaling Map's and the multi-node job's IsPresent probes leave nothing in the plane's own log.
    plane_log = (result.out / "plane.log").read_text()
    assert not [line for line in plane_log.splitlines() if " ERROR " in line or " WARNING " in line], plane_log
    # One credentials call per node of each attempt, shared with the node's processes (and the spec's read): the
    # 2-node main run's two attempts make 4, the 1-node scaling run's one attempt 1.
    issued = [line for line in plane_log.splitlines() if line.endswith(": job credentials issued")]
    assert len(issued) == 2 * 2 + 1, issued


def _assert_the_one_node_scaling_run(trial_id: str, out: Path, report: dict[str, Any], ledger: list[dict[str, Any]],
                                     printed: str) -> None:
    """``gpu-n1``: one single-node job (one log per attempt, no node suffix), one attempt (the fault is the main
    run's), trained to the end, priced at one node, and set against the 2-node run in the report's scaling section."""
    assert "-> SubmitScalingJob" in printed, printed[-3000:]
    logs = sorted(p.name for p in (out / "logs").glob("*-gpu-n1.*log"))
    assert logs == [f"{trial_id}-gpu-n1.attempt-1.log"], logs
    entries = [e for e in ledger if e["run_key"] == f"{trial_id}#gpu-n1"]
    facts = [(e["kind"], json.loads(e["body"]) if isinstance(e["body"], str) else e["body"])
             for e in entries if e.get("body") is not None]
    assert {body["nodes"] for kind, body in facts if kind == "transition"} == {1}
    summaries = [body for kind, body in facts if kind == "summary"]
    assert [(s["attempt"], s["global_step"]) for s in summaries] == [(1, 8)], summaries
    assert any(e["entry_key"] == "cost" for e in entries), [e["entry_key"] for e in entries]
    assert "gpu-n1" in report["cost"]["by_run"], sorted(report["cost"]["by_run"])
    # The report's scaling section (lambdas.domain.report.model.ScalingView): one gpu view, points at 1 and 2 nodes.
    (view,) = report.get("scaling") or [None]
    assert view is not None, sorted(report)
    assert (view["track"], view["instance_type"], view["base_nodes"]) == ("gpu", "p5.48xlarge", 1)
    points = {p["nodes"]: p for p in view["points"]}
    assert sorted(points) == [1, 2] and (points[1]["run"], points[2]["run"]) == ("gpu-n1", "gpu")
    assert points[1]["world_size"] < points[2]["world_size"]
    two = points[2]
    assert two["speedup"] is not None and two["efficiency"] == pytest.approx(two["speedup"] / 2, rel=1e-3)
    assert two["cost_per_step_ratio"] is not None and points[1]["cost_per_step_usd"] is not None
    assert "pipeline evidence" in view["summary"].lower(), view["summary"]
