"""``python -m trainer run|launch``: flags first, then the environment variables AWS Batch passes.

``run`` trains one rank in this process and exits with the trainer's exit code. ``launch`` starts this node's ranks
(``trainer.launch``) and exits with the code that reaches AWS Batch as the job's: one process on one node is exec'd
(the rank's own exit code and signals); several go through torchrun's elastic launch inside this process, which
forwards SIGTERM to the ranks and exits 143 after it, or maps the failed ranks' exit codes onto the job's (a planned
fault's 75 or 76 survives the peers' collateral failures; ``trainer.launch.job_exit_code``)."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import threading
from typing import TYPE_CHECKING

from lambdas.domain.vocabulary import is_run
from trainer import FAILURE_EXIT_CODE
from trainer.backends import BACKENDS, default_backend
from trainer.config import RUNS, UNSET, ConfigError, RunConfig

if TYPE_CHECKING:
    from trainer.credentials import NodeCredentials


def _run_name(value: str) -> str:
    """``--run``: a fixed run or a scaling run (``gpu-n1``), whose names no choices list can hold."""
    if not is_run(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a run: one of {', '.join(RUNS)} or a scaling run "
                                         "(<track>-n<nodes>, e.g. gpu-n1)")
    return value


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
        p.add_argument("--run", type=_run_name, help="run name, a scaling run's (gpu-n1) included (env "
                       "DUALTRACK_RUN); default from --run-dir")
        p.add_argument("--trial-id", help="the trial (env DUALTRACK_TRIAL_ID)")
        p.add_argument("--compile-cache-url", help=f"Neuron compile cache (env NEURON_COMPILE_CACHE_URL); {UNSET!r} "
                       "for none")
        p.add_argument("--quiet", action="store_true", help="no JSON progress lines on stdout")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
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
    from lambdas.domain.trial.layout import track_layout as layout_of
    from lambdas.domain.trial.rules import parse_trial
    from trainer import storage
    from trainer.launch import LaunchError, launch_plan

    spec = parse_trial(storage.read_text(cfg.spec_uri), allow_local_paths=True)
    layout = layout_of(spec, cfg.track, run=cfg.run)  # type: ignore[arg-type]  # a scaling run's own node count
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
    env = {**os.environ, **{k: v for k, v in settings.items() if v}, **plan.env, "DUALTRACK_BACKEND": backend}
    for name, value in settings.items():
        if not value:
            env.pop(name, None)  # "none" or unset here means unset for the ranks too
    sys.stdout.flush()
    sys.stderr.flush()
    if plan.torchrun_args is None:
        # One rank (or neuron_parallel_compile): replace this process, so Batch's SIGTERM and the exit code are its.
        # The credentials fetched to read the spec go with it: one fetch for the node.
        env.update(_seeded_credentials(env))
        os.execvpe(plan.argv[0], plan.argv, env)  # PATH lookup: neuron_parallel_compile
    shared = _node_credentials(env)
    # The elastic agent starts the ranks with this process's environment.
    for name in set(os.environ) - set(env):
        del os.environ[name]
    os.environ.update(env)
    try:
        return _elastic_launch(plan.torchrun_args)
    finally:
        if shared is not None:
            shared.close()


def _seeded_credentials(env: dict[str, str]) -> dict[str, str]:
    """The variables that hand this launcher's credentials (fetched to read the spec) to the rank it becomes."""
    from lambdas.domain.job_access import PER_NODE_ENV
    from trainer import storage
    from trainer.credentials import seed

    issued = storage.issued()
    return seed(issued) if env.get(PER_NODE_ENV) == "1" and issued else {}


def _node_credentials(env: dict[str, str]) -> NodeCredentials | None:
    """With ``DUALTRACK_CREDENTIALS_PER_NODE=1``, fetch this node's credentials once and share them with its ranks
    through a private file (``env`` gains its path), refreshed while the ranks run; None otherwise (each rank then
    asks for its own, as a single process does). A refusal ends the launch with the reason (CredentialsRefused)."""
    from lambdas.domain.job_access import CREDENTIALS_FILE_ENV, FUNCTION_ENV, PER_NODE_ENV
    from trainer.credentials import NodeCredentials, node_job_id

    function, job_id = env.get(FUNCTION_ENV), node_job_id(env)
    if env.get(PER_NODE_ENV) != "1" or not function or not job_id:
        return None
    from trainer import storage

    shared = NodeCredentials(function, job_id)
    env[CREDENTIALS_FILE_ENV] = str(shared.start(held=storage.issued()))  # the spec was read with them
    return shared


# The signals torchrun's elastic agent turns into SignalException while its ranks run (its default
# ``signals_to_handle``); after the launch this process only reports the ranks' code, so they are ignored then.
_AGENT_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")


def _elastic_launch(torchrun_args: list[str]) -> int:
    """What ``python -m torch.distributed.run <torchrun_args>`` does, in this process, returning the job's exit code
    instead of torchrun's (which is 1 for any failed rank).

    ``elastic_launch`` raises ``ChildFailedError`` when a rank fails; its ``failures`` hold every failed rank's exit
    code, the first observed one by ``get_first_failure``, and ``job_exit_code`` picks the job's. A SIGTERM or SIGINT
    to this process while the ranks run makes the agent send the same signal to every rank, wait for them (up to
    ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``, 30 s by default, then SIGKILL) and raise ``SignalException``; the job then
    exits 128 + the signal, 143 for Batch's SIGTERM."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch
    from torch.distributed.run import config_from_args, parse_args

    from trainer.launch import job_exit_code, signal_exit_code

    config, entrypoint, entry_args = config_from_args(parse_args(torchrun_args))
    try:
        try:
            elastic_launch(config, entrypoint)(*entry_args)
        finally:
            if threading.current_thread() is threading.main_thread():  # where the agent installed its handlers
                for name in _AGENT_SIGNALS:
                    signal.signal(getattr(signal, name), signal.SIG_IGN)  # the ranks are gone: report their code
    except ChildFailedError as exc:
        first, failure = exc.get_first_failure()
        codes = [failure.exitcode, *(f.exitcode for rank, f in exc.failures.items() if rank != first)]
        code = job_exit_code(codes)
        print(exc.format_msg(), file=sys.stderr)
        print(f"trainer: ranks exited {codes} (first failure first): the job exits {code}", file=sys.stderr)
        return code
    except SignalException as exc:
        print(f"trainer: got {exc.sigval.name}: the ranks were sent it and have exited", file=sys.stderr)
        return signal_exit_code(int(exc.sigval))
    return 0
