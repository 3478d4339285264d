# dualtrack — one entry point for set-up, the rehearsal, the checks and the benchmarks.
# `make demo` and `make check` each do their own set-up (make install) on a fresh machine.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
OUT    ?= out/rehearsal

.PHONY: help install demo check lint typecheck test test-fast bench check-xla check-gpu synth clean

help:
	@echo "make demo       rehearse examples/trial-rehearsal.json end to end on this machine (reports in $(OUT)/latest/)"
	@echo "make check      ruff + import layers + mypy + hadolint + the full test suite (what CI runs)"
	@echo "make bench      benchmarks: ratios measured side by side in one run"
	@echo "make check-xla  the retired PyTorch/XLA Trainium2 path on XLA:CPU in its own venv (.venv-xla, ~7 GB)"
	@echo "make check-gpu  the cuda backend's tests on this machine's NVIDIA GPU (skipped without one)"
	@echo "make synth      npx aws-cdk@2 synth (offline) into cdk.out/"

install: $(STAMP)

# torch==2.13.0 first: it is the CPU build on local disk; an unpinned torch would pull a multi-GB CUDA build.
$(STAMP): pyproject.toml package.json
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[train,dev]'
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

demo: install
	$(BIN)/dualtrack local run examples/trial-rehearsal.json --out $(OUT)

check: install lint typecheck test

lint: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/hadolint containers/gpu/Dockerfile containers/neuron/Dockerfile

typecheck: install
	$(BIN)/mypy

test: install
	$(BIN)/python -m pytest -q

test-fast: install
	$(BIN)/python -m pytest -q -m "not slow"

bench: install
	$(BIN)/python bench/run_all.py

check-gpu: install
	$(BIN)/python -m pytest -q -rs tests/trainer/test_cuda.py tests/trainer/test_fsdp.py
	$(BIN)/python bench/bench_trainer.py --backend cuda --repeats 6 --threads 0

check-xla: install
	bash scripts/xla-check.sh

synth: install
	npx --no-install cdk synth --quiet

clean:
	rm -rf cdk.out .cdk-cache out .pytest_cache .mypy_cache .ruff_cache
