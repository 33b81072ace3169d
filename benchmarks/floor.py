"""The stack's floor: what any dbt-on-Spark pipeline of wal_lake's shape pays on this machine.

On the main zone, in a schema of its own (``bench_floor``): a parse and Delta append of the same
files (read.text, from_json, one append, nothing else), then one ``dbt run`` of
benchmarks/floor_project (a change log appended, the latest touch per record merged); the same
again on the released increment. None of wal_lake's work (no framing check, dedup, seq, ledger, key
moves or deletes).
The floor's dbt runs keep a target path of their own, so that wal_lake's partial parse stays valid.
"""

from __future__ import annotations

import json
import os

from benchmarks import generate as gen
from benchmarks.bench import PROJECT_DIR, Bench
from benchmarks.results import FLOOR_APPEND, FLOOR_DBT, short

FLOOR_PROJECT = PROJECT_DIR / "benchmarks" / "floor_project"
FLOOR_SCHEMA = "bench_floor"


def floor_dbt(bench: Bench) -> float:
    """``dbt run`` of the floor project, with a target path of its own (wal_lake's partial parse
    stays valid)."""
    return bench.dbt(
        "run",
        "--target-path",
        str(bench.scratch / "floor_target"),
        "--vars",
        json.dumps({"floor_events": f"{FLOOR_SCHEMA}.events"}),
        project=FLOOR_PROJECT,
    )


def floor_append(bench: Bench, files: list[str], batch: int) -> None:
    """A parse and Delta append of the files: read.text, from_json, one append, nothing else."""
    from pyspark.sql import functions as F

    (
        bench.parsed(files)
        .select(F.lit(batch).alias("batch"), "r.*")
        .write.format("delta")
        .mode("append")
        .saveAsTable(f"{FLOOR_SCHEMA}.events")
    )


def floor(bench: Bench, zone: gen.Zone, history: int, increment: list[str] | None = None) -> None:
    """The floor's stages on the history (increment None) or on the released increment's files."""
    schema = os.environ.get("WAL_LAKE_SCHEMA")
    os.environ["WAL_LAKE_SCHEMA"] = FLOOR_SCHEMA
    try:
        if increment is None:
            bench.spark.sql(f"drop schema if exists {FLOOR_SCHEMA} cascade")
            bench.spark.sql(f"create schema {FLOOR_SCHEMA}")
            files, batch, prefix, changes = zone.history_files(), 0, "[floor]", history
        else:
            files, batch, changes = increment, 1, zone.increment_changes
            prefix = f"[floor] +{short(changes)}"
        bench.measure(f"{prefix} {FLOOR_APPEND}", changes, lambda: floor_append(bench, files, batch))
        bench.measure(f"{prefix} {FLOOR_DBT}", changes, lambda: floor_dbt(bench))
    finally:
        if schema is None:
            os.environ.pop("WAL_LAKE_SCHEMA", None)
        else:
            os.environ["WAL_LAKE_SCHEMA"] = schema
