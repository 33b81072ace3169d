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

from python_jobs.spark_session import PROJECT_DIR, SparkSetupError, get_spark

RAW_TABLES = ("wal_events", "wal_rejects", "wal_frontier")
MODEL_TABLES = ("sequin_events", "consumer_records", "record_history", "sequin_violations")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m python_jobs.demo", description=__doc__)
    parser.add_argument("--landing", default="landing/sample", help="landing zone to generate and land")
    parser.add_argument("--seed", type=int, default=7, help="sample data seed (default 7)")
    parser.add_argument("--transactions", type=int, default=200, help="sample transactions (default 200)")
    parser.add_argument("--raw-schema", default="wal_lake_raw")
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
    for name in [f"{raw_schema}.{t}" for t in RAW_TABLES] + [f"{schema}.{t}" for t in MODEL_TABLES]:
        if spark.catalog.tableExists(name):
            print(f"  {name:<36} {spark.table(name).count():>8,} rows")
        else:
            print(f"  {name:<36} not built")
    if not spark.catalog.tableExists(f"{schema}.consumer_records"):
        return
    print("\nconsumer_records per table:")
    for row in spark.sql(
        "select consumer_name, source_id, source_schema || '.' || source_table as source_table, "
        f"count(*) as n from {schema}.consumer_records group by all order by all"
    ).collect():
        print(
            f"  {row.consumer_name:<12} {row.source_id:<16} {row.source_table:<22} {row.n:>6,} live records"
        )


def consumer_state(spark, schema: str, source_id: str, consumer: str = "all_tables") -> dict[str, list[dict]]:
    """consumer_records of one source and consumer as {"schema.table": [row dicts]} (values as text)."""
    state: dict[str, list[dict]] = {}
    from pyspark.sql import functions as F

    rows = (
        spark.table(f"{schema}.consumer_records")
        .where((F.col("source_id") == source_id) & (F.col("consumer_name") == consumer))
        .select("source_schema", "source_table", "record")
        .collect()
    )
    for row in rows:
        state.setdefault(f"{row.source_schema}.{row.source_table}", []).append(dict(row.record))
    return state


def verify(spark, landing: Path, schema: str) -> list[str]:
    """Compares consumer_records of every sample source with the generator's expected table state."""
    return verify_states(landing, lambda source_id: consumer_state(spark, schema, source_id))


def verify_states(landing: Path, state_of) -> list[str]:
    """``state_of(source_id)`` (consumer_records as {"schema.table": [row dicts]}) against the sample's
    expected state, per source; prints a line per source and returns the differences."""
    from testkit import oracle, sample_data

    manifest = json.loads((landing / "manifest.json").read_text())
    types = {f"{sample_data.SCHEMA}.{t}": dict(cols) for t, (cols, _) in sample_data.TABLES.items()}
    keys = {f"{sample_data.SCHEMA}.{t}": key for t, (_, key) in sample_data.TABLES.items()}
    problems = []
    print("\nconsumer_records against the sample's expected table state:")
    for source_id, info in sorted(manifest["sources"].items()):
        expected = json.loads((landing / info["expected_state"]).read_text())
        found = oracle.compare_states(expected, state_of(source_id), types, keys)
        rows = sum(len(v) for v in expected.values())
        verdict = "equal" if not found else f"{len(found)} differences"
        print(f"  {source_id:<16} {rows:>6,} expected rows: {verdict}")
        problems.extend(f"{source_id}: {p}" for p in found)
    for problem in problems[:20]:
        print(f"    {problem}")
    return problems


def main(argv: list[str] | None = None) -> int:
    from python_jobs.ingest import job as ingest
    from testkit import sample_data

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
        print("      already generated: landing it again must add nothing")
    else:
        sample_data.generate(landing, seed=args.seed, transactions=args.transactions)
    print("[2/4] starting Spark with Delta Lake (embedded, local target)")
    try:
        spark = get_spark("wal_lake_demo")
    except SparkSetupError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 1
    print("[3/4] ingestion: landing files into wal_events")
    summary = ingest.run(spark, str(landing.resolve()), schema=args.raw_schema)
    print(f"      {summary.line()}")
    print("[4/4] dbt build: models, snapshot, unit and data tests")
    ok = dbt_build(spark, args.schema)
    report(spark, args.raw_schema, args.schema)
    ok = ok and not verify(spark, landing, args.schema)
    elapsed = time.monotonic() - started
    verdict = "built and tested" if ok else "FAILED: see dbt's output above"
    print(f"\ndemo {verdict} in {elapsed:.0f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
