"""Builds tiny landed tables by hand, so the models' rules are tested without the ingestion job."""

from __future__ import annotations

import json
import os
import re
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from python_jobs.ingest.ledger import DEFAULT_SCHEMA, FILES, FRONTIER_VIEW, SCHEMAS
from testkit.warehouse import consumer_records, spark_query

PROJECT_DIR = Path(__file__).resolve().parents[2]


def dbt_ls(*arguments: str) -> dict[str, dict]:
    """The nodes `dbt ls` lists with ``arguments`` (a selection, resource types), by name: each
    one's resource type and parents. Sources are left out."""
    from dbt.cli.main import dbtRunner

    result = dbtRunner().invoke(
        ["ls", "--output", "json", "--output-keys", "name resource_type depends_on", "--quiet", *arguments]
        + ["--project-dir", str(PROJECT_DIR), "--profiles-dir", str(PROJECT_DIR)]
    )
    assert result.success, result.exception
    nodes = [json.loads(line) for line in result.result]
    return {node["name"]: node for node in nodes if node["resource_type"] != "source"}


def raw_schema() -> str:
    """Where the models' sources are: the test module's own raw schema (conftest's ``schemas``)."""
    return os.environ.get("WAL_LAKE_RAW_SCHEMA", DEFAULT_SCHEMA)


WAL_EVENTS_DDL = """
    source_id string, commit_lsn bigint, commit_idx int, change_lsn bigint, xid bigint,
    committed_at timestamp, action string, source_schema string, source_table string,
    key_columns array<string>, record_pk string, record map<string,string>,
    changes map<string,string>, old_record_pk string, old_identity map<string,string>,
    column_types map<string,string>, source_format string, landing_file string,
    landing_line bigint, batch_id bigint, ingested_at timestamp
"""
# The job's done marks, which the wal_frontier view derives each source's frontier from.
WAL_FILES_DDL = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in SCHEMAS[FILES].fields)
WAL_REJECTS_DDL = """
    source_id string, landing_file string, landing_line bigint, raw_line string, reason string,
    batch_id bigint, ingested_at timestamp
"""
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def file_statistics(spark, table: str) -> list[dict]:
    """The statistics Delta recorded for each data file added to ``table`` (its log's ``add`` actions)."""
    location = spark.sql(f"describe detail {table}").first()["location"]
    log = Path(location.removeprefix("file:")) / "_delta_log"
    return [
        json.loads(action["add"]["stats"])
        for commit in sorted(log.glob("*.json"))
        for action in map(json.loads, commit.read_text().splitlines())
        if "add" in action and action["add"].get("stats")
    ]


def reset_raw_tables(spark) -> None:
    spark.sql(f"create database if not exists {raw_schema()}")
    for name, ddl in (
        ("wal_events", WAL_EVENTS_DDL),
        ("wal_files", WAL_FILES_DDL),
        ("wal_rejects", WAL_REJECTS_DDL),
    ):
        spark.sql(f"create or replace table {raw_schema()}.{name} ({ddl}) using delta")
    view = FRONTIER_VIEW.format(files=f"{raw_schema()}.wal_files")
    spark.sql(f"create or replace view {raw_schema()}.wal_frontier as {view}")


def change(
    lsn: int,
    idx: int,
    action: str,
    table: str = "accounts",
    pk: tuple | None = None,
    record: dict | None = None,
    old_pk: tuple | None = None,
    source: str = "src",
    key_columns: tuple = ("id",),
    old_identity: dict | None = None,
    types: dict | None = None,
) -> dict:
    """One wal_events row. `pk` values are texts in key order; record maps column to text; `types`
    gives a column's source type (text when not named)."""
    return {
        "source_id": source,
        "commit_lsn": lsn,
        "commit_idx": idx,
        "change_lsn": lsn - 100 + idx,
        "xid": 700 + lsn,
        "committed_at": EPOCH + timedelta(seconds=lsn),
        "action": action,
        "source_schema": "public",
        "source_table": table,
        "key_columns": list(key_columns) if pk is not None or old_identity is not None else None,
        "record_pk": json.dumps([str(v) for v in pk], separators=(",", ":")) if pk is not None else None,
        "record": record,
        "changes": None,
        "old_record_pk": (
            json.dumps([str(v) for v in old_pk], separators=(",", ":")) if old_pk is not None else None
        ),
        "old_identity": old_identity,
        # As wal2json sends it: a type for each column of a row change.
        "column_types": (
            {column: (types or {}).get(column, "text") for column in record}
            if record is not None and action in ("insert", "update", "delete", "read")
            else None
        ),
        "source_format": "wal2json",
        "landing_file": f"{source}/{lsn:016X}.jsonl",
        "landing_line": idx + 2,
    }


def land(spark, changes: list[dict], batch_id: int, frontier: dict[str, int] | None = None) -> None:
    """Appends `changes` as batch `batch_id` and records each source's frontier after it, as the job's
    done mark does: a wal_files row per source whose greatest commit_lsn landed is the frontier (the
    wal_frontier view keeps the greatest of a source's batches so far)."""
    now = datetime.now(UTC).replace(tzinfo=None)
    rows = [{**c, "batch_id": batch_id, "ingested_at": now} for c in changes]
    if rows:
        df = spark.createDataFrame(rows, schema=WAL_EVENTS_DDL)
        df.write.format("delta").mode("append").saveAsTable(f"{raw_schema()}.wal_events")
    if frontier is None:
        frontier = {}
        for c in changes:
            frontier[c["source_id"]] = max(frontier.get(c["source_id"], 0), c["commit_lsn"])
    if frontier:
        done = [
            {
                **dict.fromkeys(SCHEMAS[FILES].fieldNames()),
                "batch_id": batch_id,
                "source_id": s,
                "landing_file": f"{s}/batch-{batch_id}.jsonl",
                "landed": 0 if lsn is None else 1,
                "max_commit_lsn": lsn,
                "done_at": now,
            }
            for s, lsn in frontier.items()
        ]
        spark.createDataFrame(done, schema=WAL_FILES_DDL).write.format("delta").mode("append").saveAsTable(
            f"{raw_schema()}.wal_files"
        )


def consumer_state(spark, consumer: str = "all_tables") -> dict:
    """consumer_records as {(table, record_pk): record dict} for one consumer: keyed by record_pk,
    so a test names a record as the model does."""
    records = consumer_records(spark_query(spark), os.environ.get("WAL_LAKE_SCHEMA", "wal_lake"), consumer)
    return {(r.source_table, r.record_pk): r.record for r in records}


def models_schema() -> str:
    return os.environ.get("WAL_LAKE_SCHEMA", "wal_lake")


def set_consumers(spark, patterns: list[tuple[str, str]]) -> None:
    """Replaces the consumers seed's table, as `dbt seed` would, without touching seeds/consumers.csv
    (other test modules read that file)."""
    spark.createDataFrame(patterns, schema="consumer_name string, table_pattern string").write.format(
        "delta"
    ).mode("overwrite").option("overwriteSchema", "true").saveAsTable(f"{models_schema()}.consumers")


def all_consumer_records(spark) -> list[tuple]:
    """Every row of consumer_records, the record as JSON text with sorted keys, in a stable order: two
    builds are equal exactly when these lists are."""
    rows = spark.sql(
        "select consumer_name, source_id, source_schema, source_table, record_pk, to_json(record) as record, "
        f"seq, commit_lsn, commit_idx, action from {models_schema()}.consumer_records"
    ).collect()
    return sorted((*r[:5], json.dumps(json.loads(r.record), sort_keys=True), *r[6:]) for r in rows)


@contextmanager
def no_codegen_fallback(spark):
    """Within it, a query whose whole-stage generated Java code does not compile fails, naming the
    compiler's error, instead of Spark logging "Failed to compile the generated Java code" with a
    stack trace on the console and running the plan interpreted (spark.sql.codegen.fallback)."""
    key = "spark.sql.codegen.fallback"
    before = spark.conf.get(key, None)
    spark.conf.set(key, "false")
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def final_plan_scans(spark, view: str, table: str) -> int:
    """How many times the plan that ran ``view`` (a temporary view of the session) scanned ``table``:
    the file scans of its final adaptive plan, where a reused shuffle stands for a scan not run again."""
    df = spark.table(view)
    df.collect()
    final = df._jdf.queryExecution().executedPlan().toString().split("== Initial Plan ==")[0]
    return final.count(f"FileScan parquet spark_catalog.{table}[")


def scan_partition_filters(spark, view: str, table: str) -> str:
    """The partition filters of the scans of ``table`` in the plan that runs ``view``, as Spark prints
    them (``PartitionFilters: [...]`` of each file scan; empty when none prunes)."""
    plan = spark.table(view)._jdf.queryExecution().executedPlan().toString()
    scans = [line for line in plan.splitlines() if f"FileScan parquet spark_catalog.{table}[" in line]
    return " ".join(re.findall(r"PartitionFilters: \[([^\]]*)\]", " ".join(scans)))
