"""The marts' rules, end to end through dbt on Delta, from hand-built landed tables.

One scenario, landed in three batches with an incremental build after each, then rebuilt with a
full refresh: every flattening and seq rule of the contract (docs/contract.md) is asserted on the
incremental result, and the full refresh must give the same tables.

A dbt step selects only the models it needs: the views once per scenario (they do not change), and
record_history (built a seq range at a time) and the audit models (tables rebuilt in full from
sequin_events on every run) only where a test reads them.
"""

from __future__ import annotations

import json
import re

import pytest
from model_helpers import (
    all_consumer_records,
    change,
    consumer_state,
    file_statistics,
    final_plan_scans,
    land,
    reset_raw_tables,
    scan_partition_filters,
    set_consumers,
)

# The incremental models; `+consumer_records` also creates the views they read.
INCREMENTAL = ("sequin_events", "source_records", "consumer_records")

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


def merges_sent(found: list):
    """A dbt callback that adds to ``found`` the name of each table a merge statement was sent for."""

    def on_event(event) -> None:
        if event.info.name == "SQLQuery":
            words = event.data.sql.lower().split()
            for i, word in enumerate(words[:-2]):
                if word == "merge" and words[i + 1] == "into":
                    found.append(words[i + 2].rsplit(".", 1)[-1])

    return on_event


def merge_statements(found: list):
    """A dbt callback that adds to ``found`` each merge statement sent, lower case, on one line."""

    def on_event(event) -> None:
        if event.info.name == "SQLQuery":
            sql = " ".join(event.data.sql.lower().split())
            if "merge into" in sql:
                found.append(sql)

    return on_event


def views_sent(found: dict):
    """A dbt callback that records in ``found`` each temporary view created: its name -> its select."""

    def on_event(event) -> None:
        if event.info.name == "SQLQuery":
            sql = " ".join(event.data.sql.split())
            created = re.search(r"create or replace temporary view (\S+) as (.*)$", sql, re.IGNORECASE)
            if created:
                found[created.group(1)] = created.group(2)

    return on_event


def statements_sent(found: list):
    """A dbt callback that adds to ``found`` each statement sent, its whitespace collapsed."""

    def on_event(event) -> None:
        if event.info.name == "SQLQuery":
            found.append(" ".join(event.data.sql.split()))

    return on_event


def histories_described(found: list):
    """A dbt callback that adds to ``found`` the table named by each ``describe history`` sent."""

    def on_event(event) -> None:
        if event.info.name == "SQLQuery":
            for table in re.findall(r"describe history (\S+)", event.data.sql, re.IGNORECASE):
                found.append(table.rsplit(".", 1)[-1].strip("`"))

    return on_event


@pytest.fixture(scope="module")
def built(spark, dbt, schemas):
    models = schemas.models
    reset_raw_tables(spark)
    # The shipped consumer, without `dbt seed` (test_docs, test_oracle_e2e and test_cluster load it).
    spark.sql(f"create database if not exists {models}")
    set_consumers(spark, [("all_tables", "*.*")])
    land(spark, BATCH_1, batch_id=1)
    dbt("run", "--full-refresh", "-s", "+consumer_records")
    after_first = consumer_state(spark)
    land(spark, BATCH_2, batch_id=2)
    dbt("run", "-s", *INCREMENTAL)
    # a rerun with nothing new changes nothing
    before_noop = rows(spark, f"select * except (record) from {models}.consumer_records order by all")
    noop_merges, noop_statements, noop_histories = [], [], []
    noop = dbt(
        "run",
        "-s",
        *INCREMENTAL,
        callbacks=[
            merges_sent(noop_merges),
            statements_sent(noop_statements),
            histories_described(noop_histories),
        ],
    )
    after_noop = rows(spark, f"select * except (record) from {models}.consumer_records order by all")
    land(spark, BATCH_3, batch_id=3)
    merges, views = [], {}
    dbt(
        "run",
        "-s",
        *INCREMENTAL,
        "record_history",
        "sequin_violations",
        callbacks=[merges_sent(merges), views_sent(views)],
    )
    incremental = {
        "sequin": rows(spark, f"select * except (ingested_at) from {models}.sequin_events order by seq"),
        "consumer": consumer_state(spark),
        "consumer_rows": rows(spark, f"select * except (record) from {models}.consumer_records order by all"),
        "violations": rows(
            spark, f"select source_id, commit_lsn, commit_idx, reason from {schemas.audit}.sequin_violations"
        ),
    }
    # The data tests of the incremental result (the YAML unit tests run in test_dbt_unit.py).
    result = dbt(
        "test",
        "-s",
        "sequin_events",
        "source_records",
        "consumer_records",
        "sequin_violations",
        "--exclude",
        "test_type:unit",
        expect_success=False,
    )
    data = {r.node.name: r.status for r in result.result.results}
    return {
        "first": after_first,
        "noop": (before_noop, after_noop),
        "merges": {"noop": noop_merges, "new": merges},
        "noop_statements": noop_statements,
        "noop_messages": {r.node.name: str(r.message) for r in noop.result.results},
        "views": views,
        "histories": {"noop": noop_histories},
        "incremental": incremental,
        "data": data,
    }


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


def test_rerun_without_new_events_runs_no_merge(built):
    # Each model found nothing past what it consumed and sent Spark no merge: a merge of nothing
    # runs every stage of its select, then commits nothing. The next run, with new events, merges.
    assert built["merges"]["noop"] == []
    assert set(INCREMENTAL) <= set(built["merges"]["new"])


def test_rerun_without_new_events_plans_no_select(built):
    # A skipped merge skips what prepares it too: no temporary view of the model's select (Spark
    # neither analyses nor plans it) and no schema check of the view against the table. dbt reports
    # the run as "nothing new". With new events, each view is the model's select.
    sent = built["noop_statements"]
    for model in INCREMENTAL:
        assert not [s for s in sent if f"{model}__dbt_tmp" in s], sent
        assert not [s for s in sent if re.search(rf"describe extended \S*\b{model}\b", s)], sent
        assert built["noop_messages"][model] == "nothing new"
        assert not built["views"][f"{model}__dbt_tmp"].endswith("where false")


def test_rerun_without_new_events_reads_each_history_once(built):
    # A run with nothing new reads each model's recent commits once, while the model renders; the
    # post-hook that stamps a skipped run takes the latest commit from that answer.
    described = built["histories"]["noop"]
    for model in INCREMENTAL:
        assert described.count(model) == 1, described


def test_rerun_without_new_events_reads_nothing_landed(built):
    # sequin_events' mark holds the landed tables' generation (consumable_generation), and neither
    # has had a commit since: nothing landed, and nothing is asked of them.
    sent = built["noop_statements"]
    assert not [s for s in sent if re.search(r"\bint_events_consumable\b", s)], sent


def test_rerun_without_new_events_reads_no_range_of_sequin_events(built):
    # source_records stamped sequin_events' generation (table_generation) beside its seq, and
    # sequin_events has had no commit since: its range is known to be empty without reading it.
    sent = built["noop_statements"]
    assert not [s for s in sent if re.search(r"\bfrom \S*\bsequin_events\b", s)], sent


def test_rerun_without_new_events_reads_no_subscriptions(built):
    # consumer_records stamped the subscriptions' generation (subscriptions_generation) beside their
    # fingerprint, and the consumers seed has had no commit since: the stamp's fingerprint holds.
    sent = built["noop_statements"]
    assert not [s for s in sent if re.search(r"\bint_consumer_subscriptions\b", s)], sent


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


def test_sequin_events_keeps_statistics_only_of_the_columns_its_readers_filter_by(spark, schemas, built):
    added = file_statistics(spark, f"{schemas.models}.sequin_events")
    assert len(added) >= 2  # the first run's files and the increment's
    kept = {"seq", "source_id", "commit_lsn", "commit_idx", "batch_id", "action", "source_table", "record_pk"}
    assert all(set(stats["nullCount"]) == kept for stats in added), added[0]["nullCount"]


def test_violation_is_reported_not_sequenced(built):
    assert built["incremental"]["violations"] == [
        ("src", 300, 1, "differs from the change already recorded at this position")
    ]


def test_full_refresh_equals_incremental_runs(spark, dbt, schemas, built):
    dbt("run", "--full-refresh", "-s", *INCREMENTAL)
    sequin = rows(spark, f"select * except (ingested_at) from {schemas.models}.sequin_events order by seq")
    assert sequin == built["incremental"]["sequin"]
    assert consumer_state(spark) == built["incremental"]["consumer"]
    assert (
        rows(spark, f"select * except (record) from {schemas.models}.consumer_records order by all")
        == (built["incremental"]["consumer_rows"])
    )


def test_data_tests_catch_the_violation_and_pass_otherwise(built):
    failed = {name for name, status in built["data"].items() if status in ("fail", "error")}
    assert failed == {"is_empty_sequin_violations_"}


# The scenarios below each start from empty raw tables of their own; they run after the module's
# `built` scenario (file order), which they would otherwise overwrite.

CONSUMERS = ("+consumer_records",)  # the first run of a scenario: the views too, so it runs alone (-k)
EVERYTHING = (*CONSUMERS, "+record_history", "+keyless_changes", "+sequin_violations")


def fresh_start(spark, schemas) -> None:
    """Empty raw tables, the shipped consumer, and none of the tables this module's models build: the
    next run creates them (dropping is much faster than a full-refresh run)."""
    reset_raw_tables(spark)
    spark.sql(f"create database if not exists {schemas.models}")
    set_consumers(spark, [("all_tables", "*.*")])
    for table in ("sequin_events", "consumer_records", "record_history"):
        spark.sql(f"drop table if exists {schemas.models}.{table}")
    for table in ("keyless_changes", "sequin_violations"):
        spark.sql(f"drop table if exists {schemas.audit}.{table}")


def test_sequin_rebuilt_alone_makes_consumer_records_rebuild(spark, dbt, schemas):
    """A full refresh of sequin_events alone renumbers seq; consumer_records notices on its next run
    and rebuilds instead of skipping or re-applying changes."""
    fresh_start(spark, schemas)

    def both(lsn, pk, action="insert", v="1"):
        return [
            change(lsn, 0, action, table=f"t_{source}", pk=(pk,), record=a(pk, v=v), source=source)
            for source in ("a", "b")
        ]

    land(spark, both(100, 1), batch_id=1)
    land(spark, both(200, 1, "update", v="2") + both(210, 2), batch_id=2)
    dbt("run", "-s", *CONSUMERS)  # seq 1 to 3: a's changes, 4 to 6: b's; consumed up to 6
    land(spark, both(300, 3) + both(310, 1, "update", v="3"), batch_id=3)
    # Renumbered: all of a (1 to 5), then all of b. Continuing from seq 6 would skip a's 300 and 310.
    dbt("run", "--full-refresh", "-s", "sequin_events")
    land(spark, both(400, 4) + both(410, 2, "delete"), batch_id=4)
    dbt("run", "-s", *INCREMENTAL)
    incremental = all_consumer_records(spark)
    assert {(r[3], r[4]) for r in incremental} == {
        (f"t_{s}", f'["{pk}"]') for s in ("a", "b") for pk in (1, 3, 4)
    }
    dbt("run", "--full-refresh", "-s", "source_records", "consumer_records")
    assert incremental == all_consumer_records(spark)


MOVE_BATCHES = [
    [
        # A -> B -> C in one run, each move leaving the TOASTed note out
        change(100, 0, "insert", pk=(1,), record=a(1, note="toast-1", v="a")),
        change(100, 1, "update", pk=(2,), old_pk=(1,), record=a(2, v="b")),
        change(100, 2, "update", pk=(3,), old_pk=(2,), record=a(3, v="c")),
        # K -> L -> K in one run
        change(110, 0, "insert", pk=(10,), record=a(10, note="toast-10", v="k")),
        change(120, 0, "update", pk=(11,), old_pk=(10,), record=a(11, v="l")),
        change(120, 1, "update", pk=(10,), old_pk=(11,), record=a(10, v="k2")),
        # Debezium: the key change is a delete of the old key, then the create of the new one
        change(130, 0, "insert", pk=(20,), record=a(20, note="toast-20", v="d")),
        change(140, 0, "delete", pk=(20,), record={"id": "20"}),
        change(140, 1, "insert", pk=(21,), old_pk=(20,), record=a(21, v="d2")),
    ],
    [
        # C -> E -> F across runs, an update of E in between
        change(200, 0, "update", pk=(5,), old_pk=(3,), record=a(5, v="e")),
        change(200, 1, "update", pk=(5,), record=a(5, v="e2")),
        change(210, 0, "update", pk=(6,), old_pk=(5,), record=a(6, v="f")),
        # the Debezium row moves again, back onto its first key
        change(220, 0, "delete", pk=(21,), record={"id": "21"}),
        change(220, 1, "insert", pk=(20,), old_pk=(21,), record=a(20, v="d3")),
    ],
]

MOVED = {
    ("accounts", '["6"]'): a(6, note="toast-1", v="f"),
    ("accounts", '["10"]'): a(10, note="toast-10", v="k2"),
    ("accounts", '["20"]'): a(20, note="toast-20", v="d3"),
}

# Then a run with no truncate: it lays its updates over the stored records in its merge, and its
# fold reads only the stored records of the keys a row moved away from.
LAID_OVER_BATCH = [
    # two updates over a stored row, the TOASTed note left out of both
    change(300, 0, "update", pk=(6,), record=a(6, v="f2")),
    change(300, 1, "update", pk=(6,), record=a(6, v="f3")),
    change(310, 0, "update", pk=(5,), record=a(5, v="e3")),  # an update over a tombstone
    change(320, 0, "update", pk=(7,), record=a(7, v="z")),  # an update of a key never seen
    change(330, 0, "update", pk=(12,), old_pk=(10,), record=a(12, v="k3")),  # a move: 10's note
    change(340, 0, "delete", pk=(20,), record={"id": "20"}),  # a delete, then an insert
    change(340, 1, "insert", pk=(20,), record=a(20, v="d4")),
    # a move from a key with a quote and a backslash
    change(350, 0, "insert", pk=("x'\\y",), record=a("x'\\y", note="n-x", v="p")),
    change(350, 1, "update", pk=("z",), old_pk=("x'\\y",), record=a("z", v="p2")),
]

LAID_OVER = {
    ("accounts", '["5"]'): a(5, v="e3"),
    ("accounts", '["6"]'): a(6, note="toast-1", v="f3"),
    ("accounts", '["7"]'): a(7, v="z"),
    ("accounts", '["12"]'): a(12, note="toast-10", v="k3"),
    ("accounts", '["20"]'): a(20, v="d4"),
    ("accounts", '["z"]'): a("z", note="n-x", v="p2"),
}


def test_key_moves_keep_left_out_columns(spark, dbt, schemas):
    fresh_start(spark, schemas)
    land(spark, MOVE_BATCHES[0], batch_id=1)
    dbt("run", "-s", *CONSUMERS)
    land(spark, MOVE_BATCHES[1], batch_id=2)
    # record_history built once, at the end: its first run is a full build over both batches
    result = dbt("run", "-s", *INCREMENTAL, "record_history")
    assert consumer_state(spark) == MOVED
    # The moves in chains (C -> E -> F in this run; A -> B -> C -> E -> F, K -> L -> K and the
    # Debezium row's two moves over the whole log) were listed before the run, not recursed over.
    assert chain_resolution(result) == {"source_records": "2 chained", "record_history": "8 chained"}

    # every version of record_history holds the full row
    versions = spark.sql(
        f"select record_pk, valid_from_seq, record from {schemas.models}.record_history where not is_deleted"
    ).collect()
    assert len(versions) == 12
    assert [(v.record_pk, v.valid_from_seq) for v in versions if "note" not in v.record] == []
    current = {
        v.record_pk: v.record
        for v in spark.sql(
            f"select record_pk, record from {schemas.models}.record_history "
            "where valid_to_seq is null and not is_deleted"
        ).collect()
    }
    assert {("accounts", pk): record for pk, record in current.items()} == MOVED

    land(spark, LAID_OVER_BATCH, batch_id=3)
    statements = []
    dbt("run", "-s", *INCREMENTAL, callbacks=[statements_sent(statements)])
    assert consumer_state(spark) == LAID_OVER
    (view,) = [s for s in statements if "temporary view source_records__dbt_tmp" in s]
    assert "left semi join" in view
    # No row moved twice in this run: each move's base is its own link, not grouped by chain, and
    # the keys moved from are semi-joined as they come (no distinct, no shuffle for one).
    assert "chain_links" not in view and "select distinct" not in view
    (merge,) = [s for s in statements if re.search(r"merge into \S*source_records\b", s)]
    assert "DBT_INTERNAL_SOURCE.lays_over_stored" in merge
    # Its key-move steps read the run's touches again, from one scan of sequin_events (`computed_once`).
    assert final_plan_scans(spark, "source_records__dbt_tmp", f"{schemas.models}.sequin_events") == 1
    incremental = all_consumer_records(spark)

    # Too many chained moves to count (none allowed here): the recursion, with the same result.
    result = dbt("run", "--full-refresh", "-s", *INCREMENTAL, "--vars", "{wal_lake_max_chained_key_moves: 0}")
    assert chain_resolution(result) == {"source_records": "recursion"}
    assert all_consumer_records(spark) == incremental


# record_history, built a seq range at a time: every kind of touch, across runs (a fold and a
# chain of moves continuing what an earlier run holds, truncates between runs).
HISTORY_BATCHES = [
    [
        change(100, 0, "insert", pk=(1,), record=a(1, note="toast-1", v="a")),
        change(100, 1, "update", pk=(1,), record=a(1, v="a2")),  # the TOASTed note not sent
        change(110, 0, "insert", pk=(2,), record=a(2, note="toast-2", v="b")),
        change(110, 1, "delete", pk=(2,), record={"id": "2"}),
        change(120, 0, "insert", pk=(10,), record=a(10, note="toast-10", v="k")),
        change(130, 0, "insert", pk=(20,), record=a(20, note="toast-20", v="d")),
        # a chain in one run: 30 -> 31 -> 32
        change(140, 0, "insert", pk=(30,), record=a(30, note="toast-30", v="c")),
        change(140, 1, "update", pk=(31,), old_pk=(30,), record=a(31, v="c1")),
        change(140, 2, "update", pk=(32,), old_pk=(31,), record=a(32, v="c2")),
        m(150, 0, "insert", 1, "core", "admin"),
        m(150, 1, "insert", 1, "web", "member"),
    ],
    [
        change(200, 0, "update", pk=(1,), record=a(1, v="a3")),  # folds on the held record
        change(200, 1, "update", pk=(3,), old_pk=(1,), record=a(3, v="a4")),  # a move from a held key
        change(210, 0, "insert", pk=(2,), record=a(2, note="toast-2b", v="b2")),  # after a held delete
        change(220, 0, "truncate", table="memberships"),
        m(220, 1, "insert", 2, "ops", "member"),
        # Debezium's key change of a held row: the delete of the old key, then the create
        change(230, 0, "delete", pk=(20,), record={"id": "20"}),
        change(230, 1, "insert", pk=(21,), old_pk=(20,), record=a(21, v="d2")),
        # the chain goes on from a held move: 32 -> 33, an update before it
        change(240, 0, "update", pk=(32,), record=a(32, v="c3")),
        change(240, 1, "update", pk=(33,), old_pk=(32,), record=a(33, v="c4")),
        change(250, 0, "update", pk=(10,), record=a(10, v="k2")),
    ],
    [
        change(300, 0, "update", pk=(4,), old_pk=(3,), record=a(4, v="a5")),  # 1 -> 3 -> 4
        change(300, 1, "update", pk=(4,), record=a(4, v="a6")),
        change(310, 0, "update", pk=(11,), old_pk=(10,), record=a(11, v="l")),  # K -> L, back next run
        change(305, 0, "delete", pk=(21,), record={"id": "21"}),  # Debezium: the create comes next run
        change(320, 0, "update", pk=(2,), record=a(2, v="b3")),
        change(325, 0, "insert", pk=(61,), record=a(61, note="toast-61", v="g")),
        change(330, 0, "truncate"),  # accounts: every current version ends here
        change(345, 0, "insert", pk=(61,), record=a(61, v="g2")),  # the whole row: nothing carried
        change(340, 0, "insert", pk=(1,), record=a(1, note="toast-1c", v="again")),
        change(340, 1, "update", pk=(1,), record=a(1, v="again2")),
        m(350, 0, "update", 2, "ops", "owner"),
    ],
    [
        change(400, 0, "insert", pk=(11,), record=a(11, note="toast-11", v="l2")),
        change(400, 1, "update", pk=(10,), old_pk=(11,), record=a(10, v="k3")),  # L -> K
        change(410, 0, "update", pk=(10,), record=a(10, v="k4")),
        change(420, 0, "delete", pk=(1,), record={"id": "1"}),
        change(430, 0, "insert", pk=(50,), record=a(50, note="toast-50", v="e")),
        change(430, 1, "update", pk=(51,), old_pk=(50,), record=a(51, v="e1")),
        change(430, 2, "update", pk=(50,), old_pk=(51,), record=a(50, v="e2")),
        change(440, 0, "insert", pk=(22,), old_pk=(21,), record=a(22, v="d3")),
        # many touches of one key in one run: the fold starts again at each whole row
        change(450, 0, "insert", pk=(60,), record=a(60, note="toast-60", v="f")),
        change(450, 1, "update", pk=(60,), record=a(60, v="f2")),  # the note carried
        change(450, 2, "delete", pk=(60,), record={"id": "60"}),
        change(460, 0, "insert", pk=(60,), record=a(60, v="f3")),  # a new row: no note from before
        change(460, 1, "update", pk=(60,), record=a(60, note=None)),  # a null sent is a value
        change(460, 2, "update", pk=(60,), record=a(60, v="f4")),
    ],
]


def test_record_history_built_a_range_at_a_time_equals_a_full_refresh(spark, dbt, schemas):
    """record_history merges only what each run's seq range begins or ends (the held versions it
    ends, the versions it begins), folding on from the records it holds; a full refresh gives the
    same table row for row."""
    fresh_start(spark, schemas)
    history = f"{schemas.models}.record_history"

    def everything() -> list[tuple]:
        # the record as JSON with sorted keys: a map's entry order is not part of its value
        found = rows(spark, f"select * except (record), to_json(record) from {history}")
        normal = [(*r[:-1], json.dumps(json.loads(r[-1]), sort_keys=True) if r[-1] else None) for r in found]
        return sorted(normal, key=repr)

    land(spark, HISTORY_BATCHES[0], batch_id=1)
    dbt("run", "-s", "+record_history")
    for batch_id, batch in enumerate(HISTORY_BATCHES[1:], start=2):
        land(spark, batch, batch_id=batch_id)
        statements = []
        result = dbt("run", "-s", "sequin_events", "record_history", callbacks=[merge_statements(statements)])
        assert history in result.result.results[-1].node.compiled_code  # it reads what it holds
        merge = spark.sql(f"describe history {history} limit 1").collect()[0]
        assert merge.operation == "MERGE"
        # the run's source rows: the versions it began and the held ones it ended or that stopped
        # being current, nothing else (every row not in the table as it was before the merge)
        as_json = "select * except (record), to_json(record) from {}"
        before = f"{history} version as of {merge.version - 1}"
        changed = f"{as_json.format(history)} except {as_json.format(before)}"
        written = rows(spark, f"select count(*) from ({changed})")[0][0]
        assert int(merge.operationMetrics["numSourceRows"]) == written > 0
        assert written < rows(spark, f"select count(*) from {history}")[0][0]
        # the held versions it ended are marked deleted where they lie (deletion vectors), not
        # rewritten with every other version of their files
        assert int(merge.operationMetrics["numTargetRowsUpdated"]) > 0
        assert int(merge.operationMetrics["numTargetRowsCopied"]) == 0
        # the merge matches current versions only: Delta prunes the other partition's files
        assert "(dbt_internal_dest.is_current)" in statements[-1]
        # the held versions are read by three steps (the starting records, the versions closed, the
        # key moves' starts) from one scan of the table (`computed_once`), of its current partition
        assert final_plan_scans(spark, "record_history__dbt_tmp", history) == 1
        assert "is_current" in scan_partition_filters(spark, "record_history__dbt_tmp", history)
        # current: each record's latest version, and its latest that is not a deletion
        assert current_versions_as_defined(spark, history)
        # every version's record, the ones this run folded on from what it held included
        assert records_folded_as_defined(spark, schemas) == []
    # nothing new: nothing changes, and nothing held is read
    incremental = everything()
    result = dbt("run", "-s", "record_history")
    assert history not in result.result.results[0].node.compiled_code
    assert everything() == incremental
    # every live version of an account carries its TOASTed note, whichever run folded it, but
    # those of the row inserted again without one
    assert sorted(
        rows(
            spark,
            f"select record_pk, commit_lsn, commit_idx from {history} "
            "where source_table = 'accounts' and not is_deleted and not map_contains_key(record, 'note')",
        )
    ) == [('["60"]', 460, 0), ('["61"]', 345, 0)]
    current = rows(
        spark,
        f"select record_pk, record['note'], record['v'] from {history} "
        "where source_table = 'accounts' and valid_to_seq is null and not is_deleted order by record_pk",
    )
    assert current == [
        ('["10"]', "toast-11", "k4"),
        ('["22"]', "toast-20", "d3"),
        ('["50"]', "toast-50", "e2"),
        ('["60"]', None, "f4"),
        ('["61"]', None, "g2"),
    ]
    dbt("run", "--full-refresh", "-s", "record_history")
    assert everything() == incremental
    assert records_folded_as_defined(spark, schemas) == []
    # a table an earlier version built, without the current versions' partition, rebuilds itself
    spark.sql(f"create or replace table {history} using delta as select * except (is_current) from {history}")
    dbt("run", "-s", "record_history")
    assert everything() == incremental
    assert "is_current" in spark.sql(f"describe detail {history}").collect()[0].partitionColumns


def records_folded_as_defined(spark, schemas) -> list[tuple]:
    """The versions of record_history whose record is not the contract's fold of its key's touches
    up to it, folded here one version after another from the changes in sequin_events: an insert or
    read sets the row; an update lays the columns it sent over the key's version before it (nothing
    after a deletion, whatever truncate came between); a change that moved the row from another key
    lays them over that key's latest version before it that is not a deletion. Deletions are left
    out (their record is the key the change sent)."""
    sent = {
        (r.source_table, r.seq): json.loads(r.record)
        for r in spark.sql(
            f"select source_table, seq, to_json(record) as record from {schemas.models}.sequin_events "
            "where record is not null"
        ).collect()
    }
    versions = spark.sql(
        "select source_table, record_pk, valid_from_seq as seq, action, is_deleted, moved_from_pk, "
        f"to_json(record) as record from {schemas.models}.record_history order by valid_from_seq"
    ).collect()
    held: dict[tuple, list] = {}  # (table, key) -> its versions so far, in seq order
    wrong = []
    for v in versions:
        key = (v.source_table, v.record_pk)
        earlier = held.setdefault(key, [])
        if not v.is_deleted:
            changes = sent[(v.source_table, v.seq)]
            bases = []
            if v.moved_from_pk is not None and v.moved_from_pk != v.record_pk:
                bases = [o for o in held.get((v.source_table, v.moved_from_pk), []) if not o.is_deleted]
            if bases:
                expected = {**json.loads(bases[-1].record), **changes}
            elif v.action in ("insert", "read"):
                expected = changes
            else:
                before = earlier[-1] if earlier and not earlier[-1].is_deleted else None
                expected = {**(json.loads(before.record) if before else {}), **changes}
            if json.loads(v.record) != expected:
                wrong.append((*key, v.seq, v.record, expected))
        earlier.append(v)
    return wrong


def current_versions_as_defined(spark, history: str) -> bool:
    """record_history's is_current holds for each record's latest version and its latest version
    that is not a deletion, and for no other."""
    key = "source_id, source_schema, source_table, record_pk"
    wrong = rows(
        spark,
        f"""
        select count(*) from (
            select
                is_current,
                valid_from_seq = max(valid_from_seq) over (partition by {key})
                or valid_from_seq = max(if(is_deleted, null, valid_from_seq)) over (partition by {key})
                    as defined
            from {history}
        )
        where not (is_current <=> defined)
        """,
    )
    return wrong[0][0] == 0


def chain_resolution(result) -> dict[str, str]:
    """How each model of a dbt run's result that resolves key moves follows their chains."""
    found = {}
    for node_result in result.result.results:
        code = node_result.node.compiled_code or ""
        if "move_bases" in code:
            listed = len(re.findall(r"\(\d+L, \d+L, \d+, ", code))
            found[node_result.node.name] = "recursion" if "with recursive" in code else f"{listed} chained"
    return found


def test_keyless_changes_and_unsequenced_messages(spark, dbt, schemas):
    """Changes of a table without a key stay in sequin_events, in order and deduplicated by
    position, are left out of consumer_records and counted; a non-transactional message (commit_idx
    -1) orders before the transaction committing at its LSN."""
    fresh_start(spark, schemas)
    row = {"k": "same", "n": "1"}
    keyless = [
        change(100, 0, "insert", table="logs", record=row),
        change(100, 1, "delete", table="logs", record=row),
        change(200, 0, "insert", table="logs", record=row),  # the identical row again: another change
    ]
    message = change(200, -1, "message", table=None, record={"prefix": "hb", "content": "x"})
    message.update(source_schema=None)
    land(spark, [*keyless, message, change(200, 1, "insert", pk=(1,), record=a(1, v="x"))], batch_id=1)
    # the same change again, from a copy of its file
    replay = {**keyless[1], "landing_file": "src/copy-of-0000000000000064.jsonl"}
    land(spark, [replay], batch_id=2, frontier={"src": 200})
    dbt("run", "-s", *EVERYTHING)
    sequin = rows(
        spark,
        f"select commit_lsn, commit_idx, action, source_table from {schemas.models}.sequin_events "
        "order by seq",
    )
    assert sequin == [
        (100, 0, "insert", "logs"),
        (100, 1, "delete", "logs"),
        (200, -1, "message", None),
        (200, 0, "insert", "logs"),
        (200, 1, "insert", "accounts"),
    ]
    assert consumer_state(spark) == {("accounts", '["1"]'): a(1, v="x")}
    counted = "source_table, reason, change_count, insert_count, delete_count"
    assert rows(spark, f"select {counted} from {schemas.audit}.keyless_changes") == [
        ("logs", "table without a primary key", 3, 2, 1)
    ]
    keyless_versions = f"select count(*) from {schemas.models}.record_history where record_pk is null"
    assert rows(spark, keyless_versions) == [(0,)]
    result = dbt(
        "test",
        "-s",
        "stg_wal__events",
        "sequin_events",
        "source_records",
        "consumer_records",
        "record_history",
        "keyless_changes",
        "sequin_violations",
        "--exclude",
        "test_type:unit",
        expect_success=False,
    )
    failed = {r.node.name for r in result.result.results if r.status in ("fail", "error")}
    assert failed == set()


def consumer_rows(spark, schemas) -> list[tuple]:
    return rows(
        spark,
        "select consumer_name, source_schema, source_table, record_pk "
        f"from {schemas.models}.consumer_records order by all",
    )


def test_consumers_seed_changes_apply_on_the_next_run(spark, dbt, schemas):
    fresh_start(spark, schemas)

    def insert(lsn, schema, table, pk=1):
        c = change(lsn, 0, "insert", table=table, pk=(pk,), record=a(pk))
        c.update(source_schema=schema)
        return c

    land(
        spark,
        [
            insert(100, "public", "accounts"),
            insert(110, "public", "orders"),
            insert(120, "a.b", "c"),
            insert(130, "a", "b.c"),
            insert(140, "public", "x%y"),
            insert(150, "public", "xzy"),
        ],
        batch_id=1,
    )
    set_consumers(spark, [("narrow", "public.accounts"), ("gone", "*.*")])
    dbt("run", "-s", *CONSUMERS)
    set_consumers(
        spark,
        [
            ("narrow", "public.*"),  # widened
            ("late", "public.orders"),  # added
            ("dotted", '"a.b".c'),
            ("dotted_table", "a.b.c"),
            ("percent", "public.x%y"),
            ("shrunk", "public.accounts"),
        ],
    )
    land(spark, [insert(200, "public", "accounts", pk=2)], batch_id=2)
    dbt("run", "-s", *INCREMENTAL)
    incremental = consumer_rows(spark, schemas)
    set_consumers(spark, [("shrunk", "public.accounts"), ("narrow", "public.accounts")])  # narrowed, removed
    dbt("run", "-s", "consumer_records")  # nothing new landed: sequin_events has nothing to add
    narrowed = consumer_rows(spark, schemas)

    dbt("run", "--full-refresh", "-s", "consumer_records")
    assert consumer_rows(spark, schemas) == narrowed
    assert narrowed == [
        ("narrow", "public", "accounts", '["1"]'),
        ("narrow", "public", "accounts", '["2"]'),
        ("shrunk", "public", "accounts", '["1"]'),
        ("shrunk", "public", "accounts", '["2"]'),
    ]
    public = [("public", t, '["1"]') for t in ("accounts", "orders", "x%y", "xzy")]
    assert incremental == sorted(
        [
            ("dotted", "a.b", "c", '["1"]'),
            ("dotted_table", "a", "b.c", '["1"]'),
            ("late", "public", "orders", '["1"]'),
            *[("narrow", *p) for p in public],
            ("narrow", "public", "accounts", '["2"]'),
            ("percent", "public", "x%y", '["1"]'),
            ("shrunk", "public", "accounts", '["1"]'),
            ("shrunk", "public", "accounts", '["2"]'),
        ]
    )


def consumed_mark(spark, relation: str) -> list | None:
    """The consumed positions on the newest commit of ``relation`` that carries sequin_events' mark."""
    for row in spark.sql(f"describe history {relation} limit 50").collect():
        metadata = row.userMetadata or ""
        if metadata.startswith("wal_lake.consumed_positions="):
            positions = metadata.split("=", 1)[1]
            return json.loads(positions[: positions.rindex("]") + 1])  # then @ and the generation
    return None


def test_sequin_events_reads_what_it_consumed_from_its_own_commit(spark, dbt, schemas):
    """sequin_events finds what it consumed in the mark on its last commit, not by reading the log:
    a batch of replays alone is read once, not on every run after it; a commit that is not one of
    its runs (a DELETE by hand) makes the next run read the log instead."""
    fresh_start(spark, schemas)
    sequin = f"{schemas.models}.sequin_events"
    first = [
        change(100, 0, "insert", pk=(1,), record=a(1, v="a")),
        change(200, 0, "insert", pk=(2,), record=a(2)),
    ]
    land(spark, first, batch_id=1)
    dbt("run", "-s", "+sequin_events")
    assert consumed_mark(spark, sequin) == [["src", 1, 200, 0]]

    # Batch 2 holds only replays: the run finds them, inserts nothing, and its mark still moves on
    # (on a commit of its own, the merge having committed nothing), so the next run reads nothing.
    land(spark, first, batch_id=2)
    dbt("run", "-s", "sequin_events")
    assert consumed_mark(spark, sequin) == [["src", 2, 200, 0]]
    merges = []
    dbt("run", "-s", "sequin_events", callbacks=[merges_sent(merges)])
    assert merges == []

    # A change of the table that no run made: the mark no longer describes its rows. The next run
    # aggregates the log, finds position 200 missing, and reads the batches past the one it holds.
    spark.sql(f"delete from {sequin} where commit_lsn = 200")
    dbt("run", "-s", "sequin_events")
    assert rows(spark, f"select seq, commit_lsn, batch_id from {sequin} order by seq") == [
        (1, 100, 1),
        (2, 200, 2),
    ]
    assert consumed_mark(spark, sequin) == [["src", 2, 200, 0]]

    # A second source that then stays idle: what it consumed stays at its one batch, below the other
    # source's. Each source is read past its own batch, so a run with nothing new finds nothing (not
    # the other source's batches past the idle one's) and merges nothing; then the idle source's next
    # change is read.
    land(spark, [change(50, 0, "insert", pk=(7,), record=a(7), source="idle")], batch_id=3)
    land(spark, [change(300, 0, "insert", pk=(3,), record=a(3))], batch_id=4)
    dbt("run", "-s", "sequin_events")
    assert consumed_mark(spark, sequin) == [["idle", 3, 50, 0], ["src", 4, 300, 0]]
    merges = []
    dbt("run", "-s", "sequin_events", callbacks=[merges_sent(merges)])
    assert merges == []
    land(spark, [change(60, 0, "update", pk=(7,), record=a(7, v="b"), source="idle")], batch_id=5)
    dbt("run", "-s", "sequin_events")
    later = f"select seq, source_id, commit_lsn, batch_id from {sequin} where seq > 2 order by seq"
    assert rows(spark, later) == [
        (3, "idle", 50, 3),
        (4, "src", 300, 4),
        (5, "idle", 60, 5),
    ]


def test_a_small_run_numbers_seq_inline_as_the_range_plan_does(spark, dbt, schemas):
    """An incremental run of at most wal_lake_seq_inline_transactions transactions gets their offsets
    with what is past the consumed batches and inlines them; a larger one sums the spans per range of
    WAL in Spark. Both give the same seq: sources in order, a commit_idx gap kept, a replay left out,
    a transaction's changes at or below the consumed position out of its first commit_idx."""
    sequin = f"{schemas.models}.sequin_events"
    first = [
        change(100, 0, "insert", pk=(1,), record=a(1), source="a"),
        change(100, 1, "update", pk=(1,), record=a(1, v="x"), source="a"),
        change(50, 0, "insert", pk=(5,), record=a(5), source="b"),
    ]
    second = [
        change(100, 1, "update", pk=(1,), record=a(1, v="x"), source="a"),  # a replay
        change(300, 0, "insert", pk=(3,), record=a(3), source="a"),
        change(300, 1, "update", pk=(3,), record=a(3, v="y"), source="a"),
        change(300, 3, "update", pk=(3,), record=a(3, v="z"), source="a"),  # 2 was rejected
        change(200, 0, "insert", pk=(2,), record=a(2), source="a"),
        # past b's consumed position (50, 0), in the transaction it holds, landed again beside it
        change(50, 0, "insert", pk=(5,), record=a(5), source="b"),
        change(50, 1, "update", pk=(5,), record=a(5, v="w"), source="b"),
        change(400, 0, "insert", pk=(4,), record=a(4), source="b"),
        change(400, 1, "delete", pk=(4,), record=a(4), source="b"),
    ]
    numbered, plans = {}, {}
    for inline_transactions in (5000, 1):
        fresh_start(spark, schemas)
        land(spark, first, batch_id=1)
        dbt("run", "-s", "+sequin_events")
        land(spark, second, batch_id=2)
        sent = []
        dbt(
            "run",
            "-s",
            "sequin_events",
            "--vars",
            json.dumps({"wal_lake_seq_inline_transactions": inline_transactions}),
            callbacks=[statements_sent(sent)],
        )
        select = next(s for s in sent if "max_seq as (" in s)
        if "range_spans" in select:
            plans[inline_transactions] = "ranges"
        elif "as transaction_offsets (source_id" in select:
            plans[inline_transactions] = "inline"
        numbered[inline_transactions] = rows(
            spark, f"select seq, source_id, commit_lsn, commit_idx from {sequin} where seq > 3 order by seq"
        )
        assert consumed_mark(spark, sequin) == [["a", 2, 300, 3], ["b", 2, 400, 1]]
    assert plans == {5000: "inline", 1: "ranges"}
    assert numbered[5000] == numbered[1]
    assert numbered[5000] == [
        (4, "a", 200, 0),
        (5, "a", 300, 0),
        (6, "a", 300, 1),
        (8, "a", 300, 3),
        (9, "b", 50, 1),
        (10, "b", 400, 0),
        (11, "b", 400, 1),
    ]


def test_sequin_violations_checks_each_batch_once_after_sequin_events_read_it(spark, dbt, schemas):
    """sequin_violations compares only the batches sequin_events read since its last run: a
    violation landed later is found, kept once through runs with nothing new, and a full refresh
    finds the same."""
    fresh_start(spark, schemas)
    violations = f"select commit_lsn, commit_idx, landing_line, reason from {schemas.audit}.sequin_violations"
    land(spark, [change(100, 0, "insert", pk=(1,), record=a(1, v="a"))], batch_id=1)
    dbt("run", "-s", "+sequin_events", "sequin_violations")
    assert rows(spark, violations) == []

    # A different change at the consumed position 100/0, a replay of it, and a new change.
    late = [
        change(100, 0, "insert", pk=(1,), record=a(1, v="other")),
        change(100, 0, "insert", pk=(1,), record=a(1, v="a")),
        change(300, 0, "insert", pk=(3,), record=a(3)),
    ]
    land(spark, late, batch_id=2)
    dbt("run", "-s", "sequin_events", "sequin_violations")
    found = rows(spark, violations)
    assert [(lsn, idx, reason) for lsn, idx, _, reason in found] == [
        (100, 0, "differs from the change already recorded at this position")
    ]
    merges = []
    dbt("run", "-s", "sequin_events", "sequin_violations", callbacks=[merges_sent(merges)])
    assert merges == []
    assert rows(spark, violations) == found
    result = dbt("run", "--full-refresh", "-s", "sequin_violations")
    assert rows(spark, violations) == found
    assert "broadcast(positions)" in result.result.results[0].node.compiled_code
    # a run of more changes than wal_lake_broadcast_checked_changes joins by shuffle, with the same result
    low_bound = "{wal_lake_broadcast_checked_changes: 2}"
    result = dbt("run", "--full-refresh", "-s", "sequin_violations", "--vars", low_bound)
    assert "broadcast(" not in result.result.results[0].node.compiled_code
    assert rows(spark, violations) == found


def test_a_replay_is_the_same_change_only_when_it_says_the_same_thing(spark, dbt, schemas):
    """change_hash tells apart two changes that differ only in which column holds a null, and a
    replay of a row logged before the hash was xxhash64 (its change_hash the sha2 of its JSON) is
    still the same change."""
    fresh_start(spark, schemas)
    models = schemas.models
    violations = f"select commit_lsn, commit_idx, landing_line from {schemas.audit}.sequin_violations"
    first = [
        change(100, 0, "insert", pk=(1,), record=a(1, v=None, w="w")),
        change(200, 0, "insert", pk=(2,), record=a(2, v="a")),
    ]
    land(spark, first, batch_id=1)
    dbt("run", "-s", "+sequin_events", "sequin_violations")
    assert rows(spark, violations) == []
    hashes = dict(rows(spark, f"select commit_lsn, change_hash from {models}.sequin_events"))
    assert {lsn: len(h) for lsn, h in hashes.items()} == {100: 16, 200: 16}
    # 200/0 as a warehouse logged before the hash was xxhash64 holds it.
    fields = "action, source_schema, source_table, record_pk, record, changes, old_record_pk"
    spark.sql(
        f"update {models}.sequin_events set change_hash = sha2(to_json(struct({fields})), 256) "
        "where commit_lsn = 200"
    )

    def at_line(row: dict, line: int) -> dict:
        return {**row, "landing_file": "src/replays.jsonl", "landing_line": line}

    land(
        spark,
        [
            at_line(first[0], 1),  # a replay
            at_line(change(100, 0, "insert", pk=(1,), record=a(1, v="w", w=None)), 2),  # the null moved
            at_line(first[1], 3),  # a replay of the row hashed by sha2
            at_line(change(200, 0, "insert", pk=(2,), record=a(2, v="b")), 4),
        ],
        batch_id=2,
    )
    dbt("run", "-s", "sequin_events", "sequin_violations")
    assert sorted(rows(spark, violations)) == [(100, 0, 2), (200, 0, 4)]
    assert rows(spark, f"select count(*) from {models}.sequin_events") == [(2,)]
