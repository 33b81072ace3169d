"""sequin_events numbers `seq` range by range, in parallel: the result must be what one numbering in
position order gives, dense from the table's greatest seq + 1.

``wal_lake_seq_range_rows`` forced to 1 makes every position a range of its own, and 3 makes
ranges of a few positions cut inside transactions: the ranges' offsets must then add up exactly,
across sources, transactions and runs.
"""

from __future__ import annotations

import random

import pytest
from model_helpers import change, land, reset_raw_tables

SOURCES = ("src_a", "src_b", "src_c")


def insert(source: str, lsn: int, idx: int) -> dict:
    key = f"{lsn}-{idx}"
    return change(lsn, idx, "insert", pk=(key,), record={"id": key}, source=source)


def batch(lsns: range, per_txn: int, big_txn: int | None = None, seed: int = 0) -> list[dict]:
    """Transactions of `per_txn` changes at each LSN, for every source, in shuffled order; one
    transaction of 40 changes (a snapshot-like position) at `big_txn`."""
    rows = [
        insert(source, lsn, idx)
        for source in SOURCES
        for lsn in lsns
        for idx in range(40 if lsn == big_txn else per_txn)
    ]
    random.Random(seed).shuffle(rows)
    return rows


BATCH_1 = batch(range(100, 130), per_txn=3, big_txn=110, seed=1)
# A replay of batch 1's changes lands with the new ones: it must get no seq.
BATCH_2 = batch(range(130, 150), per_txn=2, big_txn=140, seed=2) + BATCH_1[:25]


def sequin(spark, schemas) -> list[tuple]:
    return [
        tuple(r)
        for r in spark.sql(
            f"select seq, source_id, commit_lsn, commit_idx from {schemas.models}.sequin_events order by seq"
        ).collect()
    ]


def positions(changes: list[dict]) -> list[tuple]:
    return sorted({(c["source_id"], c["commit_lsn"], c["commit_idx"]) for c in changes})


@pytest.fixture(scope="module")
def built(spark, dbt, schemas):
    reset_raw_tables(spark)
    spark.sql(f"create database if not exists {schemas.models}")
    land(spark, BATCH_1, batch_id=1)
    dbt("run", "--full-refresh", "-s", "+sequin_events", "--vars", "{wal_lake_seq_range_rows: 1}")
    first = sequin(spark, schemas)
    land(spark, BATCH_2, batch_id=2)
    dbt("run", "-s", "sequin_events", "--vars", "{wal_lake_seq_range_rows: 3}")
    return {"first": first, "second": sequin(spark, schemas)}


def test_a_full_refresh_numbers_every_position_once_in_order(built):
    expected = positions(BATCH_1)
    assert built["first"] == [(seq, *p) for seq, p in enumerate(expected, start=1)]


def test_an_incremental_run_continues_dense_from_the_greatest_seq(built):
    first = built["first"]
    expected_new = [p for p in positions(BATCH_2) if p not in set(positions(BATCH_1))]
    assert built["second"][: len(first)] == first
    assert built["second"][len(first) :] == [
        (seq, *p) for seq, p in enumerate(expected_new, start=len(first) + 1)
    ]
