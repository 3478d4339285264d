"""Running one trainer attempt in-process and reading what it left in the run dir."""

from __future__ import annotations

import json
from typing import Any

from trainer import storage
from trainer.config import RunConfig
from trainer.runner import run


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
