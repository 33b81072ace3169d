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
- A non-transactional logical message (``"transactional": false``) is decoded at once by Postgres,
  outside any transaction: it lands as its own position, ``commit_lsn`` = its ``lsn``, index 0.
- A change whose key cannot be known (no ``pk``, or a key column absent from the values) is rejected.
  A rejected change still takes its ``commit_idx`` slot, so the positions of the others stay those of
  the WAL.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StringType, StructField, StructType

from python_jobs.ingest.changeset import (
    ACTION_DELETE,
    ACTION_INSERT,
    ACTION_MESSAGE,
    ACTION_READ,
    ACTION_TRUNCATE,
    ACTION_UPDATE,
    FORMAT_WAL2JSON,
    KIND_CONTROL,
    KIND_EVENT,
    KIND_PENDING,
    KIND_REJECT,
    ChangeSet,
    lsn_to_bigint,
    split_classified,
)

# wal2json record codes.
CODE_BEGIN = "B"
CODE_COMMIT = "C"
CODE_INSERT = "I"
CODE_UPDATE = "U"
CODE_DELETE = "D"
CODE_TRUNCATE = "T"
CODE_MESSAGE = "M"
# Not wal2json's own: the capture job's initial snapshot writes each table row as an "R" line inside
# one B ... C transaction at the slot's consistent point (docs/capture.md).
CODE_READ = "R"

ACTIONS = {
    CODE_INSERT: ACTION_INSERT,
    CODE_UPDATE: ACTION_UPDATE,
    CODE_DELETE: ACTION_DELETE,
    CODE_TRUNCATE: ACTION_TRUNCATE,
    CODE_MESSAGE: ACTION_MESSAGE,
    CODE_READ: ACTION_READ,
}
CHANGE_CODES = list(ACTIONS)
ROW_CODES = [CODE_INSERT, CODE_UPDATE, CODE_DELETE, CODE_READ]
KNOWN_CODES = [CODE_BEGIN, CODE_COMMIT, *CHANGE_CODES]

REASON_MALFORMED = "malformed JSON"
REASON_EMPTY = "empty line"
REASON_NO_ACTION = "missing action"
REASON_BAD_LSN = "missing or invalid lsn"
REASON_BAD_XID = "missing or invalid xid"
REASON_NO_PK = (
    "no pk: the key columns of this change cannot be known (include-pk off or table without primary key)"
)
REASON_NO_VALUES = "missing columns (insert/update) or identity (delete)"
REASON_BAD_COLUMNS = "column without a name or with a duplicate name"
REASON_KEY_MISSING = "a key column's value is missing from the change"
REASON_OUTSIDE = "change outside a transaction"
REASON_COMMIT_WITHOUT_BEGIN = "commit without begin"
REASON_INTERRUPTED = "transaction interrupted by a new begin before its commit"

_COLUMN = StructType(
    [
        StructField("name", StringType()),
        StructField("type", StringType()),
        StructField("value", StringType()),
    ]
)
_KEY = StructType([StructField("name", StringType()), StructField("type", StringType())])
CORRUPT = "_corrupt_record"
RECORD_SCHEMA = StructType(
    [
        StructField("action", StringType()),
        StructField("xid", StringType()),
        StructField("lsn", StringType()),
        StructField("timestamp", StringType()),
        StructField("schema", StringType()),
        StructField("table", StringType()),
        StructField("columns", ArrayType(_COLUMN)),
        StructField("identity", ArrayType(_COLUMN)),
        StructField("pk", ArrayType(_KEY)),
        StructField("transactional", StringType()),
        StructField("prefix", StringType()),
        StructField("content", StringType()),
        StructField(CORRUPT, StringType()),
    ]
)

# Spark's JSON reader turns a JSON float into a double before it becomes text (10.50 -> "10.5",
# a numeric(50,2) loses digits). Quoting every number that is the value of a "value" key first keeps
# its exact text. The look-behind skips an escaped quote, i.e. the text inside a JSON string, and the
# look-ahead keeps an invalid number (1.2.3) invalid.
_NUMBER_VALUE = r'(?<!\\)("value"\s*:\s*)(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)(?=\s*[,}\]])'


# Higher-order functions (transform, filter, exists) are interpreted row by row, element by element;
# the helpers below use array and map functions that Spark compiles, and keep a lambda only for the
# rare multi-column key.


def _names(cols: Column) -> Column:
    return cols["name"]


def _values_map(cols: Column) -> Column:
    """Column name -> value text. The names must be known to be present and unique (``_columns_ok``)."""
    return F.map_from_arrays(cols["name"], cols["value"])


def _key_text(pk: Column, values: Column) -> Column:
    """The key values in key order as a JSON array of texts; null when any is missing."""
    single = F.element_at(values, F.get(pk["name"], 0))
    texts = F.transform(pk, lambda k: F.element_at(values, k["name"]))
    return F.when(F.size(pk) == 1, F.when(single.isNotNull(), F.to_json(F.array(single)))).otherwise(
        F.when(F.size(F.filter(texts, lambda t: t.isNull())) == 0, F.to_json(texts))
    )


def _columns_ok(cols: Column) -> Column:
    """Every column has a name and no name repeats (sorting puts a null name first)."""
    names = _names(cols)
    no_null = (F.size(names) == 0) | F.get(F.sort_array(names), 0).isNotNull()
    return no_null & (F.size(F.array_distinct(names)) == F.size(names))


def parse(lines: DataFrame) -> DataFrame:
    """Lines -> lines with the parsed record ``r`` and the per-line checks (no ordering yet)."""
    quoted = F.regexp_replace(F.col("line"), F.lit(_NUMBER_VALUE), F.lit('$1"$2"'))
    r = F.col("r")
    code = r["action"]
    non_tx_message = (code == CODE_MESSAGE) & (F.lower(r["transactional"]) == "false")
    is_row_change = code.isin(ROW_CODES)
    values_src = F.when(code == CODE_DELETE, r["identity"]).otherwise(r["columns"])
    line_error = (
        F.when(F.trim(F.col("line")) == "", F.lit(REASON_EMPTY))
        .when(r.isNull() | r[CORRUPT].isNotNull(), F.lit(REASON_MALFORMED))
        .when(code.isNull(), F.lit(REASON_NO_ACTION))
        .when(~code.isin(KNOWN_CODES), F.concat(F.lit("unknown action '"), code, F.lit("'")))
        .when(F.col("lsn_value").isNull(), F.lit(REASON_BAD_LSN))
        .when(F.col("xid_value").isNull() & ~non_tx_message, F.lit(REASON_BAD_XID))
        .when(is_row_change & (F.coalesce(F.size(r["pk"]), F.lit(0)) <= 0), F.lit(REASON_NO_PK))
        .when(is_row_change & values_src.isNull(), F.lit(REASON_NO_VALUES))
        .when(is_row_change & ~_columns_ok(values_src), F.lit(REASON_BAD_COLUMNS))
        .when(
            (code == CODE_UPDATE) & r["identity"].isNotNull() & ~_columns_ok(r["identity"]),
            F.lit(REASON_BAD_COLUMNS),
        )
        # Only reached once the names are known to be unique: a map of them cannot fail.
        .when(is_row_change & _key_text(r["pk"], _values_map(values_src)).isNull(), F.lit(REASON_KEY_MISSING))
    )
    return (
        lines.withColumn("r", F.from_json(quoted, RECORD_SCHEMA, {"mode": "PERMISSIVE"}))
        .withColumn("lsn_value", lsn_to_bigint(r["lsn"]))
        .withColumn("xid_value", r["xid"].cast("bigint"))
        .withColumn("line_error", line_error)
        .withColumn("code", F.when(F.col("line_error").isNull(), code))
        .withColumn("non_tx_message", F.coalesce(non_tx_message, F.lit(False)))
    )


def _is_begin() -> Column:
    return F.coalesce(F.col("code") == CODE_BEGIN, F.lit(False))


def number_in_files(lines: DataFrame) -> DataFrame:
    """Parsed lines with ``file_txn``: the number of valid ``B`` records up to and including the line
    within its file.

    A running count over a whole source would put every line of the source through one task; per
    file, files are numbered in parallel. ``classify`` adds each file's offset (the ``B`` records of
    the source's earlier files) from a per-file summary of this frame, which therefore is read twice:
    the job persists it (``ChangeSet.upstream``) so that each line is parsed once."""
    in_file_running = (
        Window.partitionBy("source_id", "landing_file")
        .orderBy("landing_line")
        .rowsBetween(Window.unboundedPreceding, 0)
    )
    return parse(lines).withColumn("file_txn", F.sum(_is_begin().cast("int")).over(in_file_running))


def _number_transactions(numbered: DataFrame) -> DataFrame:
    """Add ``txn`` (the number of valid ``B`` records up to and including the line, in the source's
    ``(landing_file, landing_line)`` order) and ``last_txn`` (the source's greatest ``txn``)."""
    earlier_files = (
        Window.partitionBy("source_id").orderBy("landing_file").rowsBetween(Window.unboundedPreceding, -1)
    )
    offsets = (
        numbered.groupBy("source_id", "landing_file")
        .agg(F.max("file_txn").alias("file_begins"))
        .select(
            "source_id",
            "landing_file",
            F.coalesce(F.sum("file_begins").over(earlier_files), F.lit(0)).alias("txn_offset"),
            F.sum("file_begins").over(Window.partitionBy("source_id")).alias("last_txn"),
        )
    )
    return (
        numbered.join(F.broadcast(offsets), on=["source_id", "landing_file"], how="inner")
        .withColumn("txn", F.col("txn_offset") + F.col("file_txn"))
        .drop("txn_offset", "file_txn")
    )


def _is_commit() -> Column:
    return F.coalesce(F.col("code") == CODE_COMMIT, F.lit(False))


def frame_transactions(numbered: DataFrame) -> DataFrame:
    """Lines of ``number_in_files`` with their transaction: ``txn``, whether it has a commit, the xids
    of its ``B`` and ``C``, ``commit_lsn``/``commit_ts`` from its ``C``, whether the line is inside it
    (``in_txn``) and its ``commit_idx``. The windows are spread over ``(source_id, txn)``."""
    order = [F.col("landing_file"), F.col("landing_line")]
    in_txn_running = (
        Window.partitionBy("source_id", "txn").orderBy(*order).rowsBetween(Window.unboundedPreceding, 0)
    )
    whole_txn = (
        Window.partitionBy("source_id", "txn")
        .orderBy(*order)
        .rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    )
    is_commit = _is_commit()
    # Postgres numbers the changes of a transaction whatever becomes of them here, so a change
    # rejected for its content keeps its slot: a line whose action is a change code counts.
    counts_as_change = F.col("r.action").isin(CHANGE_CODES) & ~F.col("non_tx_message")
    counts_as_change = F.coalesce(counts_as_change, F.lit(False))

    def first_at_commit(value: Column) -> Column:
        return F.first(F.when(is_commit, value), ignorenulls=True).over(whole_txn)

    return (
        _number_transactions(numbered)
        .withColumn("commits_so_far", F.sum(is_commit.cast("int")).over(in_txn_running))
        .withColumn("has_commit", F.max(is_commit).over(whole_txn))
        .withColumn("begin_xid", F.first(F.when(_is_begin(), F.col("xid_value")), True).over(whole_txn))
        .withColumn("commit_xid", first_at_commit(F.col("xid_value")))
        .withColumn("commit_lsn", first_at_commit(F.col("lsn_value")))
        .withColumn("commit_ts", first_at_commit(F.col("r.timestamp")))
        .withColumn(
            "in_txn",
            (F.col("txn") > 0)
            & ((F.col("commits_so_far") == 0) | (is_commit & (F.col("commits_so_far") == 1))),
        )
        .withColumn(
            "commit_idx",
            F.sum((counts_as_change & F.col("in_txn")).cast("int")).over(in_txn_running) - 1,
        )
    )


def classify(numbered: DataFrame) -> DataFrame:
    """One row per input line (of ``number_in_files``) with ``kind`` (event/reject/pending/control),
    ``reason`` and the transaction it belongs to (``commit_lsn``, ``commit_idx``, ``commit_ts``)."""
    is_commit = _is_commit()
    is_change = F.coalesce(F.col("code").isin(CHANGE_CODES) & ~F.col("non_tx_message"), F.lit(False))
    pending = (F.col("txn") > 0) & (F.col("txn") == F.col("last_txn")) & ~F.col("has_commit")
    xid_mismatch = F.concat(
        F.lit("xid mismatch: begin "),
        F.coalesce(F.col("begin_xid").cast("string"), F.lit("?")),
        F.lit(", commit "),
        F.coalesce(F.col("commit_xid").cast("string"), F.lit("?")),
    )
    change_xid_mismatch = F.concat(
        F.lit("xid mismatch: change xid "),
        F.col("xid_value").cast("string"),
        F.lit(" inside transaction "),
        F.col("begin_xid").cast("string"),
    )
    reason = (
        F.when(pending, F.lit(None))
        .when(F.col("line_error").isNotNull(), F.col("line_error"))
        .when(F.col("non_tx_message"), F.lit(None))
        .when(~F.col("in_txn") & is_commit, F.lit(REASON_COMMIT_WITHOUT_BEGIN))
        .when(~F.col("in_txn"), F.lit(REASON_OUTSIDE))
        .when(~F.col("has_commit"), F.lit(REASON_INTERRUPTED))
        .when(~F.col("begin_xid").eqNullSafe(F.col("commit_xid")), xid_mismatch)
        .when(is_change & (F.col("xid_value") != F.col("begin_xid")), change_xid_mismatch)
    )
    kind = (
        F.when(pending, F.lit(KIND_PENDING))
        .when(F.col("reason").isNotNull(), F.lit(KIND_REJECT))
        .when(_is_begin() | is_commit, F.lit(KIND_CONTROL))
        .otherwise(F.lit(KIND_EVENT))
    )
    return frame_transactions(numbered).withColumn("reason", reason).withColumn("kind", kind)


def _events(classified: DataFrame) -> DataFrame:
    r = F.col("r")
    code = F.col("code")
    standalone = F.col("non_tx_message")
    values_src = F.when(code == CODE_DELETE, r["identity"]).otherwise(r["columns"])
    record = _values_map(values_src)
    pk_names = _names(r["pk"])
    identity = _values_map(r["identity"])
    identity_has_non_key = F.size(F.array_except(_names(r["identity"]), pk_names)) > 0
    old_key = _key_text(r["pk"], identity)
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
        F.when(standalone, F.lit(0)).otherwise(F.col("commit_idx")).alias("commit_idx"),
        F.col("lsn_value").alias("change_lsn"),
        F.col("xid_value").alias("xid"),
        F.try_to_timestamp(F.when(standalone, r["timestamp"]).otherwise(F.col("commit_ts"))).alias(
            "committed_at"
        ),
        action.alias("action"),
        r["schema"].alias("source_schema"),
        r["table"].alias("source_table"),
        F.when(is_row, pk_names).alias("key_columns"),
        F.when(is_row, _key_text(r["pk"], record)).alias("record_pk"),
        F.when(is_row, record).when(code == CODE_MESSAGE, message).alias("record"),
        F.when(
            is_update & identity_has_non_key,
            F.map_filter(
                identity,
                lambda k, v: F.map_contains_key(record, k) & ~F.element_at(record, k).eqNullSafe(v),
            ),
        ).alias("changes"),
        F.when(is_update & (old_key != _key_text(r["pk"], record)), old_key).alias("old_record_pk"),
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
