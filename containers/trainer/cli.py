"""``python -m trainer run|launch``: flags first, then the environment variables AWS Batch passes."""

from __future__ import annotations

import argparse
import os
import socket
import sys

from lambdas.domain.job_access import TOKEN_ENV
from trainer import FAILURE_EXIT_CODE
from trainer.backends import BACKENDS, default_backend
from trainer.config import RUNS, UNSET, ConfigError, RunConfig


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m trainer", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("run", "train one attempt in this process (one rank)"),
                       ("launch", "start this node's ranks (torchrun on multi-device/multi-node), then wait")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--spec", help="frozen trial spec URI (env DUALTRACK_SPEC_URI)")
        p.add_argument("--track", choices=("gpu", "trn2"), help="env DUALTRACK_TRACK")
        p.add_argument("--run-dir", help="where checkpoints and summaries go (env DUALTRACK_RUN_DIR)")
        p.add_argument("--backend", choices=BACKENDS, help="env DUALTRACK_BACKEND; default from the track")
        p.add_argument("--resume-from", help="another run dir to resume from (env DUALTRACK_RESUME_FROM); "
                       f"{UNSET!r} for none")
        p.add_argument("--run", choices=RUNS, help="run name (env DUALTRACK_RUN); default from --run-dir")
        p.add_argument("--trial-id", help="the trial (env DUALTRACK_TRIAL_ID)")
        p.add_argument("--compile-cache-url", help=f"Neuron compile cache (env NEURON_COMPILE_CACHE_URL); {UNSET!r} "
                       "for none")
        p.add_argument("--run-token", help=f"this job's one-off token for its trial's credentials (env {TOKEN_ENV}; "
                       f"set by the workflow); {UNSET!r} for none")
        p.add_argument("--quiet", action="store_true", help="no JSON progress lines on stdout")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.run_token and args.run_token != UNSET:
        # A multi-node job gets its token as a job parameter (in its command); the ranks and the storage layer
        # read it from the environment, like a single-node job's.
        os.environ[TOKEN_ENV] = args.run_token
    try:
        cfg = RunConfig.resolve(spec=args.spec, track=args.track, run_dir=args.run_dir, backend=args.backend,
                                resume_from=args.resume_from, run=args.run, progress=not args.quiet,
                                trial_id=args.trial_id, compile_cache_url=args.compile_cache_url)
    except ConfigError as exc:
        print(f"trainer: {exc}", file=sys.stderr)
        return 2
    if args.command == "launch":
        return _launch(cfg, argv if argv is not None else sys.argv[1:])
    from trainer.runner import run

    return run(cfg)


def _launch(cfg: RunConfig, argv: list[str]) -> int:
    from lambdas.domain.trial import parse_trial
    from lambdas.domain.trial import track_layout as layout_of
    from trainer import storage
    from trainer.launch import LaunchError, launch_plan

    spec = parse_trial(storage.read_text(cfg.spec_uri), allow_local_paths=True)
    layout = layout_of(spec, cfg.track)  # type: ignore[arg-type]
    backend = cfg.backend or default_backend(cfg.track)
    # The ranks get this process's resolved settings as environment variables, never as flags: torchrun's own
    # parser would take a rank flag such as --run for an abbreviation of one of its options (--run-path).
    settings = {"DUALTRACK_SPEC_URI": cfg.spec_uri, "DUALTRACK_TRACK": cfg.track, "DUALTRACK_RUN_DIR": cfg.run_dir,
                "DUALTRACK_RESUME_FROM": cfg.resume_from, "DUALTRACK_RUN": cfg.run,
                "DUALTRACK_TRIAL_ID": cfg.trial_id, "NEURON_COMPILE_CACHE_URL": cfg.compile_cache_url}
    worker_args = ["--quiet"] if not cfg.progress else []
    try:
        address = socket.gethostbyname(socket.gethostname())
    except OSError:
        address = "127.0.0.1"
    try:
        plan = launch_plan(backend=backend, devices_per_node=layout.devices_per_node, worker_args=worker_args,
                           env=os.environ, local_address=address, expected_nodes=layout.nodes,
                           python=sys.executable, compile_only=cfg.compile_only)
    except LaunchError as exc:
        print(f"trainer: {exc}", file=sys.stderr)
        return FAILURE_EXIT_CODE
    # Replace this process, so Batch's SIGTERM (and the exit code) reach the ranks' launcher directly.
    sys.stdout.flush()
    sys.stderr.flush()
    env = {**os.environ, **{k: v for k, v in settings.items() if v}, **plan.env, "DUALTRACK_BACKEND": backend}
    for name, value in settings.items():
        if not value:
            env.pop(name, None)  # "none" or unset here means unset for the ranks too
    os.execvpe(plan.argv[0], plan.argv, env)  # PATH lookup: neuron_parallel_compile
