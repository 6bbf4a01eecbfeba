# The two commands of the README: `make demo` (the main job) and `make test` (the test suite).
# Each creates the virtualenv and installs what it needs on first use.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-cluster lint lock bench stack-up stack-down stack-status fetch system clean

# Python packages come from requirements.lock (every package pinned with its SHA-256 hashes, like
# the jars), installed by uv (tools/uv.txt, itself pinned by hash) with their bytecode compiled;
# the product and the dev tools are then installed editable without resolving again.
UV := $(BIN)/uv pip install --quiet --python $(BIN)/python
$(STAMP): pyproject.toml devtools/pyproject.toml requirements.lock tools/uv.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "eos_pipeline needs Python 3.11 or newer; set PYTHON=python3.11")'
	@command -v java >/dev/null || [ -x "$$JAVA_HOME/bin/java" ] || { echo "Java 17+ is needed (Kafka, ZooKeeper, Spark): install openjdk-17 or set JAVA_HOME" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --require-hashes -r tools/uv.txt
	$(UV) --require-hashes --compile-bytecode -r requirements.lock
	$(UV) --no-deps -e . -e ./devtools
	@touch $(STAMP)

fetch: $(STAMP)
	$(BIN)/eos-pipeline fetch

demo: fetch
	$(BIN)/eos-pipeline demo

# Debian packages some tests need (Chromium, PostgreSQL): installed when missing and allowed.
system:
	@bash tools/setup_system.sh

# Two pytest workers (TEST_WORKERS=0: one process): a test file stays on one worker, the
# MirrorMaker 2 tests share one worker, the longest groups start first (eos_pipeline_tests/conftest.py:
# its scheduler hook; --no-loadscope-reorder keeps that order).
TEST_WORKERS ?= 2

# The venv and jars, and the Debian packages, are set up side by side (network-bound, a minute each).
test:
	@$(MAKE) --no-print-directory -j2 fetch system
	$(BIN)/ruff check eos_pipeline devtools eos_pipeline_tests benchmarks tools
	$(BIN)/pytest $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder)

# The Hudi tests marked `spark_cluster` again, with the Connect server on a standalone master +
# one worker (a real distributed Spark, not local mode).
test-cluster: fetch
	EOS_TEST_SPARK_WORKERS=1 $(BIN)/pytest -m spark_cluster

# Benchmarks (benchmarks/README.md): starts its own stack on free ports, about 8 minutes.
bench: fetch
	$(BIN)/python -m benchmarks --spark --hudi --latency

# Re-resolve requirements.lock after a pin in pyproject.toml changed (the uv of tools/uv.txt, in a
# venv of its own under .cache/ so a broken lock cannot stop it; the lock is for CPython 3.11 on
# x86_64 Linux, the machines this project runs on).
lock:
	@[ -x .cache/uv/bin/uv ] || { $(PYTHON) -m venv .cache/uv && .cache/uv/bin/pip install --quiet --require-hashes -r tools/uv.txt; }
	.cache/uv/bin/uv pip compile pyproject.toml --extra dev --generate-hashes --python-version 3.11 \
		--python-platform x86_64-manylinux_2_28 --no-header -o requirements.lock

lint: $(STAMP)
	$(BIN)/ruff check eos_pipeline devtools eos_pipeline_tests benchmarks tools
	$(BIN)/ruff format --check eos_pipeline devtools eos_pipeline_tests benchmarks tools

stack-up: fetch
	$(BIN)/eos-pipeline stack up

stack-down: $(STAMP)
	$(BIN)/eos-pipeline stack down

stack-status: $(STAMP)
	$(BIN)/eos-pipeline stack status

clean: stack-down
	rm -rf .state .dagster_home
