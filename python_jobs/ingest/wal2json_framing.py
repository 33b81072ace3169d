"""wal2json transactions: which lines belong to which ``B`` ... ``C``, their positions, and each line's
outcome (event, reject, pending, control). One window per file, summaries per file and per
transaction broadcast back: the lines are shuffled once, never one task per source (docs/ingestion.md,
performance notes).

The framing rows name their file by its number in the batch (``file_no``) alone: the names
(``source_id``, ``landing_file``) come from the batch's small map of its files (``files``), joined to
the per-file summary and to the classified lines. Within a source, the files' numbers sort as their
names do (``changeset.number_files``)."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from python_jobs.ingest.changeset import KIND_CONTROL, KIND_EVENT, KIND_PENDING, KIND_REJECT, built_once
from python_jobs.ingest.wal2json_records import CHANGE_CODES, CODE_BEGIN, CODE_COMMIT, parse_framing

REASON_OUTSIDE = "change outside a transaction"
REASON_COMMIT_WITHOUT_BEGIN = "commit without begin"
REASON_INTERRUPTED = "transaction interrupted by a new begin before its commit"


def _is_begin() -> Column:
    return F.coalesce(F.col("code") == CODE_BEGIN, F.lit(False))


def _is_commit() -> Column:
    return F.coalesce(F.col("code") == CODE_COMMIT, F.lit(False))


def _counts_as_change() -> Column:
    # Postgres numbers the changes of a transaction whatever becomes of them here, so a change
    # rejected for its content keeps its slot: a line whose action is a change code counts.
    return F.coalesce(F.col("r.action").isin(CHANGE_CODES) & ~F.col("non_tx_message"), F.lit(False))


def number_in_files(lines: DataFrame) -> DataFrame:
    """Parsed lines, their file named by ``file_no`` alone, with, counted in the line's file up to and
    including the line: ``file_txn``, the valid ``B`` records; ``since_commits`` and
    ``since_changes``, the ``C`` records and the changes since the latest of those ``B`` (since the
    file's start before its first one).

    One window, per file: a running count over a whole source would put every line of the source
    through one task; per file, files are numbered in parallel. ``frame_transactions`` adds what the
    source's earlier files carry in (their ``B`` records, the open transaction's counts) from a
    per-file summary of this frame, which therefore is read twice: the job persists it
    (``ChangeSet.upstream``) so that each line is parsed once."""
    counts, at_begin, since = _file_count_columns()
    # The rows shuffled, sorted and held for the batch carry the file's number, not its names: with
    # them, the 1M bench zone's framing rows took about 1 s longer to compute and hold.
    counted = parse_framing(lines.drop("source_id", "landing_file")).select("*", *counts)
    # Whole projections rather than a column at a time: each step of a DataFrame is analysed when it
    # is made, and a batch builds its transform anew (a small batch's fixed cost).
    kept = [c for c in counted.columns if c not in ("_commits", "_changes")]
    return counted.select("*", at_begin).select(*kept, *since)


@built_once
def _file_count_columns() -> tuple[list[Column], Column, list[Column]]:
    """``number_in_files``' columns: the running counts over the file, the counts at its latest ``B``,
    and the counts since that ``B``."""
    running = Window.partitionBy("file_no").orderBy("landing_line").rowsBetween(Window.unboundedPreceding, 0)
    counts = [
        F.sum(_is_begin().cast("int")).over(running).alias("file_txn"),
        F.sum(_is_commit().cast("int")).over(running).alias("_commits"),
        F.sum(_counts_as_change().cast("int")).over(running).alias("_changes"),
    ]
    # The counts at the latest B, over the same window (no second sort): subtracted, they leave the
    # counts inside the line's transaction.
    at_begin = F.last(F.when(_is_begin(), F.struct("_commits", "_changes")), ignorenulls=True).over(running)
    since = [
        (F.col("_commits") - F.coalesce(F.col("_at_begin._commits"), F.lit(0))).alias("since_commits"),
        (F.col("_changes") - F.coalesce(F.col("_at_begin._changes"), F.lit(0))).alias("since_changes"),
    ]
    return counts, at_begin.alias("_at_begin"), since


def _number_transactions(numbered: DataFrame, files: DataFrame) -> DataFrame:
    """Add ``source_key`` (a number per source: its first file's), ``txn`` (the number of valid ``B``
    records up to and including the line, in the source's ``(landing_file, landing_line)`` order),
    ``last_txn`` (the source's greatest ``txn``), ``held_from`` (the file's first line held back by a
    missing file, see ``_held_from``) and ``commits_so_far``/``changes_so_far``: the ``C`` records
    and the changes of the line's transaction up to and including the line, its earlier files'
    included. ``files``: the batch's files (``file_no``, ``source_id``), which name the sources of
    the per-file summary."""
    aggregates, befores, summaries, held_from, line_columns = _offset_columns()
    offsets = (
        numbered.groupBy("file_no")
        .agg(*aggregates)
        .join(F.broadcast(files.select("file_no", "source_id")), on="file_no", how="inner")
        .select("*", *befores)
        .select(*summaries)
        .select(
            "file_no",
            "source_key",
            "txn_offset",
            "last_txn",
            "entering_commits",
            "entering_changes",
            held_from,
        )
    )
    joined = numbered.join(F.broadcast(offsets), on="file_no", how="inner")
    used = (
        "txn_offset",
        "file_txn",
        "since_commits",
        "since_changes",
        "entering_commits",
        "entering_changes",
    )
    return joined.select(*[c for c in joined.columns if c not in used], *line_columns)


@built_once
def _offset_columns() -> tuple[list[Column], list[Column], list[Column], Column, list[Column]]:
    """``_number_transactions``' columns: the per-file summary's aggregates, the counts its earlier
    files left, the summary row, ``held_from``, then each line's ``txn`` and counts."""
    earlier_files = (
        Window.partitionBy("source_id").orderBy("file_no").rowsBetween(Window.unboundedPreceding, -1)
    )
    whole_source = Window.partitionBy("source_id")
    code = F.col("code")

    def record(*more: str) -> Column:
        return F.struct("code", F.col("xid_value").alias("xid"), F.col("lsn_value").alias("lsn"), *more)

    def before_file(total: str) -> Column:
        # The counts the file's last B (or its start) left, summed over the source's files before it.
        return F.coalesce(F.sum(F.col("tail")[total]).over(earlier_files), F.lit(0))

    def entering(before: str) -> Column:
        # What the transaction open at the file's start counted in earlier files: everything since
        # the latest earlier file holding a B, that file's tail included.
        at_last_begin = F.last(F.when(F.col("file_begins") > 0, F.col(before)), ignorenulls=True)
        return F.coalesce(F.col(before) - at_last_begin.over(earlier_files), F.lit(0))

    aggregates = [
        F.max("file_txn").alias("file_begins"),
        F.min_by(record("non_tx_message"), F.when(code.isNotNull(), F.col("landing_line"))).alias(
            "first_record"
        ),
        F.max_by(
            record("file_no", "landing_line"),
            F.when(code.isin(CODE_BEGIN, CODE_COMMIT), F.col("landing_line")),
        ).alias("last_boundary"),
        F.max_by(F.struct("since_commits", "since_changes"), F.col("landing_line")).alias("tail"),
    ]
    befores = [
        before_file("since_commits").alias("commits_before"),
        before_file("since_changes").alias("changes_before"),
    ]
    summaries = [
        F.col("source_id"),
        F.col("file_no"),
        F.min("file_no").over(whole_source).alias("source_key"),
        F.col("first_record"),
        F.last("last_boundary", ignorenulls=True).over(earlier_files).alias("entering"),
        F.coalesce(F.sum("file_begins").over(earlier_files), F.lit(0)).alias("txn_offset"),
        F.sum("file_begins").over(whole_source).alias("last_txn"),
        entering("commits_before").alias("entering_commits"),
        entering("changes_before").alias("entering_changes"),
    ]
    before_first_begin = F.col("file_txn") == 0
    line_columns = [
        (F.col("txn_offset") + F.col("file_txn")).alias("txn"),
        (F.col("since_commits") + F.when(before_first_begin, F.col("entering_commits")).otherwise(0)).alias(
            "commits_so_far"
        ),
        (F.col("since_changes") + F.when(before_first_begin, F.col("entering_changes")).otherwise(0)).alias(
            "changes_so_far"
        ),
    ]
    return aggregates, befores, summaries, _held_from().alias("held_from"), line_columns


def _held_from() -> Column:
    """Per file summary row: the first of its lines that waits for a missing earlier file, or null.

    A file's first record shows whether the file before it in the batch is the one written before
    it. When a transaction is open at the end of the earlier files, the next file must go on with it
    (a change or commit of its xid) or decode again from before its commit (a begin or a
    non-transactional message at or below its commit LSN: a capture restarted and replays). When
    none is open, it must not start inside a transaction (a change or commit before any begin).
    Otherwise a file named between them has not landed yet: from the open transaction's begin (or
    the file's first line) on, every line of the source waits, pending, and is read again with the
    missing file."""
    prior, first = F.col("entering"), F.col("first_record")
    is_open = F.coalesce(prior["code"] == CODE_BEGIN, F.lit(False))
    mid_transaction = first["code"].isin(CODE_COMMIT, *CHANGE_CODES) & ~first["non_tx_message"]
    goes_on = F.coalesce(mid_transaction & (first["xid"] == prior["xid"]), F.lit(False))
    # A begin, or a message decoded outside any transaction, at or below the open transaction's
    # commit LSN was decoded before that commit: the stream starts again from before it.
    restarts_at = (first["code"] == CODE_BEGIN) | first["non_tx_message"]
    starts_again = F.coalesce(restarts_at & (first["lsn"] <= prior["lsn"]), F.lit(False))
    gap_at = F.when(
        is_open & first.isNotNull() & ~goes_on & ~starts_again,
        F.struct(prior["file_no"].alias("file"), prior["landing_line"].alias("line")),
    ).when(
        ~is_open & F.coalesce(mid_transaction, F.lit(False)),
        F.struct(F.col("file_no").alias("file"), F.lit(1).cast("bigint").alias("line")),
    )
    hold = F.min(gap_at).over(Window.partitionBy("source_id"))
    return F.when(F.col("file_no") > hold["file"], F.lit(1).cast("bigint")).when(
        F.col("file_no") == hold["file"], hold["line"]
    )


def frame_transactions(numbered: DataFrame, files: DataFrame) -> DataFrame:
    """Lines of ``number_in_files`` with their transaction: ``txn``, whether it has a commit, the xids
    of its ``B`` and ``C``, ``commit_lsn``/``commit_ts`` from its ``C``, whether the line is inside it
    (``in_txn``) and, for a change inside it, its ``commit_idx``.

    What a line needs of its transaction's boundaries comes from a per-transaction aggregate of the
    ``B`` and ``C`` lines (a few narrow rows each), broadcast back: the lines themselves are not
    shuffled again."""
    framed = _number_transactions(numbered, files)
    boundary, aggregates, added = _boundary_columns()
    boundaries = framed.where(boundary).groupBy("source_key", "txn").agg(*aggregates)
    return (
        framed.join(F.broadcast(boundaries), on=["source_key", "txn"], how="left")
        .withColumns(added)
        .drop("first_commit")
    )


@built_once
def _boundary_columns() -> tuple[Column, list[Column], dict[str, Column]]:
    """``frame_transactions``' columns: which lines bound a transaction, the per-transaction
    aggregates of those lines, and what each line takes from its transaction's row."""
    is_commit = _is_commit()
    aggregates = [
        F.max(is_commit).alias("has_commit"),
        F.max(F.when(_is_begin(), F.col("xid_value"))).alias("begin_xid"),
        # The transaction's first C, in the source's line order. Its timestamp is parsed here, once
        # a transaction rather than once a change (and a timestamp is narrower than its text).
        F.min_by(
            F.struct(
                F.col("xid_value").alias("xid"),
                F.col("lsn_value").alias("lsn"),
                F.try_to_timestamp(F.col("r.timestamp")).alias("ts"),
            ),
            F.when(is_commit, F.struct("file_no", "landing_line")),
        ).alias("first_commit"),
    ]
    commits_so_far = F.col("commits_so_far")
    added = {
        "has_commit": F.coalesce(F.col("has_commit"), F.lit(False)),
        "commit_xid": F.col("first_commit.xid"),
        "commit_lsn": F.col("first_commit.lsn"),
        "commit_ts": F.col("first_commit.ts"),
        "in_txn": (F.col("txn") > 0) & ((commits_so_far == 0) | (is_commit & (commits_so_far == 1))),
        # A change inside its transaction follows no C of it: every change before it counts.
        "commit_idx": F.col("changes_so_far") - 1,
    }
    return F.col("code").isin(CODE_BEGIN, CODE_COMMIT), aggregates, added


def classify(numbered: DataFrame, files: DataFrame) -> DataFrame:
    """One row per input line (of ``number_in_files``) with ``kind`` (event/reject/pending/control),
    ``reason`` and the transaction it belongs to (``commit_lsn``, ``commit_idx``, ``commit_ts``).
    ``files``: the batch's files (``file_no``, ``source_id``, ``landing_file``)."""
    reason, kind = _outcome_columns()
    return frame_transactions(numbered, files).withColumn("reason", reason).withColumn("kind", kind)


@built_once
def _outcome_columns() -> tuple[Column, Column]:
    """``classify``'s ``reason`` and ``kind``."""
    is_commit = _is_commit()
    is_change = F.coalesce(F.col("code").isin(CHANGE_CODES) & ~F.col("non_tx_message"), F.lit(False))
    held = F.coalesce(F.col("landing_line") >= F.col("held_from"), F.lit(False))
    pending = held | ((F.col("txn") > 0) & (F.col("txn") == F.col("last_txn")) & ~F.col("has_commit"))
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
    return reason, kind
