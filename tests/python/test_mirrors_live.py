"""Typed mirrors through a live Postgres whose table changes shape mid-stream.

A table is captured (snapshot, then the stream), landed and built; then, between two captures,
Postgres adds a column, drops one, widens two (integer to bigint, numeric(10,2) to numeric(14,2))
and narrows one (bigint to integer), with rows written before and after each change. After the
second build the mirror must equal `select * from t` for every column Postgres still has, compared
typed; the added column is there (null for rows untouched since), the dropped one keeps what it held,
the widened ones have their new Spark types in place, the narrowed one keeps its wider type, and
mirror_tables says so.
"""

from __future__ import annotations

import psycopg
import pytest

from python_jobs import capture, mirrors
from python_jobs.ingest import job as ingest
from testkit import oracle

MODELS = ("+source_records", "column_registry", "tag:mirror", "mirror_tables", "mirror_rejects")
TABLE = "public.items"

CREATE = """
create table items (
    id bigint primary key,
    qty integer,
    price numeric(10,2),
    big bigint,
    gone text,
    flag boolean,
    at timestamptz,
    local_at timestamp,
    day date,
    tags text[],
    scores integer[],
    raw bytea,
    doc jsonb,
    ratio double precision,
    level real,
    note text
);
insert into items values
    (1, 1, 10.50, 100, 'g1', true, '2026-01-01 10:00:00.5+02', '2026-01-01 10:00:00', '2026-02-03',
     '{"a b","c,d",NULL}', '{1,2,NULL}', '\\x0a0b', '{"k": [1, 2.50]}', 0.25, 0.1, repeat('x', 5000)),
    (2, 2, 20.00, 200, 'g2', false, '2026-01-02 00:00:00+00', null, null, '{}', null, null, null,
     null, null, 'n2'),
    (3, 3, 30.00, 300, 'g3', null, null, null, null, null, null, null, '[]', -1.5, 2.5, 'n3');
"""
WRITES_1 = """
update items set qty = 11, price = 11.25 where id = 1;
delete from items where id = 3;
insert into items (id, qty, price, big, gone, note) values (4, 4, 40.00, 400, 'g4', 'n4');
"""
SCHEMA_CHANGES = """
alter table items add column color varchar(10);
update items set color = 'red' where id = 1;
alter table items drop column gone;
insert into items (id, qty, color) values (5, 5, 'blue');
alter table items alter column qty type bigint;
update items set qty = 9000000000 where id = 2;
alter table items alter column price type numeric(14,2);
update items set price = 123456789012.25 where id = 4;
alter table items alter column big type integer;
update items set big = 7 where id = 1;
insert into items (id, qty, price, big) values (6, 6, 6.00, 6);
"""


def capture_once(dsn: str, landing, *extra: str) -> None:
    argv = ["--dsn", dsn, "--slot", "mirrors_live", "--landing", str(landing), "--quiet", "--once", *extra]
    assert capture.main(argv) == 0


def postgres_truth(dsn: str):
    with psycopg.connect(dsn) as conn:
        types, keys = oracle.table_types(conn, [TABLE])
        return oracle.postgres_state(conn, [TABLE])[TABLE], types, keys[TABLE]


def mirror_rows(spark, relation: str, columns) -> list[dict]:
    return [{c: row[c] for c in columns} for row in spark.table(relation).collect()]


@pytest.fixture(scope="module")
def built(postgres, spark, dbt, schemas, tmp_path_factory):
    landing = tmp_path_factory.mktemp("landing")
    dsn = postgres.create_database("mirrors_live")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(CREATE)
    capture_once(dsn, landing, "--snapshot")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(WRITES_1)
    capture_once(dsn, landing)
    ingest.run(spark, str(landing), schema=schemas.raw)
    (name,) = mirrors.generate(spark, schemas.raw)
    dbt("run", "-s", *MODELS)
    relation = f"{schemas.mirror}.{name}"
    first_truth = postgres_truth(dsn)
    first = mirror_rows(spark, relation, first_truth[1][TABLE])

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA_CHANGES)
    capture_once(dsn, landing)
    ingest.run(spark, str(landing), schema=schemas.raw)
    dbt("run", "-s", *MODELS)
    mirror = spark.table(relation)
    catalog = spark.sql(
        f"select column_name, spark_type, type_note from {schemas.models}.mirror_tables"
        f" where mirror_relation = '{relation}'"
    ).collect()
    return {
        "first": (first, first_truth),
        "truth": postgres_truth(dsn),
        "types": {f.name: f.dataType.simpleString() for f in mirror.schema.fields},
        "rows": {row["id"]: row.asDict() for row in mirror.collect()},
        "mirror": mirror_rows,
        "relation": relation,
        "catalog": {r.column_name: (r.spark_type, r.type_note) for r in catalog},
        "rejects": spark.table(f"{schemas.models}.mirror_rejects").count(),
        "spark": spark,
    }


@pytest.mark.postgres
def test_mirror_equals_postgres_before_the_changes(built):
    rows, (expected, types, keys) = built["first"]
    assert oracle.compare_mirror(TABLE, keys, expected, rows, types) == []


@pytest.mark.postgres
def test_mirror_equals_postgres_after_the_changes(built):
    expected, types, keys = built["truth"]
    rows = built["mirror"](built["spark"], built["relation"], types[TABLE])
    assert oracle.compare_mirror(TABLE, keys, expected, rows, types) == []
    assert built["rejects"] == 0


@pytest.mark.postgres
def test_types_follow_the_source(built):
    assert {c: built["types"][c] for c in ("qty", "price", "big", "color", "gone")} == {
        "qty": "bigint",  # widened in place
        "price": "decimal(14,2)",  # widened in place
        "big": "bigint",  # narrowing refused: the wider type stays
        "color": "string",  # added
        "gone": "string",  # dropped at the source, kept here
    }
    assert {
        c: built["types"][c] for c in ("at", "local_at", "day", "tags", "scores", "raw", "doc", "level")
    } == {
        "at": "timestamp",
        "local_at": "timestamp_ntz",
        "day": "date",
        "tags": "array<string>",
        "scores": "array<int>",
        "raw": "binary",
        "doc": "variant",
        "level": "float",
    }
    assert built["catalog"]["qty"] == ("bigint", "widened from integer to bigint")
    assert built["catalog"]["big"][0] == "bigint" and "does not widen" in built["catalog"]["big"][1]


@pytest.mark.postgres
def test_added_and_dropped_columns(built):
    rows = built["rows"]
    assert rows[1]["color"] == "red" and rows[5]["color"] == "blue"
    assert rows[2]["color"] is None  # untouched since the column came
    assert rows[4]["gone"] == "g4"  # untouched since the drop: its value stays
    assert rows[5]["gone"] is None and rows[6]["gone"] is None  # inserted after the drop
