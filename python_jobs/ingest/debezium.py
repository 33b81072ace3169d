"""Debezium Postgres change events (JSON converter) -> a ChangeSet. Pure DataFrame code, no UDFs.

A line is one event in any of the shapes a Kafka Connect sink writes: the bare value
(``{"before":…,"after":…,"source":…,"op":…}``), the value in the schema wrapper
(``{"schema":…,"payload":{…}}``), or the Kafka key beside the value (``{"key":…,"value":…}``, each
part possibly schema-wrapped). Tombstones (``"value": null``) and transaction metadata records
(``{"status":"BEGIN"|"END",…}``) carry no change: they are control lines.

Positions. Debezium does not put the commit LSN of a change's transaction on the event. What it does
put there is ``source.sequence = ["<LSN of the last commit before this transaction>", "<this event's
LSN>"]``: the first element is shared by every event of a transaction and grows from one transaction
to the next in commit order, because Debezium advances it at each commit it processes. So, for
Debezium, ``commit_lsn`` holds the LSN of the previous commit, which orders transactions exactly as
they committed (it is not the transaction's own commit LSN: do not compare it with wal2json
positions). When that element is null (the first transaction after a fresh snapshot, before Debezium
has seen any commit), ``commit_lsn`` falls back to the greatest event LSN of the transaction, which
is above the snapshot's LSN and below the commit that the next transaction names. ``commit_idx`` is
``transaction.total_order - 1`` when transaction metadata is on; otherwise the 0-based rank of the
event in its transaction by ``(change LSN, op, table, key)``: WAL order, and the same rank for the
same event landed twice (a replay or a copied file), which a rank by file and line would not give.

A snapshot (``op = r``) is one "transaction" at the snapshot's LSN (``source.lsn``, shared by all
its reads), ranked by table and key. Should a streamed transaction name that same LSN as its
previous commit, its events rank after the snapshot's reads at that position.

A position is complete, and its events land, once an event with a greater ``commit_lsn`` has been
seen in the source's lines, or the snapshot's ``last`` read, or the transaction's END metadata
record. The rest, from its first line on, is ``pending`` (a suffix of the source's lines, as the
ChangeSet contract asks): this holds the frontier during a snapshot and behind the last
transaction, which nothing yet proves complete.

Keys come from the Kafka key when the line carries one, else from the table ``registry`` the user
declares (columns ``source_schema``, ``source_table``, ``key_columns``). A change whose key columns
cannot be known is rejected, never keyed on a guess.

Values: strings are their content, JSON numbers their exact text, nested JSON its JSON text, a column
sent as ``__debezium_unavailable_value`` (an unchanged TOASTed value) is absent from ``record``.
Debezium encodes ``numeric`` per ``decimal.handling.mode``: ``string`` (recommended) or ``double``
land readable text; ``precise`` (the default) sends base64 bytes, which land as that text.

A primary-key change arrives, by default, as a delete of the old key and a create of the new one at
the same LSN: both land (delete first), which leaves the old key deleted and the new one present. An
update whose ``before`` (REPLICA IDENTITY FULL) holds another key lands with ``old_record_pk``.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from python_jobs.ingest.changeset import (
    ACTION_DELETE,
    ACTION_INSERT,
    ACTION_MESSAGE,
    ACTION_READ,
    ACTION_TRUNCATE,
    ACTION_UPDATE,
    EVENTS_SCHEMA,
    FORMAT_DEBEZIUM,
    PENDING_SCHEMA,
    REJECTS_SCHEMA,
    ChangeSet,
    conform,
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
# Events at one LSN are ranked in this order: a key change's delete precedes its create.
OP_RANK = {OP_DELETE: 0, OP_UPDATE: 1, OP_CREATE: 2, OP_TRUNCATE: 3, OP_MESSAGE: 4, OP_READ: 5}

UNAVAILABLE = "__debezium_unavailable_value"
# The placeholder as Debezium sends it for an array column.
UNAVAILABLE_ARRAY = f'["{UNAVAILABLE}"]'
SNAPSHOT_LAST = "last"
TX_STATUS_BEGIN = "BEGIN"
TX_STATUS_END = "END"

# Line outcomes inside the transform.
KIND_EVENT = "event"
KIND_REJECT = "reject"
KIND_PENDING = "pending"
KIND_CONTROL = "control"

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
# escaped quote, i.e. text inside a JSON string; the look-ahead keeps an invalid number invalid.
_FLOAT_VALUE = (
    r'(?<!\\)("\s*:\s*)'
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
REGISTRY_SCHEMA = StructType(
    [
        StructField("source_schema", StringType()),
        StructField("source_table", StringType()),
        StructField("key_columns", ArrayType(StringType())),
    ]
)


def _unwrap(text: Column) -> Column:
    """The payload of a schema-wrapped JSON object, else the object itself (both as JSON text)."""
    wrapped = F.from_json(text, "schema string, payload string, op string")
    return F.when(
        wrapped["schema"].isNotNull() & wrapped["payload"].isNotNull() & wrapped["op"].isNull(),
        wrapped["payload"],
    ).otherwise(text)


def _available(row: Column) -> Column:
    return F.map_filter(row, lambda _, v: v.isNull() | ~v.isin(UNAVAILABLE, UNAVAILABLE_ARRAY))


def _key_text(key_columns: Column, row: Column, fallback: Column) -> Column:
    """Key values in key order as a JSON array of texts; null when one is missing."""
    texts = F.transform(key_columns, lambda k: F.coalesce(F.element_at(row, k), F.element_at(fallback, k)))
    return F.when(~F.exists(texts, lambda t: t.isNull()), F.to_json(texts))


def parse(lines: DataFrame, registry: DataFrame | None = None) -> DataFrame:
    """Lines -> lines with the event envelope ``e``, its key, and the per-line checks."""
    quoted = F.regexp_replace(F.col("line"), F.lit(_FLOAT_VALUE), F.lit('$1"$2"'))
    w = F.col("w")
    keyed = (
        w["op"].isNull()
        & w["payload"].isNull()
        & w["status"].isNull()
        & (w["key"].isNotNull() | w["value"].isNotNull())
    )
    e = F.col("e")
    src = e["source"]
    op = e["op"]
    parsed = (
        lines.withColumn(
            "w", F.from_json(quoted, _WRAPPER, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT})
        )
        .withColumn("keyed", F.coalesce(keyed, F.lit(False)))
        .withColumn(
            "e", F.from_json(_unwrap(F.when(F.col("keyed"), w["value"]).otherwise(quoted)), ENVELOPE_SCHEMA)
        )
        .withColumn("kafka_key", F.from_json(_unwrap(F.when(F.col("keyed"), w["key"])), _ROW))
    )
    if registry is None:
        registry = lines.sparkSession.createDataFrame([], REGISTRY_SCHEMA)
    declared = registry.groupBy("source_schema", "source_table").agg(
        F.min("key_columns").alias("declared_key")
    )
    parsed = parsed.join(
        F.broadcast(declared),
        (src["schema"] == F.col("source_schema")) & (src["table"] == F.col("source_table")),
        how="left",
    ).drop("source_schema", "source_table")

    kafka_key_columns = F.when(F.size(F.col("kafka_key")) > 0, F.map_keys(F.col("kafka_key")))
    is_row_op = op.isin(ROW_OPS)
    after = _available(e["after"])
    before = _available(e["before"])
    row = F.when(op == OP_DELETE, before).otherwise(after)
    tombstone = F.col("keyed") & w["value"].isNull()
    tx_marker = op.isNull() & e["status"].isin(TX_STATUS_BEGIN, TX_STATUS_END)
    non_tx_message = (op == OP_MESSAGE) & src["txId"].isNull()
    table_name = F.concat_ws(".", src["schema"], src["table"])
    no_key = F.concat(
        F.lit("no key columns for "),
        table_name,
        F.lit(": the line carries no Kafka key and the table registry declares none"),
    )
    line_error = (
        F.when(F.trim(F.col("line")) == "", F.lit(REASON_EMPTY))
        .when(w.isNull() | w[CORRUPT].isNotNull(), F.lit(REASON_MALFORMED))
        .when(tombstone | tx_marker, F.lit(None))
        .when(op.isNull(), F.lit(REASON_NOT_EVENT))
        .when(~op.isin(list(ACTIONS)), F.concat(F.lit("unknown op '"), op, F.lit("'")))
        .when(src["lsn"].isNull(), F.lit(REASON_NO_LSN))
        .when(src["ts_ms"].isNull(), F.lit(REASON_NO_TS))
        .when(src["txId"].isNull() & (op != OP_READ) & (op != OP_MESSAGE), F.lit(REASON_NO_TXID))
        .when(op.isin(TABLE_OPS) & (src["schema"].isNull() | src["table"].isNull()), F.lit(REASON_NO_TABLE))
    )
    # Reasons that still leave the event a position: it keeps its slot in the transaction.
    content_error = (
        F.when(
            is_row_op
            & F.when(op == OP_DELETE, before.isNull() & F.col("kafka_key").isNull()).otherwise(
                after.isNull()
            ),
            F.lit(REASON_NO_ROW),
        )
        .when(is_row_op & F.col("key_columns").isNull(), no_key)
        .when(is_row_op & F.col("record_pk").isNull(), F.lit(REASON_KEY_MISSING))
    )
    return (
        parsed.withColumn(
            "key_columns", F.when(is_row_op, F.coalesce(kafka_key_columns, F.col("declared_key")))
        )
        .withColumn("row", row)
        .withColumn(
            "record_pk", F.when(is_row_op, _key_text(F.col("key_columns"), F.col("row"), F.col("kafka_key")))
        )
        .withColumn("line_error", line_error)
        .withColumn("content_error", F.when(F.col("line_error").isNull(), content_error))
        .withColumn("control", F.coalesce(tombstone | tx_marker, F.lit(False)) & w[CORRUPT].isNull())
        .withColumn("non_tx_message", F.coalesce(non_tx_message, F.lit(False)))
        .withColumn("is_snapshot", F.coalesce(op == OP_READ, F.lit(False)))
    )


def classify(lines: DataFrame, registry: DataFrame | None = None) -> DataFrame:
    """One row per line with ``kind`` (event/reject/pending/control), ``reason`` and its position."""
    parsed = parse(lines, registry)
    e = F.col("e")
    src = e["source"]
    positioned = F.col("line_error").isNull() & ~F.col("control")
    seq_commit = F.from_json(src["sequence"], ArrayType(StringType())).getItem(0).cast("bigint")
    by_txid = Window.partitionBy("source_id", F.col("e.source.txId"))
    streamed = positioned & ~F.col("is_snapshot") & ~F.col("non_tx_message")
    fallback = F.max(F.when(streamed & seq_commit.isNull(), src["lsn"])).over(by_txid)
    commit_lsn = (
        F.when(~positioned, F.lit(None))
        .when(F.col("is_snapshot") | F.col("non_tx_message"), src["lsn"])
        .otherwise(F.coalesce(seq_commit, fallback))
    )
    group = Window.partitionBy("source_id", "commit_lsn")
    rank_order = [
        F.col("is_snapshot").desc(),
        F.when(~F.col("is_snapshot"), src["lsn"]),
        F.col("op_rank"),
        src["schema"],
        src["table"],
        F.col("record_pk"),
    ]
    op_rank = F.lit(None)
    for code, rank in OP_RANK.items():
        op_rank = F.when(e["op"] == code, F.lit(rank)).otherwise(op_rank)
    rank = F.dense_rank().over(group.orderBy(*rank_order)) - 1
    commit_idx = F.when(positioned, F.coalesce(e["transaction"]["total_order"] - 1, rank))

    # Transaction END markers name the transaction as "txId:lsn".
    end_txid = F.when(
        F.col("control") & (e["status"] == TX_STATUS_END), F.split(e["id"], ":").getItem(0).cast("bigint")
    )
    txid = F.coalesce(src["txId"], end_txid)
    is_last_read = F.col("is_snapshot") & (src["snapshot"] == SNAPSHOT_LAST)
    complete = (
        (F.col("commit_lsn") < F.max("commit_lsn").over(Window.partitionBy("source_id")))
        | F.max(is_last_read).over(group)
        | F.max(F.col("has_end")).over(group)
        | F.col("non_tx_message")
    )
    line_pos = F.struct("landing_file", "landing_line")
    pending_from = F.min(F.when(positioned & ~F.col("complete"), line_pos)).over(
        Window.partitionBy("source_id")
    )
    staged = (
        parsed.withColumn("op_rank", op_rank)
        .withColumn("commit_lsn", commit_lsn)
        .withColumn("commit_idx", commit_idx)
        .withColumn("txid", txid)
        .withColumn("has_end", F.max(end_txid.isNotNull()).over(Window.partitionBy("source_id", "txid")))
        .withColumn("complete", F.coalesce(complete, F.lit(False)))
        .withColumn("pending_from", pending_from)
    )
    pending = F.col("pending_from").isNotNull() & (line_pos >= F.col("pending_from"))
    reason = F.when(pending, F.lit(None)).otherwise(F.coalesce("line_error", "content_error"))
    kind = (
        F.when(pending, F.lit(KIND_PENDING))
        .when(F.col("reason").isNotNull(), F.lit(KIND_REJECT))
        .when(F.col("control"), F.lit(KIND_CONTROL))
        .otherwise(F.lit(KIND_EVENT))
    )
    return staged.withColumn("reason", reason).withColumn("kind", kind)


def _events(classified: DataFrame) -> DataFrame:
    e = F.col("e")
    src = e["source"]
    op = e["op"]
    after = _available(e["after"])
    before = _available(e["before"])
    record = F.when(op == OP_DELETE, F.coalesce(before, F.col("kafka_key"))).otherwise(after)
    is_update = op == OP_UPDATE
    old_key = _key_text(F.col("key_columns"), before, F.create_map())
    message = F.map_from_arrays(
        F.array(F.lit("prefix"), F.lit("content"), F.lit("transactional")),
        F.array(
            e["message"]["prefix"],
            e["message"]["content"],
            F.lower((~F.col("non_tx_message")).cast("string")),
        ),
    )
    action = F.lit(None)
    for code, name in ACTIONS.items():
        action = F.when(op == code, F.lit(name)).otherwise(action)
    is_table_op = op.isin(TABLE_OPS)
    return classified.where(F.col("kind") == KIND_EVENT).select(
        "source_id",
        "commit_lsn",
        "commit_idx",
        src["lsn"].alias("change_lsn"),
        src["txId"].alias("xid"),
        F.timestamp_millis(src["ts_ms"]).alias("committed_at"),
        action.alias("action"),
        F.when(is_table_op, src["schema"]).alias("source_schema"),
        F.when(is_table_op, src["table"]).alias("source_table"),
        "key_columns",
        "record_pk",
        F.when(op.isin(ROW_OPS), record).when(op == OP_MESSAGE, message).alias("record"),
        F.when(
            is_update & before.isNotNull(),
            F.map_filter(
                before, lambda k, v: F.map_contains_key(after, k) & ~F.element_at(after, k).eqNullSafe(v)
            ),
        ).alias("changes"),
        F.when(is_update & (old_key != F.col("record_pk")), old_key).alias("old_record_pk"),
        F.lit(FORMAT_DEBEZIUM).alias("source_format"),
        "landing_file",
        "landing_line",
    )


def _lines_of(classified: DataFrame, kind: str) -> DataFrame:
    return conform(classified.where(F.col("kind") == kind), PENDING_SCHEMA)


def transform(lines: DataFrame, registry: DataFrame | None = None) -> ChangeSet:
    """Debezium lines (source_id, landing_file, landing_line, line) -> ChangeSet.

    ``registry`` declares the key columns of tables whose lines carry no Kafka key.
    """
    shared = classify(lines, registry)
    rejects = shared.where(F.col("kind") == KIND_REJECT).select(
        "source_id", "landing_file", "landing_line", F.col("line").alias("raw_line"), "reason"
    )
    return ChangeSet(
        events=conform(_events(shared), EVENTS_SCHEMA),
        rejects=conform(rejects, REJECTS_SCHEMA),
        pending=_lines_of(shared, KIND_PENDING),
        control=_lines_of(shared, KIND_CONTROL),
        shared=shared,
    )
