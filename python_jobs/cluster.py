"""The cluster target's helpers: talk to the Spark Thrift Server that ``scripts/cluster.sh`` starts.

``register``: the ingestion job, run as a client of the cluster, writes the raw Delta tables into the
cluster's warehouse with its own metastore (the Thrift Server holds the embedded Derby one). This
makes them known to the Thrift Server's metastore by location, idempotently, and creates the
``wal_frontier`` view over ``wal_files`` there, so that dbt's sources resolve. Against a cluster whose
Spark applications share one Hive metastore it is not needed.

``query``: run one SQL statement through the Thrift Server and print the rows (tests, by hand).
(Checking a sample's expected state on the cluster is the harness's: ``python -m testkit.warehouse``.)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from python_jobs.ingest.ledger import DEFAULT_SCHEMA, FILES, FRONTIER, FRONTIER_VIEW, SCHEMAS


def connect(host: str | None = None, port: int | None = None):
    from pyhive import hive

    return hive.connect(
        host=host or os.environ.get("WAL_LAKE_THRIFT_HOST", "127.0.0.1"),
        port=int(port or os.environ.get("WAL_LAKE_THRIFT_PORT", "10000")),
        username=os.environ.get("WAL_LAKE_THRIFT_USER", "wal_lake"),
    )


def query(sql: str, connection=None, poll_seconds: float = 0.05) -> list[tuple]:
    """Run ``sql`` in the background of the server and poll until it ends, as dbt-spark does.

    A statement run synchronously runs on the Thrift handler thread of its session, and Spark leaves
    its shared Hive metastore client in that thread's locals; the session's close then closes that
    shared client under a statement of another session, which fails with Hive's ``getMSC() is null``
    (seen once in CI, in the cluster test's overlapping closes). In the background, the statement
    never touches the handler thread."""
    from TCLIService.ttypes import TOperationState

    states = TOperationState
    waiting = (states.INITIALIZED_STATE, states.PENDING_STATE, states.RUNNING_STATE)
    conn = connection or connect()
    cursor = conn.cursor()
    try:
        cursor.execute(sql, async_=True)
        status = cursor.poll()
        while status.operationState in waiting:
            time.sleep(poll_seconds)
            poll_seconds = min(poll_seconds * 2, 1.0)
            status = cursor.poll()
        if status.errorMessage or status.operationState != states.FINISHED_STATE:
            state = states._VALUES_TO_NAMES.get(status.operationState, status.operationState)
            message = f"the Thrift Server ended the statement in {state}: {status.errorMessage}"
            raise RuntimeError(f"{message}\n{sql}")
        return cursor.fetchall() if cursor.description else []
    finally:
        cursor.close()


def register(warehouse: Path, schema: str, connection=None) -> list[str]:
    """``CREATE TABLE IF NOT EXISTS schema.t USING DELTA LOCATION ...`` for every landed raw table, and
    the ``wal_frontier`` view over ``wal_files`` once that is known."""
    conn = connection or connect()
    root = warehouse.resolve() / f"{schema}.db"
    query(f"CREATE SCHEMA IF NOT EXISTS `{schema}`", conn)
    existing = {row[1] for row in query(f"SHOW TABLES IN `{schema}`", conn)}
    registered = []
    for table in sorted(SCHEMAS):
        location = root / table
        if table in existing or not (location / "_delta_log").is_dir():
            continue
        query(f"CREATE TABLE IF NOT EXISTS `{schema}`.`{table}` USING DELTA LOCATION '{location}'", conn)
        registered.append(table)
    if FRONTIER not in existing and (FILES in existing or FILES in registered):
        view = FRONTIER_VIEW.format(files=f"`{schema}`.`{FILES}`")
        query(f"CREATE VIEW IF NOT EXISTS `{schema}`.`{FRONTIER}` AS {view}", conn)
        registered.append(FRONTIER)
    return sorted(registered)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m python_jobs.cluster", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    reg = sub.add_parser("register", help="register the landed raw tables with the Thrift Server")
    reg.add_argument("--warehouse", type=Path, required=True, help="the cluster's spark.sql.warehouse.dir")
    reg.add_argument("--schema", default=os.environ.get("WAL_LAKE_RAW_SCHEMA", DEFAULT_SCHEMA))
    q = sub.add_parser("query", help="run one SQL statement through the Thrift Server, print the rows")
    q.add_argument("sql")
    args = parser.parse_args(argv)
    try:
        if args.command == "register":
            done = register(args.warehouse, args.schema)
            print(
                f"cluster: {len(done)} raw tables registered with the Thrift Server: {', '.join(done) or '-'}"
            )
        else:
            for row in query(args.sql):
                print("\t".join("" if v is None else str(v) for v in row))
    except Exception as exc:  # Thrift and Hive errors are long; the first line says what failed
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"cluster: error: {first[:500]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
