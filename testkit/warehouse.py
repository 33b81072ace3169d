"""The warehouse read as the checks compare it, and the checks against a sample's expected state.

``consumer_records`` / ``consumer_states`` / ``consumer_state`` read one consumer's records through
any ``Query`` (the tests' Spark session, or the cluster's Thrift Server); ``mirror_state`` reads a
source's typed mirrors on a Spark session. ``verify`` and ``verify_mirrors`` compare them with the
expected state a sample landing zone wrote for each source (``testkit.sample``), print a line per
source and return the differences: the demo, the fault test's reference and the cluster test use them.

    python -m testkit.warehouse --landing landing/mine   # consumer_records on the cluster == the sample's
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import NamedTuple

from testkit import sample

Query = Callable[[str], list[tuple]]  # runs one SQL statement, returns its rows


def spark_query(spark) -> Query:
    return lambda sql: [tuple(row) for row in spark.sql(sql).collect()]


class ConsumerRecord(NamedTuple):
    source_id: str
    source_schema: str
    source_table: str
    record_pk: str
    record: dict[str, str | None]


def consumer_records(
    query: Query, schema: str, consumer: str = "all_tables", source_id: str | None = None
) -> list[ConsumerRecord]:
    """One consumer's consumer_records (of one source, or all), the record as column -> text.

    ``to_json`` carries the record map the same way through Spark and through the Thrift Server."""
    where = f"consumer_name = '{consumer}'" + (f" and source_id = '{source_id}'" if source_id else "")
    rows = query(
        "select source_id, source_schema, source_table, record_pk, to_json(record) "
        f"from `{schema}`.consumer_records where {where}"
    )
    return [ConsumerRecord(i, s, t, pk, json.loads(record)) for i, s, t, pk, record in rows]


def consumer_states(
    query: Query, schema: str, consumer: str = "all_tables", source_id: str | None = None
) -> dict[str, dict[str, list[dict]]]:
    """consumer_records of one consumer (of one source, or all, in one query), per source as
    {"schema.table": [row dicts]} (values as text)."""
    states: dict[str, dict[str, list[dict]]] = {}
    for r in consumer_records(query, schema, consumer, source_id):
        tables = states.setdefault(r.source_id, {})
        tables.setdefault(f"{r.source_schema}.{r.source_table}", []).append(r.record)
    return states


def consumer_state(
    query: Query, schema: str, source_id: str, consumer: str = "all_tables"
) -> dict[str, list[dict]]:
    """consumer_records of one source and consumer as {"schema.table": [row dicts]} (values as text)."""
    return consumer_states(query, schema, consumer, source_id).get(source_id, {})


def mirror_state(spark, schema: str, source_id: str) -> dict[str, list[dict]] | None:
    """A source's typed mirrors as {"schema.table": [row dicts of the source's columns]}, the values as
    Spark returns them; None when the source has no mirrors."""
    if not spark.catalog.tableExists(f"{schema}.mirror_tables"):
        return None
    catalog = spark.sql(
        f"select source_schema, source_table, mirror_relation, collect_list(column_name) as columns"
        f" from {schema}.mirror_tables where source_id = '{source_id}' group by all"
    ).collect()
    if not catalog:
        return None
    return {
        f"{m.source_schema}.{m.source_table}": [
            {c: row[c] for c in m.columns} for row in spark.table(m.mirror_relation).collect()
        ]
        for m in catalog
    }


def verify(query: Query, landing: Path, schema: str) -> list[str]:
    """consumer_records of every sample source against the generator's expected table state; prints a
    line per source and returns the differences."""
    problems = []
    print("\nconsumer_records against the sample's expected table state:")
    state_of = partial(consumer_state, query, schema)
    for source_id, rows, found in sample.compare_with_expected(landing, state_of):
        verdict = "equal" if not found else f"{len(found)} differences"
        print(f"  {source_id:<16} {rows:>6,} expected rows: {verdict}")
        problems.extend(f"{source_id}: {p}" for p in found)
    for problem in problems[:20]:
        print(f"    {problem}")
    return problems


def verify_mirrors(spark, landing: Path, schema: str) -> list[str]:
    """The typed mirrors of every sample source that has them against its expected table state,
    compared typed; prints a line per source and returns the differences."""
    problems = []
    print("\ntyped mirrors against the sample's expected table state (compared typed):")
    for source_id, rows, found in sample.compare_mirrors_with_expected(
        landing, partial(mirror_state, spark, schema)
    ):
        verdict = "equal" if not found else f"{len(found)} differences"
        print(f"  {source_id:<16} {rows:>6,} expected rows: {verdict}")
        problems.extend(f"{source_id} mirrors: {p}" for p in found)
    for problem in problems[:20]:
        print(f"    {problem}")
    return problems


def main(argv: list[str] | None = None) -> int:
    """consumer_records on the cluster (through its Thrift Server) against a sample's expected state."""
    from python_jobs import cluster

    parser = argparse.ArgumentParser(prog="python -m testkit.warehouse", description=main.__doc__)
    parser.add_argument("--landing", type=Path, required=True, help="a sample landing zone")
    parser.add_argument("--schema", default=os.environ.get("WAL_LAKE_SCHEMA", "wal_lake"))
    args = parser.parse_args(argv)
    try:
        conn = cluster.connect()
        problems = verify(lambda sql: cluster.query(sql, conn), args.landing, args.schema)
    except Exception as exc:  # Thrift and Hive errors are long; the first line says what failed
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"cluster: error: {first[:500]}", file=sys.stderr)
        return 1
    print(f"cluster: consumer_records {'equal the expected state' if not problems else 'DIFFER'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
