# AwoooP — the two commands a newcomer needs are `make run` and `make test`.
# With AWOOOP_DATABASE_URL / AWOOOP_BROKER_URL set, the configured services are used and
# nothing embedded is started.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STATE := .awooop
# Load the env file written by `awooop dev up` into each recipe's environment.
WITH_ENV := set -a && . $(STATE)/env && set +a &&
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: help install browser services migrate run stop test test-integration test-e2e lint bench bench-retention chaos clean

help:
	@echo "make run    set everything up and start web, workers, beat and flower"
	@echo "make test   set everything up and run the whole test suite"
	@echo "make stop   stop the embedded PostgreSQL and Redis"
	@echo "make lint   ruff + mypy"
	@echo "make bench  admission and end-to-end benchmarks (writes docs/benchmarks.md)"
	@echo "make bench-retention  a month of history: latency, scrape, sweeps (docs/benchmarks.md)"
	@echo "make chaos  fault-injection scenarios on a stack of their own (writes docs/reliability.md)"

$(BIN)/awooop: pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Python 3.11 is required"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev,test,lint]'
	@touch $@

install: $(BIN)/awooop

# The ops console's browser test drives Debian's chromium through Playwright (no browser
# download). Installed here when missing and apt can be used (root); otherwise the test skips
# locally (and fails under CI=true) and this says how to install it.
CHROMIUM := /usr/bin/chromium
browser:
	@if [ -x $(CHROMIUM) ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian chromium for the console's browser test (apt-get install chromium)"; \
		apt-get update -q >/dev/null && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null || \
		echo "warning: apt-get install chromium failed; the browser test cannot run"; \
	else \
		echo "chromium is not installed: the console's browser test will be skipped."; \
		echo "Install it with: sudo apt-get install chromium"; \
	fi

services: install
	$(BIN)/awooop dev up

migrate: services
	$(WITH_ENV) $(BIN)/awooop migrate

run: migrate
	$(WITH_ENV) $(BIN)/awooop dev demo
	$(WITH_ENV) $(BIN)/awooop metrics reset
	$(WITH_ENV) $(BIN)/honcho start -f Procfile

stop:
	-@pkill -f 'honcho start -f Procfile' 2>/dev/null || true
	@if [ -x $(BIN)/awooop ]; then $(BIN)/awooop dev down; fi

test: services browser
	$(WITH_ENV) $(BIN)/pytest

test-integration: services browser
	$(WITH_ENV) $(BIN)/pytest tests/integration tests/e2e tests/migrations

lint: install
	$(BIN)/ruff check awooop tests bench migrations celeryconfig.py
	$(BIN)/ruff format --check awooop tests bench celeryconfig.py
	$(BIN)/mypy

bench: migrate
	$(WITH_ENV) $(BIN)/python -m bench.run

# 1,000,000 finished runs and 10,000,000 dedupe rows in a scratch database of its own on the
# configured server (created and dropped); about half an hour on 2 cores.
bench-retention: services
	$(WITH_ENV) $(BIN)/python -m bench.retention

# The fault-injection suite starts its own PostgreSQL, Redis and processes (nothing of
# .awooop/env is used) and stops them; tests/chaos is left out of the default pytest run.
# AWOOOP_CHAOS_SCALE=0.2 runs each scenario at a fifth of its size.
chaos: install
	$(BIN)/pytest tests/chaos -s -p no:cacheprovider $(CHAOS_ARGS)

clean: stop
	rm -rf $(VENV) $(STATE)
