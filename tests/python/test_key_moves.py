"""Rows that move to new primary keys, many times: the chains key_move_bases resolves by pointer
jumping (macros/key_move_bases.sql), end to end through dbt on Delta, from hand-built landed tables.

A row moved 20 times in one run and twice more in the next, a row moved back and forth between two
keys, a Debezium row (delete of the old key, then the create naming it) moved in both runs, and 40
rows moved once each (many moves, no chain): every move leaves the TOASTed note out, and every key
must still hold it. consumer_records incrementally, its full refresh and record_history agree; a
chain longer than `wal_lake_max_key_move_chain` fails the build.
"""

from __future__ import annotations

import pytest
from model_helpers import all_consumer_records, change, consumer_state, land, reset_raw_tables, set_consumers

LONG = 20  # moves of one row in the first run
SINGLES = 40


def a(pk: int, **cols) -> dict:
    return {"id": str(pk), **{k: str(v) for k, v in cols.items()}}


def move(lsn: int, idx: int, old: int, new: int, **cols) -> dict:
    return change(lsn, idx, "update", pk=(new,), old_pk=(old,), record=a(new, **cols))


def debezium_move(lsn: int, old: int, new: int, **cols) -> list[dict]:
    return [
        change(lsn, 0, "delete", pk=(old,), record={"id": str(old)}),
        change(lsn, 1, "insert", pk=(new,), old_pk=(old,), record=a(new, **cols)),
    ]


def first_batch() -> list[dict]:
    changes = [change(100, 0, "insert", pk=(100,), record=a(100, note="toast-long", v=0))]
    for i in range(1, LONG + 1):
        changes.append(move(100 + i, 0, 100 + i - 1, 100 + i, v=i))
        if i == 5:  # an update between two moves, of a column the later moves leave out
            changes.append(change(100 + i, 1, "update", pk=(105,), record=a(105, extra="e5")))
    changes.append(change(200, 0, "insert", pk=(200,), record=a(200, note="toast-cycle", v="c0")))
    for i, (old, new) in enumerate([(200, 201), (201, 200), (200, 201), (201, 200)], start=1):
        changes.append(move(200 + i, 0, old, new, v=f"c{i}"))
    changes.append(change(300, 0, "insert", pk=(300,), record=a(300, note="toast-deb", v="d0")))
    changes += debezium_move(301, 300, 301, v="d1") + debezium_move(302, 301, 302, v="d2")
    for i in range(SINGLES):
        changes.append(change(400 + i, 0, "insert", pk=(1000 + i,), record=a(1000 + i, note=f"n{i}", v="s0")))
    return changes


def second_batch() -> list[dict]:
    changes = [move(500, 0, 120, 121, v=21), move(501, 0, 121, 122, v=22)]
    changes.append(move(510, 0, 200, 201, v="c5"))
    changes += debezium_move(520, 302, 303, v="d3")
    for i in range(SINGLES):
        changes.append(move(600 + i, 0, 1000 + i, 2000 + i, v="s1"))
    return changes


EXPECTED = {
    ("accounts", '["122"]'): a(122, note="toast-long", v=22, extra="e5"),
    ("accounts", '["201"]'): a(201, note="toast-cycle", v="c5"),
    ("accounts", '["303"]'): a(303, note="toast-deb", v="d3"),
    **{("accounts", f'["{2000 + i}"]'): a(2000 + i, note=f"n{i}", v="s1") for i in range(SINGLES)},
}


@pytest.fixture(scope="module")
def moved(spark, dbt, schemas):
    reset_raw_tables(spark)
    spark.sql(f"create database if not exists {schemas.models}")
    set_consumers(spark, [("all_tables", "*.*")])
    land(spark, first_batch(), batch_id=1)
    dbt("run", "-s", "+consumer_records")
    land(spark, second_batch(), batch_id=2)
    dbt("run", "-s", "sequin_events", "consumer_records", "record_history")
    return {"state": consumer_state(spark), "rows": all_consumer_records(spark)}


def test_chains_keep_left_out_columns(moved):
    assert moved["state"] == EXPECTED


def test_record_history_holds_the_full_row_of_every_version(spark, schemas, moved):
    versions = spark.sql(
        f"select record_pk, valid_from_seq, valid_to_seq, record from {schemas.models}.record_history "
        "where not is_deleted"
    ).collect()
    assert [(v.record_pk, v.valid_from_seq) for v in versions if "note" not in v.record] == []
    current = {("accounts", v.record_pk): v.record for v in versions if v.valid_to_seq is None}
    assert current == EXPECTED


def test_full_refresh_equals_incremental_runs(spark, dbt, moved):
    dbt("run", "--full-refresh", "-s", "consumer_records")
    assert all_consumer_records(spark) == moved["rows"]


def test_a_chain_longer_than_the_limit_fails_the_build(spark, dbt, moved):
    result = dbt(
        "run",
        "--full-refresh",
        "-s",
        "consumer_records",
        "--vars",
        "{wal_lake_max_key_move_chain: 16}",
        expect_success=False,
    )
    assert not result.success
    messages = " ".join(str(r.message) for r in result.result.results)
    assert "more than 16 times" in messages
    assert all_consumer_records(spark) == moved["rows"]  # the failed rebuild replaced nothing
