# The one entry point for install, lint, type-check, test, bench and chaos.
# The README and .ci/run call these targets and nothing else.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# install-run: what running needs (pyproject's dependencies: the server, the CLI and
# the Spark jobs); install: that plus the development tools ('.[dev]').
RUN_STAMP := $(VENV)/.run-stamp
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: install install-run run test lint fmt spark-jars browser-deps bench bench-quick chaos chaos-quick deploy-check clean

install-run: $(RUN_STAMP)

$(RUN_STAMP): pyproject.toml
	@echo "==> $(VENV): creating the virtual environment"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	@echo "==> $(VENV): installing lakepubsub and what it needs to run (a few minutes the first time)"
	$(BIN)/python -m pip install -e .
	@java -version >/dev/null 2>&1 || echo "warning: no java on PATH; the Spark jobs need JDK 17"
	touch $(RUN_STAMP)

install: $(STAMP)

$(STAMP): $(RUN_STAMP)
	@echo "==> $(VENV): adding the development tools (pytest, ruff, mypy, schemathesis, …)"
	$(BIN)/python -m pip install -e '.[dev]'
	touch $(STAMP)

run: install-run
	$(BIN)/lakepubsub serve

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

fmt: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

test: lint spark-jars browser-deps
	$(BIN)/pytest -q $(PYTEST_ARGS)

# Headless Chromium and its driver for the console's browser tests (tests/console/):
# Debian's packages, installed with apt-get when missing (as root, or through sudo).
browser-deps:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	else echo "==> installing chromium and chromium-driver (apt-get)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium chromium-driver; fi

# delta-spark and hadoop-aws for Spark: fetched by Ivy once per machine, then
# named by file (docs/spark.md); a no-op when they are cached.
spark-jars: install
	$(BIN)/python -m lakepubsub.spark.fetch

# The side-by-side benchmark (lakepubsub over REST vs NATS JetStream) and the
# library-level one; bench-quick runs the CI form of every case `python -m bench
# quick` lists, reports in bench/results/tmp. bench/README.md documents them all.
bench: install
	$(BIN)/python -m bench
	$(BIN)/python -m bench core

bench-quick: install
	$(BIN)/python -m bench quick

# Fault injection: crash, storage faults, concurrency, fuzz (tests/chaos).
chaos: install
	$(BIN)/python -m tests.chaos

chaos-quick: install
	$(BIN)/python -m tests.chaos --quick

deploy-check:
	terraform/check.sh

clean:
	rm -rf $(VENV) .lake .pytest_cache .mypy_cache .ruff_cache
