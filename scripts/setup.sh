#!/usr/bin/env bash
# Installs everything wal_lake needs, idempotently: the virtual environment with pinned packages,
# Delta Lake's jars (from Maven Central, cached outside git), with --postgres, Postgres 15 and
# wal2json from Debian's packages, and with --chromium, Debian's chromium (renders the docs site in
# tests/python/test_docs.py). Safe to run again: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

want_postgres=0
want_chromium=0
for arg in "$@"; do
  case "$arg" in
    --postgres) want_postgres=1 ;;
    --chromium) want_chromium=1 ;;
    *) echo "setup.sh: unknown argument '$arg' (known: --postgres, --chromium)" >&2; exit 2 ;;
  esac
done

PYTHON=${PYTHON:-python3.11}
CACHE=${WAL_LAKE_CACHE:-$HOME/.cache/wal_lake}
DELTA_VERSION=4.4.0
SPARK_BINARY=4.2
# Hive's LLAP common classes, for the Thrift Server of scripts/cluster.sh only: pyspark ships Hive
# 2.3's hive-exec without them, and Hive's function registry, which a closing Thrift session can load,
# fails on a class it lacks (then every later load of it waits forever). Same version as hive-exec
# in pyspark's jars.
HIVE_VERSION=2.3.10
JARS=("io.delta:delta-spark_${SPARK_BINARY}_2.13:${DELTA_VERSION}" "io.delta:delta-storage:${DELTA_VERSION}"
  "org.apache.hive:hive-llap-common:${HIVE_VERSION}")

step() { printf '[setup] %s\n' "$*"; }

# 1. Python packages, pinned. The stamp holds the hash of the pin files, so a change reinstalls.
command -v "$PYTHON" >/dev/null || { echo "setup.sh: $PYTHON not found (Python 3.11 is required)" >&2; exit 1; }
stamp=.venv/.wal_lake-installed
want=$(cat requirements.txt constraints.txt | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  step "creating .venv and installing pinned packages (requirements.txt, constraints.txt)"
  [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip==23.2.1 >/dev/null
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt -c constraints.txt
  echo "$want" > "$stamp"
else
  step "python packages up to date"
fi

# 2. Delta Lake's jars and the Thrift Server's Hive LLAP jar, with Maven (its own ~/.m2 cache, then
# ours, outside git).
mkdir -p "$CACHE/jars"
for coord in "${JARS[@]}"; do
  IFS=: read -r _group artifact version <<<"$coord"
  jar="$CACHE/jars/${artifact}-${version}.jar"
  if [ -s "$jar" ]; then continue; fi
  command -v mvn >/dev/null || { echo "setup.sh: Maven (mvn) is needed to fetch $coord" >&2; exit 1; }
  step "fetching $coord from Maven Central"
  # Maven's output (colour resets even in batch mode) is shown only when the fetch fails.
  if ! out=$(mvn --batch-mode --quiet org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy \
    -Dartifact="$coord" -DoutputDirectory="$CACHE/jars" -Dmdep.overWriteIfNewer=true 2>&1); then
    printf '%s\n' "$out" >&2
    echo "setup.sh: could not fetch $coord with Maven (is Maven Central reachable?)" >&2
    exit 1
  fi
done
step "Delta and Hive LLAP jars in $CACHE/jars"

# 3. Postgres 15 with wal2json, for the end-to-end tests. A machine may come with an older 15.x
# than Debian's current one: once per machine (a stamp in the cache), refresh the package lists and
# bring postgresql-15 up to date along with wal2json; the test server asks the installed binaries
# which settings they know, so an older server that could not be upgraded still works.
if [ "$want_postgres" = 1 ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  pg_stamp="$CACHE/postgres-checked"
  installed() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || true; }
  if [ -f /usr/lib/postgresql/15/lib/wal2json.so ] && [ -x /usr/lib/postgresql/15/bin/initdb ] \
     && [ -f "$pg_stamp" ] && [ "$(cat "$pg_stamp")" = "$(installed postgresql-15)" ]; then
    step "postgres $(installed postgresql-15) and wal2json present (checked against Debian's current 15.x)"
  else
    step "refreshing Debian's package lists"
    $SUDO apt-get update -qq
    before=$(installed postgresql-15)
    candidate=$(apt-cache policy postgresql-15 | awk '/Candidate:/ {print $2}')
    step "installing postgresql-15 ${candidate:-?} (installed: ${before:-none}) and postgresql-15-wal2json"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql-15 postgresql-15-wal2json >/dev/null
    installed postgresql-15 > "$pg_stamp"
    step "postgres $(installed postgresql-15) and wal2json $(installed postgresql-15-wal2json) installed"
  fi
fi

# 4. Chromium, headless, to render the dbt documentation site in the tests.
if [ "$want_chromium" = 1 ]; then
  if [ -x /usr/bin/chromium ]; then
    step "chromium present"
  else
    step "installing chromium from Debian's packages"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
  fi
fi
step "done"
