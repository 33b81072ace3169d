"""The marts' rules, end to end through dbt on Delta, from hand-built landed tables.

One scenario, landed in three batches with an incremental build after each, then rebuilt with a
full refresh: every flattening and seq rule of the contract (docs/contract.md) is asserted on the
incremental result, and the full refresh must give the same tables.
"""

from __future__ import annotations

import pytest
from model_helpers import change, consumer_state, land, reset_raw_tables

BUILD = ("+consumer_records", "+sequin_violations", "+record_history")

FULL = {"id": "1", "email": "a@x", "note": "big-toasted-text", "balance": "10.50"}


def a(pk: int, **cols) -> dict:
    return {"id": str(pk), **{k: (None if v is None else str(v)) for k, v in cols.items()}}


def m(lsn, idx, action, account, team, role=None, **kw):
    record = {"account_id": str(account), "team": team}
    if role is not None:
        record["role"] = role
    return change(
        lsn,
        idx,
        action,
        table="memberships",
        pk=(account, team),
        record=record,
        key_columns=("account_id", "team"),
        **kw,
    )


BATCH_1 = [
    # two touches of one row in one transaction: both stay in the log
    change(100, 0, "insert", pk=(1,), record=FULL),
    change(100, 1, "update", pk=(1,), record=a(1, email="a2@x", balance="11.00")),  # note not sent
    # several touches ending in a delete
    change(200, 0, "insert", pk=(2,), record=a(2, email="b@x", note="n2", balance="1")),
    change(200, 1, "update", pk=(2,), record=a(2, email="b2@x", note="n2", balance="2")),
    change(200, 2, "delete", pk=(2,), record={"id": "2"}),
    m(300, 0, "insert", 1, "core", "admin"),
    m(300, 1, "insert", 1, "web", "member"),
]
BATCH_2 = [
    change(100, 1, "update", pk=(1,), record=a(1, email="a2@x", balance="11.00")),  # replay
    # primary-key change 1 -> 3 that leaves the TOASTed note out
    change(400, 0, "update", pk=(3,), old_pk=(1,), record=a(3, email="a2@x", balance="12.00")),
    # delete then re-insert (across runs)
    change(500, 0, "insert", pk=(2,), record=a(2, email="b3@x", note="n3", balance="3")),
    # a truncate between touches: earlier memberships go, later ones stay
    change(500, 1, "truncate", table="memberships"),
    m(500, 2, "insert", 2, "ops", "member"),
    # a snapshot read is a touch
    change(600, 0, "read", pk=(6,), record=a(6, email="f@x", note=None, balance="6")),
    change(600, 1, "insert", pk=(5,), record=a(5, email="e@x", note="n5", balance="5")),
]
BATCH_3 = [
    change(700, 0, "delete", pk=(5,), record={"id": "5"}),
    change(700, 1, "update", pk=(2,), record=a(2, email="b4@x", balance="4")),  # note not sent
    # a different change at a consumed position: a contract violation, never a seq
    change(
        300,
        1,
        "insert",
        table="memberships",
        pk=(9, "x"),
        record={"account_id": "9", "team": "x"},
        key_columns=("account_id", "team"),
    ),
]

EXPECTED = {
    ("accounts", '["2"]'): a(2, email="b4@x", note="n3", balance="4"),
    ("accounts", '["3"]'): a(3, email="a2@x", note="big-toasted-text", balance="12.00"),
    ("accounts", '["6"]'): a(6, email="f@x", note=None, balance="6"),
    ("memberships", '["2","ops"]'): {"account_id": "2", "team": "ops", "role": "member"},
}


def rows(spark, sql):
    return [tuple(r) for r in spark.sql(sql).collect()]


@pytest.fixture(scope="module")
def built(spark, dbt, schemas):
    models = schemas.models
    reset_raw_tables(spark)
    dbt("seed", "--full-refresh")
    land(spark, BATCH_1, batch_id=1)
    dbt("run", "--full-refresh", "-s", *BUILD)
    after_first = consumer_state(spark)
    land(spark, BATCH_2, batch_id=2)
    dbt("run", "-s", *BUILD)
    # a rerun with nothing new changes nothing
    before_noop = rows(spark, f"select * except (record) from {models}.consumer_records order by all")
    dbt("run", "-s", *BUILD)
    after_noop = rows(spark, f"select * except (record) from {models}.consumer_records order by all")
    land(spark, BATCH_3, batch_id=3)
    dbt("run", "-s", *BUILD)
    incremental = {
        "sequin": rows(spark, f"select * except (ingested_at) from {models}.sequin_events order by seq"),
        "consumer": consumer_state(spark),
        "consumer_rows": rows(spark, f"select * except (record) from {models}.consumer_records order by all"),
        "violations": rows(
            spark, f"select source_id, commit_lsn, commit_idx, reason from {schemas.audit}.sequin_violations"
        ),
    }
    return {"first": after_first, "noop": (before_noop, after_noop), "incremental": incremental}


def test_first_run_flattens_and_drops_final_deletes(built):
    first = built["first"]
    assert first[("accounts", '["1"]')] == {**FULL, "email": "a2@x", "balance": "11.00"}
    assert ("accounts", '["2"]') not in first
    assert set(first) == {
        ("accounts", '["1"]'),
        ("memberships", '["1","core"]'),
        ("memberships", '["1","web"]'),
    }


def test_rerun_without_new_events_changes_nothing(built):
    before, after = built["noop"]
    assert before == after


def test_consumer_records_hold_exactly_the_live_rows(built):
    assert built["incremental"]["consumer"] == EXPECTED


def test_sequin_events_one_row_per_position_in_wal_order(built):
    sequin = built["incremental"]["sequin"]
    positions = [(r[2], r[4]) for r in sequin]  # commit_lsn, commit_idx
    assert positions == sorted(set(positions)), "one row per position, seq increasing with position"
    assert len(positions) == len(BATCH_1) + len(BATCH_2) - 1 + 2  # the replay once; the violation never
    seqs = [r[0] for r in sequin]
    assert seqs == list(range(1, len(seqs) + 1))
    # two changes of one row in one transaction stay two rows
    assert [(r[2], r[4], r[8]) for r in sequin if r[2] == 100] == [(100, 0, "insert"), (100, 1, "update")]


def test_violation_is_reported_not_sequenced(built):
    assert built["incremental"]["violations"] == [
        ("src", 300, 1, "differs from the change already recorded at this position")
    ]


def test_full_refresh_equals_incremental_runs(spark, dbt, schemas, built):
    dbt("run", "--full-refresh", "-s", *BUILD)
    sequin = rows(spark, f"select * except (ingested_at) from {schemas.models}.sequin_events order by seq")
    assert sequin == built["incremental"]["sequin"]
    assert consumer_state(spark) == built["incremental"]["consumer"]
    assert (
        rows(spark, f"select * except (record) from {schemas.models}.consumer_records order by all")
        == (built["incremental"]["consumer_rows"])
    )


def test_data_tests_catch_the_violation_and_pass_otherwise(dbt, built):
    result = dbt(
        "test",
        "-s",
        "sequin_events",
        "consumer_records",
        "sequin_violations",
        "--exclude",
        "test_type:unit",
        expect_success=False,
    )
    failed = {r.node.name for r in result.result.results if r.status in ("fail", "error")}
    assert failed == {"is_empty_sequin_violations_"}


def test_dbt_unit_tests_pass(dbt, built):
    """The models' YAML unit tests (full-refresh and incremental mode) on this warehouse's tables."""
    result = dbt("test", "--select", "test_type:unit", expect_success=False)
    outcomes = {r.node.name: r.status for r in result.result.results}
    assert len(outcomes) >= 4
    assert all(status == "pass" for status in outcomes.values()), outcomes
