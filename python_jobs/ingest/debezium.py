"""Debezium Postgres change events (JSON converter) -> a ChangeSet. Pure DataFrame code, no UDFs.

``debezium_envelope`` parses a line (its shapes, keys and values, and the per-line checks); this
module gives each event its position and decides which lines land, wait or are rejected.

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

A primary-key change arrives, by default, as a delete of the old key and a create of the new one at
the same LSN: both land (delete first), which leaves the old key deleted and the new one present. An
update whose ``before`` (REPLICA IDENTITY FULL) holds another key lands with ``old_record_pk``.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StringType

from python_jobs.ingest.changeset import (
    FORMAT_DEBEZIUM,
    KIND_CONTROL,
    KIND_EVENT,
    KIND_PENDING,
    KIND_REJECT,
    ChangeSet,
    split_classified,
)
from python_jobs.ingest.debezium_envelope import (
    ACTIONS,
    OP_CREATE,
    OP_DELETE,
    OP_MESSAGE,
    OP_READ,
    OP_TRUNCATE,
    OP_UPDATE,
    ROW_OPS,
    SNAPSHOT_LAST,
    TABLE_OPS,
    TX_STATUS_END,
    available,
    key_text,
    parse,
)

# Events at one LSN are ranked in this order: a key change's delete precedes its create.
OP_RANK = {OP_DELETE: 0, OP_UPDATE: 1, OP_CREATE: 2, OP_TRUNCATE: 3, OP_MESSAGE: 4, OP_READ: 5}


def _positioned() -> Column:
    return F.col("line_error").isNull() & ~F.col("control")


def position(parsed: DataFrame) -> DataFrame:
    """Parsed lines (of ``debezium_envelope.parse``) with their position: ``commit_lsn``, ``commit_idx``."""
    e = F.col("e")
    src = e["source"]
    positioned = _positioned()
    seq_commit = F.from_json(src["sequence"], ArrayType(StringType())).getItem(0).cast("bigint")
    by_txid = Window.partitionBy("source_id", F.col("e.source.txId"))
    streamed = positioned & ~F.col("is_snapshot") & ~F.col("non_tx_message")
    fallback = F.max(F.when(streamed & seq_commit.isNull(), src["lsn"])).over(by_txid)
    commit_lsn = (
        F.when(~positioned, F.lit(None))
        .when(F.col("is_snapshot") | F.col("non_tx_message"), src["lsn"])
        .otherwise(F.coalesce(seq_commit, fallback))
    )
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
    rank = F.dense_rank().over(Window.partitionBy("source_id", "commit_lsn").orderBy(*rank_order)) - 1
    commit_idx = F.when(positioned, F.coalesce(e["transaction"]["total_order"] - 1, rank))
    return (
        parsed.withColumn("op_rank", op_rank)
        .withColumn("commit_lsn", commit_lsn)
        .withColumn("commit_idx", commit_idx)
    )


def classify(lines: DataFrame, registry: DataFrame | None = None) -> DataFrame:
    """One row per line with ``kind`` (event/reject/pending/control), ``reason`` and its position."""
    e = F.col("e")
    src = e["source"]
    group = Window.partitionBy("source_id", "commit_lsn")
    # Transaction END markers name the transaction as "txId:lsn".
    end_txid = F.when(
        F.col("control") & (e["status"] == TX_STATUS_END), F.split(e["id"], ":").getItem(0).cast("bigint")
    )
    is_last_read = F.col("is_snapshot") & (src["snapshot"] == SNAPSHOT_LAST)
    complete = (
        (F.col("commit_lsn") < F.max("commit_lsn").over(Window.partitionBy("source_id")))
        | F.max(is_last_read).over(group)
        | F.max(F.col("has_end")).over(group)
        | F.col("non_tx_message")
    )
    line_pos = F.struct("landing_file", "landing_line")
    pending_from = F.min(F.when(_positioned() & ~F.col("complete"), line_pos)).over(
        Window.partitionBy("source_id")
    )
    staged = (
        position(parse(lines, registry))
        .withColumn("txid", F.coalesce(src["txId"], end_txid))
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
    after = available(e["after"])
    before = available(e["before"])
    record = F.when(op == OP_DELETE, F.coalesce(before, F.col("kafka_key"))).otherwise(after)
    is_update = op == OP_UPDATE
    old_key = key_text(F.col("key_columns"), before, F.create_map())
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


def transform(lines: DataFrame, registry: DataFrame | None = None) -> ChangeSet:
    """Debezium lines (source_id, landing_file, landing_line, line) -> ChangeSet.

    ``registry`` declares the key columns of tables whose lines carry no Kafka key.
    """
    shared = classify(lines, registry)
    return split_classified(shared, _events(shared))
