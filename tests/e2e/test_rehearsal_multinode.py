"""End to end: a trial whose GPU track declares 2 nodes runs as a Batch multi-node parallel job.

The local stage pins its tracks to one zone, so it has a multi-node job definition per node count; the workflow
submits the 2-node definition with the run's settings as job parameters, the local Batch starts both nodes, and
the ranks form one process group over gloo on loopback, training the layout's 16 data-parallel ranks. The example's
planned fault stops both nodes after step 6; Batch retries the 2-node job, which resumes from the step-4 checkpoint.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from dualtrack.local.progress import Progress
from dualtrack.local.rehearsal import Rehearsal, RehearsalOptions
from lambdas.domain.trial import parse_trial

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]


def test_a_two_node_gpu_run_trains_on_both_nodes_resumes_and_is_billed_for_both(tmp_path: Path) -> None:
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
    assert "fault injected after step 6" in printed
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
