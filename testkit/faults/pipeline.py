"""The pipeline step: the process the fault injection kills, and the dump its runs are compared by.

A step lands what is new in the landing zone (the ingestion job), then builds the models the
comparisons read (``MODELS``; seeding a fresh warehouse first), on one Spark session, and may dump
every raw, model and audit table as sorted JSON rows. Its rules:

- a dump leaves out the columns that record when a run happened (``RUN_COLUMNS``) and writes the
  landing root as a mark, so that two runs over the same files from two folders dump the same rows;
- a step runs on the client compiler without whole-stage code generation (``STEP_JVM_OPTIONS``,
  ``STEP_SPARK_CONF``): cheaper for a short-lived JVM on small data, and the same rows;
- dbt parses the project once (``parse_project``) and every run starts from a copy of that parse;
- a step asked to ``serve`` stays after its run and waits for the injector's next request
  (``request.json`` in its folder), so that the next run needs no JVM start; it stops when none
  comes.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from unittest import mock

from python_jobs.ingest.ledger import DEFAULT_SCHEMA as RAW_SCHEMA
from python_jobs.spark_session import PROJECT_DIR

SCHEMA = "wal_lake"
RAW_TABLES = ("wal_events", "wal_rejects", "wal_frontier", "wal_files", "wal_batches")
MODEL_TABLES = ("sequin_events", "consumer_records", "record_history")
AUDIT_TABLES = ("sequin_violations",)  # built in <schema>_audit (models/audit)
# Columns that record when a run happened (or a copy's mtime), not what it produced.
RUN_COLUMNS = {"ingested_at", "updated_at", "done_at", "planned_at", "modified_at"}
LANDING_MARK = "<landing>"
# What the comparisons read.
MODELS = ("+consumer_records", "+record_history", "+sequin_violations")
# dbt's parsed project, saved once and copied into every run's target: no run parses it again.
PARSE_STATE = "partial_parse.msgpack"
# A step is a short-lived JVM on a few thousand rows: its time goes to start-up, query planning and
# compiling code, not to throughput. The client compiler only (with room for all of Spark's code) and
# no whole-stage code generation make it several times cheaper; what it writes is the same.
STEP_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
STEP_SPARK_CONF = {"spark.sql.codegen.wholeStage": "false"}


def pipeline_env(target: Path, logs: Path) -> dict[str, str]:
    """The variables a pipeline run (or dbt's parse for one) sees: the local target, the steps'
    schemas, dbt's target and log directories."""
    return {
        "WAL_LAKE_TARGET": "local",
        "WAL_LAKE_SCHEMA": SCHEMA,
        "WAL_LAKE_RAW_SCHEMA": RAW_SCHEMA,
        "DBT_TARGET_PATH": str(target),
        "DBT_LOG_PATH": str(logs),
    }


def jvm_tmp_env(directory: Path) -> dict[str, str]:
    """The variable that points the JVM of a process the test kills at ``directory`` (made here) for
    its temporary files: Spark's scratch folders (block manager, pyspark, userFiles), its native
    libraries. A JVM killed -9 never removes them; under the test's folder they go with it, not into
    the machine's /tmp. spark-submit passes ``SPARK_SUBMIT_OPTS`` to the driver JVM it starts."""
    directory.mkdir(parents=True, exist_ok=True)
    options = f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} -Djava.io.tmpdir={directory}".strip()
    return {"SPARK_SUBMIT_OPTS": options}


def files_under(*tops: Path) -> set[str]:
    """Every file under the folders (looked at every 20 ms while a run may be killed: no stat)."""
    return {os.path.join(d, name) for top in tops for d, _, names in os.walk(top) for name in names}


def dump_tables(spark, landing: Path) -> dict[str, list[str]]:
    """Every raw and model table as sorted JSON rows, run timestamps left out and the landing root
    replaced by a mark (the reference and the faulted run land the same files from two folders)."""
    from pyspark.sql import functions as F

    root = str(landing.resolve())
    tables = {}
    names = [f"{RAW_SCHEMA}.{t}" for t in RAW_TABLES] + [f"{SCHEMA}.{t}" for t in MODEL_TABLES]
    names += [f"{SCHEMA}_audit.{t}" for t in AUDIT_TABLES]
    for name in names:
        if not spark.catalog.tableExists(name):
            tables[name] = []
            continue
        df = spark.table(name)
        cols = [c for c in df.columns if c not in RUN_COLUMNS]
        rows = df.select(F.to_json(F.struct(*cols)).alias("j")).collect()
        tables[name] = sorted(r.j.replace(root, LANDING_MARK) for r in rows)
    return tables


def pipeline(
    spark,
    landing: Path,
    max_files_per_batch: int,
    dbt_args: tuple[str, ...] = (),
    out=None,
) -> bool:
    """Land what is new, then build the models the comparisons read (seeding a fresh warehouse first).
    ``out``: where to write how long each part took (the ingestion, each dbt node)."""
    from dbt.cli.main import dbtRunner

    from python_jobs.ingest import job

    started = time.monotonic()
    summary = job.run(
        spark, str(landing.resolve()), schema=RAW_SCHEMA, max_files_per_batch=max_files_per_batch or None
    )
    print(summary.line(), flush=True)
    if out:
        print(f"step: ingestion {time.monotonic() - started:.1f}s", file=out, flush=True)

    def dbt(*args: str) -> bool:
        started = time.monotonic()
        result = dbtRunner().invoke(
            [*args, "--project-dir", str(PROJECT_DIR), "--profiles-dir", str(PROJECT_DIR), *dbt_args]
        )
        if out:
            nodes = getattr(result.result, "results", None) or []
            each = ", ".join(f"{r.node.name} {r.execution_time:.1f}s" for r in nodes)
            print(f"step: dbt {args[0]} {time.monotonic() - started:.1f}s ({each})", file=out, flush=True)
        return bool(result.success)

    if not spark.catalog.tableExists(f"{SCHEMA}.consumer_records") and not dbt("seed"):
        return False
    return dbt("run", "--select", *MODELS)


def short_run_conf() -> dict[str, str]:
    """Spark settings for a short-lived process (STEP_JVM_OPTIONS) on top of the profile's."""
    from python_jobs.spark_session import local_spark_conf

    options = local_spark_conf().get("spark.driver.extraJavaOptions", "")
    return {"spark.driver.extraJavaOptions": f"{options} {STEP_JVM_OPTIONS}".strip(), **STEP_SPARK_CONF}


def step(
    landing: Path,
    dump: Path | None,
    max_files_per_batch: int,
    serve: Path | None = None,
) -> int:
    """The process that gets killed: the pipeline on a Spark session of its own, then the dump.

    ``serve``: after the dump, wait for a request (``serve/request.json``, as ``Warehouse.request``
    writes it) to run once more in the same process, whose JVM is started and warm already."""
    from python_jobs.spark_session import SparkSetupError, get_spark

    started = time.monotonic()
    try:
        spark = get_spark("wal_lake_faults", extra_conf=short_run_conf())
    except SparkSetupError as exc:
        print(f"faults: error: {exc}", file=sys.stderr, flush=True)
        return 2
    print(f"step: Spark session {time.monotonic() - started:.1f}s", flush=True)
    while True:
        if not pipeline(spark, landing, max_files_per_batch, dbt_args=("--quiet",), out=sys.stdout):
            return 1
        if dump is not None:
            started = time.monotonic()
            tmp = dump.with_suffix(".tmp")
            tmp.write_text(json.dumps(dump_tables(spark, landing)))
            tmp.rename(dump)
            print(f"step: dump {time.monotonic() - started:.1f}s", flush=True)
        if serve is None:
            return 0
        request = _next_request(serve)
        if request.get("stop"):
            return 0
        dump = Path(request["dump"]) if request.get("dump") else None
        if request.get("last"):
            serve = None


def _next_request(serve: Path, patience: float = 1800) -> dict:
    """The injector's next request; a stop when none comes (the injector failed and left)."""
    path = serve / "request.json"
    deadline = time.monotonic() + patience
    while not path.exists():
        if time.monotonic() > deadline:
            return {"stop": True}
        time.sleep(0.02)
    request = json.loads(path.read_text())
    path.unlink()
    return request


def parse_project(target: Path) -> Path:
    """dbt's parse of the project as the faulted runs see it (their schemas), saved for them to copy."""
    from dbt.cli.main import dbtRunner

    with mock.patch.dict(os.environ, pipeline_env(target, target / "logs")):
        result = dbtRunner().invoke(
            ["parse", "--quiet", "--project-dir", str(PROJECT_DIR), "--profiles-dir", str(PROJECT_DIR)]
        )
    if not result.success:
        raise RuntimeError(f"dbt parse failed: {result.exception}")
    return target / PARSE_STATE
