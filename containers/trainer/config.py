"""What one trainer process was asked to do: flags, with the environment variables Batch passes as fallbacks."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

from lambdas.domain.vocabulary import COMPILE_RUN, RUNS, is_run, track_of
from trainer.backends import BACKENDS

# A flag's value meaning "not given": multi-node jobs receive their settings as Batch job parameters substituted into
# the command (``Ref::name``), and an optional one needs a default in the job definition.
UNSET = "none"


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class RunConfig:
    spec_uri: str
    track: str
    run_dir: str
    backend: str | None = None
    resume_from: str | None = None
    compile_cache_url: str | None = None
    trial_id: str | None = None
    run: str | None = None
    attempt: int = 1
    progress: bool = True

    @property
    def compile_only(self) -> bool:
        """The warm-up compile stage: build and cache the training step's graphs over a few steps, keep nothing
        else (no checkpoints, no training results)."""
        return self.run == COMPILE_RUN

    @classmethod
    def resolve(cls, *, spec: str | None, track: str | None, run_dir: str | None, backend: str | None = None,
                resume_from: str | None = None, run: str | None = None, progress: bool = True,
                env: Mapping[str, str] | None = None, trial_id: str | None = None,
                compile_cache_url: str | None = None) -> RunConfig:
        env = os.environ if env is None else env
        spec = spec or env.get("DUALTRACK_SPEC_URI")
        track = track or env.get("DUALTRACK_TRACK")
        run_dir = run_dir or env.get("DUALTRACK_RUN_DIR")
        missing = [name for name, value in (("--spec / DUALTRACK_SPEC_URI", spec),
                                            ("--track / DUALTRACK_TRACK", track),
                                            ("--run-dir / DUALTRACK_RUN_DIR", run_dir)) if not value]
        if missing:
            raise ConfigError(f"missing {', '.join(missing)}")
        if track not in ("gpu", "trn2"):
            raise ConfigError(f"--track must be gpu or trn2, got {track!r}")
        backend = backend or env.get("DUALTRACK_BACKEND") or None
        if backend is not None and backend not in BACKENDS:
            raise ConfigError(f"--backend / DUALTRACK_BACKEND must be one of {', '.join(BACKENDS)}, got {backend!r}")
        try:
            attempt = int(env.get("AWS_BATCH_JOB_ATTEMPT", "1"))
        except ValueError:
            raise ConfigError("AWS_BATCH_JOB_ATTEMPT must be an integer") from None
        resume_from = _given(resume_from) or _given(env.get("DUALTRACK_RESUME_FROM"))
        run = run or env.get("DUALTRACK_RUN") or _run_name(str(run_dir), str(track), resume_from)
        if not is_run(run):
            raise ConfigError(f"--run / DUALTRACK_RUN must be one of {', '.join(RUNS)} or a scaling run "
                              f"(<track>-n<nodes>, e.g. gpu-n1), got {run!r}")
        if run == COMPILE_RUN and track != "trn2":
            raise ConfigError(f"--run {COMPILE_RUN} (the warm-up compile stage) runs on the trn2 track, not {track}")
        if track_of(run) != track:
            raise ConfigError(f"--run {run} trains on the {track_of(run)} track, not {track}")
        return cls(spec_uri=str(spec), track=str(track), run_dir=str(run_dir).rstrip("/"), backend=backend,
                   resume_from=resume_from.rstrip("/") if resume_from else None,
                   compile_cache_url=_given(compile_cache_url) or _given(env.get("NEURON_COMPILE_CACHE_URL")),
                   trial_id=trial_id or env.get("DUALTRACK_TRIAL_ID") or None, run=run, attempt=max(1, attempt),
                   progress=progress)


def _given(value: str | None) -> str | None:
    return None if value in (None, "", UNSET) else value


def _run_name(run_dir: str, track: str, resume_from: str | None) -> str:
    """The run a run directory (``trials/<trial>/<run>``) is for: its last segment when that names a run (a scaling
    run's ``gpu-n1`` included), else the track's own run (its fallback when resuming another run)."""
    name = PurePosixPath(run_dir.rstrip("/")).name
    if is_run(name):
        return name
    return "gpu-fallback" if track == "gpu" and resume_from else track
