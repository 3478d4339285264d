"""Running one trainer attempt in-process and reading what it left in the run dir."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from trainer import storage
from trainer.config import RunConfig
from trainer.runner import run

ROOT = Path(__file__).resolve().parents[2]


def attempt(spec: str, run_dir: str, *, track: str = "gpu", number: int = 1, backend: str = "cpu",
            resume_from: str | None = None, cache_url: str | None = None, run_name: str | None = None
            ) -> tuple[int, dict[str, Any]]:
    cfg = RunConfig(spec_uri=spec, track=track, run_dir=run_dir, backend=backend, resume_from=resume_from,
                    compile_cache_url=cache_url, trial_id="t-test", run=run_name or track, attempt=number,
                    progress=False)
    code = run(cfg)
    summary = json.loads(storage.read_text(storage.join(run_dir, f"attempt-{number}", "summary.json")))
    return code, summary


def losses(summary: dict[str, Any]) -> dict[int, float]:
    return {int(p["step"]): float(p["loss"]) for p in summary["loss"]["per_step"]}


def launched(spec: str, run_dir: Path, processes: int, attempt: int, track: str = "gpu",
             resume_from: Path | None = None, backend: str = "cpu") -> subprocess.CompletedProcess[str]:
    """One attempt as its own processes: ``processes`` > 1 under torchrun, on a CPU backend (``cpu`` by default; the
    Trainium2 stand-in ``compiled`` compiles the step with Inductor)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_BATCH_JOB_")}
    env.update({"PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "containers")]), "DUALTRACK_SPEC_URI": spec,
                "DUALTRACK_TRACK": track, "DUALTRACK_RUN_DIR": str(run_dir), "DUALTRACK_BACKEND": backend,
                "AWS_BATCH_JOB_ATTEMPT": str(attempt), "DUALTRACK_IMDS_ENDPOINT": "off", "OMP_NUM_THREADS": "1",
                **({"DUALTRACK_RESUME_FROM": str(resume_from)} if resume_from else {})})
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
                if processes > 1 else [sys.executable])
    return subprocess.run([*launcher, "-m", "trainer", "run", "--quiet"], env=env, capture_output=True, text=True,
                          timeout=240)


def summary_of(run_dir: Path, attempt: int) -> dict[str, Any]:
    return json.loads((run_dir / f"attempt-{attempt}" / "summary.json").read_text())


def run_error(run_dir: Path, attempt: int) -> str | None:
    path = run_dir / f"attempt-{attempt}" / "summary.json"
    return json.loads(path.read_text()).get("error") if path.exists() else "no summary"
