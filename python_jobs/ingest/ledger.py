"""The landed tables and the ingestion ledger (write-ahead batch plans and their outcomes).

A batch is planned, executed, then marked done (docs/ingestion.md):

1. ``wal_batches`` gets the plan, in one Delta commit: one row per file with the line to start
   from. From then on the batch's input is fixed.
2. ``wal_events`` and ``wal_rejects`` are appended with Delta idempotent writes (``txnAppId`` per
   table, ``txnVersion`` = batch_id): re-executing a batch after a crash skips every write that
   already committed. A batch without rejects writes nothing to ``wal_rejects``.
3. ``wal_files`` gets the outcome of every planned file, in one commit: that commit is the batch's
   "done" mark. A planned batch without outcome rows is unfinished and is re-executed first.
   Each row holds the greatest commit_lsn its batch landed from the file (``max_commit_lsn``), so
   the frontier follows from the done marks: ``wal_frontier`` is a view over ``wal_files``
   (``FRONTIER_VIEW``), one commit fewer a batch and no commit of a frontier to lose.
"""

from __future__ import annotations

import logging
import re
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, fields
from datetime import datetime

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from python_jobs.ingest.changeset import EVENTS_SCHEMA, REJECTS_SCHEMA
from python_jobs.ingest.errors import IngestError, first_line

EVENTS = "wal_events"
REJECTS = "wal_rejects"
FRONTIER = "wal_frontier"
BATCHES = "wal_batches"
FILES = "wal_files"

DEFAULT_SCHEMA = "wal_lake_raw"

_log = logging.getLogger(__name__)

_BATCH_COLUMNS = [StructField("batch_id", LongType()), StructField("ingested_at", TimestampType())]

SCHEMAS: dict[str, StructType] = {
    EVENTS: StructType(EVENTS_SCHEMA.fields + _BATCH_COLUMNS),
    REJECTS: StructType(REJECTS_SCHEMA.fields + _BATCH_COLUMNS),
    BATCHES: StructType(
        [
            StructField("batch_id", LongType()),
            StructField("source_id", StringType()),
            StructField("landing_file", StringType()),
            StructField("source_format", StringType()),
            StructField("from_line", LongType()),
            StructField("file_size", LongType()),
            StructField("modified_at", TimestampType()),
            StructField("planned_at", TimestampType()),
        ]
    ),
    FILES: StructType(
        [
            StructField("batch_id", LongType()),
            StructField("source_id", StringType()),
            StructField("landing_file", StringType()),
            StructField("source_format", StringType()),
            StructField("file_size", LongType()),
            StructField("from_line", LongType()),
            StructField("to_line", LongType()),
            StructField("next_line", LongType()),
            StructField("lines_read", LongType()),
            StructField("landed", LongType()),
            StructField("rejected", LongType()),
            StructField("control", LongType()),
            StructField("pending", LongType()),
            StructField("max_commit_lsn", LongType()),
            StructField("done_at", TimestampType()),
        ]
    ),
}

# Delta keeps each data file's min, max and null count of the columns named here, for the readers'
# file skipping. By default it keeps them for a table's first 32 columns, and wal_events' append
# spent a fifth of its write on them (1.07M events: 4.7-5.2 s against 3.7-4.0 s with none), most of
# it on columns no reader filters by. These are the ones the models and the job filter wal_events
# by. Set when the table is created; a table created before keeps its own until altered
# (docs/operations.md).
STATS_COLUMNS = {
    EVENTS: ("source_id", "commit_lsn", "commit_idx", "batch_id", "action", "source_format", "source_table"),
}

# wal_frontier, per source and batch: the greatest commit_lsn the source has landed up to and
# including the batch (a running max of the batches' own), and when the batch was done. The same
# rows the job appended to a table of that name before (docs/landed_tables.md); a ledger that has
# that table has it replaced by the view once (``Ledger._replace_frontier_table``).
FRONTIER_VIEW = """
select
    source_id,
    max(batch_lsn) over (
        partition by source_id order by batch_id rows between unbounded preceding and current row
    ) as frontier_lsn,
    batch_id,
    updated_at
from (
    select source_id, batch_id, max(max_commit_lsn) as batch_lsn, max(done_at) as updated_at
    from {files}
    group by source_id, batch_id
) as batches
"""

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The mark of a batch's commit (Ledger._marker): its batch id, and the run that wrote it.
_MARKER = re.compile(r"^wal_lake ingest batch (\d+), run [0-9a-f]+$")


@dataclass(frozen=True)
class FileState:
    """Where a landed file stands after its latest batch."""

    source_id: str
    landing_file: str
    source_format: str
    file_size: int
    to_line: int
    next_line: int

    @property
    def pending(self) -> bool:
        return self.next_line <= self.to_line


@dataclass(frozen=True)
class PlannedFile:
    """One file of a batch's plan, as ``wal_batches`` holds it: its lines from ``from_line`` on are read."""

    source_id: str
    landing_file: str
    source_format: str
    from_line: int
    file_size: int | None
    modified_at: datetime | None  # None for a file re-read from its pending tail

    def row(self, batch_id: int, planned_at: datetime) -> dict:
        return {**asdict(self), "batch_id": batch_id, "planned_at": planned_at}


class Ledger:
    """The raw schema's tables, as used by one ingestion run."""

    def __init__(self, spark: SparkSession, schema: str) -> None:
        if not _IDENTIFIER.match(schema):
            raise ValueError(f"invalid target schema name: {schema!r}")
        self.spark = spark
        self.schema = schema
        # Names this run's commits (Delta's userMetadata), so it can tell its own commit from another's.
        self.run_id = uuid.uuid4().hex[:12]

    def name(self, table: str) -> str:
        return f"{self.schema}.{table}"

    def ensure_tables(self) -> bool:
        """Create the tables that are missing, add new columns to the others; True when this call
        created every table, so the ledger is known to be empty without reading it."""
        if not self.spark.catalog.databaseExists(self.schema):
            self.spark.sql(f"create schema if not exists {self.schema}")
        listed = self.spark.sql(f"show tables in {self.schema}").collect()  # cheaper than listTables
        existing = {r.tableName for r in listed if not r.isTemporary}
        missing = [table for table in SCHEMAS if table not in existing]
        for table in SCHEMAS:
            if table in existing:
                self._add_new_columns(table, SCHEMAS[table])
        if missing:
            # Each creation mostly waits (its first commit, the metastore): a fresh schema's four
            # tables are created at once, about 0.3 s sooner than one after the other.
            with ThreadPoolExecutor(max_workers=len(missing), thread_name_prefix="ledger-create") as pool:
                created = [pool.submit(self._create, table) for table in missing]
            for done in created:
                done.result()  # the first failure, once every creation has ended
        if FRONTIER not in existing:
            self._create_frontier_view()
        elif self.spark.catalog.getTable(self.name(FRONTIER)).tableType != "VIEW":
            self._replace_frontier_table()
        return not existing & {*SCHEMAS, FRONTIER}

    def _create_frontier_view(self) -> None:
        """``wal_frontier``, the view over ``wal_files`` (``FRONTIER_VIEW``)."""
        query = FRONTIER_VIEW.format(files=self.name(FILES))
        try:
            self.spark.sql(f"create view if not exists {self.name(FRONTIER)} as {query}")
        except Exception:
            # Another run creating it at the same moment: the metastore refuses the second.
            if not self.spark.catalog.tableExists(self.name(FRONTIER)):
                raise

    def _replace_frontier_table(self) -> None:
        """Replace the ``wal_frontier`` table that versions before the view appended to with the view,
        losing nothing: ``wal_files`` rows that landed events but were written before they recorded
        their greatest commit_lsn get it from ``wal_events`` first (one MERGE), and the table is
        dropped only when the view gives every source at least the frontier the table holds. Each
        step can be run again: a run stopped half way finishes it."""
        files, events = self.name(FILES), self.name(EVENTS)
        if self.table(FILES).where("landed > 0 and max_commit_lsn is null").limit(1).count():
            self.spark.sql(
                f"""merge into {files} as f
                using (
                    select batch_id, landing_file, max(commit_lsn) as lsn
                    from {events}
                    group by batch_id, landing_file
                ) as e
                on f.batch_id = e.batch_id and f.landing_file = e.landing_file
                    and f.landed > 0 and f.max_commit_lsn is null
                when matched then update set f.max_commit_lsn = e.lsn"""
            )
        recorded = self.frontiers()
        derived = self._latest_frontiers(
            self.spark.sql(FRONTIER_VIEW.format(files=files)).select("source_id", "batch_id", "frontier_lsn")
        )
        behind = sorted(
            f"{source} (the table {lsn}, wal_files {derived.get(source)})"
            for source, lsn in recorded.items()
            if lsn is not None and (derived.get(source) is None or derived[source] < lsn)
        )
        if behind:
            raise IngestError(
                f"{self.name(FRONTIER)} is a table that holds frontiers wal_files cannot give back, for "
                f"{', '.join(behind)}: were wal_files rows or wal_events deleted? It is left as it is; "
                "restore them, or drop the table to have the frontiers follow wal_files"
            )
        self.spark.sql(f"drop table if exists {self.name(FRONTIER)}")
        self._create_frontier_view()
        _log.info("%s replaced by a view over %s", self.name(FRONTIER), files)

    def _create(self, table: str) -> None:
        """Create one of the ledger's tables, empty, with its statistics columns."""
        from delta.tables import DeltaTable

        builder = DeltaTable.createIfNotExists(self.spark).tableName(self.name(table))
        builder = builder.addColumns(SCHEMAS[table])
        if table in STATS_COLUMNS:
            builder = builder.property("delta.dataSkippingStatsColumns", ",".join(STATS_COLUMNS[table]))
        builder.execute()

    def _add_new_columns(self, table: str, schema: StructType) -> None:
        """Give a table landed by an earlier version the nullable columns added since (appends match
        columns by name, so their place at the end does not matter)."""
        present = set(self.table(table).columns)
        added = [f"`{f.name}` {f.dataType.simpleString()}" for f in schema.fields if f.name not in present]
        if added:
            self.spark.sql(f"alter table {self.name(table)} add columns ({', '.join(added)})")

    def table(self, table: str) -> DataFrame:
        return self.spark.table(self.name(table))

    def append(self, table: str, df: DataFrame, batch_id: int) -> None:
        """Append once per batch: a re-executed batch's write of an already committed table is skipped.
        The commit is marked as this run's (``rows_committed``)."""
        (
            df.select(*[F.col(f.name).cast(f.dataType) for f in SCHEMAS[table].fields])
            .write.format("delta")
            .mode("append")
            .option("txnAppId", self._app_id(table))
            .option("txnVersion", batch_id)
            .option("userMetadata", self._marker(batch_id))
            .saveAsTable(self.name(table))
        )

    def prepare_appends(self, tables: tuple[str, ...]) -> None:
        """Compute now what each table's next ``append`` checks first: the ``txnAppId`` versions of
        its latest snapshot, which Delta reconstructs from the table's log (short Spark jobs, mostly
        waiting). The job calls this in the background while a batch is framed, so its appends find
        the state computed: a one-row idempotent append 0.23–0.29 s warmed, 0.66–0.75 s not (AMD).

        Only reads. When a commit comes in between, the append meets a newer snapshot and computes
        its state itself, as it would have without this. A failure here costs only that time: it is
        logged as a warning, not raised."""
        for table in tables:
            try:
                self._transactions(table)
            except Exception as exc:  # py4j wraps whatever the JVM raised
                _log.warning(
                    "could not prepare the append to %s (it computes its state itself): %s",
                    self.name(table),
                    first_line(exc),
                )

    def _app_id(self, table: str) -> str:
        return f"wal_lake/{self.schema}/{table}"

    def _transactions(self, table: str):
        """The ``txnAppId`` versions of the table's latest snapshot (a Scala map), its state computed
        if it was not yet."""
        jvm = self.spark.sparkContext._jvm
        none = jvm.scala.Option.empty()
        identifier = jvm.org.apache.spark.sql.catalyst.TableIdentifier(table, jvm.scala.Some(self.schema))
        log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(self.spark._jsparkSession, identifier)
        return log.update(False, none, none).transactions()

    def _marker(self, batch_id: int) -> str:
        return f"wal_lake ingest batch {batch_id}, run {self.run_id}"  # read back by _MARKER

    def _latest_commit(self, table: str) -> Row | None:
        """The table's latest commit: one row of its history (a read of the log, not of the data)."""
        from delta.tables import DeltaTable

        return DeltaTable.forName(self.spark, self.name(table)).history(1).first()

    def _marked_batch(self, table: str) -> int | None:
        """The batch id that the mark on the table's latest commit names; None when that commit is not
        a batch's append (the table's creation, a column added, a user's OPTIMIZE)."""
        last = self._latest_commit(table)
        marked = _MARKER.match((last["userMetadata"] or "") if last is not None else "")
        return int(marked.group(1)) if marked else None

    def rows_committed(self, table: str, batch_id: int) -> int | None:
        """The rows that this run's append of ``batch_id`` wrote, read from the table's latest commit
        (its history: one small read, no scan of the data). None when that commit is not this run's
        append: it was skipped (already committed by an earlier execution of the batch), or another
        run has committed since; the caller then reads the table."""
        last = self._latest_commit(table)
        if last is None or last["userMetadata"] != self._marker(batch_id):
            return None
        rows = (last["operationMetrics"] or {}).get("numOutputRows")
        return int(rows) if rows is not None else None

    def last_planned(self) -> int:
        """The greatest batch_id planned (0 when none was).

        Plans are appended in the order of their ids, each commit marked with its batch id
        (``_marker``), so the table's latest commit names the last plan: one read of its history,
        without a scan of the table. A latest commit of anything else (the table's creation, a
        column added, a user's OPTIMIZE) falls back on the scan."""
        marked = self._marked_batch(BATCHES)
        if marked is not None:
            return marked
        return self.table(BATCHES).agg(F.max("batch_id")).first()[0] or 0

    def last_batch_id(self, done: int, planned: int) -> int:
        """The greatest batch_id any table has seen, given the greatest done and the greatest planned.

        New batch ids start above every id any table has seen: Delta skips an idempotent write whose
        txnVersion is not above the last one committed for its txnAppId, so reusing an id (say, after
        the ledger tables were dropped but wal_events kept) would silently drop a batch. Every write
        follows a plan, so the plans' greatest id is enough unless there are no plans at all."""
        if planned:
            return max(planned, done)
        highest = self.table(EVENTS).select("batch_id")
        for table in (REJECTS, FILES):
            highest = highest.unionByName(self.table(table).select("batch_id"))
        return max(highest.agg(F.max("batch_id")).first()[0] or 0, done)

    def batch_events(self, batch_id: int) -> dict[str, tuple[int, int]]:
        """Per file, the events a batch wrote and their greatest commit_lsn (data skipping on batch_id
        keeps this to the batch's own files)."""
        rows = (
            self.table(EVENTS)
            .where(F.col("batch_id") == batch_id)
            .groupBy("landing_file")
            .agg(F.count("*").alias("n"), F.max("commit_lsn").alias("lsn"))
            .collect()
        )
        return {r.landing_file: (r.n, r.lsn) for r in rows}

    def plan_of(self, batch_id: int) -> tuple[datetime | None, list[PlannedFile]]:
        """(when the batch was planned, its files), as written; (None, []) for a batch never planned."""
        rows = self.table(BATCHES).where(F.col("batch_id") == batch_id).collect()
        names = [f.name for f in fields(PlannedFile)]
        planned_at = rows[0]["planned_at"] if rows else None
        return planned_at, [PlannedFile(**{n: row[n] for n in names}) for row in rows]

    def file_rows(self) -> list[dict]:
        """Every outcome row of the ledger (one small row per file per batch that read it)."""
        return [r.asDict() for r in self.table(FILES).drop("done_at").collect()]

    def frontiers(self) -> dict[str, int | None]:
        """Per source, its frontier as of its latest batch. One row per source per batch: read whole
        and reduced here, which takes one small job where Spark's aggregate takes a shuffle."""
        return self._latest_frontiers(self.table(FRONTIER).select("source_id", "batch_id", "frontier_lsn"))

    @staticmethod
    def _latest_frontiers(rows: DataFrame) -> dict[str, int | None]:
        latest: dict[str, tuple[int, int | None]] = {}
        for row in rows.collect():
            if row.source_id not in latest or row.batch_id > latest[row.source_id][0]:
                latest[row.source_id] = (row.batch_id, row.frontier_lsn)
        return {source: lsn for source, (_, lsn) in latest.items()}


def frontiers_from_files(file_rows: list[dict]) -> dict[str, int | None] | None:
    """Per source, its frontier (the greatest commit_lsn it has landed, None before any) from the
    ``wal_files`` rows alone, as the ``wal_frontier`` view's latest rows give it. None when a row that
    landed events lacks its ``max_commit_lsn`` (written before the column was, and not filled in since:
    ``Ledger._replace_frontier_table`` fills them in); the caller then asks the view."""
    landed: dict[str, list[int]] = {}
    for row in file_rows:
        lsn = row.get("max_commit_lsn")
        if row["landed"] and lsn is None:
            return None
        landed.setdefault(row["source_id"], []).extend([] if lsn is None else [lsn])
    return {source: max(lsns, default=None) for source, lsns in landed.items()}


def latest_rows(file_rows: list[dict]) -> dict[str, dict]:
    """Per landed file, its ``wal_files`` row of the latest batch that read it."""
    latest: dict[str, dict] = {}
    for row in file_rows:
        seen = latest.get(row["landing_file"])
        if seen is None or row["batch_id"] > seen["batch_id"]:
            latest[row["landing_file"]] = row
    return latest


def file_states(file_rows: list[dict]) -> dict[str, FileState]:
    """The latest outcome of every landed file."""
    return {
        path: FileState(
            r["source_id"], path, r["source_format"], r["file_size"], r["to_line"], r["next_line"]
        )
        for path, r in latest_rows(file_rows).items()
    }


def totals(file_rows: list[dict]) -> dict[str, int]:
    """The accounting identity over every batch ever done: landed + rejected + control + pending
    (the latest of each file) = lines (every line of every file read so far)."""
    latest = latest_rows(file_rows)
    result = {k: sum(r[k] for r in file_rows) for k in ("landed", "rejected", "control")}
    result["pending"] = sum(r["pending"] for r in latest.values())
    result["lines"] = sum(r["to_line"] for r in latest.values())
    return result
