"""`dualtrack local run`: rehearse a trial end to end on this machine."""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

from dualtrack.commands._common import CommandError, load_trial, print_problems
from dualtrack.extras import EXIT_MISSING_EXTRA, extra_missing
from dualtrack.local.progress import Progress
from dualtrack.local.rehearsal import Rehearsal, RehearsalOptions, RehearsalResult
from dualtrack.output_option import add_json_option
from lambdas.domain.json_types import JsonObject
from lambdas.domain.trial.rules import Problem, s3_inputs
from lambdas.domain.trial.spec import TrialSpec

HELP = """\
Rehearse a trial on this machine before spending on capacity: the same state machine `cdk synth` produces runs on
moto (in-process AWS), the real Lambda handlers cost the runs from real-shaped Batch and S3 events, and each Batch
job runs the real trainer as a local subprocess with the job definition's command, environment and retry strategy.

The GPU track runs the trainer's cpu backend (cuda if a GPU is present); the Trainium2 track runs neuron if a
Neuron device exists, else the torch.compile stand-in, so compile time and compile-cache hits are real
measurements. Figures from a stand-in are labelled as such; costs are at the declared instance's rate and prove
the pipeline, not the bill. The local plane's state (the compile cache and its registry, as the deployed cache
bucket and table) lives in one place per machine, ~/.local/state/dualtrack/local-plane (DUALTRACK_STATE_DIR moves
it): a second trial, written to any --out, meets a warm cache; --fresh starts clean. When the trial's cache key
is cold, the workflow runs the warm-up compile stage first (trn2-compile: a compile-only job on the Trainium2
compile queue), so the training job starts warm and the report books the stage's time and cost as compile.

Each run writes its own directory, OUT/<UTC time>-<trial name>/ (OUT/latest names the newest; nothing earlier is
overwritten): report.json, report.md, report.html, ledger.json, execution-history.json, logs/. Compare two runs
with `dualtrack report OUT/latest --compare OUT/<an earlier run>`.
Ctrl-C stops the workflow and the jobs and leaves what was written readable.

The jobs live in the stage's synthesized VPC: a job may call an AWS service only through an endpoint its subnets
reach (or a route to the internet), and the nodes of a multi-node job meet only if their security groups allow it.
What the network refuses is printed (`network: ...`) and fails the rehearsal, as it would fail the job on AWS.

exit codes: 0 the trial's workflow succeeded, 1 it failed (the report says why) or the network refused a job
something, 2 invalid trial, 8 a valid trial this machine cannot rehearse (its model or data live in S3; the lines
say what to change, and examples/trial-rehearsal.json is one that runs), 9 the rehearsal extra is not installed
(pip install 'dualtrack[rehearsal]'), 130 interrupted

examples:
  dualtrack local run examples/trial-rehearsal.json
  dualtrack local run --fresh --out /tmp/r examples/trial-rehearsal.json
  dualtrack local run --json examples/trial-rehearsal.json | jq .headline
  DUALTRACK_FORCE_FAIL_TRN2=step dualtrack local run examples/trial-rehearsal.json   # exercise the GPU fallback
  dualtrack local run --fresh --fail-trn2 compile examples/trial-rehearsal.json   # a failed compile falls back
"""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("local", help="rehearse a trial on this machine", description=HELP,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="local_command", metavar="ACTION", required=True)
    run = actions.add_parser("run", help="run the whole control plane locally", description=HELP,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("trial", metavar="TRIAL.json", help="trial file (local data paths are accepted)")
    run.add_argument("--out", default="out/rehearsal", type=Path, help="output directory (default out/rehearsal)")
    run.add_argument("--fresh", action="store_true", help="forget the compile cache and registry of earlier runs")
    run.add_argument("--fail-trn2", choices=["compile", "step", "save"], default=None,
                     help="break the Trainium2 track at this point to exercise the GPU fallback (compile breaks "
                          "the warm-up compile stage when the cache is cold, else the training job's first step)")
    run.add_argument("--no-capacity", choices=["gpu", "trn2"], default=None, metavar="TRACK",
                     help="give this track's job queue no instances (gpu or trn2): its jobs stay RUNNABLE until "
                          "the queue's time-limit action cancels them (the wait is time-scaled)")
    run.add_argument("--quiet", action="store_true", help="only print the summary")
    add_json_option(run, help="for machines: no progress, one JSON object at the end (status, run directory, "
                              "outcome, files)")
    run.add_argument("--timeout", type=float, default=1800, help="give up after this many seconds (default 1800)")
    run.set_defaults(func=run_local)


EXIT_CANNOT_REHEARSE = 8


def json_result(result: RehearsalResult) -> JsonObject:
    """What ``--json`` prints. A report made on stand-ins carries ``stand_in: true`` and its rehearsal outcome,
    never a verdict: cheaper, not cheaper and inconclusive are answers about real devices."""
    report = result.report or {}
    comparison = report.get("comparison")
    comparison = comparison if isinstance(comparison, dict) else {}
    stand_in = bool(report.get("stand_in"))
    out: JsonObject = {"trial_id": result.trial_id, "status": result.status, "succeeded": result.succeeded,
                       "out": str(result.out), "wall_s": round(result.wall_s, 1), "stand_in": stand_in}
    if stand_in:
        out["rehearsal"] = comparison.get("rehearsal")
    else:
        out["verdict"] = comparison.get("verdict")
    out["headline"] = comparison.get("headline")
    out["network_denied"] = [{"job": j, "service": svc, "reason": why} for j, svc, why in result.network_denied]
    out["files"] = [str(p) for p in result.files]
    return out


def rehearsal_problems(spec: TrialSpec) -> list[Problem]:
    """Why this machine cannot rehearse a valid trial: the rehearsal runs without AWS, so every input must be a
    local file it uploads (data) or a model built in code (``model.config``); nothing under s3:// exists here."""
    fix = "point it at a local file, as examples/trial-rehearsal.json does (the rehearsal uploads it)"
    problems = [Problem(path, f"{uri}: the rehearsal runs without AWS, so nothing under s3:// exists here; {fix}")
                for path, uri in s3_inputs(spec) if path != "model.uri"]
    if spec.model.config is None:
        problems.insert(0, Problem("model", "the rehearsal builds its model in code from model.config and loads no "
                                            "weights; give model.config (a small Llama-class architecture) and "
                                            "drop model.uri, as examples/trial-rehearsal.json does"))
    return problems


def run_local(args: argparse.Namespace) -> int:
    if extra_missing("rehearsal", "dualtrack local run"):
        return EXIT_MISSING_EXTRA
    try:
        spec = load_trial(args.trial, local=True)
    except CommandError as exc:
        print_problems(args.trial, exc.problems, as_json=False)
        return 2
    cannot = rehearsal_problems(spec)
    if cannot:
        print_problems(args.trial, cannot, as_json=args.json)
        return EXIT_CANNOT_REHEARSE
    options = RehearsalOptions(out=args.out, fresh=args.fresh, fail_trn2=args.fail_trn2,
                               quiet=args.quiet or args.json, timeout_s=args.timeout, no_capacity=args.no_capacity)
    try:
        if args.json:
            result = Rehearsal(spec, options, progress=Progress(io.StringIO(), quiet=True)).run()
            print(json.dumps(json_result(result), indent=2))
            return 0 if result.succeeded else 1
        rehearsal = Rehearsal(spec, options)
        try:
            result = rehearsal.run()
        finally:
            rehearsal.progress.close()  # the terminal's cursor and bars, whatever happened
    except KeyboardInterrupt:
        print(f"\ninterrupted: what was written is under {args.out}", file=sys.stderr)
        return 130
    return 0 if result.succeeded else 1
