#!/usr/bin/env bash
# The whole suite as two groups side by side, each in its own pytest process: the tiers that start subprocesses
# (the trainer on CPU, the rehearsal end to end) beside the ones that run in process (unit, the synthesized stacks,
# moto integration, client, reliability, security). Each group's output is printed whole when both have ended, with
# its slowest tests; the run fails if either group fails. Usage: scripts/test-tiers.sh PYTHON [pytest args...]
set -uo pipefail
python="$1"; shift
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
"$python" -m pytest -q --durations=15 "$@" tests/trainer tests/e2e >"$logs/processes.log" 2>&1 &
heavy=$!
"$python" -m pytest -q --durations=15 "$@" tests/unit tests/stacks tests/integration tests/client tests/reliability \
  tests/security >"$logs/in-process.log" 2>&1 &
light=$!
wait "$light"; light_rc=$?
wait "$heavy"; heavy_rc=$?
for group in in-process processes; do
  echo "== tests, $group"
  cat "$logs/$group.log"
done
echo "== tests: in-process exit $light_rc, processes exit $heavy_rc"
[ "$light_rc" -eq 0 ] && [ "$heavy_rc" -eq 0 ]
