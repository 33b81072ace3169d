"""The ingestion job: land the landing zone's new files as the raw Delta tables, in batches.

A thin shell: ``plan`` picks a batch's files and writes the plan ahead, ``extract`` reads them as
numbered lines, the format modules transform them (``transform(lines) -> ChangeSet``), ``load`` writes
the batch exactly once and marks it done, ``accounting`` checks every line's outcome. ``run`` loops
over batches; ``cli`` is the command line. Batches, their write-ahead plans and crash recovery:
``ledger`` and docs/ingestion.md.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TextIO

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from python_jobs.ingest import table_keys
from python_jobs.ingest.accounting import (
    KIND_REJECTED,
    BatchResult,
    LineStats,
    RunSummary,
    check_lines_counted,
    check_rejects_counted,
    check_wal_order,
    file_outcomes,
    landing_events,
    line_stats,
)
from python_jobs.ingest.changeset import FORMAT_DEBEZIUM, FORMAT_WAL2JSON, ChangeSet, union_all
from python_jobs.ingest.errors import IngestError
from python_jobs.ingest.landing import LandingFile, list_files, read_lines
from python_jobs.ingest.ledger import (
    DEFAULT_SCHEMA,
    EVENTS,
    FILES,
    REJECTS,
    SCHEMAS,
    FileState,
    Ledger,
    PlannedFile,
    file_states,
    frontiers_from_files,
    latest_rows,
    totals,
)
from python_jobs.ingest.plan import (
    DEFAULT_MAX_BATCH_BYTES,
    FORMAT_AUTO,
    FORMATS,
    check_present,
    check_unchanged,
    plan_new_batch,
    write_plan,
)
from python_jobs.ingest.table_keys import TableKey

__all__ = ["BatchResult", "Carry", "IngestError", "RunSummary", "load", "run", "run_batch"]

# Landing text per shuffle partition of a batch. The session's spark.sql.shuffle.partitions suits the
# models and small batches; a large batch raises it for its own shuffles, so that no partition of the
# parsed lines (two to three times the size of their text) outgrows a task's memory.
BATCH_PARTITION_BYTES = 32 * 2**20
# A batch of wal2json files up to this size runs with Spark's adaptive execution off (_plans_statically).
STATIC_PLAN_BYTES = 32 * 2**20
# A batch larger than this computes its framing into local checkpoints rather than caches (_hold).
CHECKPOINT_BYTES = 32 * 2**20


# --- extract ---------------------------------------------------------------------------------------


def plan_frame(spark: SparkSession, plan: list[PlannedFile]) -> DataFrame:
    """The planned files as a small frame: (landing_file, file_no, source_id, source_format,
    from_line), ``file_no`` numbering the files in name order."""
    return spark.createDataFrame(
        [
            (p.landing_file, no, p.source_id, p.source_format, p.from_line)
            for no, p in enumerate(sorted(plan, key=lambda p: p.landing_file))
        ],
        "landing_file string, file_no int, source_id string, source_format string, from_line bigint",
    )


def extract(
    spark: SparkSession, plan: list[PlannedFile], planned: DataFrame | None = None
) -> tuple[DataFrame, dict[str, int]]:
    """The planned files as numbered lines (with each file's ``source_format``), and per file the
    lines counted in it. ``planned``: the plan's ``plan_frame``, when the caller has it."""
    plan_df = plan_frame(spark, plan) if planned is None else planned
    return read_lines(spark, plan_df, sorted({p.landing_file for p in plan}))


# --- transform -------------------------------------------------------------------------------------


def transform_for(source_format: str) -> Callable[[DataFrame], ChangeSet]:
    """The format's ``transform``; the Debezium module is imported only when a file needs it."""
    try:
        module = importlib.import_module(f"python_jobs.ingest.{source_format}")
    except ModuleNotFoundError as exc:
        if exc.name != f"python_jobs.ingest.{source_format}":
            raise
        raise IngestError(
            f"format '{source_format}' is not available: python_jobs/ingest/{source_format}.py is missing"
        ) from exc
    return module.transform


def transform(lines: DataFrame, formats: list[str], inputs: dict[str, dict] | None = None) -> list[ChangeSet]:
    """One ChangeSet per format present in the batch; ``inputs``: a format's own keyword arguments."""
    return [
        transform_for(fmt)(
            lines.where(F.col("source_format") == fmt).drop("source_format"), **(inputs or {}).get(fmt, {})
        )
        for fmt in formats
    ]


def _format_inputs(
    ledger: Ledger,
    formats: list[str],
    frontiers: dict[str, int | None],
    keys: tuple[TableKey, ...],
    planned: DataFrame,
) -> dict:
    """Each format's own keyword arguments, for the formats the batch has files of: for wal2json, the
    batch's files (its framing names them by number); for Debezium, the table registry and what has
    landed (a replayed event takes back the index it landed with)."""
    inputs: dict[str, dict] = {}
    if FORMAT_WAL2JSON in formats:
        inputs[FORMAT_WAL2JSON] = {"files": planned.select("file_no", "source_id", "landing_file")}
    if FORMAT_DEBEZIUM in formats:
        registry = table_keys.to_frame(ledger.spark, keys)
        landed = ledger.table(EVENTS)
        inputs[FORMAT_DEBEZIUM] = {"registry": registry, "landed": landed, "frontiers": frontiers}
    return inputs


# --- load ------------------------------------------------------------------------------------------


def _advanced_frontiers(
    frontiers: dict[str, int | None], landed_max: dict[str, int | None], sources: set[str]
) -> dict[str, int | None]:
    """Per source of a batch, the greater of its frontier so far and the greatest commit it landed."""
    advanced = {}
    for source_id in sorted(sources):
        known = [v for v in (frontiers.get(source_id), landed_max.get(source_id)) if v is not None]
        advanced[source_id] = max(known) if known else None
    return advanced


def _events_written(
    ledger: Ledger, batch_id: int, landing: dict[str, tuple[int, int]]
) -> dict[str, tuple[int, int]]:
    """Per file, the events the batch's append wrote and their greatest commit_lsn, given per file the
    lines that land by the outcomes and their greatest commit_lsn (``landing``).

    When the append's own commit wrote as many rows as lines land by the outcomes, no line was
    unusable once parsed in full, and the outcomes say it all. Otherwise (late rejects, or an append
    skipped as committed by an earlier execution of the batch) the events are counted in wal_events."""
    if ledger.rows_committed(EVENTS, batch_id) == sum(n for n, _ in landing.values()):
        return landing
    return ledger.batch_events(batch_id)


def count_outcomes(
    plan: list[PlannedFile], sets: list[ChangeSet], counted: dict[str, int] | None = None
) -> dict[tuple[str, str], LineStats]:
    """Every line's outcome counted per file (the framing: most of what a batch reads before it writes),
    and the checks the counts decide: every line of the files read (``counted``, per file) has one
    outcome, and the files' names sort in WAL order. Writes nothing."""
    stats = line_stats(sets)
    for cs in sets:  # the counts above computed every line's outcome into the shared frames
        for df in cs.upstream:
            df.unpersist()
    if counted is not None:
        check_lines_counted(plan, stats, counted)
    check_wal_order(plan, stats)
    return stats


def load(
    ledger: Ledger,
    batch_id: int,
    planned_at: datetime,
    plan: list[PlannedFile],
    sets: list[ChangeSet],
    frontiers: dict[str, int | None],
    stats: dict[tuple[str, str], LineStats],
) -> BatchResult:
    """Write one batch's outputs exactly once, then mark it done (the ``wal_files`` commit), given
    every line's outcome counted (``count_outcomes``).

    The events are written first and counted (``_events_written``); only when fewer landed than the
    outcomes say are the late rejects computed (their lines are parsed again), so a batch of clean
    lines is parsed once."""
    spark = ledger.spark
    stamp = [F.lit(batch_id).alias("batch_id"), F.lit(planned_at).alias("ingested_at")]
    ledger.append(EVENTS, union_all([cs.events for cs in sets]).select("*", *stamp), batch_id)
    landing = landing_events(stats)
    written = _events_written(ledger, batch_id, landing)
    # The early rejects' text is read again from the files: only when there are any.
    any_early = any(kind == KIND_REJECTED for _, kind in stats)
    rejects = [cs.early_rejects for cs in sets] if any_early else []
    late: dict[str, int] = {}
    late_frame = reject_frame = None
    if any(written.get(path, (0, None))[0] != n for path, (n, _) in landing.items()):
        late_sets = [cs.late_rejects for cs in sets if cs.late_rejects is not None]
        if late_sets:
            late_frame = union_all(late_sets).persist(StorageLevel.MEMORY_AND_DISK)
            late = {r.landing_file: r["count"] for r in late_frame.groupBy("landing_file").count().collect()}
            rejects.append(late_frame)
    try:
        # A batch that rejects nothing makes no commit there: run again, it rejects nothing again.
        if rejects:
            # Computed once and counted before the append: what is written is what was counted.
            reject_frame = union_all(rejects).select("*", *stamp).localCheckpoint(eager=True)
            per_file = reject_frame.groupBy("landing_file").count().collect()
            check_rejects_counted({r.landing_file: r["count"] for r in per_file}, stats, late)
            ledger.append(REJECTS, reject_frame, batch_id)
        outcomes, landed_max = file_outcomes(plan, stats, written, late)
    finally:
        if late_frame is not None:
            late_frame.unpersist()
        if reject_frame is not None:
            _release(reject_frame)
    advanced = _advanced_frontiers(frontiers, landed_max, {p.source_id for p in plan})
    done_at = datetime.now(UTC)
    file_rows = [{**o.row(batch_id), "done_at": done_at} for o in outcomes]
    # The done mark. Its rows' greatest commit_lsn landed (max_commit_lsn) is what the wal_frontier
    # view derives each source's frontier from: the frontier moves with this commit, not after it.
    ledger.append(FILES, spark.createDataFrame(file_rows, SCHEMAS[FILES]), batch_id)
    return BatchResult(files=outcomes, frontiers=advanced)


# --- a batch ---------------------------------------------------------------------------------------

# The tables every batch appends to after its framing (wal_rejects only when it rejects a line, and
# wal_batches before it): their appends' state is computed while the batch is framed.
PREPARED = (EVENTS, FILES)


def _batch_bytes(plan: list[PlannedFile]) -> int:
    """The landing text a batch reads, by its files' sizes: what its settings are chosen by."""
    return sum(p.file_size or 0 for p in plan)


def _batch_partitions(spark: SparkSession, plan: list[PlannedFile]) -> tuple[str, int]:
    """(the session's shuffle partitions, as set; the partitions this batch uses)."""
    current = spark.conf.get("spark.sql.shuffle.partitions")
    return current, max(int(current), -(-_batch_bytes(plan) // BATCH_PARTITION_BYTES))


def _plans_statically(plan: list[PlannedFile]) -> bool:
    """Whether the batch runs with Spark's adaptive execution off: a small batch of wal2json files.

    Adaptive execution plans each shuffle stage again once the one before it has run: for a batch of
    a few megabytes, a dozen re-plannings and separate jobs that cost more than the work they plan
    (it has nothing to coalesce or split, and its joins are broadcast by hint). A Debezium batch keeps
    it: its lookups of landed events rely on it to drop a join with nothing to look up before it
    reads wal_events."""
    return _batch_bytes(plan) <= STATIC_PLAN_BYTES and all(p.source_format != FORMAT_DEBEZIUM for p in plan)


def run_batch(
    ledger: Ledger,
    batch_id: int,
    planned_at: datetime,
    plan: list[PlannedFile],
    frontiers: dict[str, int | None],
    keys: tuple[TableKey, ...] = (),
    plan_written: Future | None = None,
) -> BatchResult:
    """Execute a written plan: extract, transform, load. Safe to call again for the same plan.
    ``plan_written``: the plan's write when it is still under way; the batch reads and parses
    meanwhile, and writes nothing before it has succeeded."""
    started = time.monotonic()
    spark = ledger.spark
    current, partitions = _batch_partitions(spark, plan)
    pinned = {**split_settings(spark), "spark.sql.shuffle.partitions": str(partitions)}
    if _plans_statically(plan):
        pinned["spark.sql.adaptive.enabled"] = "false"
    saved = {key: spark.conf.get(key, None) for key in pinned}
    saved["spark.sql.shuffle.partitions"] = current
    for key, value in pinned.items():
        spark.conf.set(key, value)
    try:
        result = _run_batch(ledger, batch_id, planned_at, plan, frontiers, keys, plan_written)
    finally:
        if plan_written is not None:
            wait([plan_written])  # a failed batch leaves no write of its plan running behind it
        for key, value in saved.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
    return replace(result, seconds=time.monotonic() - started)


# How Spark splits the files it reads into blocks. Line numbers rest on every scan of a batch
# splitting its files alike (landing.read_lines); without minPartitionNum, the split follows the cores
# the cluster has registered when each scan is planned, which changes as executors come and go.
SPLIT_SETTINGS = (
    "spark.sql.files.maxPartitionBytes",
    "spark.sql.files.openCostInBytes",
    "spark.sql.files.minPartitionNum",
)


def split_settings(spark: SparkSession) -> dict[str, str]:
    """The split settings as they stand at a batch's start, to hold for the whole batch: the
    session's values, and for minPartitionNum (unset: Spark's default parallelism, the cores) the
    parallelism of the moment."""
    size, open_cost, parts = SPLIT_SETTINGS
    return {
        size: spark.conf.get(size),
        open_cost: spark.conf.get(open_cost),
        parts: spark.conf.get(parts, None) or str(spark.sparkContext.defaultParallelism),
    }


def _run_batch(
    ledger: Ledger,
    batch_id: int,
    planned_at: datetime,
    plan: list[PlannedFile],
    frontiers: dict[str, int | None],
    keys: tuple[TableKey, ...] = (),
    plan_written: Future | None = None,
) -> BatchResult:
    formats = sorted({p.source_format for p in plan})
    for fmt in formats:
        transform_for(fmt)  # fail before reading anything when a format module is missing
    planned = plan_frame(ledger.spark, plan)
    lines, counted = extract(ledger.spark, plan, planned)
    sets = transform(lines, formats, _format_inputs(ledger, formats, frontiers, keys, planned))
    held: list[DataFrame] = []
    # While the batch is framed, the state its appends check is computed beside it (the pool waits
    # for it on the way out, so nothing of a batch runs on behind it).
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest-prepare") as beside:
        beside.submit(ledger.prepare_appends, PREPARED)
        try:
            checkpoint = _batch_bytes(plan) > CHECKPOINT_BYTES
            sets = [_hold(cs, held, checkpoint) for cs in sets]
            # The lines are framed and counted while the plan's commit is under way: both mostly
            # wait (on the tasks, on the commit), and counting writes nothing.
            stats = count_outcomes(plan, sets, counted)
            if plan_written is not None:
                plan_written.result()  # the write-ahead plan is committed before any output
            return load(ledger, batch_id, planned_at, plan, sets, frontiers, stats)
        finally:
            for df in held:
                _release(df)


def _hold(cs: ChangeSet, held: list[DataFrame], checkpoint: bool = False) -> ChangeSet:
    """The ChangeSet with its ``shared`` frame (and the frames it reads twice) computed once for the
    batch: cached, or computed now into local checkpoints and the set built again on them. What it
    holds is added to ``held``, to be released after the batch.

    A set that reads a table the batch writes is always built again on a checkpoint of ``shared``
    (``ChangeSet.rebuild``). With ``checkpoint`` (a large batch), a set that can be built on
    checkpoints of its upstream frames is (``ChangeSet.rebuild_upstream``): a checkpoint keeps the
    rows as they are, where a cache converts them into compressed columns, a tenth of the 1M bench
    zone's framing; a small batch keeps caches, which need no job of their own."""
    checkpointed: tuple[DataFrame, ...] = ()
    if checkpoint and cs.rebuild_upstream is not None:
        checkpointed = tuple(_checkpoint(df) for df in cs.upstream)
        held.extend(checkpointed)
        cs = cs.rebuild_upstream(checkpointed)
    for df in cs.upstream:
        held.append(df.persist(StorageLevel.MEMORY_AND_DISK))
    if cs.shared is None:
        return cs
    if cs.rebuild is None:
        held.append(cs.shared.persist(StorageLevel.MEMORY_AND_DISK))
        return cs
    shared = _checkpoint(cs.shared)
    held.append(shared)
    for df in cs.upstream:  # computed into the checkpoint: no longer read
        df.unpersist()
    for df in checkpointed:
        _release(df)
    return cs.rebuild(shared)


def _checkpoint(df: DataFrame) -> DataFrame:
    """``df`` computed now into a local checkpoint: its rows as they are, in memory or on disk."""
    return df.localCheckpoint(eager=True, storageLevel=StorageLevel.MEMORY_AND_DISK)


def _release(df: DataFrame) -> None:
    """Free a frame's cached or checkpointed blocks now (a checkpoint's would wait for a GC)."""
    plan = df._jdf.queryExecution().logical()
    if plan.getClass().getSimpleName() == "LogicalRDD":
        plan.rdd().unpersist(False)
    else:
        df.unpersist()


# --- the run ---------------------------------------------------------------------------------------


@dataclass
class _Known:
    """What the ledger says has been read, kept current as the run's batches finish."""

    history: list[dict]  # every wal_files row, without done_at
    states: dict[str, FileState]  # per file, where it stands after its latest batch
    planned: int = 0  # the greatest batch_id planned before the run
    created: bool = False  # this run created the ledger: no batch was planned or written before
    ledger: Ledger | None = None  # where the frontiers are read from, when first asked for
    read_frontiers: dict[str, int | None] | None = None

    @classmethod
    def read(cls, ledger: Ledger) -> _Known:
        """The files read and the last batch planned, read at once: each read is a short Spark job
        that mostly waits (on Delta's log, on scheduling), so two threads take about the time of one.
        The frontiers follow from the files' rows; from rows that lack their ``max_commit_lsn``, they
        are read from the wal_frontier view when a batch first needs them."""
        with ThreadPoolExecutor(max_workers=2) as pool:
            history, planned = pool.submit(ledger.file_rows), pool.submit(ledger.last_planned)
            rows = history.result()
            return cls(
                rows,
                file_states(rows),
                planned.result(),
                ledger=ledger,
                read_frontiers=frontiers_from_files(rows),
            )

    @classmethod
    def nothing(cls) -> _Known:
        """A ledger this run created: nothing read, nothing planned (its tables are not read back)."""
        return cls([], {}, created=True, read_frontiers={})

    @property
    def frontiers(self) -> dict[str, int | None]:
        """Per source, its frontier as of its latest batch (read from the ledger when first asked for)."""
        if self.read_frontiers is None:
            assert self.ledger is not None, "a _Known not read from a ledger holds its frontiers"
            self.read_frontiers = self.ledger.frontiers()
        return self.read_frontiers

    @property
    def done(self) -> int:
        """The greatest batch id done (0 when none is)."""
        return max((row["batch_id"] for row in self.history), default=0)

    def record(self, batch_id: int, result: BatchResult) -> None:
        self.history.extend(o.row(batch_id) for o in result.files)
        self.states.update((o.landing_file, o.state()) for o in result.files)
        self.frontiers.update(result.frontiers)
        self.planned = max(self.planned, batch_id)
        self.created = False


@dataclass
class Carry:
    """What a run leaves for the next run of the same process on the same raw schema: the ledger as
    it read it and kept current, so the next run reads none of it again (two or three Spark jobs whose
    cost grows with the files landed). Only for a process that is the raw schema's one writer
    between its runs (the follower, which holds the warehouse's lock). A run that fails leaves
    nothing: the next one reads the ledger again, as after any crash."""

    schema: str | None = None
    ledger: Ledger | None = None
    known: _Known | None = None

    def take(self, schema: str) -> tuple[Ledger, _Known] | None:
        """The ledger and what it holds, when the last run on ``schema`` ended well; cleared."""
        carried = (self.ledger, self.known) if self.schema == schema and self.known is not None else None
        self.schema = self.ledger = self.known = None
        return carried  # type: ignore[return-value]

    def keep(self, schema: str, ledger: Ledger, known: _Known) -> None:
        self.schema, self.ledger, self.known = schema, ledger, known

    def last_done(self, schema: str) -> int | None:
        """The greatest batch id done on ``schema``, as the ledger kept says; None when nothing is kept."""
        if self.schema != schema or self.known is None:
            return None
        return self.known.done

    def figures(self, schema: str) -> tuple[dict[str, int | None], dict[str, int], dict[str, int]] | None:
        """Per source, as the ledger kept stands on ``schema``: its frontier, its lines pending (each
        file's latest batch) and its lines rejected (every batch); None when nothing is kept."""
        if self.schema != schema or self.known is None:
            return None
        rejects: dict[str, int] = {}
        for row in self.known.history:
            rejects[row["source_id"]] = rejects.get(row["source_id"], 0) + row["rejected"]
        pending: dict[str, int] = {}
        for row in latest_rows(self.known.history).values():
            pending[row["source_id"]] = pending.get(row["source_id"], 0) + row["pending"]
        return dict(self.known.frontiers), pending, rejects


def _open_ledger(spark: SparkSession, schema: str) -> Ledger:
    try:
        return Ledger(spark, schema)
    except ValueError as exc:
        raise IngestError(str(exc)) from exc


def _batches(
    ledger: Ledger,
    listed: list[LandingFile],
    known: _Known,
    source_format: str,
    max_files: int | None,
    max_bytes: int | None,
    out: TextIO,
    sources: list[str] | None = None,
    writer: ThreadPoolExecutor | None = None,
) -> Iterator[tuple[int, datetime, list[PlannedFile], Future | None]]:
    """The batches to execute, in order: an unfinished one of an earlier run first, as it was planned;
    then new ones, each planned (and its plan written) only once the batch before it is recorded in
    ``known``, since the files that batch left pending are part of the next plan. Each comes with
    its plan's write when ``writer`` runs it (one Delta commit that mostly waits: the batch reads
    and parses its files meanwhile); else the plan is written before the batch is yielded."""
    done = known.done
    planned = known.planned
    highest = 0 if known.created else ledger.last_batch_id(done, planned)
    if planned > done:
        planned_at, plan = ledger.plan_of(planned)
        check_present(listed, {}, plan, sources)
        check_unchanged(listed, {}, plan)
        print(f"batch {planned}: resuming an unfinished batch of {len(plan)} files", file=out, flush=True)
        yield planned, planned_at, plan, None
    check_present(listed, known.states, [], sources)
    check_unchanged(listed, known.states, [])
    batch_id = max(highest, planned)
    while plan := plan_new_batch(ledger.spark, listed, known.states, source_format, max_files, max_bytes):
        batch_id += 1
        planned_at = datetime.now(UTC)
        if writer is None:
            write_plan(ledger, batch_id, planned_at, plan)
            yield batch_id, planned_at, plan, None
        else:
            yield batch_id, planned_at, plan, writer.submit(write_plan, ledger, batch_id, planned_at, plan)


def run(
    spark: SparkSession,
    landing: str,
    sources: list[str] | None = None,
    source_format: str = FORMAT_AUTO,
    schema: str = DEFAULT_SCHEMA,
    max_files_per_batch: int | None = None,
    out: TextIO = sys.stdout,
    max_bytes_per_batch: int | None = DEFAULT_MAX_BATCH_BYTES,
    table_keys_file: str | None = None,
    carry: Carry | None = None,
) -> RunSummary:
    """Land every new file (and re-read pending tails) in batches of at most ``max_files_per_batch``
    new files and ``max_bytes_per_batch`` bytes of them (None: no limit); return the run's accounting.
    ``table_keys_file``: the table registry (None: the project's seeds/table_keys.csv). ``carry``:
    the ledger the last run of this process left (``Carry``), taken, and kept for the next."""
    if source_format not in FORMATS:
        raise IngestError(f"unknown format '{source_format}' (expected one of {', '.join(FORMATS)})")
    keys = table_keys.load(table_keys_file)
    started = time.monotonic()
    carried = carry.take(schema) if carry is not None else None
    ledger = carried[0] if carried is not None else _open_ledger(spark, schema)
    listed = list_files(spark, landing, sources)
    if carried is not None:
        known = carried[1]
    else:
        known = _Known.nothing() if ledger.ensure_tables() else _Known.read(ledger)
    summary = RunSummary()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest-plan") as writer:
        batches = _batches(
            ledger,
            listed,
            known,
            source_format,
            max_files_per_batch,
            max_bytes_per_batch,
            out,
            sources,
            writer,
        )
        for batch_id, planned_at, plan, plan_written in batches:
            result = run_batch(ledger, batch_id, planned_at, plan, known.frontiers, keys, plan_written)
            known.record(batch_id, result)
            summary.add(plan, result)
            print(summary.batch_line(batch_id, plan, result), file=out, flush=True)
    summary.pending_end = sum(summary.run_pending.values())
    summary.overall = totals(known.history)
    summary.seconds = time.monotonic() - started
    if carry is not None:
        carry.keep(schema, ledger, known)
    return summary
