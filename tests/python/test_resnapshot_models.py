"""Re-snapshot one table while streaming, end to end: live Postgres, capture, ingestion, dbt.

One source, four tables whose landed state is wrong or incomplete before their re-snapshot:

- ``items``: filled before the slot existed (its rows never streamed), then re-snapshotted in chunks
  while another session inserts, updates, deletes and moves keys;
- ``old_name``, renamed to ``new_name`` after it was captured: ``new_name`` re-snapshotted;
- ``remade``, dropped (its rows never deleted in the stream) and created again with other rows:
  re-snapshotted;
- ``resumed``: its re-snapshot killed (-9) after a few chunks and resumed by the next capture.

A first build runs before the DDL, so the re-snapshots are applied by incremental runs. After the
second build `consumer_records` and every table's typed mirror equal `select * from t`, nothing is
rejected, and `old_name`'s records stay, as the contract says (purging them is the user's step).
No model changes for this: the reset lands as the table's truncate and the chunks as reads.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import psycopg
import pytest
from test_capture import PROJECT_DIR, landed_files, landed_lines, run_capture, slot_name, source_id
from test_oracle_e2e import consumer_problems, mirror_problems
from test_resnapshot import _churn, _resets

from python_jobs import mirrors
from python_jobs.capture.resnapshot import STATE_FILE
from python_jobs.ingest import job as ingest
from testkit import oracle
from testkit.warehouse import consumer_states, spark_query

MODELS = ("+consumer_records", "column_registry", "tag:mirror", "mirror_tables", "mirror_rejects")
TABLES = ("items", "old_name", "remade", "resumed")
ROWS = {"items": 600, "old_name": 50, "remade": 50, "resumed": 1500}


def _create(conn: psycopg.Connection, table: str, rows: int, label: str = "row") -> None:
    conn.execute(f"create table {table} (id bigint primary key, v text, n integer)")
    conn.execute(
        f"insert into {table} select n, %s || ' ' || n, n %% 10 from generate_series(1, %s) n", (label, rows)
    )
    conn.execute(f"analyze {table}")


def _kill_after_chunks(dsn: str, landing, table: str, chunks: int) -> dict:
    """Start a capture re-snapshotting ``table`` in chunks of 20 and kill it (-9) once ``chunks`` have
    landed; the state it left."""
    state = landing / source_id(dsn) / STATE_FILE
    command = [sys.executable, "-m", "python_jobs.capture", "--dsn", dsn, "--slot", slot_name(dsn)]
    command += ["--landing", str(landing), "--once", "--quiet", "--resnapshot", table]
    command += ["--resnapshot-chunk-rows", "20"]
    child = subprocess.Popen(command, cwd=PROJECT_DIR)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if state.exists() and json.loads(state.read_text())["queue"][0]["chunks"] >= chunks:
                break
            time.sleep(0.01)
        child.send_signal(signal.SIGSTOP)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    return json.loads(state.read_text())["queue"][0]


def _truth(dsn: str) -> dict:
    with psycopg.connect(dsn) as conn:
        tables = oracle.user_tables(conn)
        types, keys = oracle.table_types(conn, tables)
        return {"state": oracle.postgres_state(conn, tables), "types": types, "keys": keys}


@pytest.fixture(scope="module")
def built(postgres, spark, dbt, schemas, tmp_path_factory):
    landing = tmp_path_factory.mktemp("landing")
    dsn = postgres.create_database("resnap_models")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table, rows in ROWS.items():
            _create(conn, table, rows)
    assert run_capture(dsn, landing, "--once") == 0  # the slot starts now: no row above is landed
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in TABLES:
            conn.execute(f"update {table} set v = 'streamed' where id <= 20")
        conn.execute(
            "insert into remade select n, 'gone with the table', 0 from generate_series(1001, 1010) n"
        )
    assert run_capture(dsn, landing, "--once") == 0
    land = lambda: ingest.run(spark, str(landing), schema=schemas.raw)  # noqa: E731
    land()
    mirrors.generate(spark, schemas.raw)
    dbt("seed")
    dbt("run", "-s", *MODELS)

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("alter table old_name rename to new_name")
        conn.execute("update new_name set v = 'after the rename' where id <= 3")
        conn.execute("drop table remade")
        _create(conn, "remade", 30, label="remade")
    killed_at = _kill_after_chunks(dsn, landing, "public.resumed", 3)
    stop, errors = threading.Event(), []
    writer = threading.Thread(target=_churn, args=(dsn, stop, 7, errors))
    writer.start()
    try:
        args = ["--once", "--resnapshot-chunk-rows", "40"]
        args += [
            "--resnapshot",
            "public.items",
            "--resnapshot",
            "public.new_name",
            "--resnapshot",
            "public.remade",
        ]
        assert run_capture(dsn, landing, *args) == 0
    finally:
        stop.set()
        writer.join()
    assert errors == []
    assert run_capture(dsn, landing, "--once") == 0
    land()
    mirrors.generate(spark, schemas.raw)
    dbt("run", "-s", *MODELS)
    records = [json.loads(line) for line in landed_lines(landed_files(landing, source_id(dsn)))]
    return {
        "source": source_id(dsn),
        "truth": _truth(dsn),
        "consumers": consumer_states(spark_query(spark), schemas.models).get(source_id(dsn), {}),
        "records": records,
        "killed_at": killed_at,
        "spark": spark,
        "schema": schemas.models,
    }


@pytest.mark.postgres
def test_consumer_records_equal_every_resnapshotted_table(built):
    t = built["truth"]
    actual = {table: rows for table, rows in built["consumers"].items() if table in t["state"]}
    assert sorted(t["state"]) == ["public.items", "public.new_name", "public.remade", "public.resumed"]
    assert consumer_problems(actual, t) == []


@pytest.mark.postgres
def test_mirrors_equal_every_resnapshotted_table(built):
    assert mirror_problems(built["spark"], built["schema"], built["source"], built["truth"]) == []


@pytest.mark.postgres
def test_the_renamed_tables_old_name_stays_until_purged(built):
    """The stream says nothing of the rename: ``old_name``'s records (the 20 rows streamed before it)
    stay as they were (the contract's DDL rules: purging them is the user's step)."""
    old = built["consumers"]["public.old_name"]
    assert sorted(int(row["id"]) for row in old) == list(range(1, 21))
    assert {row["v"] for row in old} == {"streamed"}


@pytest.mark.postgres
def test_the_killed_resnapshot_resumed_with_one_reset(built):
    assert built["killed_at"]["chunks"] >= 3 and built["killed_at"]["reset_lsn"]
    records = built["records"]
    assert len(_resets(records, "resumed")) == 1
    assert [len(_resets(records, table)) for table in ("items", "new_name", "remade")] == [1, 1, 1]
