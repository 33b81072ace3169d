"""The typed mirrors at their edges: exact or rejected, never silently different.

Hand-built changes, as wal2json sends them, through dbt on Delta: a table and columns whose names
Delta refuses without column mapping (spaces, dots, quotes), a decimal column whose scale grows
mid-stream, BC and infinite dates and timestamps, arrays Postgres writes with quotes, braces, NULLs
and more than one dimension. Every value is either held exactly by its mirror column or null there
with a row in mirror_rejects saying why; one odd table never stops the others.

A second batch also checks where a mirror's run stamp lands: a mirror whose columns change and whose
merge then fails must apply that batch on its next run, not skip it.
"""

from __future__ import annotations

import json
from datetime import date, datetime
from decimal import Decimal

import pytest
from model_helpers import change, land, reset_raw_tables
from pyspark.sql.types import VariantVal

from python_jobs import mirrors

MODELS = ("+source_records", "column_registry", "tag:mirror", "mirror_tables", "mirror_rejects")
ODD = "src__sales_dept__order_lines"
# A quote and a backslash in a name: Spark reads `\t` in a string literal as a tab, so the name must be
# escaped for SQL, not only its quotes doubled.
NOTE = "Note's \\t"
ODD_TYPES = {"Order Id": "integer", 'Qty "x"': "integer", NOTE: "text"}


def odd(lsn, idx, pk, qty):
    row = change(
        lsn,
        idx,
        "insert",
        table="Order.Lines",
        pk=(pk,),
        key_columns=("Order Id",),
        record={"Order Id": str(pk), 'Qty "x"': str(qty), NOTE: f"{qty} o'clock \\t"},
        types=ODD_TYPES,
    )
    return {**row, "source_schema": "Sales Dept"}


def row(table, lsn, idx, pk, types, action="insert", **values):
    record = {"id": str(pk), **values}
    return change(lsn, idx, action, table=table, pk=(pk,), record=record, types={"id": "integer", **types})


NUMS_1 = {"price": "numeric(12,2)", "wide": "numeric(38,0)"}
NUMS_2 = {"price": "numeric(12,4)", "wide": "numeric(38,2)"}
TIMES = {"day": "date", "at": "timestamp with time zone", "local_at": "timestamp without time zone"}
ARRAYS = {"docs": "jsonb[]", "tags": "text[]", "grid": "integer[]", "days": "date[]"}

# jsonb keeps any number exactly; a variant turns one of more than 38 digits into a double
LONG_NUMBER = '{"n": 12345678901234567890123456789012345678901, "s": "x"}'
LONG_STRING = '{"n": 1.5, "s": "12345678901234567890123456789012345678901"}'
DBZ_1 = {
    "price": "org.apache.kafka.connect.data.Decimal(10,2)",
    "at": "io.debezium.time.Timestamp",
    "zoned": "io.debezium.time.ZonedTimestamp",
}
DBZ_2 = {
    "price": "org.apache.kafka.connect.data.Decimal(14,4)",
    "at": "io.debezium.time.MicroTimestamp",
    "nanos": "io.debezium.time.NanoTimestamp",
}
# Debezium 2.x sends a timestamp's infinity as the Postgres JDBC driver's sentinel instant counted
# in the type's unit (never a real date: no value is held), a zoned one as the text itself.
DBZ_INFINITY_MILLIS = ("9223372036825200", "-9223372036832400")
DBZ_INFINITY_MICROS = ("9223372036825200000", "-9223372036832400000")
DBZ_INFINITY_NANOS = ("9223372036854775807", "-9223372036854775808")


def dbz(lsn, idx, pk, types, **values):
    record = {"id": str(pk), **values}
    return change(
        lsn, idx, "insert", table="dbz", pk=(pk,), record=record, types={"id": "int32", **types}, source="dbz"
    )


BATCH_1 = [
    # 12345 unscaled: 123.45 at scale 2; epoch millis
    dbz(100, 0, 1, DBZ_1, price="MDk=", at="1767261600123"),
    dbz(100, 1, 3, DBZ_1, at=DBZ_INFINITY_MILLIS[0], zoned="infinity"),
    dbz(100, 2, 4, DBZ_1, at=DBZ_INFINITY_MILLIS[1], zoned="-infinity"),
    odd(100, 0, 1, 5),
    row("plain", 100, 1, 1, {"note": "text"}, note="still built"),
    row("nums", 100, 2, 1, NUMS_1, price="10.50", wide="12345678901234567890123456789012345678"),
    row("stamped", 100, 3, 1, {}),
    row(
        "times",
        200,
        0,
        1,
        TIMES,
        day="2026-01-01",
        at="2026-01-01 10:00:00.5+00",
        local_at="2026-01-01 10:00:00",
    ),
    row("times", 200, 1, 2, TIMES, day="0044-03-15 BC", at="0044-03-15 10:00:00+00 BC", local_at="-infinity"),
    row("times", 200, 2, 3, TIMES, day="infinity", at="infinity", local_at="0001-01-01 00:00:00 BC"),
    row("times", 200, 3, 4, TIMES, day="-infinity", at="-infinity", local_at="infinity"),
    # rejected in this batch, held after the next one's update: the reject goes with the value
    row("times", 200, 4, 5, TIMES, day="infinity"),
    row(
        "arrays",
        300,
        0,
        1,
        ARRAYS,
        docs='{"{\\"a\\": 1}",NULL,"[1, {\\"b\\": \\"x,y\\"}]"}',
        tags='{"{x}","a,b",NULL,"NULL","say \\"hi\\"","back\\\\slash",""}',
        grid="{1,NULL,3}",
        days="{2026-01-01,NULL}",
    ),
    row("arrays", 300, 1, 2, ARRAYS, docs="{}", tags="{}", grid="{{1,2},{3,4}}", days='{"0044-03-15 BC"}'),
    row("arrays", 300, 2, 3, ARRAYS, grid="[0:1]={7,8}", tags="{{a},{b}}"),
    row("docs", 300, 3, 1, {"doc": "jsonb"}, doc=LONG_NUMBER),
    row("docs", 300, 4, 2, {"doc": "jsonb"}, doc=LONG_STRING),
]
BATCH_2 = [
    # the same unscaled bytes at scale 4: 1.2345; epoch micros
    dbz(400, 0, 2, DBZ_2, price="MDk=", at="1767261600123456"),
    dbz(400, 1, 5, DBZ_2, at=DBZ_INFINITY_MICROS[0], nanos=DBZ_INFINITY_NANOS[0]),
    dbz(400, 2, 6, DBZ_2, at=DBZ_INFINITY_MICROS[1], nanos=DBZ_INFINITY_NANOS[1]),
    row("times", 400, 4, 5, TIMES, action="update", day="2026-02-02"),
    row("nums", 400, 0, 2, NUMS_2, price="1.2345", wide="1.25"),
    row("nums", 400, 1, 3, NUMS_2, price="0.0001", wide="7.00"),
    # a new column (the mirror's table changes first), then a row its merge refuses (see `built`)
    row("stamped", 400, 2, 2, {"extra": "text"}, extra="x"),
    odd(400, 3, 2, 6),
]


def snapshot(spark, schemas) -> dict:
    names = [t.name for t in spark.catalog.listTables(schemas.mirror) if not t.isTemporary]
    tables = {}
    for name in names:
        relation = f"{schemas.mirror}.{name}"
        tables[name] = {
            "types": {f.name: f.dataType.simpleString() for f in spark.table(relation).schema.fields},
            "rows": {
                r["_wal_lake_record_pk"]: r.asDict() for r in spark.sql(f"select * from {relation}").collect()
            },
        }
    tables["catalog"] = sorted(tuple(r) for r in spark.table(f"{schemas.models}.mirror_tables").collect())
    tables["rejects"] = sorted(
        (r.source_table, r.record_pk, r.column_name, r.raw_value, r.reason)
        for r in spark.table(f"{schemas.models}.mirror_rejects").collect()
    )
    return tables


@pytest.fixture(scope="module")
def built(spark, dbt, schemas):
    """Every build step's result is kept, failed or not, so that each test names what it checks."""
    runs = {}

    def run(step, *args):
        runs[step] = dbt(*args, expect_success=False)
        # A new dbt process starts without a failed run's session settings.
        spark.sql("reset spark.databricks.delta.commitInfo.userMetadata")

    reset_raw_tables(spark)
    spark.sql(f"create database if not exists {schemas.models}")
    land(spark, BATCH_1, batch_id=1)
    names = mirrors.generate(spark, schemas.raw)
    run("first", "run", "-s", *MODELS)
    first = snapshot(spark, schemas)
    # The stamped mirror's merge is made to fail after its new column is added.
    stamped = f"{schemas.mirror}.src__public__stamped"
    spark.sql(f"alter table {stamped} add constraint small_ids check (id < 2)")
    land(spark, BATCH_2, batch_id=2)
    mirrors.generate(spark, schemas.raw)
    run("refused merge", "run", "-s", *MODELS)
    spark.sql(f"alter table {stamped} drop constraint small_ids")
    run("second", "run", "-s", *MODELS)
    run("nothing new", "run", "-s", *MODELS)
    incremental = snapshot(spark, schemas)
    run("rejects refreshed", "build", "--full-refresh", "-s", "mirror_rejects")
    rejects_refreshed = snapshot(spark, schemas)["rejects"]
    run("tests", "test", "-s", *(m.lstrip("+") for m in MODELS), "--exclude", "test_type:unit")
    run("full refresh", "run", "--full-refresh", "-s", *MODELS)
    full = snapshot(spark, schemas)
    # The plain mirror's model rewritten to name another table: its table refuses it.
    model = mirrors.mirror_dir() / "src__public__plain.sql"
    original = model.read_text()
    model.write_text(original.replace("'plain'", "'nums'"))
    run("taken over", "run", "-s", "src__public__plain")
    model.write_text(original)
    return {
        "names": names,
        "runs": runs,
        "first": first,
        "incremental": incremental,
        "full": full,
        "rejects refreshed": rejects_refreshed,
    }


def plain(value):
    """A variant as its JSON, inside arrays too (VariantVal compares by identity)."""
    if isinstance(value, VariantVal):
        return json.loads(value.toJson())
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def values(row: dict) -> dict:
    return {k: plain(v) for k, v in row.items() if not k.startswith("_wal_lake_")}


def rejects(built, table, build="incremental"):
    return [r[1:] for r in built[build]["rejects"] if r[0] == table]


def test_odd_names_get_a_mirror_and_fail_nothing(built):
    assert ODD in built["names"]
    failed = [step for step, result in built["runs"].items() if not result.success]
    assert failed == ["refused merge", "taken over"]  # the two the test makes fail, no other
    odd_mirror = built["incremental"][ODD]
    assert {k: v for k, v in odd_mirror["types"].items() if not k.startswith("_")} == {
        "Order Id": "int",
        'Qty "x"': "int",
        NOTE: "string",
    }
    assert {k: values(v) for k, v in odd_mirror["rows"].items()} == {
        '["1"]': {"Order Id": 1, 'Qty "x"': 5, NOTE: "5 o'clock \\t"},
        '["2"]': {"Order Id": 2, 'Qty "x"': 6, NOTE: "6 o'clock \\t"},
    }
    catalog = {(r[2], r[4]) for r in built["incremental"]["catalog"] if r[3].endswith(ODD)}
    assert catalog == {("Order.Lines", "Order Id"), ("Order.Lines", 'Qty "x"'), ("Order.Lines", NOTE)}
    assert values(built["first"]["src__public__plain"]["rows"]['["1"]'])["note"] == "still built"


def test_decimal_scale_growth_widens_and_never_rounds(built):
    nums = built["incremental"]["src__public__nums"]
    assert nums["types"]["price"] == "decimal(14,4)"  # numeric(12,2) then numeric(12,4)
    assert {k: v["price"] for k, v in nums["rows"].items()} == {
        '["1"]': Decimal("10.5000"),
        '["2"]': Decimal("1.2345"),
        '["3"]': Decimal("0.0001"),
    }
    # numeric(38,0) then numeric(38,2) needs 40 digits: the column stays decimal(38,0) and a value
    # with fraction digits is rejected, not rounded; one whose fraction is zero is exact.
    assert nums["types"]["wide"] == "decimal(38,0)"
    assert {k: v["wide"] for k, v in nums["rows"].items()} == {
        '["1"]': Decimal("12345678901234567890123456789012345678"),
        '["2"]': None,
        '["3"]': Decimal("7"),
    }
    assert rejects(built, "nums") == [
        ('["2"]', "wide", "1.25", "more fraction digits than decimal(38,0) holds: not rounded"),
    ]


def test_bc_and_infinite_dates_and_timestamps_are_rejected_not_moved(built):
    times = built["incremental"]["src__public__times"]["rows"]
    assert values(times['["1"]']) == {
        "id": 1,
        "day": date(2026, 1, 1),
        "at": datetime(2026, 1, 1, 10, 0, 0, 500000),
        "local_at": datetime(2026, 1, 1, 10, 0, 0),
    }
    for pk in ('["2"]', '["3"]', '["4"]'):
        assert {k: v for k, v in values(times[pk]).items() if k != "id"} == dict.fromkeys(TIMES)
    assert values(times['["5"]']) == {"id": 5, "day": date(2026, 2, 2), "at": None, "local_at": None}
    bc = "a BC date: the mirror holds dates from the year 1 on"
    infinite = "{} has no date or timestamp value: not moved to one".format
    assert rejects(built, "times") == [
        ('["2"]', "at", "0044-03-15 10:00:00+00 BC", bc),
        ('["2"]', "day", "0044-03-15 BC", bc),
        ('["2"]', "local_at", "-infinity", infinite("-infinity")),
        ('["3"]', "at", "infinity", infinite("infinity")),
        ('["3"]', "day", "infinity", infinite("infinity")),
        ('["3"]', "local_at", "0001-01-01 00:00:00 BC", bc),
        ('["4"]', "at", "-infinity", infinite("-infinity")),
        ('["4"]', "day", "-infinity", infinite("-infinity")),
        ('["4"]', "local_at", "infinity", infinite("infinity")),
        # nothing for ["5"]: its infinity was replaced by a date the mirror holds
    ]


def test_debezium_infinity_sentinels_are_rejected_not_moved(built):
    infinite = "{} has no date or timestamp value: not moved to one".format
    for build in ("incremental", "full"):
        rows = built[build]["dbz__public__dbz"]["rows"]
        for pk in ('["3"]', '["4"]', '["5"]', '["6"]'):
            assert (rows[pk]["at"], rows[pk]["zoned"], rows[pk]["nanos"]) == (None, None, None), (build, pk)
    assert rejects(built, "dbz") == [
        ('["3"]', "at", DBZ_INFINITY_MILLIS[0], infinite("infinity")),
        ('["3"]', "zoned", "infinity", infinite("infinity")),
        ('["4"]', "at", DBZ_INFINITY_MILLIS[1], infinite("-infinity")),
        ('["4"]', "zoned", "-infinity", infinite("-infinity")),
        ('["5"]', "at", DBZ_INFINITY_MICROS[0], infinite("infinity")),
        ('["5"]', "nanos", DBZ_INFINITY_NANOS[0], infinite("infinity")),
        ('["6"]', "at", DBZ_INFINITY_MICROS[1], infinite("-infinity")),
        ('["6"]', "nanos", DBZ_INFINITY_NANOS[1], infinite("-infinity")),
    ]


def test_valid_arrays_are_held_and_others_listed_never_mangled(built):
    arrays = built["incremental"]["src__public__arrays"]
    assert {k: v for k, v in arrays["types"].items() if not k.startswith("_")} == {
        "id": "int",
        "docs": "array<variant>",
        "tags": "array<string>",
        "grid": "array<int>",
        "days": "array<date>",
    }
    one, two, three = (values(arrays["rows"][pk]) for pk in ('["1"]', '["2"]', '["3"]'))
    assert one == {
        "id": 1,
        "docs": [{"a": 1}, None, [1, {"b": "x,y"}]],
        "tags": ["{x}", "a,b", None, "NULL", 'say "hi"', "back\\slash", ""],
        "grid": [1, None, 3],
        "days": [date(2026, 1, 1), None],
    }
    assert two == {"id": 2, "docs": [], "tags": [], "grid": None, "days": None}
    assert three == {"id": 3, "docs": None, "tags": None, "grid": None, "days": None}
    dimensions = "a multi-dimensional array or one with explicit bounds: array<{}> holds one dimension".format
    assert rejects(built, "arrays") == [
        ('["2"]', "days", '{"0044-03-15 BC"}', "an element does not convert to date"),
        ('["2"]', "grid", "{{1,2},{3,4}}", dimensions("int")),
        ('["3"]', "grid", "[0:1]={7,8}", dimensions("int")),
        ('["3"]', "tags", "{{a},{b}}", dimensions("string")),
    ]


def test_json_numbers_beyond_38_digits_are_rejected_not_rounded(built):
    docs = built["incremental"]["src__public__docs"]["rows"]
    assert values(docs['["1"]'])["doc"] is None
    assert values(docs['["2"]'])["doc"] == json.loads(LONG_STRING)  # digits inside a string are text
    assert rejects(built, "docs") == [
        (
            '["1"]',
            "doc",
            LONG_NUMBER,
            "a JSON number of more than 38 digits: a variant would hold it as a double",
        ),
    ]


def test_a_failed_merge_leaves_its_changes_for_the_next_run(built):
    assert not built["runs"]["refused merge"].success  # the constraint refused the merge
    stamped = built["incremental"]["src__public__stamped"]["rows"]
    assert sorted(stamped) == ['["1"]', '["2"]']
    assert values(stamped['["2"]'])["extra"] == "x"


def test_full_refresh_equals_incremental(built):
    for name, table in built["incremental"].items():
        if name in ("catalog", "rejects"):
            assert built["full"][name] == table, name
            continue
        full = built["full"][name]
        assert full["types"] == table["types"], name
        assert {k: values(v) for k, v in full["rows"].items()} == {
            k: values(v) for k, v in table["rows"].items()
        }, name


def test_a_full_refresh_of_mirror_rejects_equals_the_incremental_table(built):
    assert built["runs"]["rejects refreshed"].success
    assert built["rejects refreshed"] == built["incremental"]["rejects"]


def test_debezium_values_decode_with_the_type_they_were_sent_with(built):
    for build in ("incremental", "full"):
        rows = built[build]["dbz__public__dbz"]["rows"]
        assert {k: (v["price"], v["at"]) for k, v in rows.items() if k in ('["1"]', '["2"]')} == {
            '["1"]': (Decimal("123.4500"), datetime(2026, 1, 1, 10, 0, 0, 123000)),
            '["2"]': (Decimal("1.2345"), datetime(2026, 1, 1, 10, 0, 0, 123456)),
        }, build


def test_a_mirror_refuses_another_table(built):
    result = built["runs"]["taken over"]
    assert not result.success
    message = " ".join(str(r.message) for r in result.result.results)
    assert '["src", "public", "plain"]' in message and '["src", "public", "nums"]' in message


def test_a_name_once_given_stays_its_tables(tmp_path):
    old = ("src_1", "public", "orders")
    (tmp_path / "src_1__public__orders.sql").write_text(mirrors.model_sql(mirrors.CapturedTable(*old, ())))
    (tmp_path / "hand_written.sql").write_text("select 1")  # not a generated model: ignored
    given = mirrors.given_names(tmp_path)
    assert given == {"src_1__public__orders": old}
    # A later table sorts first and comes out with the same name: it takes the next free one.
    later = ("Src-1", "public", "Orders")
    assert mirrors.mirror_names([later, old], given) == {
        old: "src_1__public__orders",
        later: "src_1__public__orders_2",
    }
    # The old table no longer landed: its name stays given all the same.
    assert mirrors.mirror_names([later], given)[later] == "src_1__public__orders_2"
