"""The typed mirrors, end to end through dbt on Delta, from hand-built landed tables.

Two batches, an incremental build after each, then a full refresh that must give the same mirrors.
The first batch sends one row of every type the mirrors convert, and the rules the mirrors share
with consumer_records (an update's left-out column carried, a delete, a key move, a truncate); a
value that fits no Spark type (numeric NaN into decimal, timestamp infinity) must land in
mirror_rejects. The second changes the table's schema mid-stream: a column added, one dropped (no
longer sent), one widened (integer to bigint, numeric(12,2) to numeric(14,2)) and one narrowed
(bigint to integer), which the mirror refuses and mirror_tables reports.
"""

from __future__ import annotations

import json
import math
from datetime import date, datetime
from decimal import Decimal

import pytest
from model_helpers import change, final_plan_scans, land, no_codegen_fallback, reset_raw_tables
from pyspark.sql.types import VariantVal

from python_jobs import mirrors

MIRRORS = ("dbz__public__typed", "src__public__items", "src__public__logs")
MODELS = ("+source_records", "column_registry", "tag:mirror", "mirror_tables", "mirror_rejects")

TYPES_1 = {
    "id": "bigint",
    "qty": "integer",
    "price": "numeric(12,2)",
    "ok": "boolean",
    "at": "timestamp with time zone",
    "local_at": "timestamp without time zone",
    "tags": "text[]",
    "scores": "integer[]",
    "blob": "bytea",
    "ratio": "double precision",
    "level": "real",
    "day": "date",
    "big": "bigint",
    "note": "text",
    "doc": "jsonb",
    "amount": "numeric",
}
TYPES_2 = {
    **{k: v for k, v in TYPES_1.items() if k != "ratio"},  # ratio dropped at the source
    "qty": "bigint",  # widened
    "price": "numeric(14,2)",  # widened
    "big": "integer",  # narrowed: refused
    "color": "character varying(10)",  # added
}


def item(pk: int, **values) -> dict:
    return {"id": str(pk), **{k: None if v is None else str(v) for k, v in values.items()}}


ROW_1 = item(
    1,
    qty=5,
    price="10.50",
    ok="true",
    at="2026-01-01 10:00:00.123456+00",
    local_at="2026-01-01 10:00:00",
    tags='{"a b","c,d",NULL,plain}',
    scores="{1,2,NULL}",
    blob="\\x0a0b",
    ratio="NaN",
    level="1.5",
    day="2026-02-03",
    big=7,
    note="big-toasted-text",
    doc='{"k": [1, 2]}',
    amount="12345678901234567890123456789012345678901.5",
)


def items(lsn, idx, action, pk, record, types=TYPES_1, **kw):
    return change(lsn, idx, action, table="items", pk=(pk,), record=record, types=types, **kw)


# Debezium's Connect types (debezium_envelope.connect_type), each with the encoding its values come in.
DBZ_TYPES = {
    "id": "int64",
    "small": "int16",
    "price": "org.apache.kafka.connect.data.Decimal(12,2)",  # precise: unscaled bytes, base64
    "neg": "org.apache.kafka.connect.data.Decimal(38,0)",
    "total": "string (NUMERIC(14,3))",  # decimal.handling.mode=string, source type propagated
    "amount": "io.debezium.data.VariableScaleDecimal",  # unconstrained numeric
    "at": "io.debezium.time.ZonedTimestamp",
    "local_at": "io.debezium.time.MicroTimestamp",
    "local_ms": "io.debezium.time.Timestamp",
    "day": "io.debezium.time.Date",
    "clock": "io.debezium.time.MicroTime",
    "tags": "array<string>",
    "scores": "array<int32>",
    "days": "array<io.debezium.time.Date>",
    "doc": "io.debezium.data.Json",
    "blob": "bytes",
    "ok": "boolean",
    "ratio": "float64",
}
DBZ_ROW = {
    "id": "1",
    "small": "3",
    "price": "BBo=",  # 1050
    "neg": "9rZPCQ/9zOw7tm+vIccMsg==",  # -12345678901234567890123456789012345678
    "total": "1.500",
    "amount": '{"scale":3,"value":"+y4="}',  # -1234
    "at": "2026-01-01T10:00:00.5Z",
    "local_at": "1767261600123456",
    "local_ms": "1767261600123",
    "day": "20454",
    "clock": "36000500000",
    "tags": '["a b",null,"c,d"]',
    "scores": "[1,2,null]",
    "days": "[0,20454]",
    "doc": '{"k":[1,2]}',
    "blob": "CgtG",
    "ok": "true",
    "ratio": "2.5",
}


def typed(lsn, idx, pk, record):
    return change(lsn, idx, "insert", table="typed", pk=(pk,), record=record, types=DBZ_TYPES, source="dbz")


def logs(lsn, idx, action, pk):
    return change(lsn, idx, action, table="logs", pk=(pk,), record={"id": str(pk)}, types={"id": "integer"})


BATCH_1 = [
    items(100, 0, "insert", 1, ROW_1),
    # left out: note (an unchanged TOASTed value); it is carried
    items(100, 1, "update", 1, {k: v for k, v in ROW_1.items() if k != "note"} | {"qty": "6"}),
    items(200, 0, "insert", 2, item(2, qty=1, price="NaN", at="infinity", ok="false", note="n2")),
    items(200, 1, "insert", 3, item(3, qty=3, note="gone")),
    items(200, 2, "delete", 3, {"id": "3"}),
    items(300, 0, "insert", 5, item(5, qty=5, note="moved")),
    # a key move that leaves note out: the new key carries it
    items(300, 1, "update", 6, item(6, qty=50), old_pk=(5,)),
    logs(300, 2, "insert", 1),
    logs(300, 3, "insert", 2),
    typed(300, 4, 1, DBZ_ROW),
    typed(300, 5, 2, {"id": "2", "price": "not base64!", "clock": "99999999999", "scores": '[1,"x"]'}),
]
BATCH_2 = [
    change(400, 0, "truncate", table="logs"),
    logs(400, 1, "insert", 3),
    # ratio no longer sent; color new; qty, price wider; big narrower
    items(
        500,
        0,
        "update",
        1,
        item(1, qty=9000000000, price="123456789012.25", big=8, color="red", note="big-toasted-text"),
        types=TYPES_2,
    ),
    items(500, 1, "insert", 7, item(7, qty=7, big=70, color="blue"), types=TYPES_2),
]


@pytest.fixture(scope="module")
def built(spark, dbt, schemas):
    reset_raw_tables(spark)
    spark.sql(f"create database if not exists {schemas.models}")
    land(spark, BATCH_1, batch_id=1)
    names = mirrors.generate(spark, schemas.raw)
    dbt("run", "-s", *MODELS)
    first = snapshot(spark, schemas)
    land(spark, BATCH_2, batch_id=2)
    assert mirrors.generate(spark, schemas.raw) == names  # no new table: the same models
    dbt("run", "-s", *MODELS)
    # source_records' scans in the incremental mirror_rejects run (its temporary view)
    rejects_scans = final_plan_scans(spark, "mirror_rejects__dbt_tmp", f"{schemas.models}.source_records")
    stamps = {
        name: stamped_seq(spark, relation)
        for name, relation in [
            ("source_records", f"{schemas.models}.source_records"),
            ("mirror_rejects", f"{schemas.models}.mirror_rejects"),
            *[(name, f"{schemas.mirror}.{name}") for name in MIRRORS],
        ]
    }
    dbt("run", "-s", *MODELS)  # a rerun with nothing new changes nothing
    incremental = snapshot(spark, schemas)
    dbt("test", "-s", *(m.lstrip("+") for m in MODELS), "--exclude", "test_type:unit")
    dbt("run", "--full-refresh", "-s", *MODELS)
    return {
        "names": names,
        "first": first,
        "incremental": incremental,
        "full": snapshot(spark, schemas),
        "stamps": stamps,
        "rejects_scans": rejects_scans,
    }


def stamped_seq(spark, relation: str) -> int | None:
    """The seq the newest stamped commit of ``relation`` says it consumed."""
    for row in spark.sql(f"describe history {relation} limit 50").collect():
        if (row.userMetadata or "").startswith("wal_lake.consumed_seq="):
            return int(row.userMetadata.split(",")[0].split("=")[1])
    return None


def snapshot(spark, schemas) -> dict:
    tables = {}
    for name in MIRRORS:
        relation = f"{schemas.mirror}.{name}"
        tables[name] = {
            "types": {f.name: f.dataType.simpleString() for f in spark.table(relation).schema.fields},
            "rows": {r["_wal_lake_record_pk"]: r.asDict() for r in spark.table(relation).collect()},
        }
    tables["catalog"] = sorted(tuple(r) for r in spark.table(f"{schemas.models}.mirror_tables").collect())
    tables["rejects"] = sorted(
        (r.record_pk, r.column_name, r.raw_value, r.reason)
        for r in spark.table(f"{schemas.models}.mirror_rejects").collect()
    )
    return tables


def plain(value):
    """NaN as text (NaN never equals itself); a variant as its JSON."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, VariantVal):
        return json.loads(value.toJson())
    return value


def values(row: dict) -> dict:
    """A mirror row's source columns, comparable."""
    return {k: plain(v) for k, v in row.items() if not k.startswith("_wal_lake_")}


def test_one_model_per_captured_table(built):
    assert built["names"] == list(MIRRORS)


def test_every_type_converts(built):
    items = built["first"]["src__public__items"]
    assert items["types"] == {
        "id": "bigint",
        "qty": "int",
        "price": "decimal(12,2)",
        "ok": "boolean",
        "at": "timestamp",
        "local_at": "timestamp_ntz",
        "tags": "array<string>",
        "scores": "array<int>",
        "blob": "binary",
        "ratio": "double",
        "level": "float",
        "day": "date",
        "big": "bigint",
        "note": "string",
        "doc": "variant",
        "amount": "string",
        "_wal_lake_record_pk": "string",
        "_wal_lake_seq": "bigint",
        "_wal_lake_commit_lsn": "string",
        "_wal_lake_committed_at": "timestamp",
    }
    row = items["rows"]['["1"]']
    assert values(row) == {
        "id": 1,
        "qty": 6,
        "price": Decimal("10.50"),
        "ok": True,
        "at": datetime(2026, 1, 1, 10, 0, 0, 123456),  # UTC, the session's zone
        "local_at": datetime(2026, 1, 1, 10, 0, 0),
        "tags": ["a b", "c,d", None, "plain"],
        "scores": [1, 2, None],
        "blob": bytearray(b"\n\x0b"),
        "ratio": "NaN",
        "level": 1.5,
        "day": date(2026, 2, 3),
        "big": 7,
        "note": "big-toasted-text",  # carried over the update that left it out
        "doc": {"k": [1, 2]},
        "amount": "12345678901234567890123456789012345678901.5",
    }
    assert row["_wal_lake_commit_lsn"] == "0/64"


def test_every_debezium_encoding_decodes(built):
    """Debezium's Connect types map to the Spark types of the Postgres types they stand for, and each
    value is decoded from its encoding: unscaled base64 decimals, epoch days and micros, micros of a
    day, JSON arrays, base64 bytes."""
    typed = built["first"]["dbz__public__typed"]
    assert {k: v for k, v in typed["types"].items() if not k.startswith("_wal_lake_")} == {
        "id": "bigint",
        "small": "smallint",
        "price": "decimal(12,2)",
        "neg": "decimal(38,0)",
        "total": "decimal(14,3)",
        "amount": "string",
        "at": "timestamp",
        "local_at": "timestamp_ntz",
        "local_ms": "timestamp_ntz",
        "day": "date",
        "clock": "string",
        "tags": "array<string>",
        "scores": "array<int>",
        "days": "array<date>",
        "doc": "variant",
        "blob": "binary",
        "ok": "boolean",
        "ratio": "double",
    }
    assert values(typed["rows"]['["1"]']) == {
        "id": 1,
        "small": 3,
        "price": Decimal("10.50"),
        "neg": Decimal("-12345678901234567890123456789012345678"),
        "total": Decimal("1.500"),
        "amount": "-1.234",
        "at": datetime(2026, 1, 1, 10, 0, 0, 500000),
        "local_at": datetime(2026, 1, 1, 10, 0, 0, 123456),
        "local_ms": datetime(2026, 1, 1, 10, 0, 0, 123000),
        "day": date(2026, 1, 1),
        "clock": "10:00:00.5",
        "tags": ["a b", None, "c,d"],
        "scores": [1, 2, None],
        "days": [date(1970, 1, 1), date(2026, 1, 1)],
        "doc": {"k": [1, 2]},
        "blob": bytearray(b"\n\x0bF"),
        "ok": True,
        "ratio": 2.5,
    }
    bad = values(typed["rows"]['["2"]'])
    assert (bad["price"], bad["clock"], bad["scores"]) == (None, None, None)


def test_rules_shared_with_consumer_records(built):
    items = built["first"]["src__public__items"]["rows"]
    assert sorted(items) == ['["1"]', '["2"]', '["6"]']  # 3 deleted, 5 moved to 6
    assert values(items['["6"]'])["note"] == "moved"  # carried across the key move
    assert sorted(built["first"]["src__public__logs"]["rows"]) == ['["1"]', '["2"]']
    assert sorted(built["incremental"]["src__public__logs"]["rows"]) == ['["3"]']  # truncated before


def test_values_that_do_not_convert_are_rejected_not_lost(built):
    assert values(built["first"]["src__public__items"]["rows"]['["2"]'])["price"] is None
    dbz = "does not convert from {} to {}".format
    assert built["incremental"]["rejects"] == [
        ('["2"]', "at", "infinity", "infinity has no date or timestamp value: not moved to one"),
        ('["2"]', "clock", "99999999999", dbz("io.debezium.time.MicroTime", "string")),
        ('["2"]', "price", "NaN", "does not convert to decimal(12,2)"),
        (
            '["2"]',
            "price",
            "not base64!",
            dbz("org.apache.kafka.connect.data.Decimal(12,2)", "decimal(12,2)"),
        ),
        ('["2"]', "scores", '[1,"x"]', dbz("array<int32>", "array<int>")),
    ]


def test_schema_changes_mid_stream(built):
    items = built["incremental"]["src__public__items"]
    assert items["types"]["qty"] == "bigint"  # widened in place
    assert items["types"]["price"] == "decimal(14,2)"
    assert items["types"]["big"] == "bigint"  # narrowing refused
    assert items["types"]["color"] == "string"  # added
    assert list(items["types"])[-5:] == ["color", *list(items["types"])[-4:]]
    one, seven, two = items["rows"]['["1"]'], items["rows"]['["7"]'], items["rows"]['["2"]']
    assert (one["qty"], one["price"], one["big"], one["color"]) == (
        9000000000,
        Decimal("123456789012.25"),
        8,
        "red",
    )
    assert one["ratio"] is not None  # dropped: the last value sent stays
    assert (seven["ratio"], seven["color"], seven["qty"]) == (None, "blue", 7)
    assert two["color"] is None  # a row untouched since the column came: null
    notes = {(r[4], r[8]) for r in built["incremental"]["catalog"] if r[8]}
    assert notes == {
        ("amount", "numeric without a precision of 38 digits or less: kept as text"),
        ("qty", "widened from integer to bigint"),
        ("price", "widened from numeric(12,2) to numeric(14,2)"),
        (
            "big",
            "the source changed it to integer, which does not widen bigint: kept, values that do not "
            "convert are rejected",
        ),
    }


def test_rejects_read_the_run_s_records_once(built):
    # Every mirror's checks and the touched records read the run's source_records rows: one scan
    # (`computed_once`), not one per mirror and another for the touched records.
    assert built["rejects_scans"] == 1


def test_a_run_with_nothing_for_a_model_still_moves_its_stamp(built):
    # The second batch touches the Debezium table's mirror not at all, and maybe rejects nothing:
    # their merges write nothing (Delta makes no commit), yet each stamp says the run's upto, or
    # every later run would read that range again.
    stamps = built["stamps"]
    assert stamps["source_records"] is not None
    assert stamps == dict.fromkeys(stamps, stamps["source_records"])


def test_full_refresh_equals_incremental(built):
    for name in MIRRORS:
        full, incremental = built["full"][name], built["incremental"][name]
        assert full["types"] == incremental["types"]
        assert {k: values(v) for k, v in full["rows"].items()} == {
            k: values(v) for k, v in incremental["rows"].items()
        }
        assert {k: v["_wal_lake_seq"] for k, v in full["rows"].items()} == {
            k: v["_wal_lake_seq"] for k, v in incremental["rows"].items()
        }
    assert built["full"]["catalog"] == built["incremental"]["catalog"]
    # The same values rejected; a rebuild checks them against the column's type of now.
    assert [r[:3] for r in built["full"]["rejects"]] == [r[:3] for r in built["incremental"]["rejects"]]
    assert ('["2"]', "price", "NaN", "does not convert to decimal(14,2)") in built["full"]["rejects"]


def test_column_registry_compiles_to_java_code(spark, dbt, schemas, built):
    # Spark generates Java code for the model's type mapping (spark_type_for); written as a CASE
    # of a when per type name it grew past the 64 KB a Java method may hold, and every build logged
    # the compiler's ERROR and stack trace on the console, then ran the projection interpreted.
    # With the fallback off, such a build fails instead.
    registry = f"select * from {schemas.models}.column_registry order by all"
    before = spark.sql(registry).collect()
    with no_codegen_fallback(spark):
        dbt("run", "--full-refresh", "-s", "column_registry")
    after = spark.sql(registry).collect()
    assert after == before
    types = {(r.column_name, r.source_type): r.spark_type for r in after if r.source_table == "items"}
    assert types[("price", "numeric(12,2)")] == "decimal(12,2)"
    assert types[("price", "numeric(14,2)")] == "decimal(14,2)"
    assert types[("tags", "text[]")] == "array<string>"
    assert types[("doc", "jsonb")] == "variant"


def test_mirror_names_are_sanitized_and_collisions_resolved():
    names = mirrors.mirror_names(
        [("src_1", "public", "orders"), ("Src-1", "public", "Orders"), ("src.1", "public", "orders")]
    )
    # all three come out as src_1__public__orders: the first in (source, schema, table) order keeps it
    assert names == {
        ("Src-1", "public", "Orders"): "src_1__public__orders",
        ("src.1", "public", "orders"): "src_1__public__orders_2",
        ("src_1", "public", "orders"): "src_1__public__orders_3",
    }


def test_mirror_models_must_live_inside_the_project(tmp_path):
    assert mirrors.mirror_dir("mirrors") == mirrors.PROJECT_DIR.resolve() / "mirrors"
    for outside in (str(tmp_path / "mirrors"), "../mirrors"):
        with pytest.raises(mirrors.MirrorSetupError, match="WAL_LAKE_MIRROR_MODELS"):
            mirrors.mirror_dir(outside)


def test_generated_models_in_the_former_default_directory_move_to_the_new_one(tmp_path, monkeypatch):
    monkeypatch.delenv("WAL_LAKE_MIRROR_MODELS", raising=False)
    former = tmp_path / mirrors.FORMER_DEFAULT_DIR
    former.mkdir()
    (former / mirrors.SCHEMA_FILE).write_text(f"# {mirrors.GENERATED_MARK}: do not edit\n")
    (former / "src__public__t.sql").write_text("{{ mirror_table('src', 'public', 't') }}\n")
    assert mirrors.mirror_dir(project=tmp_path) == (tmp_path / mirrors.DEFAULT_DIR).resolve()
    assert not former.exists()
    assert (tmp_path / mirrors.DEFAULT_DIR / "src__public__t.sql").is_file()
    # a folder of the user's own that happens to be called mirrors/ is left where it is
    mine = tmp_path / mirrors.FORMER_DEFAULT_DIR
    mine.mkdir()
    (mine / "notes.sql").write_text("select 1\n")
    assert mirrors.mirror_dir(project=tmp_path) == (tmp_path / mirrors.DEFAULT_DIR).resolve()
    assert (mine / "notes.sql").is_file()
