#!/usr/bin/env bash
# The Neuron backend's XLA code path (device, mark_step, optimizer step, persistent compile cache, save/load)
# on XLA:CPU. torch-neuronx is built on torch-xla, so this exercises the code the Trn2 track runs; only
# neuronx-cc and the Neuron runtime are absent. The side venv is large (~7 GB: the torch-xla wheel pulls a
# CUDA-enabled torch) and takes a few minutes to create the first time; later runs reuse it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${XLA_VENV:-$ROOT/.venv-xla}"
PYTHON="${PYTHON:-python3}"
STAMP="$VENV/.installed-torch-xla-2.9.0"

cd "$ROOT"
if [[ ! -f "$STAMP" ]]; then
  echo "creating $VENV (torch 2.9.0 + torch-xla 2.9.0)"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet "torch==2.9.0" "torch-xla==2.9.0"
  "$VENV/bin/python" -m pip install --quiet "transformers>=4.46,<6" "peft>=0.13,<1" "safetensors>=0.4" \
    "pydantic>=2.7,<3" "boto3>=1.35,<2" "pytest>=8" "pytest-timeout>=2.3" "moto[s3]==5.2.5"
  touch "$STAMP"
fi

export PJRT_DEVICE=CPU
export DUALTRACK_METRICS=off
exec "$VENV/bin/python" -m pytest -q -m xla -p no:cacheprovider tests/trainer "$@"
