"""Debezium lines -> the event envelope, its key and the per-line checks (the first half of the
``debezium`` transform; ``debezium`` gives the events their positions). Pure DataFrame code, no UDFs.

A line is one event in any of the shapes a Kafka Connect sink writes: the bare value
(``{"before":…,"after":…,"source":…,"op":…}``), the value in the schema wrapper
(``{"schema":…,"payload":{…}}``), or the Kafka key beside the value (``{"key":…,"value":…}``, each
part possibly schema-wrapped). Tombstones (``"value": null``) and transaction metadata records
(``{"status":"BEGIN"|"END",…}``) carry no change: they are control lines.

Keys come from the Kafka key when the line carries one, else from the table ``registry`` the user
declares (columns ``source_schema``, ``source_table``, ``key_columns``). A change whose key columns
cannot be known is rejected, never keyed on a guess.

A line that carries its Kafka key as null (or an empty key) is a change of a table without a primary
key: unless the registry declares key columns for the table, it lands with a null ``record_pk``. A
bare value of a table the registry does not declare is rejected: nothing in it tells a table without
a key from one whose key was not sent.

REPLICA IDENTITY USING INDEX on columns other than the key: an update's or delete's ``before`` holds
the index's columns and no key; they land as ``old_identity``, as wal2json's identity does.

Values: strings are their content, JSON numbers their exact text, nested JSON its JSON text. A column
Debezium sends as its unavailable-value placeholder (an unchanged TOASTed value), in whatever shape the
column's type and ``binary.handling.mode`` (bytes, base64, base64-url-safe or hex) give it, is absent
from ``record``: the column was not sent.
Debezium encodes ``numeric`` per ``decimal.handling.mode``: ``string`` (recommended) or ``double``
land readable text; ``precise`` (the default) sends base64 bytes, which land as that text.

Types: a value sent in the schema wrapper (the JSON converter's ``schemas.enable=true``) carries its
table's Connect schema; each column's type lands in ``column_types`` as one text (``connect_type``),
which the typed mirrors read. A line without the wrapper sends no types.
"""

from __future__ import annotations

import base64
import hashlib
import uuid

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, MapType, StringType, StructField, StructType

from python_jobs.ingest import table_keys
from python_jobs.ingest.changeset import (
    ACTION_DELETE,
    ACTION_INSERT,
    ACTION_MESSAGE,
    ACTION_READ,
    ACTION_TRUNCATE,
    ACTION_UPDATE,
)

# Debezium op codes.
OP_CREATE = "c"
OP_UPDATE = "u"
OP_DELETE = "d"
OP_READ = "r"
OP_TRUNCATE = "t"
OP_MESSAGE = "m"

ACTIONS = {
    OP_CREATE: ACTION_INSERT,
    OP_UPDATE: ACTION_UPDATE,
    OP_DELETE: ACTION_DELETE,
    OP_READ: ACTION_READ,
    OP_TRUNCATE: ACTION_TRUNCATE,
    OP_MESSAGE: ACTION_MESSAGE,
}
ROW_OPS = [OP_CREATE, OP_UPDATE, OP_DELETE, OP_READ]
TABLE_OPS = [*ROW_OPS, OP_TRUNCATE]

UNAVAILABLE = "__debezium_unavailable_value"
_UNAVAILABLE_BYTES = UNAVAILABLE.encode()
_UNAVAILABLE_BASE64 = base64.b64encode(_UNAVAILABLE_BYTES).decode()
# binary.handling.mode=hex: Debezium's HexConverter writes lowercase digits.
_UNAVAILABLE_HEX = _UNAVAILABLE_BYTES.hex()
# Java's UUID.nameUUIDFromBytes: an MD5 name-based UUID of the bytes, without a namespace.
_UNAVAILABLE_UUID = str(uuid.UUID(bytes=hashlib.md5(_UNAVAILABLE_BYTES).digest(), version=3))
# The placeholder in each shape Debezium gives it by column type (its UnchangedToastedPlaceholder), as
# the text a value of the parsed row holds (nested JSON is its compact JSON text).
UNAVAILABLE_VALUES = (
    UNAVAILABLE,  # text, json, xml, ...: any type without a shape of its own
    # bytea, binary.handling.mode=bytes (the default: the JSON converter writes bytes as base64),
    # base64 and base64-url-safe (the placeholder's base64 has no character the alphabets differ in)
    _UNAVAILABLE_BASE64,
    _UNAVAILABLE_HEX,  # bytea, binary.handling.mode=hex
    f'["{UNAVAILABLE}"]',  # text, varchar, char, json and jsonb arrays
    f'["{_UNAVAILABLE_BASE64}"]',  # bytea arrays
    f'["{_UNAVAILABLE_HEX}"]',  # bytea arrays, binary.handling.mode=hex
    "[" + ",".join(str(b) for b in _UNAVAILABLE_BYTES) + "]",  # integer, bigint and date arrays
    f'{{"{UNAVAILABLE}":"{UNAVAILABLE}"}}',  # hstore, as a map or as its JSON text
    f'["{_UNAVAILABLE_UUID}"]',  # uuid arrays
)
# A geometry is a struct; its WKB never starts with the placeholder's bytes.
_UNAVAILABLE_WKB = f'"wkb":"{_UNAVAILABLE_BASE64}"'
SNAPSHOT_LAST = "last"
TX_STATUS_BEGIN = "BEGIN"
TX_STATUS_END = "END"

REASON_EMPTY = "empty line"
REASON_MALFORMED = "malformed JSON"
REASON_NOT_EVENT = "not a Debezium change event (no op)"
REASON_NO_LSN = "missing source.lsn"
REASON_NO_TS = "missing source.ts_ms"
REASON_NO_TXID = "missing source.txId"
REASON_NO_TABLE = "missing source.schema or source.table"
REASON_NO_ROW = "missing after (create/update/read) or before and key (delete)"
REASON_KEY_MISSING = "a key column's value is missing from the row"

CORRUPT = "_corrupt_record"

# Spark's JSON reader turns a JSON float into a double before it becomes text (10.50 -> "10.5").
# Quoting every non-integer number that is the value of a key keeps its exact text (integers keep
# theirs anyway, and the envelope's integer fields must stay numbers). The look-behind skips an
# escaped quote, i.e. text inside a JSON string; the look-ahead keeps an invalid number invalid. The
# pattern starts with the quote (the look-behind comes after it): a position without one fails at
# once, where a look-behind first is evaluated at every position of the line.
_FLOAT_VALUE = (
    r'"(?<!\\")(\s*:\s*)'
    r"(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+(?:[eE][+-]?[0-9]+)?|[eE][+-]?[0-9]+))"
    r"(?=\s*[,}\]])"
)

_WRAPPER = StructType(
    [
        StructField("key", StringType()),
        StructField("value", StringType()),
        StructField("schema", StringType()),
        StructField("payload", StringType()),
        StructField("op", StringType()),
        StructField("status", StringType()),
        StructField(CORRUPT, StringType()),
    ]
)
_ROW = MapType(StringType(), StringType())
_SOURCE = StructType(
    [
        StructField("version", StringType()),
        StructField("connector", StringType()),
        StructField("name", StringType()),
        StructField("ts_ms", LongType()),
        StructField("snapshot", StringType()),
        StructField("db", StringType()),
        StructField("sequence", StringType()),
        StructField("schema", StringType()),
        StructField("table", StringType()),
        StructField("txId", LongType()),
        StructField("lsn", LongType()),
        StructField("xmin", LongType()),
    ]
)
ENVELOPE_SCHEMA = StructType(
    [
        StructField("op", StringType()),
        StructField("ts_ms", LongType()),
        StructField("before", _ROW),
        StructField("after", _ROW),
        StructField("source", _SOURCE),
        StructField(
            "transaction",
            StructType(
                [
                    StructField("id", StringType()),
                    StructField("total_order", LongType()),
                    StructField("data_collection_order", LongType()),
                ]
            ),
        ),
        StructField(
            "message", StructType([StructField("prefix", StringType()), StructField("content", StringType())])
        ),
        # Transaction metadata records.
        StructField("status", StringType()),
        StructField("id", StringType()),
        StructField("event_count", LongType()),
    ]
)


_SCHEMA_WRAPPER = "schema string, payload string, op string"
# A Connect field schema, as much of it as a column's type needs (a Postgres array has one dimension).
_FIELD_TYPE = "type string, name string, parameters map<string,string>"
_VALUE_SCHEMA = (
    f"fields array<struct<field string, fields array<struct<field string, {_FIELD_TYPE},"
    f" items struct<{_FIELD_TYPE}>>>>>"
)
DECIMAL = "org.apache.kafka.connect.data.Decimal"
# column.propagate.source.type: the Postgres type Debezium read the column as, beside its Connect type.
SOURCE_COLUMN_TYPE = "__debezium.source.column.type"
SOURCE_COLUMN_LENGTH = "__debezium.source.column.length"
SOURCE_COLUMN_SCALE = "__debezium.source.column.scale"


def _wrapped(text: Column) -> Column:
    """``text`` parsed as a maybe schema-wrapped object: ``schema``, ``payload``, ``op`` as JSON text."""
    return F.from_json(text, _SCHEMA_WRAPPER)


def _is_wrapped(wrapped: Column) -> Column:
    return wrapped["schema"].isNotNull() & wrapped["payload"].isNotNull() & wrapped["op"].isNull()


def _unwrap(text: Column) -> Column:
    """The payload of a schema-wrapped JSON object, else the object itself (both as JSON text)."""
    wrapped = _wrapped(text)
    return F.when(_is_wrapped(wrapped), wrapped["payload"]).otherwise(text)


def _connect_scalar(field: Column) -> Column:
    """A non-array Connect type as text: its semantic name (``io.debezium.time.MicroTimestamp``), else
    its type (``int64``); a Decimal with its precision and scale (``…Decimal(12,2)``, ``…Decimal(,2)``
    when the connector sends no precision)."""
    params = field["parameters"]
    decimal = F.concat(
        field["name"],
        F.lit("("),
        F.coalesce(params["connect.decimal.precision"], F.lit("")),
        F.lit(","),
        F.coalesce(params["scale"], F.lit("0")),
        F.lit(")"),
    )
    return F.when(field["name"] == DECIMAL, decimal).otherwise(F.coalesce(field["name"], field["type"]))


def connect_type(field: Column) -> Column:
    """A column's Connect schema as the one text the column registry records: ``_connect_scalar``, an
    array as ``array<item>``, then the Postgres type Debezium propagated (``column.propagate.source.type``)
    in parentheses, with its precision and scale for a numeric: ``string (NUMERIC(12,2))``."""
    params = field["parameters"]
    source = F.upper(params[SOURCE_COLUMN_TYPE])
    dims = F.when(
        source.isin("NUMERIC", "DECIMAL") & params[SOURCE_COLUMN_LENGTH].isNotNull(),
        F.concat(
            F.lit("("),
            params[SOURCE_COLUMN_LENGTH],
            F.coalesce(F.concat(F.lit(","), params[SOURCE_COLUMN_SCALE]), F.lit("")),
            F.lit(")"),
        ),
    )
    propagated = F.concat(F.lit(" ("), source, F.coalesce(dims, F.lit("")), F.lit(")"))
    connect = F.when(
        field["type"] == "array", F.concat(F.lit("array<"), _connect_scalar(field["items"]), F.lit(">"))
    ).otherwise(_connect_scalar(field))
    return F.concat(connect, F.coalesce(propagated, F.lit("")))


def column_types(value_schema: Column) -> Column:
    """Each column of the envelope's row (its ``after`` field, else ``before``) to its ``connect_type``;
    null when the value came without its schema."""
    rows = F.filter(value_schema["fields"], lambda f: f["field"].isin("after", "before"))
    columns = F.try_element_at(rows, F.lit(1))["fields"]
    return F.when(
        F.size(columns) > 0,
        F.map_from_entries(F.transform(columns, lambda c: F.struct(c["field"], connect_type(c)))),
    )


def available(row: Column) -> Column:
    """The row without the columns Debezium sent as unavailable (unchanged TOASTed values)."""
    return F.map_filter(
        row,
        lambda _, v: (
            v.isNull() | ~(v.isin(*UNAVAILABLE_VALUES) | (v.startswith("{") & v.contains(_UNAVAILABLE_WKB)))
        ),
    )


def key_text(key_columns: Column, row: Column, fallback: Column) -> Column:
    """Key values in key order as a JSON array of texts; null when one is missing."""
    texts = F.transform(key_columns, lambda k: F.coalesce(F.element_at(row, k), F.element_at(fallback, k)))
    return F.when(~F.exists(texts, lambda t: t.isNull()), F.to_json(texts))


def _read(lines: DataFrame, registry: DataFrame | None) -> DataFrame:
    """Lines with the wrapper ``w``, the envelope ``e``, the Kafka key and the registry's ``declared_key``."""
    quoted = F.regexp_replace(F.col("line"), F.lit(_FLOAT_VALUE), F.lit('"$1"$2"'))
    w = F.col("w")
    keyed = (
        w["op"].isNull()
        & w["payload"].isNull()
        & w["status"].isNull()
        & (w["key"].isNotNull() | w["value"].isNotNull())
    )
    src = F.col("e")["source"]
    value = F.col("value_wrapper")
    parsed = (
        lines.withColumn(
            "w", F.from_json(quoted, _WRAPPER, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT})
        )
        .withColumn("keyed", F.coalesce(keyed, F.lit(False)))
        .withColumn("value_text", F.when(F.col("keyed"), w["value"]).otherwise(quoted))
        .withColumn("value_wrapper", _wrapped(F.col("value_text")))
        .withColumn(
            "e",
            F.from_json(
                F.when(_is_wrapped(value), value["payload"]).otherwise(F.col("value_text")), ENVELOPE_SCHEMA
            ),
        )
        .withColumn("value_schema", F.from_json(F.when(_is_wrapped(value), value["schema"]), _VALUE_SCHEMA))
        .withColumn("kafka_key", F.from_json(_unwrap(F.when(F.col("keyed"), w["key"])), _ROW))
        .drop("value_text", "value_wrapper")
    )
    if registry is None:
        registry = lines.sparkSession.createDataFrame([], table_keys.SCHEMA)
    declared = registry.groupBy(
        F.col("source_id").alias("r_source"),
        F.col("source_schema").alias("r_schema"),
        F.col("source_table").alias("r_table"),
    ).agg(F.min("key_columns").alias("r_key"))
    own = declared.where(F.col("r_source") != table_keys.ANY_SOURCE).withColumnRenamed("r_key", "own_key")
    shared = declared.where(F.col("r_source") == table_keys.ANY_SOURCE).drop("r_source")
    same_table = (src["schema"] == F.col("r_schema")) & (src["table"] == F.col("r_table"))
    return (
        parsed.join(F.broadcast(own), same_table & (F.col("source_id") == F.col("r_source")), how="left")
        .drop("r_source", "r_schema", "r_table")
        .join(F.broadcast(shared), same_table, how="left")
        .withColumn("declared_key", F.coalesce("own_key", "r_key"))
        .drop("r_schema", "r_table", "own_key", "r_key")
    )


def _tombstone() -> Column:
    return F.col("keyed") & F.col("w")["value"].isNull()


def _tx_marker() -> Column:
    e = F.col("e")
    return e["op"].isNull() & e["status"].isin(TX_STATUS_BEGIN, TX_STATUS_END)


def _line_error() -> Column:
    """Why a line has no place among the events at all (it is rejected without a position)."""
    w, e = F.col("w"), F.col("e")
    src, op = e["source"], e["op"]
    return (
        F.when(F.trim(F.col("line")) == "", F.lit(REASON_EMPTY))
        .when(w.isNull() | w[CORRUPT].isNotNull(), F.lit(REASON_MALFORMED))
        .when(_tombstone() | _tx_marker(), F.lit(None))
        .when(op.isNull(), F.lit(REASON_NOT_EVENT))
        .when(~op.isin(list(ACTIONS)), F.concat(F.lit("unknown op '"), op, F.lit("'")))
        .when(src["lsn"].isNull(), F.lit(REASON_NO_LSN))
        .when(src["ts_ms"].isNull(), F.lit(REASON_NO_TS))
        .when(src["txId"].isNull() & (op != OP_READ) & (op != OP_MESSAGE), F.lit(REASON_NO_TXID))
        .when(op.isin(TABLE_OPS) & (src["schema"].isNull() | src["table"].isNull()), F.lit(REASON_NO_TABLE))
    )


def _content_error() -> Column:
    """Why an event with a position cannot land: it is rejected but keeps its slot in the transaction."""
    e = F.col("e")
    src, op = e["source"], e["op"]
    is_row_op = op.isin(ROW_OPS)
    no_key = F.concat(
        F.lit("no key columns for "),
        F.concat_ws(".", src["schema"], src["table"]),
        F.lit(": the line carries no Kafka key and the table registry (seeds/table_keys.csv) declares none"),
    )
    no_row = F.when(op == OP_DELETE, available(e["before"]).isNull() & F.col("kafka_key").isNull()).otherwise(
        available(e["after"]).isNull()
    )
    keyed = is_row_op & ~F.col("keyless")
    return (
        F.when(is_row_op & no_row, F.lit(REASON_NO_ROW))
        .when(keyed & F.col("key_columns").isNull(), no_key)
        .when(keyed & F.col("record_pk").isNull() & F.col("old_identity").isNull(), F.lit(REASON_KEY_MISSING))
    )


def old_identity() -> Column:
    """REPLICA IDENTITY USING INDEX on columns other than the key: an update's or delete's ``before``
    holds the index's columns only (the others null) and the key is in neither it nor the Kafka key.
    The identity, ``before``'s non-null values, lands as ``old_identity`` for the old key to be resolved
    from the record's last known state (as wal2json's); such a delete lands with a null ``record_pk``.
    Null when ``before`` holds the key (REPLICA IDENTITY FULL or DEFAULT) or nothing."""
    e, key_columns, record_pk = F.col("e"), F.col("key_columns"), F.col("record_pk")
    op, before = e["op"], available(e["before"])
    identity = F.map_filter(before, lambda _, v: v.isNotNull())
    old_key = key_text(key_columns, before, F.create_map())
    no_old_key = F.when(op == OP_DELETE, record_pk.isNull()).when(op == OP_UPDATE, old_key.isNull())
    return F.when(key_columns.isNotNull() & no_old_key & (F.size(identity) > 0), identity)


def parse(lines: DataFrame, registry: DataFrame | None = None) -> DataFrame:
    """Lines -> lines with the event envelope ``e``, its key, and the per-line checks."""
    e = F.col("e")
    op = e["op"]
    is_row_op = op.isin(ROW_OPS)
    kafka_key_columns = F.when(F.size(F.col("kafka_key")) > 0, F.map_keys(F.col("kafka_key")))
    row = F.when(op == OP_DELETE, available(e["before"])).otherwise(available(e["after"]))
    non_tx_message = (op == OP_MESSAGE) & e["source"]["txId"].isNull()
    # Debezium keys a table without a primary key with a null Kafka key. A key that is there but
    # does not parse is not that: it leaves the key unknown.
    null_key = F.col("keyed") & (F.col("w")["key"].isNull() | (F.size(F.col("kafka_key")) == 0))
    return (
        _read(lines, registry)
        .withColumn("key_columns", F.when(is_row_op, F.coalesce(kafka_key_columns, F.col("declared_key"))))
        .withColumn("keyless", F.coalesce(is_row_op & F.col("key_columns").isNull() & null_key, F.lit(False)))
        .withColumn("row", row)
        .withColumn(
            "record_pk", F.when(is_row_op, key_text(F.col("key_columns"), F.col("row"), F.col("kafka_key")))
        )
        .withColumn("old_identity", old_identity())
        .withColumn("line_error", _line_error())
        .withColumn("content_error", F.when(F.col("line_error").isNull(), _content_error()))
        .withColumn(
            "control", F.coalesce(_tombstone() | _tx_marker(), F.lit(False)) & F.col("w")[CORRUPT].isNull()
        )
        .withColumn("column_types", F.when(is_row_op, column_types(F.col("value_schema"))))
        .withColumn("non_tx_message", F.coalesce(non_tx_message, F.lit(False)))
        .withColumn("is_snapshot", F.coalesce(op == OP_READ, F.lit(False)))
    )
