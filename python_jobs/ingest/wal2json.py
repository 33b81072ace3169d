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

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StringType

from python_jobs.ingest.changeset import (
    ACTION_INSERT,
    FORMAT_WAL2JSON,
    KIND_EVENT,
    KIND_REJECT,
    ChangeSet,
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
    has_key,
    key_text,
    values_map,
)

__all__ = ["RECORD_SCHEMA", "transform"]

# commit_idx of a non-transactional message: below every change of a transaction at its lsn.
STANDALONE_IDX = -1


def _events(classified: DataFrame) -> DataFrame:
    r = F.col("r")
    code = F.col("code")
    standalone = F.col("non_tx_message")
    values_src = F.when(code == CODE_DELETE, r["identity"]).otherwise(r["columns"])
    record = values_map(values_src)
    pk_names = column_names(r["pk"])
    identity = values_map(r["identity"])
    no_names = F.array().cast(ArrayType(StringType()))
    identity_has_non_key = (
        F.size(F.array_except(column_names(r["identity"]), F.coalesce(pk_names, no_names))) > 0
    )
    keyed = has_key(r["pk"])
    old_key = F.when(keyed, key_text(r["pk"], identity))
    new_key = F.when(keyed, key_text(r["pk"], record))
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
    return classified.where(F.col("kind") == KIND_EVENT).select(
        "source_id",
        F.when(standalone, F.col("lsn_value")).otherwise(F.col("commit_lsn")).alias("commit_lsn"),
        F.when(standalone, F.lit(STANDALONE_IDX)).otherwise(F.col("commit_idx")).alias("commit_idx"),
        F.col("lsn_value").alias("change_lsn"),
        F.col("xid_value").alias("xid"),
        F.try_to_timestamp(F.when(standalone, r["timestamp"]).otherwise(F.col("commit_ts"))).alias(
            "committed_at"
        ),
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
        F.lit(FORMAT_WAL2JSON).alias("source_format"),
        "landing_file",
        "landing_line",
    )


def transform(lines: DataFrame) -> ChangeSet:
    """wal2json lines (source_id, landing_file, landing_line, line) -> ChangeSet."""
    numbered = number_in_files(lines)
    classified = classify(numbered)
    # What the outputs need, and no more: the job persists this frame for the batch, and the raw
    # text of a line is only kept where it is rejected.
    shared = classified.select(
        "source_id",
        "landing_file",
        "landing_line",
        "kind",
        "reason",
        F.when(F.col("kind") == KIND_REJECT, F.col("line")).alias("line"),
        F.when(F.col("kind") == KIND_EVENT, F.col("r")).alias("r"),
        "code",
        "non_tx_message",
        "lsn_value",
        "xid_value",
        "commit_lsn",
        "commit_idx",
        "commit_ts",
    )
    return split_classified(shared, _events(shared), upstream=(numbered,))
