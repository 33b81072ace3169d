# The two commands of the README: `make demo` and `make test`. Each installs what it needs first.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup setup-test bench-deps demo follow test lint bench clean

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
## the landing zone LANDING (default landing/live; make demo's is landing/sample), and with DSN="host=... dbname=..." a capture from it
LANDING ?= landing/live
follow: setup
	@$(PY) -m python_jobs.follow --landing $(LANDING) $(if $(DSN),--dsn "$(DSN)")

## lint: sqlfluff (sparksql, jinja templater: no Spark needed) and ruff
lint: setup
	@$(VENV)/bin/sqlfluff lint $(wildcard models tests snapshots analyses) --processes 2
	@$(VENV)/bin/ruff check $(wildcard python_jobs testkit tests scripts benchmarks)
	@$(VENV)/bin/ruff format --check $(wildcard python_jobs testkit tests scripts benchmarks)

## test: lint, then the whole test suite (Spark, dbt, a real Postgres started by the tests); duckdb
## too, so the test of the benchmark's DuckDB peer runs instead of being skipped
test: setup-test lint bench-deps
	@$(VENV)/bin/pytest

## bench: throughput and incremental cost vs the peers (BENCHMARKS.md); CHANGES=10000000 for 10M
CHANGES ?= 1000000
bench: bench-deps
	@$(PY) -m benchmarks.run --changes $(CHANGES)

clean:
	rm -rf .spark target logs
