# dualtrack — one entry point for set-up, the rehearsal, the checks and the benchmarks.
# `make demo` and `make check` each do their own set-up (make install) on a fresh machine.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
OUT    ?= out/rehearsal
LOCK   := requirements/lock.txt

.PHONY: help install demo check lint typecheck test test-fast test-unit test-trainer test-infra test-integration test-e2e bench \
        check-xla check-gpu synth clean lock

help:
	@echo "make demo       rehearse examples/trial-rehearsal.json end to end on this machine (reports in $(OUT)/latest/)"
	@echo "make check      ruff + import layers + mypy + hadolint + the full test suite (what CI runs)"
	@echo "make test-unit | test-trainer | test-infra | test-integration | test-e2e   one layer of the suite (docs/README.md)"
	@echo "make bench      benchmarks: ratios measured side by side in one run"
	@echo "make check-xla  the retired PyTorch/XLA Trainium2 path on XLA:CPU in its own venv (.venv-xla, ~7 GB)"
	@echo "make check-gpu  the cuda backend's tests on this machine's NVIDIA GPU (skipped without one)"
	@echo "make synth      npx aws-cdk@2 synth (offline) into cdk.out/"
	@echo "make lock       re-resolve requirements/lock.txt from pyproject.toml (pip-tools); UPGRADE=1 moves every pin"

install: $(STAMP)

# torch==2.13.0 first: it is the CPU build on local disk; an unpinned torch would pull a multi-GB CUDA build.
# Then the lock (every extra and the test tools, pinned), then the project itself, which resolves nothing more.
$(STAMP): pyproject.toml $(LOCK) package.json
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -r $(LOCK)
	$(PY) -m pip install --quiet --no-deps -e .
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# Re-resolve $(LOCK) from pyproject.toml (every extra) and requirements/lock.in, with this machine's pip settings
# (its find-links hold the CPU torch), in a throwaway venv. Pins already in the lock are kept where they still fit;
# `make lock UPGRADE=1` moves every pin to the newest release allowed. Then `make install`.
lock:
	@set -e; tool=$$(mktemp -d); trap 'rm -rf "$$tool"' EXIT; \
	$(PYTHON) -m venv "$$tool"; \
	"$$tool/bin/python" -m pip install --quiet pip==26.3 pip-tools==7.7.0; \
	"$$tool/bin/pip-compile" --quiet --all-extras --strip-extras --no-emit-index-url --no-emit-find-links \
	  --unsafe-package dualtrack --unsafe-package pip --unsafe-package setuptools $(if $(UPGRADE),--upgrade) \
	  --output-file $(LOCK) pyproject.toml requirements/lock.in

demo: install
	$(BIN)/dualtrack local run examples/trial-rehearsal.json --out $(OUT)

check: install lint typecheck test

lint: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/hadolint containers/gpu/Dockerfile containers/neuron/Dockerfile

typecheck: install
	$(BIN)/mypy

# Every test, in two groups side by side (scripts/test-tiers.sh): the tiers that start subprocesses (trainer, e2e)
# beside the in-process ones, each group's 15 slowest tests listed, so a test that grows slow shows in CI's output.
test: install
	bash scripts/test-tiers.sh $(BIN)/python

# One layer each: unit (pure code, no AWS, no network, nothing that trains or synthesizes: the all-day tier),
# trainer (the trainer on CPU, multi-process with gloo), infra (synthesized templates, one synthesis per session),
# integration (handlers and adapters on moto, the CLI against the API, faults and bad input), e2e (the local
# rehearsal end to end).
test-unit: install
	$(BIN)/python -m pytest -q --durations=10 tests/unit

test-trainer: install
	$(BIN)/python -m pytest -q --durations=10 tests/trainer

test-infra: install
	$(BIN)/python -m pytest -q --durations=10 tests/stacks

test-integration: install
	$(BIN)/python -m pytest -q --durations=10 tests/integration tests/client tests/reliability tests/security

test-e2e: install
	$(BIN)/python -m pytest -q --durations=10 tests/e2e

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
