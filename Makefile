# Keeper: the commands a new user needs. `make run` and `make test` do all the set-up.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-fast journeys bench bench-against chaos lint migrate shell docs docs-build clean-data local-model

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,langgraph,otel]'
	$(PY) -m pip install --quiet -e clients/python
	touch $(STAMP)

## Optional: torch (CPU) + sentence-transformers + a small local model (all-MiniLM-L6-v2), so the
## sentence-transformers embedder's tests run instead of skipping. Elsewhere, set TORCH to a CPU
## wheel or index, e.g. TORCH="torch --index-url https://download.pytorch.org/whl/cpu".
TORCH ?= torch==2.13.0
local-model: $(STAMP)
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet -e '.[dev,langgraph,local-model,otel]'

## Start embedded PostgreSQL + Redis (unless DATABASE_URL / REDIS_URL are set), migrate, and run web, worker and beat.
run: $(STAMP)
	$(PY) -m config.launcher run

## Test processes (pytest-xdist); each starts its own embedded PostgreSQL and Redis in a temporary folder.
TEST_WORKERS ?= 2

## The whole suite, slow crash suites included, on $(TEST_WORKERS) pytest-xdist processes, each with its
## own embedded PostgreSQL and Redis (config/pytest_plugin.py). Most of its time is spent waiting for
## worker processes and leases, so the slow part gains as much as the fast part.
test: $(STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

## The fast part only (no slow crash / many-run suites).
test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow" -n $(TEST_WORKERS) $(PYTEST_ARGS)

## The journeys alone: each role's whole job on the demo in a real browser (Debian's chromium), at
## laptop and phone width (make test runs them too).
journeys: $(STAMP)
	$(PY) -m pytest -m journeys -n $(TEST_WORKERS) $(PYTEST_ARGS)

## commit_step through the engine against the raw single-statement baseline.
bench: $(STAMP)
	$(PY) manage.py migrate --noinput -v 0
	$(PY) manage.py bench $(BENCH_ARGS)

## This tree's commit_step and run_e2e against another revision, from one run: both trees at once,
## taking turns round by round (REV=c9db2ea; BENCH_AGAINST_ARGS="--env KEEPER_SLICE_MS=1000").
bench-against: $(STAMP)
	$(PY) -m bench.against $(REV) $(BENCH_AGAINST_ARGS)

## ruff (lint and format), the import contracts of pyproject.toml (lint-imports), then mypy ([tool.mypy]).
## The Django plugin imports config.settings.test, which wants service URLs; nothing connects to them.
TYPECHECK_ENV := DATABASE_URL=postgresql://typecheck@localhost:1/typecheck REDIS_URL=redis://localhost:1/0
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(TYPECHECK_ENV) $(VENV)/bin/mypy

migrate: $(STAMP)
	$(PY) manage.py migrate --noinput

shell: $(STAMP)
	$(PY) manage.py shell

## The documentation site (mkdocs.yml, pages under docs/), served with live reload at http://127.0.0.1:8001/.
DOCS_ADDR ?= 127.0.0.1:8001
docs: $(STAMP)
	$(VENV)/bin/mkdocs serve --strict --dev-addr $(DOCS_ADDR)

## The site built once into site/, strictly: a broken link, a missing anchor or a page outside the nav fails.
docs-build: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --site-dir site

## Stop nothing, delete the embedded database and Redis data under .data/ (asks no questions).
clean-data:
	rm -rf .data
