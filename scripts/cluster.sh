#!/usr/bin/env bash
# A real Spark cluster on loopback, from the pyspark distribution in .venv: a standalone master, one
# worker and the Spark Thrift Server (Delta configured on the server side), for the `cluster` target.
#
#   scripts/cluster.sh start     start all three (idempotent), wait until the Thrift Server answers
#   scripts/cluster.sh ingest -- --landing DIR   run the ingestion job on the cluster, then register
#                                the raw tables with the Thrift Server's metastore
#   scripts/cluster.sh env       print the exports that point dbt and the ingestion job at it
#   scripts/cluster.sh status    what is running
#   scripts/cluster.sh stop      stop all three (TERM, then KILL after 20 s)
#
# State (pid files, logs, warehouse, metastores) lives in $WAL_LAKE_CLUSTER_DIR (default .cluster/).
# Ports: $WAL_LAKE_MASTER_PORT (7077), $WAL_LAKE_THRIFT_PORT (10000), web UIs on
# $WAL_LAKE_MASTER_UI_PORT (8090) and $WAL_LAKE_WORKER_UI_PORT (8091).
set -euo pipefail
cd "$(dirname "$0")/.."
PROJECT=$(pwd)

STATE=${WAL_LAKE_CLUSTER_DIR:-$PROJECT/.cluster}
case "$STATE" in /*) ;; *) STATE=$PROJECT/$STATE ;; esac
MASTER_PORT=${WAL_LAKE_MASTER_PORT:-7077}
THRIFT_PORT=${WAL_LAKE_THRIFT_PORT:-10000}
MASTER_UI_PORT=${WAL_LAKE_MASTER_UI_PORT:-8090}
WORKER_UI_PORT=${WAL_LAKE_WORKER_UI_PORT:-8091}
WORKER_CORES=${WAL_LAKE_WORKER_CORES:-4}        # shared by the Thrift Server and the ingestion job
WORKER_MEMORY=${WAL_LAKE_WORKER_MEMORY:-4g}
APP_CORES=${WAL_LAKE_APP_CORES:-2}              # spark.cores.max of each application
JARS_DIR=${WAL_LAKE_CACHE:-$HOME/.cache/wal_lake}/jars
JARS="$JARS_DIR/delta-spark_4.2_2.13-4.4.0.jar,$JARS_DIR/delta-storage-4.4.0.jar"
# The Thrift Server's driver only: Hive's function registry needs it (see scripts/setup.sh). Without
# it, a session that closes while another one does can fail its close, and the server then hangs.
HIVE_LLAP_JAR="$JARS_DIR/hive-llap-common-2.3.10.jar"
MASTER_URL="spark://127.0.0.1:$MASTER_PORT"
WAREHOUSE="$STATE/warehouse"
PY="$PROJECT/.venv/bin/python"

die() { echo "cluster.sh: $*" >&2; exit 1; }

spark_home() {
  [[ -x $PY ]] || die "no virtual environment: run 'make setup' first"
  "$PY" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))'
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

alive() { [[ -f $STATE/$1.pid ]] && kill -0 "$(cat "$STATE/$1.pid")" 2>/dev/null; }

wait_port() {  # name port seconds
  local deadline=$((SECONDS + $3))
  until port_open "$2"; do
    if ! alive "$1"; then
      echo "cluster.sh: $1 exited; the end of $STATE/$1.log:" >&2
      tail -n 30 "$STATE/$1.log" >&2
      exit 1
    fi
    if ((SECONDS > deadline)); then
      echo "cluster.sh: $1 does not answer on port $2 after $3 s; the end of $STATE/$1.log:" >&2
      tail -n 30 "$STATE/$1.log" >&2
      exit 1
    fi
    sleep 1
  done
}

launch() {  # name port command...: start in its own session, remember the pid
  local name=$1 port=$2
  shift 2
  if alive "$name"; then
    echo "  $name already running (pid $(cat "$STATE/$name.pid"))"
    return
  fi
  if port_open "$port"; then
    die "port $port (for the $name) is taken by another process: set WAL_LAKE_*_PORT (see the header)"
  fi
  setsid "$@" >"$STATE/$name.log" 2>&1 < /dev/null &
  echo $! >"$STATE/$name.pid"
  echo "  $name starting (pid $!, log $STATE/$name.log)"
}

start() {
  local home
  home=$(spark_home)
  for jar in ${JARS//,/ } $HIVE_LLAP_JAR; do
    [[ -f $jar ]] || die "jar not found: $jar. Run 'make setup' first."
  done
  mkdir -p "$STATE" "$WAREHOUSE"
  export SPARK_LOG_DIR=$STATE SPARK_WORKER_DIR=$STATE/work SPARK_LOCAL_IP=127.0.0.1
  export SPARK_CONF_DIR=$STATE/conf
  mkdir -p "$SPARK_CONF_DIR"
  cp "$PROJECT/conf/log4j2.properties" "$SPARK_CONF_DIR/log4j2.properties"
  local t0=$SECONDS
  launch master "$MASTER_PORT" "$home/bin/spark-class" org.apache.spark.deploy.master.Master \
    --host 127.0.0.1 --port "$MASTER_PORT" --webui-port "$MASTER_UI_PORT"
  wait_port master "$MASTER_PORT" 60
  launch worker "$WORKER_UI_PORT" "$home/bin/spark-class" org.apache.spark.deploy.worker.Worker \
    --host 127.0.0.1 --cores "$WORKER_CORES" --memory "$WORKER_MEMORY" --webui-port "$WORKER_UI_PORT" \
    --work-dir "$STATE/work" "$MASTER_URL"
  # The Thrift Server needs only the master to start (its executors come when the worker registers):
  # the two JVMs start side by side, and both are waited for below.
  # Delta's extension and catalog are static confs: they must be set when the server starts.
  # Hive's session directories and the server's operation logs go under $STATE, not /tmp (Hive's
  # client makes a directory per session and never removes it).
  (cd "$STATE" && launch thrift "$THRIFT_PORT" "$home/bin/spark-submit" \
    --master "$MASTER_URL" \
    --class org.apache.spark.sql.hive.thriftserver.HiveThriftServer2 \
    --name wal_lake_thrift \
    --jars "$JARS" \
    --driver-class-path "${JARS//,/:}:$HIVE_LLAP_JAR" \
    --conf spark.cores.max="$APP_CORES" \
    --conf spark.executor.memory=1g \
    --conf spark.driver.memory=2g \
    --conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension \
    --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog \
    --conf spark.sql.warehouse.dir="$WAREHOUSE" \
    --conf "spark.hadoop.javax.jdo.option.ConnectionURL=jdbc:derby:;databaseName=$STATE/metastore_db;create=true" \
    --conf "spark.driver.extraJavaOptions=-Dderby.system.home=$STATE" \
    --conf "spark.hadoop.hive.downloaded.resources.dir=$STATE/hive_resources/\${hive.session.id}_resources" \
    --conf spark.sql.ansi.enabled=false \
    --conf spark.sql.session.timeZone=UTC \
    --conf spark.sql.shuffle.partitions="${WAL_LAKE_SHUFFLE_PARTITIONS:-4}" \
    --conf spark.databricks.delta.snapshotPartitions=2 \
    --conf spark.sql.codegen.cache.maxEntries=4096 \
    --conf spark.ui.enabled=false \
    --hiveconf hive.server2.thrift.port="$THRIFT_PORT" \
    --hiveconf hive.server2.thrift.bind.host=127.0.0.1 \
    --hiveconf hive.server2.logging.operation.log.location="$STATE/operation_logs" \
    spark-internal)
  wait_port worker "$WORKER_UI_PORT" 60
  wait_port thrift "$THRIFT_PORT" 180
  echo "cluster.sh: master $MASTER_URL, Thrift Server 127.0.0.1:$THRIFT_PORT, warehouse $WAREHOUSE (up in $((SECONDS - t0)) s)"
}

stop() {
  local name pid deadline
  for name in thrift worker master; do
    alive "$name" || { rm -f "$STATE/$name.pid"; continue; }
    pid=$(cat "$STATE/$name.pid")
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    deadline=$((SECONDS + 20))
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null; then
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
      echo "  $name killed (pid $pid did not stop in 20 s)"
    else
      echo "  $name stopped"
    fi
    rm -f "$STATE/$name.pid"
  done
}

status() {
  local name rc=0
  for name in master worker thrift; do
    if alive "$name"; then echo "  $name running (pid $(cat "$STATE/$name.pid"))"; else echo "  $name not running"; rc=3; fi
  done
  return $rc
}

env_lines() {
  cat <<EOF
export WAL_LAKE_TARGET=cluster
export WAL_LAKE_THRIFT_HOST=127.0.0.1
export WAL_LAKE_THRIFT_PORT=$THRIFT_PORT
export WAL_LAKE_SPARK_MASTER=$MASTER_URL
EOF
}

# The ingestion job as a client of the cluster: its executors run on the worker and it writes the raw
# Delta tables into the cluster's warehouse. It keeps its own small metastore ($STATE/ingest): the
# Thrift Server holds the embedded Derby one, so the tables are then registered there by location.
# (Against a cluster with a shared Hive metastore, run the job with that metastore instead.)
ingest() {
  alive thrift || die "the cluster is not running: scripts/cluster.sh start"
  [[ ${1:-} == -- ]] && shift
  WAL_LAKE_SPARK_MASTER=$MASTER_URL \
  WAL_LAKE_SPARK_DIR=$STATE/ingest \
  WAL_LAKE_WAREHOUSE_DIR=$WAREHOUSE \
  WAL_LAKE_SPARK_CONF="spark.cores.max=$APP_CORES,spark.executor.memory=1g,spark.executorEnv.PYTHONPATH=$PROJECT" \
  PYSPARK_PYTHON=$PY \
    "$PY" -m python_jobs.ingest "$@"
  WAL_LAKE_THRIFT_HOST=127.0.0.1 WAL_LAKE_THRIFT_PORT=$THRIFT_PORT \
    "$PY" -m python_jobs.cluster register --warehouse "$WAREHOUSE"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  env) env_lines ;;
  ingest) shift; ingest "$@" ;;
  *) echo "usage: scripts/cluster.sh start|stop|status|env|ingest -- --landing DIR" >&2; exit 2 ;;
esac
