# Torus: `make up` runs the platform, `make test` runs the tests. See README.md.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

# Debian's own Python where there is one: the virtualenvs link to it, and the platform's
# unprivileged account and jobs' users must be able to run it (a Python under /root is not).
PYTHON ?= $(firstword $(wildcard /usr/bin/python3) python3)
VENV := .venv
BIN := $(VENV)/bin
export TORUS_VAR_DIR ?= $(CURDIR)/.var
# The database and Redis URLs (with generated passwords) come from .var/secrets/services.env,
# written by platform/services and read by config/settings.py.
# A per-checkout secret, made once and kept under .var/ (never committed; 0640 root:torus).
export TORUS_SECRET_KEY ?= $(shell mkdir -p .var && test -s .var/secret-key || \
	(umask 077 && $(PYTHON) -c 'import secrets; print(secrets.token_urlsafe(50))' > .var/secret-key); \
	cat .var/secret-key)
export DJANGO_SETTINGS_MODULE := config.settings
# TORUS_SCALE=N (2..9) runs N of each tier (scripts/portal) and Elasticsearch as a cluster of
# three nodes with a replica of every index (docs/scaling.md)
ifneq ($(filter-out 1,$(or $(TORUS_SCALE),1)),)
export TORUS_ES_NODES ?= 3
endif

.PHONY: help up down test test-lanes test-parallel test-serial test-quick lint bench services migrate static seed venv examples-venv engines ui ui-test prometheus \
	backup restore

help:
	@echo "make up     run the platform (services, migrations, demo data, web, worker, beat)"
	@echo "make test   lint and run the whole test suite against the real services"
	@echo "make test-quick  the unit and PostgreSQL tests only, in parallel (no cluster, no browser)"
	@echo "make test-lanes  the parallel lane, then the serial lane"
	@echo "make down   stop the platform and its services"
	@echo "make lint   ruff check, ruff format --check and the import contracts (lint-imports)"
	@echo "make bench  run the benchmarks beside their peers (results in bench/results/)"
	@echo "make backup            dump the platform's PostgreSQL database to .var/backups/ (docs/backup.md)"
	@echo "make restore FILE=...  restore such a dump into it (stop the portal first: scripts/portal stop)"

# python-ldap (for django-auth-ldap) builds from source: a compiler and the OpenLDAP and SASL
# headers; and Debian's venv module for the virtualenvs. Installed with apt-get when missing
# (as platform/services does).
BUILD_DEPS := gcc python3-dev python3-venv libldap2-dev libsasl2-dev

$(BIN)/.installed: pyproject.toml client/pyproject.toml
	bash -c 'source platform/services/lib.sh && torus_apt_install $(BUILD_DEPS)'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]' -e ./client
	touch $@

# A virtualenv made with another interpreter (an older checkout's) is made again.
define same-python
[ ! -e $(1)/bin/python3 ] || [ "$$(readlink -f $(1)/bin/python3)" = "$$(readlink -f $(PYTHON))" ] || \
	{ echo "remaking $(1) with $(PYTHON)"; rm -rf $(1); }
endef

venv:
	@$(call same-python,$(VENV))
	@$(MAKE) --no-print-directory $(BIN)/.installed

# Where jobs' files live (outside .var, which jobs cannot read): the per-tenant job tree and a
# shared read-only root; config/settings.py derives the same path from TORUS_VAR_DIR.
export TORUS_DATA_DIR ?= /var/lib/torus/$(shell printf '%s' '$(TORUS_VAR_DIR)' | sha256sum | cut -c1-12)
SHARED_ROOT := $(TORUS_DATA_DIR)/shared

# The researchers' side: the environment the example training jobs run in (PyTorch on CPU),
# and the examples themselves, in the shared read-only root every job may use. Kept apart
# from the platform's own virtualenv, as a job's environment would be.
TORCH_VENV := $(SHARED_ROOT)/envs/torch
$(TORCH_VENV)/.installed:
	install -d -m 755 $(SHARED_ROOT) $(SHARED_ROOT)/envs
	test -x $(TORCH_VENV)/bin/python || $(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(TORCH_VENV)/bin/python -m pip install --quiet 'torch==2.13.0'
	touch $@

examples-venv:
	@$(call same-python,$(TORCH_VENV))
	@$(MAKE) --no-print-directory $(TORCH_VENV)/.installed
	rm -rf $(SHARED_ROOT)/examples.new
	cp -r examples $(SHARED_ROOT)/examples.new
	chmod -R u=rwX,go=rX $(SHARED_ROOT)/examples.new
	rm -rf $(SHARED_ROOT)/examples
	mv $(SHARED_ROOT)/examples.new $(SHARED_ROOT)/examples

# The serving engine (docs/serving.md, The engine): llama.cpp's llama-server, built once from
# the llama-cpp-python sdist into ~/.cache/torus (scripts/build-llama-server: 10-30 minutes the
# first time, then a no-op), installed in the shared root jobs read with the tokenizer the tiny
# test model uses (examples/serving/make_tiny_llama.py), and the matching `gguf` package in
# the platform's virtualenv (that generator needs it).
ENGINES := $(SHARED_ROOT)/engines/llama.cpp
engines: venv
	@dir=$$(scripts/build-llama-server); \
	if ! cmp -s "$$dir/VERSION" $(ENGINES)/VERSION || [ ! -x $(ENGINES)/bin/llama-server ]; then \
		rm -rf $(ENGINES).new; \
		install -d -m 755 $(SHARED_ROOT) $(SHARED_ROOT)/engines $(ENGINES).new/bin $(ENGINES).new/models; \
		install -m 755 "$$dir/bin/llama-server" $(ENGINES).new/bin/; \
		install -m 644 "$$dir/models/ggml-vocab-llama-spm.gguf" $(ENGINES).new/models/; \
		install -m 644 "$$dir/VERSION" $(ENGINES).new/; \
		rm -rf $(ENGINES); mv $(ENGINES).new $(ENGINES); \
		echo "installed $$(cat $(ENGINES)/VERSION) in $(ENGINES)"; \
	fi; \
	want=$$(sed -n 's/^version = "\(.*\)"/\1/p' "$$dir/gguf-py/pyproject.toml"); \
	have=$$($(BIN)/python -c 'import importlib.metadata as m; print(m.version("gguf"))' 2>/dev/null || true); \
	[ "$$have" = "$$want" ] || $(BIN)/python -m pip install --quiet "$$dir/gguf-py"

services:
	platform/services/up
	scripts/web-proxy install

migrate: venv services static
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py cluster_register_local

static: venv ui
	$(BIN)/python manage.py collectstatic --noinput --verbosity 0

# The browser UI (frontend/, docs/ui.md): Node 20+ (frontend/scripts/node.sh installs it when
# missing), packages from package-lock.json, built again only when its sources change.
NODE := frontend/scripts/node.sh
UI_SOURCES := $(shell find frontend/src frontend/index.html frontend/vite.config.ts \
	frontend/tsconfig.json frontend/package.json -type f 2>/dev/null)
frontend/node_modules/.installed: frontend/package-lock.json
	$(NODE) npm ci --prefix frontend --no-audit --no-fund
	touch $@
frontend/dist/index.html: frontend/node_modules/.installed $(UI_SOURCES)
	$(NODE) npm run --prefix frontend build
ui: frontend/dist/index.html

# ESLint (no import cycle, no page importing App.tsx), vitest, and the API types checked against
# the schema; the browser tests (tests/e2e) need Debian's chromium (and CJK fonts for the Chinese
# pages), installed here when missing.
ui-test: venv frontend/node_modules/.installed
	bash -c 'source platform/services/lib.sh && torus_apt_install chromium fonts-noto-cjk'
	$(NODE) frontend/scripts/api-types.sh --check
	$(NODE) npm run --prefix frontend lint
	$(NODE) npm run --prefix frontend test

seed: migrate
	umask 077 && $(BIN)/python manage.py seed_demo --json > $(TORUS_VAR_DIR)/demo.json
	chmod 600 $(TORUS_VAR_DIR)/demo.json

# `make up`: the portal as soon as the core services run (every component but the S3 gateway
# and kubernetes); the slow builds, the S3 gateway (its keys are written first, for the
# portal), Kubernetes (then its cluster is registered) and the serving engine, go on in the
# background (scripts/builds: `torus clusters`, /readyz and the Clusters page say how far; log
# in .var/log/builds.log). `make test` and .ci/run still build and start everything.
UP_COMPONENTS := $(shell bash -c 'source platform/services/lib.sh && torus_components && echo "$${TORUS_COMPONENTS[*]}"')
BACKGROUND_COMPONENTS := $(filter s3 kubernetes,$(UP_COMPONENTS))
up: export TORUS_SERVICES := $(filter-out $(BACKGROUND_COMPONENTS),$(UP_COMPONENTS))
up:
	@# the services' installs and starts (mostly waiting on apt and the daemons) beside the
	@# virtualenv and the UI's build (CPU), then the rest in order
	$(MAKE) --no-print-directory -j2 services static
	$(MAKE) --no-print-directory -o services -o static seed  # those two are done: not again
	$(if $(filter s3,$(BACKGROUND_COMPONENTS)),platform/services/components/s3 env)
	scripts/builds --background $(BACKGROUND_COMPONENTS) engine
	scripts/portal start
	@echo
	@if [ "$${TORUS_SCALE:-1}" -gt 1 ]; then url=https://127.0.0.1:$${TORUS_TLS_PORT:-8443}/; \
	else url=http://127.0.0.1:$${TORUS_PORT:-8000}/; fi; \
	echo "Torus is running at $$url  (API docs: /api/docs/; TORUS_SCALE=$${TORUS_SCALE:-1})"
	@echo "Demo login: acme-owner / torus-demo-pass  (also acme-admin, acme-member, acme-viewer, globex-*)"
	@echo "Demo API tokens: $(TORUS_VAR_DIR)/demo.json   Logs: $(TORUS_VAR_DIR)/log/"
	@scripts/builds --status

down:
	scripts/portal stop
	platform/services/down

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-logo --no-cache  # the import contracts in pyproject.toml

# Tests in lanes (docs/ARCHITECTURE.md, Tests in lanes): the parallel lane on TEST_WORKERS
# pytest-xdist workers (each its own test database, Redis databases and names: tests/lanes.py),
# then the serial lane (tests that stop or kill a shared service). Tests use their own Redis
# databases (8-10, and 11-13, 3-5 for more workers) so they never touch a running platform's.
TEST_WORKERS ?= 3
PYTEST := TORUS_REDIS_DB_BASE=8 $(BIN)/python -m pytest
define lane
	@start=$$(date +%s); rc=0; $(PYTEST) $(2) $(PYTEST_ARGS) || rc=$$?; \
	echo "lane $(1): $$(( $$(date +%s) - start )) s of wall time (exit $$rc)"; \
	[ $$rc -eq 0 ] || [ $$rc -eq 5 ]
endef

# `make test`: lint and the UI's checks, then the parallel lane and the serial lane, each
# with its wall time (docs/ARCHITECTURE.md, Tests in lanes). Every test runs in one of them.
test: lint ui-test test-lanes

test-lanes: venv examples-venv engines services static prometheus
	@rc=0; $(MAKE) --no-print-directory test-parallel || rc=1; \
	$(MAKE) --no-print-directory test-serial || rc=1; exit $$rc

# Prometheus and promtool (Debian's package) for tests/core/test_prometheus.py, which starts a
# server of its own; the package's service is never started.
prometheus:
	bash -c 'source platform/services/lib.sh && torus_apt_install prometheus'

test-parallel:
	$(call lane,parallel,-n $(TEST_WORKERS) --dist loadgroup -m "not serial")

test-serial:
	$(call lane,serial,-m serial)

# No cluster, no browser: the unit and PostgreSQL tests, in parallel (a change to Python only).
test-quick: export TORUS_FUZZ := quick
test-quick: venv
	$(call lane,quick,-n $(TEST_WORKERS) --dist loadgroup --reuse-db -m "(unit or postgres) and not serial")

bench: venv services
	$(BIN)/python -m pip install --quiet -e '.[bench]'  # matplotlib: the benchmarks' plots
	mkdir -p bench/results
	$(BIN)/python bench/run_all.py

# The platform's PostgreSQL database (docs/backup.md): a pg_dump archive, and back from one.
backup:
	scripts/pg-backup backup $(if $(FILE),"$(FILE)")

restore:
	@[ -n "$(FILE)" ] || { echo "usage: make restore FILE=<dump> (stop the portal first: scripts/portal stop)" >&2; exit 1; }
	scripts/pg-backup restore "$(FILE)"
