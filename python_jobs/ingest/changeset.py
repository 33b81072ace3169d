"""What every format transform returns, and the column contracts it must meet.

A format module (``wal2json``, ``debezium``) exposes ``transform(lines: DataFrame) -> ChangeSet``.
``lines`` has the columns of ``LINES_SCHEMA``: one row per input line, with the file it came from and
its 1-based line number. The transform is pure (no writes, no collect) so that the job can plan,
retry and account for every line around it.

Every input line must end in exactly one of: ``events`` (a change), ``rejects`` (with a reason),
``pending`` (part of a trailing transaction whose commit record has not landed yet; re-read next run)
or ``control`` (a transaction boundary or other bookkeeping record that carries no change). The job
checks that identity on every batch.

``pending`` must be, per source, a suffix of the lines in ``(landing_file, landing_line)`` order: the
job re-reads each file from its first pending line in the next batch, so any line after it in that
file is read again and must not have landed or been rejected already.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, wraps
from typing import TypeVar

from pyspark import SparkContext
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

T = TypeVar("T")


def built_once(build: Callable[[], T]) -> Callable[[], T]:
    """``build`` (Columns made from column names alone) called once per Spark application, its result
    reused by every batch's transform.

    Each Column is made by calls to the JVM (a few thousand for a wal2json transform, about half of
    the time a small batch spends building it). A Column names columns and functions and is bound to
    no DataFrame: Spark turns it into an expression afresh each time a DataFrame uses it, so one
    Column serves any number of plans, two sides of one join included."""
    built: dict[str, T] = {}

    @wraps(build)
    def cached() -> T:
        context = SparkContext._active_spark_context
        app = context.applicationId if context is not None else ""
        if app not in built:
            built.clear()  # a Column of a stopped application is of no use to the next one
            built[app] = build()
        return built[app]

    return cached


# Values of wal_events.action (docs/landed_tables.md).
ACTION_INSERT = "insert"
ACTION_UPDATE = "update"
ACTION_DELETE = "delete"
ACTION_TRUNCATE = "truncate"
ACTION_READ = "read"
ACTION_MESSAGE = "message"

FORMAT_WAL2JSON = "wal2json"
FORMAT_DEBEZIUM = "debezium"

# A line's outcome as a format transform classifies it, before the ChangeSet splits the lines by it.
KIND_EVENT = "event"
KIND_REJECT = "reject"
KIND_PENDING = "pending"
KIND_CONTROL = "control"

LINES_SCHEMA = StructType(
    [
        StructField("source_id", StringType()),
        StructField("landing_file", StringType()),
        StructField("landing_line", LongType()),
        StructField("line", StringType()),
    ]
)

# wal_events without the two columns the job adds when it writes a batch (batch_id, ingested_at).
EVENTS_SCHEMA = StructType(
    [
        StructField("source_id", StringType()),
        StructField("commit_lsn", LongType()),
        StructField("commit_idx", IntegerType()),
        StructField("change_lsn", LongType()),
        StructField("xid", LongType()),
        StructField("committed_at", TimestampType()),
        StructField("action", StringType()),
        StructField("source_schema", StringType()),
        StructField("source_table", StringType()),
        StructField("key_columns", ArrayType(StringType())),
        StructField("record_pk", StringType()),
        StructField("record", MapType(StringType(), StringType())),
        StructField("changes", MapType(StringType(), StringType())),
        StructField("old_record_pk", StringType()),
        StructField("old_identity", MapType(StringType(), StringType())),
        StructField("column_types", MapType(StringType(), StringType())),
        StructField("source_format", StringType()),
        StructField("landing_file", StringType()),
        StructField("landing_line", LongType()),
    ]
)

REJECTS_SCHEMA = StructType(
    [
        StructField("source_id", StringType()),
        StructField("landing_file", StringType()),
        StructField("landing_line", LongType()),
        StructField("raw_line", StringType()),
        StructField("reason", StringType()),
    ]
)

# Also the schema of ChangeSet.control.
PENDING_SCHEMA = StructType(
    [
        StructField("source_id", StringType()),
        StructField("landing_file", StringType()),
        StructField("landing_line", LongType()),
    ]
)


@dataclass(frozen=True)
class ChangeSet:
    """The outcome of one format transform over a batch of lines.

    ``shared`` is the one intermediate DataFrame (classified lines; for wal2json without the lines'
    text) that the others derive from. The job persists it for the batch, so the classification runs
    once although the batch's outputs are written and counted by several actions.

    ``upstream`` lists frames that ``shared`` reads more than once (by two branches of its plan); the
    job persists them too, before ``shared``, so that each is computed once. ``rebuild_upstream``, when
    given, builds the same set on other copies of its upstream frames: for a large batch the job
    computes them into local checkpoints instead of caches and builds the set again on those
    (``job._hold``).

    ``outcomes`` is every line with its ``kind`` (``landing_file``, ``landing_line``, ``kind``,
    ``commit_lsn``: an event's, as written; ``source_table``: a Debezium event's table, else null):
    what the job counts. ``events`` are the lines of kind event, less ``late_rejects`` when the
    transform gives them: lines that land by their framing but whose content turned out unusable
    once parsed in full. ``rejects`` holds every reject (``early_rejects``, known from ``outcomes``,
    and the late). The job writes the events, counts what was written, and computes
    ``late_rejects`` only when fewer events were written than ``outcomes`` has lines of kind event.
    ``pending`` and ``control`` hold the lines of those kinds (the job counts them from
    ``outcomes``; the frames are there for tests and tools).

    The frames of rejects, pending and control lines are built when first asked for: a batch that
    rejects nothing never builds them, and building a frame costs round trips to the JVM.

    ``rebuild`` is given when ``shared`` reads a table that the batch writes (Debezium's lookups of
    landed events in wal_events): the same ChangeSet built on another copy of ``shared``. A cache
    would not hold there: Delta drops every cached plan that reads a table it appends to, so the
    classification would run again for each output written after the events. The job computes such a
    ``shared`` once into a local checkpoint, which refers to no table, and rebuilds the set on it.
    """

    events: DataFrame
    shared: DataFrame
    outcomes: DataFrame
    build_early_rejects: Callable[[], DataFrame]
    build_late_rejects: Callable[[], DataFrame] | None = None
    upstream: tuple[DataFrame, ...] = ()
    rebuild: Callable[[DataFrame], ChangeSet] | None = None
    rebuild_upstream: Callable[[tuple[DataFrame, ...]], ChangeSet] | None = None

    @cached_property
    def early_rejects(self) -> DataFrame:
        return conform(self.build_early_rejects(), REJECTS_SCHEMA)

    @cached_property
    def late_rejects(self) -> DataFrame | None:
        return None if self.build_late_rejects is None else conform(self.build_late_rejects(), REJECTS_SCHEMA)

    @property
    def rejects(self) -> DataFrame:
        late = self.late_rejects
        return self.early_rejects if late is None else self.early_rejects.unionByName(late)

    @property
    def pending(self) -> DataFrame:
        return conform(self.shared.where(F.col("kind") == KIND_PENDING), PENDING_SCHEMA)

    @property
    def control(self) -> DataFrame:
        return conform(self.shared.where(F.col("kind") == KIND_CONTROL), PENDING_SCHEMA)


# Columns of EVENTS_SCHEMA that only some formats fill; a transform that does not name one gives nulls.
# old_identity: the row's replica identity before the change, when it does not hold the key columns
# (REPLICA IDENTITY USING INDEX on other columns), for the old key to be resolved from it.
# column_types: each column of the change to its source type as the capture sent it (wal2json's
# "type"; Debezium's Connect type from the schema wrapper), read by the column registry; a line that
# sends no types leaves it null.
OPTIONAL_COLUMNS = frozenset({"old_identity", "column_types"})


def conform(df: DataFrame, schema: StructType) -> DataFrame:
    """Select exactly ``schema``'s columns, in order, cast to its types (the output contract)."""
    return df.select(
        *[
            (F.col(f.name) if f.name in df.columns or f.name not in OPTIONAL_COLUMNS else F.lit(None))
            .cast(f.dataType)
            .alias(f.name)
            for f in schema.fields
        ]
    )


def split_classified(
    shared: DataFrame,
    events: DataFrame,
    upstream: tuple[DataFrame, ...] = (),
    late_rejects: Callable[[], DataFrame] | None = None,
    early_rejects: Callable[[], DataFrame] | None = None,
    table: Column | None = None,
) -> ChangeSet:
    """A format's classified lines (with ``kind`` and ``reason``) and the events it built from them ->
    ChangeSet. Rejects, pending and control lines are split off alike whatever the format; the
    rejects from ``shared``'s ``line`` unless the format builds ``early_rejects`` of its own
    (``late_rejects`` and ``early_rejects`` are called only when the job needs them).
    ``table``, when the format gives it, names each line's table in ``outcomes`` (``source_table``)
    for the job's check of a landing zone's layout (``accounting.check_wal_order``)."""

    def from_shared() -> DataFrame:
        return shared.where(F.col("kind") == KIND_REJECT).select(
            "source_id", "landing_file", "landing_line", F.col("line").alias("raw_line"), "reason"
        )

    return ChangeSet(
        events=conform(events, EVENTS_SCHEMA),
        shared=shared,
        outcomes=shared.select(
            "source_id",
            "landing_file",
            "landing_line",
            "kind",
            F.col("commit_lsn").cast(LongType()),
            (F.lit(None) if table is None else table).cast(StringType()).alias("source_table"),
        ),
        build_early_rejects=early_rejects or from_shared,
        build_late_rejects=late_rejects,
        upstream=upstream,
    )


def number_files(lines: DataFrame) -> DataFrame:
    """``lines`` with ``file_no``, a number per (source, file) of the batch. The job's lines have it
    already; lines built by hand (tests) get their files numbered in name order here."""
    if "file_no" in lines.columns:
        return lines
    files = lines.select("source_id", "landing_file").distinct()
    in_name_order = Window.orderBy("source_id", "landing_file")
    numbered = files.select("*", F.dense_rank().over(in_name_order).alias("file_no"))
    return lines.join(F.broadcast(numbered), on=["source_id", "landing_file"], how="inner")


def file_names(lines: DataFrame) -> DataFrame:
    """The files of numbered ``lines`` (``number_files``): one row per ``file_no`` with its
    ``source_id`` and ``landing_file``. A pass over the lines: the job passes its plan's instead."""
    return lines.select("file_no", "source_id", "landing_file").distinct()


def union_all(frames: list[DataFrame]) -> DataFrame:
    """The frames' rows together, matched by column name (the frames of one output of several formats)."""
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result


def lsn_to_bigint(lsn: Column) -> Column:
    """Postgres ``X/Y`` hex LSN text -> bigint ``(X << 32) | Y``; null when it is not an LSN."""
    parts = F.split(lsn, "/")
    valid = lsn.rlike(r"^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$")
    high = F.conv(parts.getItem(0), 16, 10).cast(LongType())
    low = F.conv(parts.getItem(1), 16, 10).cast(LongType())
    return F.when(valid, F.shiftleft(high, 32).bitwiseOR(low))
