"""The rehearsal's stage places a scaling run (``gpu-n1``) and its job runs as any other track's: the two-node example
trains its main gpu run at 2 nodes (the stage's 2-node job definition) and a 1-node scaling run on the single-node
definition; no fault the rehearsal forces reaches a scaling run."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from dualtrack.local.progress import Progress
from dualtrack.local.rehearsal import Rehearsal, RehearsalOptions
from dualtrack.local.staging import REHEARSAL_STAGE
from infra.config import stage_config
from lambdas.domain.trial.job_targets import JobTarget
from lambdas.domain.trial.rules import parse_trial
from lambdas.domain.trial.spec import TrialSpec
from lambdas.services.trial_submission import job_targets

ROOT = Path(__file__).resolve().parents[3]
TWO_NODE = ROOT / "examples" / "trial-rehearsal-2node.json"


def two_node_example() -> TrialSpec:
    return parse_trial(json.loads(TWO_NODE.read_text()), allow_local_paths=True)


def local_stage_targets() -> dict[str, dict[str, JobTarget]]:
    """The targets the local stage's compute stack creates (infra.constructs.job_definitions), by the stage's
    cdk.json settings: a single-node definition per instance type and a multi-node one per multi_node_counts entry."""
    stage = stage_config(json.loads((ROOT / "cdk.json").read_text())["context"], REHEARSAL_STAGE)
    targets: dict[str, dict[str, JobTarget]] = {}
    for track in ("gpu", "trn2"):
        family = getattr(stage, track)
        assert family is not None, f"the local stage offers no {track} capacity"
        targets[track] = {t: JobTarget(queue=f"{track}-{t}", single_node=f"{track}-{t}-single",
                                       multi_node={n: f"{track}-{t}-multi-{n}" for n in family.multi_node_counts})
                          for t in family.instance_types}
    return targets


def test_the_local_stage_places_the_main_run_at_two_nodes_and_the_scaling_run_at_one() -> None:
    jobs = job_targets(two_node_example(), local_stage_targets())
    assert (jobs["gpu"].definition, jobs["gpu"].nodes) == ("gpu-p5.48xlarge-multi-2", 2)
    # One node is a plain container job: the single-node definition, no node count (no SubmitScalingMultiNodeJob).
    assert (jobs["gpu-n1"].definition, jobs["gpu-n1"].nodes) == ("gpu-p5.48xlarge-single", None)
    assert jobs["gpu-n1"].queue == jobs["gpu"].queue


@pytest.mark.parametrize(("run", "track", "forced"), [
    ("trn2", "trn2", "step"), ("trn2-n1", "trn2", None), ("gpu-n1", "gpu", None), ("gpu", "gpu", None)])
def test_fail_trn2_breaks_the_main_trn2_run_only(tmp_path: Path, run: str, track: str, forced: str | None) -> None:
    rehearsal = Rehearsal(two_node_example(), RehearsalOptions(out=tmp_path, fail_trn2="step", quiet=True,
                                                                state_dir=tmp_path / "state"),
                          progress=Progress(io.StringIO(), quiet=True))
    env = rehearsal._job_env({"DUALTRACK_RUN": run, "DUALTRACK_TRACK": track})
    assert env.get("DUALTRACK_FORCE_FAIL") == forced
    assert env["DUALTRACK_BACKEND"] in (("cpu", "cuda") if track == "gpu" else ("compiled", "neuron"))
