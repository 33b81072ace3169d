#!/usr/bin/env bash
# Soak test: seeded random workloads on a throwaway Postgres, captured live (with a snapshot taken
# under load and a capture process killed mid-stream), checked against the Python oracle.
#   scripts/soak.sh --seeds 1-20 --transactions 400 [--keep --landing DIR] [--dsn CONNINFO]
# Options: python -m testkit.soak --help. Exit status 1 when any seed shows a mismatch.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m testkit.soak "$@"
