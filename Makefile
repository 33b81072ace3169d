# The two commands of the README: `make demo` and `make test`; `make check` is the quick inner loop.
# Each installs what it needs first.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup setup-test bench-deps demo follow check test lint bench bench-lag clean

setup:
	@bash scripts/setup.sh

setup-test:
	@bash scripts/setup.sh --postgres --chromium

## bench-deps: the benchmark's pinned duckdb (its DuckDB peer, and that peer's test)
bench-deps: setup
	@$(VENV)/bin/pip install -q --disable-pip-version-check -c constraints.txt -r benchmarks/requirements.txt

## demo: land sample WAL, build and test the models on the embedded default, print what was built
demo: setup
	@$(PY) -m python_jobs.demo

## follow: keep the embedded warehouse current, cycle after cycle (python -m python_jobs.follow):
## the landing zone LANDING (default landing/live; make demo's is landing/sample), and with DSN="host=... dbname=..." a capture
## from it (passed by environment, not on the follower's command line; keep the password in ~/.pgpass or PGPASSWORD)
LANDING ?= landing/live
follow: setup
	@$(if $(DSN),WAL_LAKE_CAPTURE_DSN="$(DSN)") $(PY) -m python_jobs.follow --landing $(LANDING)

## lint: sqlfluff (sparksql, jinja templater: no Spark needed) and ruff. macros/ by its topic
## folders (macros/<topic>/, with macros/.sqlfluff), so a macro file lands in one to be linted.
lint: setup
	@$(VENV)/bin/sqlfluff lint $(wildcard models tests analyses macros/*/) --processes 2
	@$(VENV)/bin/ruff check $(wildcard python_jobs testkit tests scripts benchmarks)
	@$(VENV)/bin/ruff format --check $(wildcard python_jobs testkit tests scripts benchmarks)

## check: lint, then the fast tier: every test but the slow end-to-end modules (tests/python/conftest.py's
## SLOW_MODULES) and those that need a live Postgres, the dbt unit tests included (docs/testing.md)
check: setup lint bench-deps
	@$(VENV)/bin/pytest -m "not slow and not postgres"

## test: lint, then the whole test suite (Spark, dbt, a real Postgres started by the tests); duckdb
## too, so the test of the benchmark's DuckDB peer runs instead of being skipped
test: setup-test lint bench-deps
	@$(VENV)/bin/pytest

## bench: throughput and incremental cost vs the peers (BENCHMARKS.md); CHANGES=10000000 for 10M
CHANGES ?= 1000000
bench: bench-deps
	@$(PY) -m benchmarks.run --changes $(CHANGES)

## bench-lag: follow mode's lag from a commit in Postgres to visible in consumer_records and the mirrors,
## at RATE changes/s for MINUTES (a throwaway Postgres and warehouse; benchmarks/lag.py)
RATE ?= 1000
MINUTES ?= 10
bench-lag:
	@bash scripts/setup.sh --postgres
	@$(PY) -m benchmarks.lag --rate $(RATE) --minutes $(MINUTES)

clean:
	rm -rf .spark target logs
