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
has seen any commit), ``commit_lsn`` falls back to the greatest event LSN of the transaction, or just
above the snapshot's LSN (of this batch's reads or of landed ones) when that is greater: a
transaction that began before the snapshot's point has events below it, yet commits after it. Either
is below the commit that the next transaction names.

``commit_idx`` is ``transaction.total_order - 1`` when transaction metadata is on. Otherwise it is the
event's rank in its transaction by ``(change LSN, op, table, key)`` (WAL order; a row of a table
without a key is told apart by its values), and the rank does not start again with each batch: an
event that has landed before (a replay after a connector restart, or a copied file) takes the index
it landed with, and the new events of a position some of whose events have landed are numbered after
them. So a transaction gets the same positions however its lines were cut into files and batches.

A non-transactional logical message (``op = m``, null ``txId``) belongs to no transaction. Debezium
treats it as a commit of its own: its ``sequence`` is ``[its LSN, its LSN]`` and the transaction
decoded after it names the message's LSN as its last commit. The message is at ``(sequence[0], -1)``:
after every transaction decoded before it, before every change of the one decoded after it, and at
an index no change takes.

A snapshot (``op = r``) is one "transaction" at the snapshot's LSN (``source.lsn``, shared by all
its reads), ranked by table and key. Should a streamed transaction name that same LSN as its
previous commit, its events rank after the snapshot's reads at that position.

A position is complete, and its events land, once an event with a greater ``commit_lsn`` has been
seen in the source's lines, or its transaction's END metadata record; the snapshot's reads once its
``last`` read has been seen. The rest, from its first line on, is ``pending`` (a suffix of the
source's lines, as the ChangeSet contract asks): this holds the frontier during a snapshot and behind
the last transaction, which nothing yet proves complete.

A primary-key change arrives, by default, as a delete of the old key and a create of the new one at
the same LSN: both land (delete first), and the create names the old key in ``old_record_pk`` (its
action stays ``insert``): a move, so the new key keeps the values of columns the create leaves out.
An update whose ``before`` (REPLICA IDENTITY FULL) holds another key lands with ``old_record_pk``.
"""

from __future__ import annotations

from dataclasses import replace

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
ACTION_RANK = {ACTIONS[op]: rank for op, rank in OP_RANK.items()}
# The index of a non-transactional message: below every change's.
MESSAGE_IDX = -1


def _positioned() -> Column:
    return F.col("line_error").isNull() & ~F.col("control")


def _rank_of(code: Column, ranks: dict[str, int]) -> Column:
    rank = F.lit(None)
    for name, value in ranks.items():
        rank = F.when(code == name, F.lit(value)).otherwise(rank)
    return rank


def _order_key(
    is_snapshot: Column, lsn: Column, op_rank: Column, table: tuple[Column, Column], row: Column
) -> Column:
    """An event's place in its transaction, the same for the event in a line and as landed."""
    return F.struct(
        (~is_snapshot).alias("streamed"),
        F.when(~is_snapshot, lsn).alias("lsn"),
        op_rank.alias("op"),
        table[0].alias("schema"),
        table[1].alias("table"),
        F.col("record_pk").alias("pk"),
        F.when(F.col("record_pk").isNull(), F.to_json(row)).alias("row"),
    )


def _seq_commit() -> Column:
    return F.from_json(F.col("e.source.sequence"), ArrayType(StringType())).getItem(0).cast("bigint")


def _streamed() -> Column:
    return _positioned() & ~F.col("is_snapshot") & ~F.col("non_tx_message")


def _with_snapshot_lsn(parsed: DataFrame, landed: DataFrame | None) -> DataFrame:
    """``snapshot_lsn``: the greatest snapshot LSN of the source, in this batch or landed before it.
    Landed reads are looked up only for a source with a transaction naming no previous commit; when
    there is none, Spark's adaptive execution drops the join before it reads wal_events."""
    in_batch = F.max(F.when(_positioned() & F.col("is_snapshot"), F.col("e.source.lsn")))
    staged = parsed.withColumn("snapshot_lsn", in_batch.over(Window.partitionBy("source_id")))
    if landed is None:
        return staged
    sources = parsed.where(_streamed() & _seq_commit().isNull()).select("source_id").distinct()
    snapshots = (
        landed.where((F.col("source_format") == FORMAT_DEBEZIUM) & (F.col("action") == ACTIONS[OP_READ]))
        .join(F.broadcast(sources), "source_id", how="left_semi")
        .groupBy("source_id")
        .agg(F.max("commit_lsn").alias("landed_snapshot_lsn"))
    )
    return (
        staged.join(F.broadcast(snapshots), "source_id", how="left")
        .withColumn("snapshot_lsn", F.greatest("snapshot_lsn", "landed_snapshot_lsn"))
        .drop("landed_snapshot_lsn")
    )


def _commit_lsn(parsed: DataFrame, landed: DataFrame | None = None) -> DataFrame:
    """Parsed lines with ``commit_lsn``, ``ranked`` (the index is a rank) and the ``order_key``.

    ``landed`` (wal_events) gives the snapshot's LSN when its reads landed in an earlier batch."""
    parsed = _with_snapshot_lsn(parsed, landed)
    e = F.col("e")
    src = e["source"]
    positioned = _positioned()
    seq_commit = _seq_commit()
    by_txid = Window.partitionBy("source_id", F.col("e.source.txId"))
    streamed = _streamed()
    # A transaction that began before the snapshot's point has events below it: its stand-in is kept
    # above the snapshot's LSN, off the reads' position too, where indexes taken from transaction
    # metadata would collide with the reads' ranks.
    greatest_lsn = F.max(F.when(streamed & seq_commit.isNull(), src["lsn"])).over(by_txid)
    fallback = F.greatest(greatest_lsn, F.when(greatest_lsn.isNotNull(), F.col("snapshot_lsn") + 1))
    commit_lsn = (
        F.when(~positioned, F.lit(None))
        .when(F.col("is_snapshot"), src["lsn"])
        .when(F.col("non_tx_message"), F.coalesce(seq_commit, src["lsn"]))
        .otherwise(F.coalesce(seq_commit, fallback))
    )
    ranked = positioned & ~F.col("non_tx_message") & e["transaction"]["total_order"].isNull()
    table_op = e["op"].isin(TABLE_OPS)
    table = (F.when(table_op, src["schema"]), F.when(table_op, src["table"]))
    order_key = _order_key(F.col("is_snapshot"), src["lsn"], _rank_of(e["op"], OP_RANK), table, F.col("row"))
    return (
        parsed.withColumn("commit_lsn", commit_lsn)
        .withColumn("ranked", ranked)
        .withColumn("order_key", order_key)
    )


def _landed_keys(staged: DataFrame, landed: DataFrame, frontiers: dict[str, int | None]) -> DataFrame:
    """(source_id, commit_lsn, order_key, landed_idx) of the landed events at the positions of this
    batch's ranked events. Only a position at or below its source's frontier can hold landed events,
    and those are few (replays, a snapshot's LSN): the others are not looked up, and when there are
    none, Spark's adaptive execution drops the join before it reads wal_events."""
    bounds = [F.lit(x) for source, lsn in frontiers.items() if lsn is not None for x in (source, lsn)]
    frontier = F.element_at(F.create_map(*bounds), F.col("source_id"))
    at_or_below = F.col("ranked") & (F.col("commit_lsn") <= frontier)
    positions = staged.where(at_or_below).select("source_id", "commit_lsn").distinct()
    action = F.col("action")
    return (
        landed.where((F.col("source_format") == FORMAT_DEBEZIUM) & (F.col("commit_idx") >= 0))
        .join(F.broadcast(positions), ["source_id", "commit_lsn"], how="left_semi")
        .select(
            "source_id",
            "commit_lsn",
            _order_key(
                action == ACTIONS[OP_READ],
                F.col("change_lsn"),
                _rank_of(action, ACTION_RANK),
                (F.col("source_schema"), F.col("source_table")),
                F.when(action != ACTIONS[OP_MESSAGE], F.col("record")),
            ).alias("order_key"),
            F.col("commit_idx").alias("landed_idx"),
        )
    )


def _looks_up(landed: DataFrame | None, frontiers: dict[str, int | None] | None) -> bool:
    return landed is not None and any(lsn is not None for lsn in (frontiers or {}).values())


def position(
    parsed: DataFrame, landed: DataFrame | None = None, frontiers: dict[str, int | None] | None = None
) -> DataFrame:
    """Lines with their ``commit_lsn`` (of ``_commit_lsn``) with ``commit_idx`` too;
    and ``moved_from``, the old key of a create that is the second half of a key change.

    ``landed`` (wal_events) and ``frontiers`` (per source, the greatest landed ``commit_lsn``) let the
    ranks continue from what has landed; without them the batch is taken to be all there is."""
    group = ["source_id", "commit_lsn"]
    staged = parsed
    if _looks_up(landed, frontiers):
        # A copied file lands its events twice: one index per event.
        keys = (
            _landed_keys(staged, landed, frontiers)
            .groupBy(*group, "order_key")
            .agg(F.min("landed_idx").alias("landed_idx"))
        )
        bases = keys.groupBy(*group).agg((F.max("landed_idx") + 1).alias("base"))
        staged = staged.join(F.broadcast(keys), [*group, "order_key"], how="left").join(
            F.broadcast(bases), group, how="left"
        )
    else:
        staged = staged.withColumn("landed_idx", F.lit(None).cast("int")).withColumn("base", F.lit(None))
    e = F.col("e")
    # Ranks count the events that take one, before those that landed already.
    by_rank = Window.partitionBy(*group).orderBy(
        ~F.col("ranked"), F.col("landed_idx").isNotNull(), "order_key"
    )
    rank = F.dense_rank().over(by_rank) - 1
    commit_idx = (
        F.when(~_positioned(), F.lit(None))
        .when(F.col("non_tx_message"), F.lit(MESSAGE_IDX))
        .otherwise(
            F.coalesce(e["transaction"]["total_order"] - 1, "landed_idx", F.coalesce("base", F.lit(0)) + rank)
        )
    )
    # A key change's delete is the event just before its create, at the same LSN and table.
    key = F.col("order_key")
    delete = F.when(
        (e["op"] == OP_DELETE) & F.col("record_pk").isNotNull(),
        F.struct(key["lsn"].alias("lsn"), key["table"].alias("table"), "record_pk"),
    )
    before = F.last(delete, ignorenulls=True).over(by_rank.rowsBetween(Window.unboundedPreceding, -1))
    same_record = (before["lsn"] == key["lsn"]) & before["table"].eqNullSafe(key["table"])
    moved_from = F.when((e["op"] == OP_CREATE) & same_record, before["record_pk"])
    return staged.withColumn("commit_idx", commit_idx).withColumn("moved_from", moved_from)


def classify(
    parsed: DataFrame, landed: DataFrame | None = None, frontiers: dict[str, int | None] | None = None
) -> DataFrame:
    """One row per line with ``kind`` (event/reject/pending/control), ``reason`` and its position."""
    e = F.col("e")
    src = e["source"]
    group = Window.partitionBy("source_id", "commit_lsn")
    # Transaction END markers name the transaction as "txId:lsn".
    end_txid = F.when(
        F.col("control") & (e["status"] == TX_STATUS_END), F.split(e["id"], ":").getItem(0).cast("bigint")
    )
    is_last_read = F.col("is_snapshot") & (src["snapshot"] == SNAPSHOT_LAST)
    # The last read completes the snapshot's reads, not a streamed transaction that names its LSN.
    complete = (
        (F.col("commit_lsn") < F.max("commit_lsn").over(Window.partitionBy("source_id")))
        | (F.col("is_snapshot") & F.max(is_last_read).over(group))
        | F.col("has_end")
        | F.col("non_tx_message")
    )
    line_pos = F.struct("landing_file", "landing_line")
    pending_from = F.min(F.when(_positioned() & ~F.col("complete"), line_pos)).over(
        Window.partitionBy("source_id")
    )
    staged = (
        position(parsed, landed, frontiers)
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
        F.when(is_update & (old_key != F.col("record_pk")), old_key)
        .otherwise(F.col("moved_from"))
        .alias("old_record_pk"),
        "old_identity",
        "column_types",
        F.lit(FORMAT_DEBEZIUM).alias("source_format"),
        "landing_file",
        "landing_line",
    )


def transform(
    lines: DataFrame,
    registry: DataFrame | None = None,
    landed: DataFrame | None = None,
    frontiers: dict[str, int | None] | None = None,
) -> ChangeSet:
    """Debezium lines (source_id, landing_file, landing_line, line) -> ChangeSet.

    ``registry`` (``table_keys.SCHEMA``) declares the key columns of tables whose lines carry no Kafka
    key. ``landed`` (the wal_events table) and ``frontiers`` (per source, its frontier before this
    batch) give events that landed in earlier batches their indexes back (see ``position``).
    """
    looks_up = _looks_up(landed, frontiers)
    staged = _commit_lsn(parse(lines, registry), landed if looks_up else None)
    shared = classify(staged, landed, frontiers)

    def outputs(classified: DataFrame) -> ChangeSet:
        src = F.col("e")["source"]
        table = F.when(F.col("e")["op"].isin(ROW_OPS), F.concat_ws(".", src["schema"], src["table"]))
        return split_classified(classified, _events(classified), table=table)

    if not looks_up:
        return outputs(shared)
    # The staged lines feed two branches (the lookups and the lines): compute them once. The
    # classified lines read wal_events, which the batch appends to: the job holds them as a checkpoint.
    return replace(outputs(shared), upstream=(staged,), rebuild=outputs)
