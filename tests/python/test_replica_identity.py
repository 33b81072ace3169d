"""REPLICA IDENTITY USING INDEX on columns other than the key, end to end through dbt.

The identity of an update or delete then holds the index's columns, not the key: the ingestion lands
it in ``old_identity`` (a delete with no record_pk, an update with no old_record_pk), and
sequin_events resolves the old key from the record's last known state, in this run's changes or in
its history. Table ``by_code``: key ``id``, identity the unique index on ``code``.
"""

from __future__ import annotations

import pytest
from model_helpers import change, consumer_state, land, reset_raw_tables, set_consumers

# The tables the tests read; the first run also creates the views they are built from.
BUILD = ("sequin_events", "source_records", "consumer_records", "keyless_changes")


def upsert(lsn: int, idx: int, action: str, pk: int, code: str, v: str, identity: str | None = None) -> dict:
    """An insert, or an update whose identity (the old code) does not carry the key."""
    return change(
        lsn,
        idx,
        action,
        table="by_code",
        pk=(pk,),
        record={"id": str(pk), "code": code, "v": v},
        old_identity=None if identity is None else {"code": identity},
    )


def delete(lsn: int, idx: int, identity: str) -> dict:
    """A delete as wal2json lands it under the index identity: no key, the record is the identity."""
    return change(
        lsn, idx, "delete", table="by_code", record={"code": identity}, old_identity={"code": identity}
    )


BATCH_1 = [
    upsert(100, 0, "insert", 1, "c1", "a"),
    upsert(100, 1, "insert", 10, "k1", "x"),
    # the key changes 1 -> 2, the identity (the old code) does not say from what
    upsert(200, 0, "update", 2, "c1", "b", identity="c1"),
    upsert(300, 0, "insert", 20, "d1", "y"),
    # one transaction: 20 -> 21 -> 22 (the code changing on the way), then the row's delete
    upsert(400, 0, "update", 21, "d1", "y", identity="d1"),
    upsert(400, 1, "update", 22, "d2", "y", identity="d1"),
    delete(400, 2, identity="d2"),
    # nothing was ever known under this code: the key cannot be resolved
    delete(500, 0, identity="zz"),
]
BATCH_2 = [
    # resolved from sequin_events' history: k1 is 10's code, c1 now 2's
    delete(600, 0, identity="k1"),
    upsert(600, 1, "update", 7, "c1", "c", identity="c1"),
]

AFTER_1 = {
    ("by_code", '["2"]'): {"id": "2", "code": "c1", "v": "b"},
    ("by_code", '["10"]'): {"id": "10", "code": "k1", "v": "x"},
}
AFTER_2 = {("by_code", '["7"]'): {"id": "7", "code": "c1", "v": "c"}}


def keyless(spark, schemas) -> list[tuple]:
    return [
        tuple(r)
        for r in spark.sql(
            "select source_table, reason, change_count, delete_count "
            f"from {schemas.audit}.keyless_changes order by all"
        ).collect()
    ]


@pytest.fixture(scope="module")
def built(spark, dbt, schemas):
    reset_raw_tables(spark)
    # The shipped consumer, without `dbt seed` (test_docs, test_oracle_e2e and test_cluster load it).
    spark.sql(f"create database if not exists {schemas.models}")
    set_consumers(spark, [("all_tables", "*.*")])
    land(spark, BATCH_1, batch_id=1)
    dbt("run", "--full-refresh", "-s", "+consumer_records", "keyless_changes")
    first = {"consumer": consumer_state(spark), "keyless": keyless(spark, schemas)}
    # a sequin_events built before the column existed gains it on the next incremental run
    sequin = f"{schemas.models}.sequin_events"
    spark.sql(
        f"alter table {sequin} set tblproperties ('delta.columnMapping.mode' = 'name', "
        "'delta.minReaderVersion' = '2', 'delta.minWriterVersion' = '5')"
    )
    spark.sql(f"alter table {sequin} drop column old_identity")
    land(spark, BATCH_2, batch_id=2)
    dbt("run", "-s", *BUILD)
    second = {
        "consumer": consumer_state(spark),
        "keyless": keyless(spark, schemas),
        "sequin": {
            (r.commit_lsn, r.commit_idx): (r.record_pk, r.old_record_pk, r.old_identity)
            for r in spark.sql(f"select * from {sequin} where source_table = 'by_code'").collect()
        },
    }
    return {"first": first, "second": second}


def test_key_changes_and_chains_under_an_index_identity_resolve_in_one_run(built):
    # 1 moved to 2; 20 -> 21 -> 22 and its delete leave nothing
    assert built["first"]["consumer"] == AFTER_1


def test_a_later_run_resolves_from_history(built):
    # 10 deleted by its code alone; 2 moved to 7
    assert built["second"]["consumer"] == AFTER_2
    sequin = built["second"]["sequin"]
    assert sequin[(600, 0)][0] == '["10"]'
    assert sequin[(600, 1)][:2] == ('["7"]', '["2"]')
    assert sequin[(600, 1)][2] == {"code": "c1"}


def test_the_resolved_keys_of_one_run(built):
    sequin = built["second"]["sequin"]
    assert [sequin[(200, 0)][:2], sequin[(400, 0)][:2], sequin[(400, 1)][:2], sequin[(400, 2)][:2]] == [
        ('["2"]', '["1"]'),
        ('["21"]', '["20"]'),
        ('["22"]', '["21"]'),
        ('["22"]', None),
    ]


def test_an_unresolved_delete_stays_keyless_and_counted(built):
    assert built["first"]["keyless"] == [("by_code", "key not in the change", 1, 1)]
    assert built["second"]["keyless"] == [("by_code", "key not in the change", 1, 1)]
    assert built["second"]["sequin"][(500, 0)][0] is None
