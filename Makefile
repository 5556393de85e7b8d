# Quick start: `make run` opens the app on the embedded default model; `make test` runs the tests.
# Both create .venv on first use and are fast and safe to re-run (installs are stamped).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# llama-cpp-python built for this CPU (no AMX path, flags in the key); see tuiagent/llama_build.py.
LLAMA_BUILD := $(BIN)/python -m tuiagent.llama_build

.PHONY: run test test-fast bench lint clean

run: $(VENV)/.stamp-run
	$(BIN)/tuiagent fetch
	$(BIN)/python -m tuiagent.smoke
	$(BIN)/tuiagent

# The suite in worker processes (pytest-xdist), two per CPU since many tests mostly wait (a kernel
# starting, a cell's time limit), and at most one per 3 GiB of memory (a worker may hold the default
# model). Each model a test loads decodes on one thread there, the tests that load one start first,
# and a free worker takes the next test (conftest.py). Measured in docs/benchmarks.md
# ("The test suite"). PYTEST_WORKERS=0: one process.
PYTEST_WORKERS ?= $(shell $(PYTHON) -c 'import os; gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 30; print(max(1, min(2 * len(os.sched_getaffinity(0)), gib // 3)))' 2>/dev/null || echo 2)
PYTEST_PARALLEL = $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist load --maxschedchunk 1)

# pytest rewrites each test module's asserts and caches the result in __pycache__, unless Python is
# told not to write bytecode (PYTHONDONTWRITEBYTECODE, which some machines set, this one included):
# then each worker process compiles all ~280 test modules again (6 CPU-seconds each). The suite lets
# it cache (docs/benchmarks.md, "The test suite").
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest

test: $(VENV)/.stamp-test
	$(MAKE) --no-print-directory lint
	$(BIN)/python -m tuiagent.smoke
	$(PYTEST) $(PYTEST_PARALLEL)

# The inner loop: the suite without the tests that load a real model (marked slow; gpu ones skip
# off a GPU anyway) and without the smoke check, which loads one too.
test-fast: $(VENV)/.stamp-test
	$(MAKE) --no-print-directory lint
	$(PYTEST) $(PYTEST_PARALLEL) -m "not slow and not gpu"

bench: $(VENV)/.stamp-test
	$(BIN)/python bench/bench_kernel.py
	$(BIN)/python bench/bench_loop.py
	$(BIN)/python bench/bench_llama.py

lint: $(VENV)/.stamp-test
	$(BIN)/lint-imports
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m mypy

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "tuiagent needs Python 3.11 or newer: run make PYTHON=python3.11")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# setuptools' editable install warns that folders named like a package in the working directory may
# shadow it on import; the project's own folders are the packages, so the notice is only noise on a
# first `make run` (issue 39). Only that warning is silenced.
EDITABLE := PYTHONWARNINGS="ignore:Editable installation" $(BIN)/pip install --quiet -e
# The build leaves tuiagent.egg-info in the repository root, where Python finds it before the installed
# metadata whenever it runs from here: an old one would hide entry points added since. Removed first.
STALE_METADATA := tuiagent.egg-info

$(VENV)/.stamp-run: pyproject.toml | $(BIN)/python
	$(LLAMA_BUILD) install
	rm -rf $(STALE_METADATA)
	$(EDITABLE) '.[llama]'
	touch $@

$(VENV)/.stamp-test: pyproject.toml | $(BIN)/python
	$(LLAMA_BUILD) install
	rm -rf $(STALE_METADATA)
	$(EDITABLE) '.[llama,test]'
	touch $@

clean:
	rm -rf $(VENV)
