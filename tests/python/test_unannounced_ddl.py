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
    # A warehouse of an earlier version holds it as a table: the run makes it the view it is now.
    spark.sql(f"create schema if not exists {schemas.audit}")
    spark.sql(f"create or replace table {schemas.audit}.unannounced_ddl (source_id string) using delta")
    dbt("run", "-s", *BUILD)
    assert rows(spark, f"select * from {schemas.audit}.unannounced_ddl") == []
    described = spark.sql(f"describe extended {schemas.audit}.unannounced_ddl")
    assert described.where("col_name = 'Type'").first()[1] == "VIEW"

    land(
        spark,
        [
            # the old key once more, in the next run: the span of ["id"] ends here, not at 200
            change(250, 0, "update", pk=(1,), record={"id": "1", "region": "eu", "v": "b2"}),
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
        ("accounts", "key columns changed", '["id"]', '["id","region"]', 250, 300),
        ("orders", "column renamed or replaced", "total", "amount", 200, 300),
    ]
    # The key spans were merged by the second run, not rebuilt: they read only its range.
    spans_table = f"{schemas.audit}.key_column_spans"
    assert spark.sql(f"describe history {spans_table} limit 1").first()["operation"] == "MERGE"
    spans_sql = (
        "select source_table, to_json(key_columns), first_seen.commit_lsn, last_seen.commit_lsn, "
        f"change_count from {spans_table} order by source_table, size(key_columns)"
    )
    spans = rows(spark, spans_sql)
    assert spans == [
        ("accounts", '["id"]', 100, 250, 3),
        ("accounts", '["id","region"]', 300, 300, 1),
        ("orders", '["id"]', 100, 300, 3),
    ]
    # Built a range at a time, as built in full.
    reported = f"select * from {schemas.audit}.unannounced_ddl order by source_table"
    before = rows(spark, reported)
    dbt("run", "-s", "key_column_spans", "unannounced_ddl", "--full-refresh")
    assert rows(spark, spans_sql) == spans
    assert rows(spark, reported) == before
    result = dbt("test", "-s", "unannounced_ddl", "--exclude", "test_type:unit")
    assert result.success  # a warning, not an error: the data is not wrong, it needs a decision
    statuses = {r.node.name: str(r.status) for r in result.result}
    assert any(name.startswith("is_empty_unannounced_ddl") and s == "warn" for name, s in statuses.items())
