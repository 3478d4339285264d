"""`dualtrack cache list|key|explain`: the compile-cache registry, a trial's cache key, and why two trials miss each
other's entries."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from dualtrack.client.cli_support import add_connection_arguments, describe, emit_json, open_api, remote_command
from dualtrack.client.display import cache_lines
from dualtrack.client.errors import EXIT_INVALID, EXIT_OK, ClientFailure
from dualtrack.commands._common import CommandError, load_trial
from dualtrack.output_option import add_json_option
from lambdas.domain.cache.compile_cache import cache_key, explain
from lambdas.domain.trial.spec import TrialSpec

HELP = describe(
    """\
List the Neuron compile-cache registry: one entry per cache key (model, compiler version, sequence length,
parallel layout, flags), with hits, misses, hit rate, first-compile seconds, compile seconds saved by hits, size and
last use; then totals per model and compiler version. A team member sees the entries its team's trials resolved or
used; a platform admin sees every entry.""",
    """\
  dualtrack cache list
  dualtrack cache list --model meta-llama-llama-3-1-8b --compiler-version 2.21.0
  dualtrack cache list --json | jq '.groups[] | {model, hit_rate}'""",
)
KEY_HELP = describe(
    """Print the compile-cache key of a trial's Trainium2 track and every component that goes into it: the model's
architecture (a hash of its config), method and LoRA shape, sequence length, micro-batch, parallel layout,
precision, compiler flags, LNC, instance family, and the Neuron SDK, neuronx-cc, torch-neuronx and runtime
versions. Without --image-env the versions stand in as the trial's declared SDK release; with it (a JSON object of
an image's versions, as the trainer's environment record writes them) they are the image's own.""",
    """  dualtrack cache key examples/trial-llama31-8b-lora.json
  dualtrack cache key trial.json --image-env image-env.json --json""",
)
EXPLAIN_HELP = describe(
    """Say which key components make two trials miss each other's cache entries, and classify the difference by the
source document's change classes: data or hyper-parameters (same graph, reuse), model structure or operators (new
graph, recompile), training flow (sequence length, batch shape, parallelism: recompile and re-verify memory
bounds), low-level extensions (custom kernels: not a migration), and the compiler environment.""",
    """  dualtrack cache explain trial-a.json trial-b.json
  dualtrack cache explain trial-a.json trial-b.json --json | jq .change_classes""",
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("cache", help="the Neuron compile-cache registry", description=HELP,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="cache_command", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="entries and hit rates", description=HELP,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    listing.add_argument("--model", help="only this model slug")
    listing.add_argument("--compiler-version", help="only this neuronx-cc version")
    add_connection_arguments(listing)
    listing.set_defaults(func=run_list)
    key = actions.add_parser("key", help="a trial's cache key and its components", description=KEY_HELP,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    key.add_argument("trial", metavar="TRIAL.json")
    key.add_argument("--image-env", metavar="FILE", help="JSON object of the image's versions (neuronx_cc, "
                                                         "torch_neuronx, neuron_runtime)")
    add_json_option(key, help="the key and components as JSON")
    key.set_defaults(func=run_key)
    explain = actions.add_parser("explain", help="why two trials miss each other's cache entries",
                                 description=EXPLAIN_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    explain.add_argument("trial_a", metavar="TRIAL_A.json")
    explain.add_argument("trial_b", metavar="TRIAL_B.json")
    add_json_option(explain, help="the differences and change classes as JSON")
    explain.set_defaults(func=run_explain)


def _trn2_trial(path: str) -> TrialSpec:
    try:
        spec = load_trial(path, local=True)
    except CommandError as exc:
        raise ClientFailure("; ".join(f"{path}: {p.path + ': ' if p.path else ''}{p.message}"
                                      for p in exc.problems), EXIT_INVALID) from None
    if spec.tracks.trn2 is None:
        raise ClientFailure(f"{path}: no tracks.trn2: only a Trainium2 track has a compile-cache key", EXIT_INVALID)
    return spec


def _image_env(path: str | None) -> dict[str, str] | None:
    if not path:
        return None
    try:
        loaded = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ClientFailure(f"--image-env {path}: not a readable JSON object ({exc})", EXIT_INVALID) from None
    if not isinstance(loaded, dict):
        raise ClientFailure(f"--image-env {path}: expected a JSON object of versions", EXIT_INVALID)
    return {str(k): str(v) for k, v in loaded.items() if v is not None}


@remote_command
def run_key(args: argparse.Namespace) -> int:
    found = cache_key(_trn2_trial(args.trial), _image_env(args.image_env))
    if args.json:
        emit_json(found.model_dump(mode="json"))
        return EXIT_OK
    print(f"key     {found.key}")
    print(f"prefix  {found.prefix}")
    width = max(len(name) for name in found.components)
    for name, value in found.components.items():
        print(f"  {name:<{width}}  {value}")
    return EXIT_OK


@remote_command
def run_explain(args: argparse.Namespace) -> int:
    result = explain(_trn2_trial(args.trial_a), _trn2_trial(args.trial_b))
    if args.json:
        emit_json(result.model_dump(mode="json"))
        return EXIT_OK
    print(result.summary)
    for d in result.differences:
        print(f"  {d.component}: {d.a!r} -> {d.b!r}  [{d.change_class}]")
    for line in result.meaning:
        print(f"  {line}")
    return EXIT_OK


@remote_command
def run_list(args: argparse.Namespace) -> int:
    body = open_api(args).compile_cache(model=args.model, compiler_version=args.compiler_version)
    if args.json:
        emit_json(body)
    else:
        print("\n".join(cache_lines(body)))
    return EXIT_OK
