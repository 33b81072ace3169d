"""The README's main job on the embedded default: sample WAL -> wal_events -> dbt build -> report.

Runs in one process with one Spark session: the ingestion job lands the sample landing zone, then
dbt (session method) builds and tests the models on that same session, so there is never a second
JVM competing for the embedded Derby metastore. Safe to run again: files already landed add
nothing and the incremental models change nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from python_jobs.ingest.ledger import DEFAULT_SCHEMA as DEFAULT_RAW_SCHEMA
from python_jobs.spark_session import PROJECT_DIR, SparkSetupError, get_spark

# The product's one import of the harness: the demo generates the sample and checks the models
# against the state the sample expects.
from testkit import sample, warehouse

RAW_TABLES = ("wal_events", "wal_rejects", "wal_frontier")
MODEL_TABLES = (
    "sequin_events",
    "source_records",
    "consumer_records",
    "record_history",
    "column_registry",
    "mirror_tables",
    "mirror_rejects",
)
AUDIT_TABLES = ("sequin_violations",)  # built in <schema>_audit (models/audit)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m python_jobs.demo", description=__doc__)
    parser.add_argument("--landing", default="landing/sample", help="landing zone to generate and land")
    parser.add_argument("--seed", type=int, default=7, help="sample data seed (default 7)")
    parser.add_argument("--transactions", type=int, default=200, help="sample transactions (default 200)")
    parser.add_argument("--raw-schema", default=DEFAULT_RAW_SCHEMA)
    parser.add_argument("--schema", default="wal_lake", help="schema of the dbt models")
    return parser.parse_args(argv)


def dbt(*args: str) -> bool:
    from dbt.cli.main import dbtRunner

    result = dbtRunner().invoke(
        [*args, "--project-dir", str(PROJECT_DIR), "--profiles-dir", str(PROJECT_DIR)]
    )
    return bool(result.success)


def dbt_build(spark, schema: str) -> bool:
    # Unit tests of incremental models read the model's own table (`input: this`): on a fresh
    # warehouse create the tables empty first.
    if not spark.catalog.tableExists(f"{schema}.consumer_records"):
        print("      fresh warehouse: dbt run --empty creates the model tables for the unit tests")
        if not (dbt("seed") and dbt("run", "--empty")):
            return False
    return dbt("build")


def report(spark, raw_schema: str, schema: str) -> None:
    print("\nwhat was built:")
    models = [f"{schema}.{t}" for t in MODEL_TABLES] + [f"{schema}_audit.{t}" for t in AUDIT_TABLES]
    for name in [f"{raw_schema}.{t}" for t in RAW_TABLES] + models:
        if spark.catalog.tableExists(name):
            print(f"  {name:<36} {spark.table(name).count():>8,} rows")
        else:
            print(f"  {name:<36} not built")
    if not spark.catalog.tableExists(f"{schema}.consumer_records"):
        return
    report_mirrors(spark, schema)
    print("\nconsumer_records per table:")
    for row in spark.sql(
        "select consumer_name, source_id, source_schema || '.' || source_table as source_table, "
        f"count(*) as n from {schema}.consumer_records group by all order by all"
    ).collect():
        print(
            f"  {row.consumer_name:<12} {row.source_id:<16} {row.source_table:<22} {row.n:>6,} live records"
        )


def report_mirrors(spark, schema: str) -> None:
    if not spark.catalog.tableExists(f"{schema}.mirror_tables"):
        return
    print(f"\ntyped mirrors ({schema}.mirror_tables):")
    for row in spark.sql(
        f"select mirror_relation, count(*) as columns from {schema}.mirror_tables group by all order by all"
    ).collect():
        rows = (
            spark.table(row.mirror_relation).count() if spark.catalog.tableExists(row.mirror_relation) else 0
        )
        print(f"  {row.mirror_relation:<52} {rows:>6,} rows, {row.columns} typed columns")


def main(argv: list[str] | None = None) -> int:
    from python_jobs import mirrors
    from python_jobs.ingest import job as ingest

    args = parse_args(argv)
    started = time.monotonic()
    landing = Path(args.landing)
    print(f"[1/4] sample landing zone: {landing} (seed {args.seed}, {args.transactions} transactions)")
    manifest_path = landing / "manifest.json"
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        if (manifest["seed"], manifest["transactions"]) != (args.seed, args.transactions):
            print(
                f"demo: {landing} holds another sample (seed {manifest['seed']}); remove it or pass --landing"
            )
            return 2
        if manifest.get("version", 1) != sample.SAMPLE_VERSION:
            print(
                f"demo: {landing} holds a sample of an earlier version (its Debezium lines carry no "
                f"schemas, so no typed mirrors): remove it and the warehouse it was landed into (.spark/), "
                f"or pass --landing and --raw-schema/--schema of a new warehouse"
            )
            return 2
        print("      already generated: landing it again must add nothing")
    else:
        sample.generate(landing, seed=args.seed, transactions=args.transactions)
    print("[2/4] starting Spark with Delta Lake (embedded, local target)")
    try:
        spark = get_spark("wal_lake_demo")
    except SparkSetupError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 1
    print("[3/4] ingestion: landing files into wal_events")
    summary = ingest.run(spark, str(landing.resolve()), schema=args.raw_schema)
    print(f"      {summary.line()}")
    print("      typed mirrors: one dbt model per captured table")
    mirrors.generate(spark, args.raw_schema)
    print("[4/4] dbt build: models, unit and data tests")
    ok = dbt_build(spark, args.schema)
    report(spark, args.raw_schema, args.schema)
    ok = ok and not warehouse.verify(warehouse.spark_query(spark), landing, args.schema)
    ok = ok and not warehouse.verify_mirrors(spark, landing, args.schema)
    elapsed = time.monotonic() - started
    verdict = "built and tested" if ok else "FAILED: see dbt's output above"
    print(f"\ndemo {verdict} in {elapsed:.0f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
