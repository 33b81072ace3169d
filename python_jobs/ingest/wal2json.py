"""wal2json ``format-version=2`` lines -> a ChangeSet. Pure DataFrame code, no Python UDFs.

Expected plugin options: ``include-xids``, ``include-lsn``, ``include-timestamp``, ``include-pk`` and
``include-transaction`` (the default), so that every transaction is framed by ``B`` and ``C``
records whose ``lsn`` is the commit LSN, and every change carries its own ``lsn`` and ``xid``.

Rules (docs/ingestion.md has the why):

- Lines of one source are read in ``(landing_file, landing_line)`` order. Every valid ``B`` opens a
  transaction; its lines run up to the first valid ``C`` after it. ``commit_lsn``/``committed_at``
  come from that ``C``; ``commit_idx`` numbers the I/U/D/T/M records in between from 0.
- A trailing transaction without its ``C`` is pending: its lines (and everything after them) are
  re-read in the next batch. A transaction whose ``C`` never came before the next ``B`` is rejected.
- A file that does not go on where the file before it stopped (an open transaction not continued,
  or a change before any ``B``) shows that a file named between them has not landed yet: from the
  cut on, the source's lines are pending until that file arrives (``wal2json_framing._held_from``).
- A non-transactional logical message (``"transactional": false``) is decoded at once by Postgres,
  outside any transaction: it lands at ``commit_lsn`` = its ``lsn``, ``commit_idx`` -1. wal2json
  reports it at the end of its record, where the next commit record may start; that transaction,
  decoded after it, numbers its changes from 0, and two messages never end at one LSN.
- A table without a primary key (``pk`` empty or absent) lands with a null ``record_pk``. An insert
  or update whose key column's value is absent is rejected.
- REPLICA IDENTITY USING INDEX: when the identity (the index's columns) lacks a key column, the old
  key is not in the change: ``old_identity`` carries the identity, for the key to be resolved from
  the record's last known state; such a delete lands with a null ``record_pk``.
- A rejected change still takes its ``commit_idx`` slot, so the positions of the others stay those
  of the WAL.
"""

from __future__ import annotations

from dataclasses import replace

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StringType

from python_jobs.ingest.changeset import (
    ACTION_INSERT,
    FORMAT_WAL2JSON,
    KIND_EVENT,
    KIND_REJECT,
    ChangeSet,
    built_once,
    file_names,
    number_files,
    split_classified,
)
from python_jobs.ingest.wal2json_framing import classify, number_in_files
from python_jobs.ingest.wal2json_records import (
    ACTIONS,
    CODE_DELETE,
    CODE_INSERT,
    CODE_MESSAGE,
    CODE_UPDATE,
    RECORD_SCHEMA,
    ROW_CODES,
    column_names,
    content_error,
    full_record,
    has_key,
    key_text,
    parse,
    types_map,
    values_map,
)

__all__ = ["RECORD_SCHEMA", "transform"]

# commit_idx of a non-transactional message: below every change of a transaction at its lsn.
STANDALONE_IDX = -1


def _events(parsed: DataFrame) -> DataFrame:
    """Lines that land, fully parsed and framed -> the events (EVENTS_SCHEMA's columns)."""
    maps, keys, columns = _event_columns()
    return parsed.select("*", *maps).select("*", *keys).select(*columns)


@built_once
def _event_columns() -> tuple[list[Column], list[Column], list[Column]]:
    """``_events``' three projections: the record's and the identity's maps, the keys read from them,
    then the event's columns."""
    r = F.col("r")
    code = F.col("code")
    standalone = F.col("non_tx_message")
    values_src = F.when(code == CODE_DELETE, r["identity"]).otherwise(r["columns"])
    pk_names = column_names(r["pk"])
    keyed = has_key(r["pk"])
    # The record's and the identity's maps, then the keys read from them, are each built once, in
    # a projection of their own: Spark does not share an expression between the branches of a
    # `when`, and each is read by several of the event's columns (a map built three times a row).
    record, identity = F.col("_record"), F.col("_identity")
    old_key, new_key = F.col("_old_key"), F.col("_new_key")
    maps = [values_map(values_src).alias("_record"), values_map(r["identity"]).alias("_identity")]
    keys = [
        F.when(keyed, key_text(r["pk"], identity)).alias("_old_key"),
        F.when(keyed, key_text(r["pk"], record)).alias("_new_key"),
    ]
    no_names = F.array().cast(ArrayType(StringType()))
    identity_has_non_key = (
        F.size(F.array_except(column_names(r["identity"]), F.coalesce(pk_names, no_names))) > 0
    )
    # REPLICA IDENTITY USING INDEX on other columns: the old key is not in the change.
    unresolved = keyed & code.isin(CODE_UPDATE, CODE_DELETE) & r["identity"].isNotNull() & old_key.isNull()
    message = F.map_from_arrays(
        F.array(F.lit("prefix"), F.lit("content"), F.lit("transactional")),
        F.array(r["prefix"], r["content"], F.lower(r["transactional"])),
    )
    is_row = code.isin(ROW_CODES)
    is_update = code == CODE_UPDATE
    action = F.when(code == CODE_INSERT, F.lit(ACTION_INSERT))
    for wal_code, name in list(ACTIONS.items())[1:]:
        action = action.when(code == wal_code, F.lit(name))
    columns = [
        F.col("source_id"),
        # A non-transactional message's own position, (its lsn, STANDALONE_IDX), is set in _classified.
        F.col("commit_lsn"),
        F.col("commit_idx"),
        F.col("lsn_value").alias("change_lsn"),
        F.col("xid_value").alias("xid"),
        # A transaction's commit time comes parsed with its position (wal2json_framing).
        F.when(standalone, F.try_to_timestamp(r["timestamp"]))
        .otherwise(F.col("commit_ts"))
        .alias("committed_at"),
        action.alias("action"),
        r["schema"].alias("source_schema"),
        r["table"].alias("source_table"),
        F.when(is_row, pk_names).alias("key_columns"),
        F.when(is_row, new_key).alias("record_pk"),
        F.when(is_row, record).when(code == CODE_MESSAGE, message).alias("record"),
        F.when(
            is_update & identity_has_non_key,
            F.map_filter(
                identity,
                lambda k, v: F.map_contains_key(record, k) & ~F.element_at(record, k).eqNullSafe(v),
            ),
        ).alias("changes"),
        F.when(is_update & (old_key != new_key), old_key).alias("old_record_pk"),
        F.when(unresolved, identity).alias("old_identity"),
        F.when(is_row, types_map(values_src)).alias("column_types"),
        F.lit(FORMAT_WAL2JSON).alias("source_format"),
        F.col("landing_file"),
        F.col("landing_line"),
    ]
    return maps, keys, columns


def _classified(numbered: DataFrame, files: DataFrame) -> DataFrame:
    """The lines' framing fields numbered in their files (``number_in_files``) -> every line with its
    outcome: ``kind``, ``reason`` and, for the lines that land, their position; framed from the
    framing fields alone, without the lines' text. ``files`` (``file_no``, ``source_id``,
    ``landing_file``) gives each line its file's names back."""
    kind = F.col("kind")
    landing = kind == KIND_EVENT
    # A non-transactional message's position is its own, not that of the transaction before it:
    # its event (_events) and the batch's frontier (from the outcomes) both take it from here.
    standalone = F.col("non_tx_message")
    named = F.broadcast(files.select("file_no", "source_id", "landing_file"))
    framed = classify(numbered, files).join(named, on="file_no", how="inner")
    return framed.select(
        "source_id",
        "file_no",
        "landing_file",
        "landing_line",
        "kind",
        "reason",
        # A row change rejected by its framing whose content is unusable too is rejected for its
        # content, as a full parse of every line would have it (see _with_text).
        ((kind == KIND_REJECT) & F.col("line_error").isNull() & F.col("code").isin(ROW_CODES)).alias(
            "content_first"
        ),
        F.when(landing & standalone, F.col("lsn_value"))
        .when(landing, F.col("commit_lsn"))
        .alias("commit_lsn"),
        F.when(landing & standalone, F.lit(STANDALONE_IDX))
        .when(landing, F.col("commit_idx"))
        .alias("commit_idx"),
        F.when(landing, F.col("commit_ts")).alias("commit_ts"),
    )


def _line_key() -> Column:
    """One long per line of a batch: its file's number and its line number."""
    return (F.col("file_no").cast("long") * F.lit(1 << 32) + F.col("landing_line")).alias("line_key")


def _with_text(lines: DataFrame, classified: DataFrame) -> DataFrame:
    """The ``classified`` lines (a few, or a few columns each) with their text from ``lines``.

    Broadcast under a single long key, so the lines are matched where they are read, without a
    shuffle of their text."""
    keyed = classified.select(_line_key(), *[c for c in classified.columns if c not in lines.columns])
    joined = lines.select("*", _line_key()).join(F.broadcast(keyed), on="line_key", how="inner")
    return joined.drop("line_key")


def _early_rejects(lines: DataFrame, classified: DataFrame) -> DataFrame:
    """The lines the framing rejects, with their text and reason."""
    rejected = _with_text(
        lines,
        classified.where(F.col("kind") == KIND_REJECT).select(
            "file_no", "landing_line", "reason", "content_first"
        ),
    )
    content = content_error(full_record(F.col("line")))
    reason = F.when(F.col("content_first"), F.coalesce(content, F.col("reason"))).otherwise(F.col("reason"))
    return rejected.select(
        "source_id",
        "landing_file",
        "landing_line",
        F.col("line").alias("raw_line"),
        reason.alias("reason"),
    )


def transform(lines: DataFrame, files: DataFrame | None = None) -> ChangeSet:
    """wal2json lines (source_id, landing_file, landing_line, line[, file_no]) -> ChangeSet.
    ``files``: the batch's files (``file_no``, ``source_id``, ``landing_file``), as the job has them
    from its plan; without it they are read from the lines (``changeset.file_names``, a pass over them).

    Two reads of the lines, no shuffle of a parsed line: the framing fields of every line are
    numbered in their files (``number_in_files``, read twice by the framing: the set's ``upstream``)
    and classified (``_classified``, the set's ``shared``), then the lines that land are parsed in
    full where they are read. A line that lands by its framing but whose content is unusable is one
    of ``late_rejects``, with its reason. The job computes both frames once each: cached, or, for a
    large batch, as checkpoints on which it builds the set again (``rebuild_upstream``, then
    ``rebuild``)."""
    lines = number_files(lines)
    files = file_names(lines) if files is None else files

    def outputs(classified: DataFrame) -> ChangeSet:
        landing = classified.where(F.col("kind") == KIND_EVENT).select(
            "file_no", "landing_line", "commit_lsn", "commit_idx", "commit_ts"
        )
        parsed = parse(_with_text(lines, landing))
        events = _events(parsed.where(F.col("line_error").isNull()))

        def late_rejects() -> DataFrame:
            return parsed.where(F.col("line_error").isNotNull()).select(
                "source_id",
                "landing_file",
                "landing_line",
                F.col("line").alias("raw_line"),
                F.col("line_error").alias("reason"),
            )

        return split_classified(
            classified,
            events,
            late_rejects=late_rejects,
            early_rejects=lambda: _early_rejects(lines, classified),
        )

    def on_checkpoint(numbered: DataFrame) -> ChangeSet:
        # Built on a checkpoint of the framing rows: the classified lines are checkpointed too.
        return replace(outputs(_classified(numbered, files)), rebuild=outputs)

    numbered = number_in_files(lines)
    return replace(
        outputs(_classified(numbered, files)),
        upstream=(numbered,),
        rebuild_upstream=lambda held: on_checkpoint(*held),
    )
