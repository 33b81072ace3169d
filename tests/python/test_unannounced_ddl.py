"""DDL that logical decoding does not send, detected from what it leaves in the data.

A primary key changed at the source shows as a table whose changes name other key columns from
some position on; a column rename as a column that stops appearing where a new one of its type
begins. ``unannounced_ddl`` reports both, and its data test warns (docs/contract.md, "DDL the
stream does not carry"). Ordinary schema changes (a column added, a type widened) are not reported.
"""

from __future__ import annotations

from model_helpers import change, land, reset_raw_tables

BUILD = ("+unannounced_ddl",)


def rows(spark, sql: str) -> list[tuple]:
    return [tuple(r) for r in spark.sql(sql).collect()]


def test_a_changed_key_and_a_renamed_column_are_reported_and_a_plain_added_column_is_not(spark, dbt, schemas):
    reset_raw_tables(spark)
    land(
        spark,
        [
            # accounts: key id; then `alter table ... drop constraint, add primary key (id, region)`
            change(100, 0, "insert", pk=(1,), record={"id": "1", "region": "eu", "v": "a"}),
            change(200, 0, "update", pk=(1,), record={"id": "1", "region": "eu", "v": "b"}),
            # orders: a column added (note) is an ordinary change of the table's shape
            change(100, 1, "insert", table="orders", pk=(1,), record={"id": "1", "total": "5"}),
            change(200, 1, "insert", table="orders", pk=(2,), record={"id": "2", "total": "6", "note": "x"}),
        ],
        batch_id=1,
    )
    dbt("run", "-s", *BUILD)
    assert rows(spark, f"select * from {schemas.audit}.unannounced_ddl") == []

    land(
        spark,
        [
            change(
                300,
                0,
                "update",
                pk=(1, "eu"),
                key_columns=("id", "region"),
                record={"id": "1", "region": "eu", "v": "c"},
            ),
            # orders: `alter table orders rename column total to amount`
            change(300, 1, "update", table="orders", pk=(2,), record={"id": "2", "amount": "7", "note": "x"}),
        ],
        batch_id=2,
    )
    dbt("run", "-s", *BUILD)
    found = rows(
        spark,
        "select source_table, change_kind, before_value, after_value, before_last_commit_lsn, "
        f"after_first_commit_lsn from {schemas.audit}.unannounced_ddl order by source_table",
    )
    assert found == [
        ("accounts", "key columns changed", '["id"]', '["id","region"]', 200, 300),
        ("orders", "column renamed or replaced", "total", "amount", 200, 300),
    ]
    result = dbt("test", "-s", "unannounced_ddl", "--exclude", "test_type:unit")
    assert result.success  # a warning, not an error: the data is not wrong, it needs a decision
    statuses = {r.node.name: str(r.status) for r in result.result}
    assert any(name.startswith("is_empty_unannounced_ddl") and s == "warn" for name, s in statuses.items())
