#!/usr/bin/env bash
# The retired PyTorch/XLA path (the xla backend, containers/trainer/legacy_xla.py: device, mark_step, optimizer
# step, persistent compile cache, save/load) on XLA:CPU, for stages whose Trainium2 image pins a Neuron SDK up to
# 2.31 (torch-neuronx 2.x is built on torch-xla); only neuronx-cc and the Neuron runtime are absent. The side venv is large (~7 GB: the torch-xla wheel pulls a
# CUDA-enabled torch) and takes a few minutes to create the first time; later runs reuse it.
# Creating it needs about 12 GiB free at the peak (about 4 GiB of wheels are held while a 7 GiB venv fills); on a machine with less
# free disk the tier says so and skips, as the GPU tier does without a GPU, instead of failing half-installed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${XLA_VENV:-$ROOT/.venv-xla}"
PYTHON="${PYTHON:-python3}"
STAMP="$VENV/.installed-torch-xla-2.9.0"

cd "$ROOT"
NEED_GIB="${XLA_VENV_NEED_GIB:-12}"
if [[ ! -f "$STAMP" ]]; then
  FREE_GIB=$(df -Pk "$(dirname "$VENV")" | awk 'NR==2 {print int($4 / 1048576)}')
  if (( FREE_GIB < NEED_GIB )); then
    echo "SKIPPED: the XLA tier needs about ${NEED_GIB} GiB free to create $VENV; $(dirname "$VENV") has ${FREE_GIB} GiB."
    echo "Free some disk (or set XLA_VENV to a roomier place) and run 'make check-xla' again."
    rm -rf "$VENV"
    exit 0
  fi
  echo "creating $VENV (torch 2.9.0 + torch-xla 2.9.0; ${FREE_GIB} GiB free)"
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  # No pip cache: it would keep a second copy of the multi-GB wheels on disk.
  export PIP_NO_CACHE_DIR=1
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet "torch==2.9.0" "torch-xla==2.9.0"
  "$VENV/bin/python" -m pip install --quiet "transformers>=4.46,<6" "peft>=0.13,<1" "safetensors>=0.4" \
    "pydantic>=2.7,<3" "boto3>=1.35,<2" "pytest>=8" "pytest-timeout>=2.3" "moto[s3]==5.2.5"
  touch "$STAMP"
fi

export PJRT_DEVICE=CPU
export DUALTRACK_METRICS=off
exec "$VENV/bin/python" -m pytest -q -m xla -p no:cacheprovider tests/trainer "$@"
