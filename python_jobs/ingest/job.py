"""``python -m python_jobs.ingest``: land the landing zone's new files as the raw Delta tables.

A thin shell: ``extract`` reads the planned files as numbered lines, the format modules transform
them (``transform(lines) -> ChangeSet``), ``load`` writes a batch exactly once, ``main`` wires it up
from the command line. Batches, their write-ahead plans and crash recovery: ``ledger`` and
docs/ingestion.md.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TextIO

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from python_jobs.ingest.changeset import FORMAT_DEBEZIUM, FORMAT_WAL2JSON, ChangeSet
from python_jobs.ingest.landing import (
    LandingError,
    LandingFile,
    line_counts,
    list_files,
    probe,
    read_lines,
)
from python_jobs.ingest.ledger import (
    BATCHES,
    EVENTS,
    FILES,
    FRONTIER,
    REJECTS,
    SCHEMAS,
    FileState,
    Ledger,
    file_states,
    totals,
)

FORMAT_AUTO = "auto"
FORMATS = (FORMAT_AUTO, FORMAT_WAL2JSON, FORMAT_DEBEZIUM)
DEFAULT_SCHEMA = "wal_lake_raw"

KIND_LANDED = "landed"
KIND_REJECTED = "rejected"
KIND_CONTROL = "control"
KIND_PENDING = "pending"


class IngestError(RuntimeError):
    """A run cannot go on; the message is one line for the user."""


@dataclass
class RunSummary:
    batches: int = 0
    files: int = 0
    lines_read: int = 0
    reread: int = 0  # lines read again because an earlier batch of this run left them pending
    landed: int = 0
    rejected: int = 0
    control: int = 0
    pending_end: int = 0
    seconds: float = 0.0
    run_pending: dict[str, int] = field(default_factory=dict, repr=False)
    overall: dict[str, int] = field(default_factory=dict)  # ledger.totals after the run

    @property
    def balanced(self) -> bool:
        run_ok = (
            self.lines_read - self.reread == self.landed + self.rejected + self.control + self.pending_end
        )
        o = self.overall
        overall_ok = not o or o["lines"] == o["landed"] + o["rejected"] + o["control"] + o["pending"]
        return run_ok and overall_ok

    def line(self) -> str:
        rate = self.lines_read / self.seconds if self.seconds else 0.0
        check = "ok" if self.balanced else "MISMATCH"
        o = self.overall
        return (
            f"ingest: {self.batches} batches, {self.files} files in {self.seconds:.1f}s "
            f"({rate:,.0f} lines/s); lines read {self.lines_read - self.reread:,} = "
            f"landed {self.landed:,} + rejected {self.rejected:,} + control {self.control:,} "
            f"+ pending {self.pending_end:,}; overall {o.get('lines', 0):,} = {o.get('landed', 0):,} "
            f"+ {o.get('rejected', 0):,} + {o.get('control', 0):,} + {o.get('pending', 0):,} [{check}]"
        )


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


# --- extract ---------------------------------------------------------------------------------------


def extract(spark: SparkSession, plan: list[dict]) -> DataFrame:
    """The planned files as numbered lines (with each file's ``source_format``)."""
    plan_df = spark.createDataFrame(
        [(p["landing_file"], p["source_id"], p["source_format"], p["from_line"]) for p in plan],
        "landing_file string, source_id string, source_format string, from_line bigint",
    )
    return read_lines(spark, plan_df, sorted({p["landing_file"] for p in plan}))


# --- transform -------------------------------------------------------------------------------------


def transform(lines: DataFrame, formats: list[str]) -> list[ChangeSet]:
    """One ChangeSet per format present in the batch."""
    return [
        transform_for(fmt)(lines.where(F.col("source_format") == fmt).drop("source_format"))
        for fmt in formats
    ]


def _union(frames: list[DataFrame]) -> DataFrame:
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result


# --- load ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchResult:
    files: list[dict]
    landed: int
    rejected: int
    control: int
    pending: int
    lines_read: int


def _file_outcomes(
    spark: SparkSession, sets: list[ChangeSet], plan: list[dict]
) -> tuple[list[dict], dict[str, int]]:
    """Per planned file: lines read, outcome counts and the line to start from next time; and per
    source the greatest commit_lsn landed. The lines read are counted from the files' text, apart
    from the transforms, so the identity read = landed + rejected + control + pending is a check."""

    def tag(df: DataFrame, kind: str, lsn: str | None = None) -> DataFrame:
        return df.select(
            "landing_file",
            "landing_line",
            F.lit(kind).alias("kind"),
            (F.col(lsn) if lsn else F.lit(None)).cast("bigint").alias("commit_lsn"),
        )

    totals = line_counts(spark, sorted({p["landing_file"] for p in plan}))
    tagged = []
    for cs in sets:
        tagged += [
            tag(cs.events, KIND_LANDED, "commit_lsn"),
            tag(cs.rejects, KIND_REJECTED),
            tag(cs.pending, KIND_PENDING),
        ]
        if cs.control is not None:
            tagged.append(tag(cs.control, KIND_CONTROL))
    stats = {
        (r.landing_file, r.kind): r
        for r in _union(tagged)
        .groupBy("landing_file", "kind")
        .agg(
            F.count("*").alias("n"),
            F.min("landing_line").alias("first"),
            F.max("landing_line").alias("last"),
            F.max("commit_lsn").alias("lsn"),
        )
        .collect()
    }
    checks_control = all(cs.control is not None for cs in sets)
    outcomes = []
    landed_max: dict[str, int] = {}
    for p in plan:
        path = p["landing_file"]
        to_line = max(totals.get(path, 0), p["from_line"] - 1)
        n_read = to_line - p["from_line"] + 1
        landed, rejected, control, pending = (stats[(path, k)].n if (path, k) in stats else 0 for k in _KINDS)
        if not checks_control:
            control = n_read - landed - rejected - pending
        if landed + rejected + control + pending != n_read or control < 0:
            raise IngestError(
                f"accounting identity broken for {path}: read {n_read} != landed {landed} + rejected "
                f"{rejected} + control {control} + pending {pending} (a transform bug)"
            )
        first_pending = stats[(path, KIND_PENDING)].first if pending else None
        if pending and to_line - first_pending + 1 != pending:
            raise IngestError(f"pending lines of {path} are not a tail of the file (a transform bug)")
        if landed:
            lsn = stats[(path, KIND_LANDED)].lsn
            landed_max[p["source_id"]] = max(lsn, landed_max.get(p["source_id"], lsn))
        outcomes.append(
            {
                **{k: p[k] for k in ("source_id", "landing_file", "source_format", "file_size", "from_line")},
                "to_line": to_line,
                "next_line": first_pending if pending else to_line + 1,
                "lines_read": n_read,
                "landed": landed,
                "rejected": rejected,
                "control": control,
                "pending": pending,
            }
        )
    return outcomes, landed_max


_KINDS = (KIND_LANDED, KIND_REJECTED, KIND_CONTROL, KIND_PENDING)


def load(
    ledger: Ledger,
    batch_id: int,
    planned_at: datetime,
    plan: list[dict],
    sets: list[ChangeSet],
    frontiers: dict[str, int | None],
) -> BatchResult:
    """Write one batch's outputs exactly once, then mark it done. Updates ``frontiers`` in place."""
    spark = ledger.spark
    stamp = [F.lit(batch_id).alias("batch_id"), F.lit(planned_at).alias("ingested_at")]
    events = _union([cs.events for cs in sets])
    outcomes, landed_max = _file_outcomes(spark, sets, plan)
    for cs in sets:  # the counts above computed every line's outcome into the shared frames
        for df in cs.upstream:
            df.unpersist()

    ledger.append(EVENTS, events.select("*", *stamp), batch_id)
    ledger.append(REJECTS, _union([cs.rejects for cs in sets]).select("*", *stamp), batch_id)

    for source_id in sorted({p["source_id"] for p in plan}):
        known = [v for v in (frontiers.get(source_id), landed_max.get(source_id)) if v is not None]
        frontiers[source_id] = max(known) if known else None
    frontier_rows = [(s, frontiers[s], batch_id, planned_at) for s in sorted({p["source_id"] for p in plan})]
    ledger.append(
        FRONTIER,
        spark.createDataFrame(
            frontier_rows, "source_id string, frontier_lsn bigint, batch_id bigint, updated_at timestamp"
        ),
        batch_id,
    )

    done_at = datetime.now(UTC)
    file_rows = [{**o, "batch_id": batch_id, "done_at": done_at} for o in outcomes]
    ledger.append(FILES, spark.createDataFrame(file_rows, SCHEMAS[FILES]), batch_id)
    return BatchResult(
        files=outcomes,
        landed=sum(o["landed"] for o in outcomes),
        rejected=sum(o["rejected"] for o in outcomes),
        control=sum(o["control"] for o in outcomes),
        pending=sum(o["pending"] for o in outcomes),
        lines_read=sum(o["lines_read"] for o in outcomes),
    )


# --- the run ---------------------------------------------------------------------------------------


def _plan_new_batch(
    spark: SparkSession,
    listed: list[LandingFile],
    states: dict[str, FileState],
    source_format: str,
    max_files: int | None,
    max_bytes: int | None,
) -> list[dict]:
    new = [f for f in listed if f.path not in states]
    if max_files:
        new = new[:max_files]
    if max_bytes:
        new = _within_bytes(new, max_bytes)
    if not new:
        return []
    sources = {f.source_id for f in new}
    present = {f.path for f in listed}
    plan = [
        {
            "source_id": s.source_id,
            "landing_file": s.landing_file,
            "source_format": s.source_format,
            "from_line": s.next_line,
            "file_size": s.file_size,
            "modified_at": None,
        }
        for s in sorted(states.values(), key=lambda s: s.landing_file)
        if s.pending and s.source_id in sources and s.landing_file in present
    ]
    known = {s.source_id: s.source_format for s in states.values()}
    for f in new:
        if source_format == FORMAT_AUTO:
            fmt = probe(spark, f.path, detect=True) or known.get(f.source_id) or FORMAT_WAL2JSON
        else:
            probe(spark, f.path, detect=False)
            fmt = source_format
        known.setdefault(f.source_id, fmt)
        plan.append(
            {
                "source_id": f.source_id,
                "landing_file": f.path,
                "source_format": fmt,
                "from_line": 1,
                "file_size": f.size,
                "modified_at": datetime.fromtimestamp(f.modified_ms / 1000, UTC),
            }
        )
    return plan


def _within_bytes(files: list[LandingFile], max_bytes: int) -> list[LandingFile]:
    """The leading files whose sizes add up to at most ``max_bytes``; always at least one, so a file
    larger than the limit lands in a batch of its own."""
    taken, total = [], 0
    for f in files:
        if taken and total + f.size > max_bytes:
            break
        taken.append(f)
        total += f.size
    return taken


def _check_unchanged(listed: list[LandingFile], states: dict[str, FileState], plan: list[dict]) -> None:
    sizes = {p["landing_file"]: p["file_size"] for p in plan}
    sizes.update({path: s.file_size for path, s in states.items()})
    for f in listed:
        if f.path in sizes and sizes[f.path] != f.size:
            raise IngestError(
                f"landing file changed after it was planned or landed ({sizes[f.path]} -> {f.size} bytes): "
                f"{f.path}; landing files must be immutable (write them elsewhere, then move them in)"
            )


# Landing text (new files, as stored) per batch by default. A batch parses, frames and caches all of its
# lines at once, so its memory grows with it; this keeps a backlog of any size within a 4 GB driver
# (a 6.5 GB landing zone in one batch ran it out of heap). About 800k wal2json changes per batch.
DEFAULT_MAX_BATCH_BYTES = 512 * 2**20

# Landing text per shuffle partition of a batch. The session's spark.sql.shuffle.partitions suits the
# models and small batches; a large batch raises it for its own shuffles, so that no partition of the
# parsed lines (two to three times the size of their text) outgrows a task's memory.
BATCH_PARTITION_BYTES = 32 * 2**20


def _batch_partitions(spark: SparkSession, plan: list[dict]) -> tuple[str, int]:
    """(the session's shuffle partitions, as set; the partitions this batch uses)."""
    current = spark.conf.get("spark.sql.shuffle.partitions")
    size = sum(p["file_size"] or 0 for p in plan)
    return current, max(int(current), -(-size // BATCH_PARTITION_BYTES))


def run_batch(
    ledger: Ledger, batch_id: int, planned_at: datetime, plan: list[dict], frontiers: dict[str, int | None]
) -> BatchResult:
    """Execute a written plan: extract, transform, load. Safe to call again for the same plan."""
    spark = ledger.spark
    current, partitions = _batch_partitions(spark, plan)
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    try:
        return _run_batch(ledger, batch_id, planned_at, plan, frontiers)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", current)


def _run_batch(
    ledger: Ledger, batch_id: int, planned_at: datetime, plan: list[dict], frontiers: dict[str, int | None]
) -> BatchResult:
    spark = ledger.spark
    formats = sorted({p["source_format"] for p in plan})
    for fmt in formats:
        transform_for(fmt)  # fail before reading anything when a format module is missing
    lines = extract(spark, plan)
    sets = transform(lines, formats)
    persisted = [
        df.persist(StorageLevel.MEMORY_AND_DISK)
        for cs in sets
        for df in (*cs.upstream, *([cs.shared] if cs.shared is not None else []))
    ]
    try:
        return load(ledger, batch_id, planned_at, plan, sets, frontiers)
    finally:
        for df in persisted:
            df.unpersist()


def _write_plan(ledger: Ledger, batch_id: int, planned_at: datetime, plan: list[dict]) -> None:
    rows = [{**p, "batch_id": batch_id, "planned_at": planned_at} for p in plan]
    ledger.append(BATCHES, ledger.spark.createDataFrame(rows, SCHEMAS[BATCHES]), batch_id)
    stored = {(p["landing_file"], p["from_line"]) for p in ledger.plan_of(batch_id)}
    if stored != {(p["landing_file"], p["from_line"]) for p in plan}:
        raise IngestError(
            f"batch {batch_id} was planned by another ingestion run at the same time; run one at a time"
        )


def run(
    spark: SparkSession,
    landing: str,
    sources: list[str] | None = None,
    source_format: str = FORMAT_AUTO,
    schema: str = DEFAULT_SCHEMA,
    max_files_per_batch: int | None = None,
    out: TextIO = sys.stdout,
    max_bytes_per_batch: int | None = DEFAULT_MAX_BATCH_BYTES,
) -> RunSummary:
    """Land every new file (and re-read pending tails) in batches of at most ``max_files_per_batch``
    new files and ``max_bytes_per_batch`` bytes of them (None: no limit); return the run's accounting."""
    if source_format not in FORMATS:
        raise IngestError(f"unknown format '{source_format}' (expected one of {', '.join(FORMATS)})")
    started = time.monotonic()
    try:
        ledger = Ledger(spark, schema)
    except ValueError as exc:
        raise IngestError(str(exc)) from exc
    listed = list_files(spark, landing, sources)
    ledger.ensure_tables()
    history = ledger.file_rows()
    states = file_states(history)
    done = max((r["batch_id"] for r in history), default=0)
    highest, planned = ledger.last_batch_ids(done)
    frontiers = ledger.frontiers()
    summary = RunSummary()

    def execute(batch_id: int, planned_at: datetime, plan: list[dict]) -> None:
        t0 = time.monotonic()
        summary.reread += sum(summary.run_pending.get(p["landing_file"], 0) for p in plan)
        result = run_batch(ledger, batch_id, planned_at, plan, frontiers)
        history.extend({**o, "batch_id": batch_id} for o in result.files)
        for o in result.files:
            states[o["landing_file"]] = FileState(
                o["source_id"],
                o["landing_file"],
                o["source_format"],
                o["file_size"],
                o["to_line"],
                o["next_line"],
            )
            summary.run_pending[o["landing_file"]] = o["pending"]
        summary.batches += 1
        summary.files += len(plan)
        summary.lines_read += result.lines_read
        summary.landed += result.landed
        summary.rejected += result.rejected
        summary.control += result.control
        elapsed = time.monotonic() - t0
        print(
            f"batch {batch_id}: {len(plan)} files, {result.lines_read:,} lines -> landed {result.landed:,}, "
            f"rejected {result.rejected:,}, control {result.control:,}, pending {result.pending:,} "
            f"({result.lines_read / elapsed if elapsed else 0:,.0f} lines/s); "
            f"done so far: {summary.files} files, {summary.lines_read:,} lines",
            file=out,
            flush=True,
        )

    if planned > done:
        plan = ledger.plan_of(planned)
        planned_at = plan[0]["planned_at"]
        _check_unchanged(listed, {}, plan)
        print(f"batch {planned}: resuming an unfinished batch of {len(plan)} files", file=out, flush=True)
        execute(planned, planned_at, plan)
    _check_unchanged(listed, states, [])

    batch_id = max(highest, planned)
    while True:
        plan = _plan_new_batch(spark, listed, states, source_format, max_files_per_batch, max_bytes_per_batch)
        if not plan:
            break
        batch_id += 1
        planned_at = datetime.now(UTC)
        _write_plan(ledger, batch_id, planned_at, plan)
        execute(batch_id, planned_at, plan)

    summary.pending_end = sum(summary.run_pending.values())
    summary.overall = totals(history)
    summary.seconds = time.monotonic() - started
    return summary


# --- main ------------------------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be a positive integer")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    env = os.environ
    parser = argparse.ArgumentParser(
        prog="python -m python_jobs.ingest",
        description=(
            "Land new CDC files (wal2json format-version 2 or Debezium JSON Lines, optionally .gz) from a "
            "landing zone (one folder per source_id) as the Delta tables wal_events, wal_rejects and "
            "wal_frontier. Exactly once per file and safe to kill at any point: rerun to finish."
        ),
        epilog="An option's environment variable applies when the option is not given. "
        "See docs/ingestion.md.",
    )
    parser.add_argument(
        "--landing",
        metavar="PATH",
        default=env.get("WAL_LAKE_LANDING"),
        required="WAL_LAKE_LANDING" not in env,
        help="root of the landing zone, any path Spark reads (env WAL_LAKE_LANDING)",
    )
    parser.add_argument(
        "--source",
        metavar="ID",
        action="append",
        dest="sources",
        help="a source_id (a folder of the landing zone) to ingest; repeatable; default: every folder",
    )
    parser.add_argument(
        "--format",
        metavar="{auto,wal2json,debezium}",
        default=env.get("WAL_LAKE_INGEST_FORMAT", FORMAT_AUTO),
        help="input format; auto detects it per file from its first parsable line "
        "(choices: auto, wal2json, debezium; env WAL_LAKE_INGEST_FORMAT; default auto)",
    )
    parser.add_argument(
        "--target-schema",
        metavar="NAME",
        default=env.get("WAL_LAKE_RAW_SCHEMA", DEFAULT_SCHEMA),
        help=f"schema of the landed tables (env WAL_LAKE_RAW_SCHEMA; default {DEFAULT_SCHEMA})",
    )
    parser.add_argument(
        "--max-files-per-batch",
        metavar="N",
        type=_positive_int,
        default=_positive_int(env["WAL_LAKE_MAX_FILES_PER_BATCH"])
        if env.get("WAL_LAKE_MAX_FILES_PER_BATCH")
        else None,
        help="land at most N new files per batch "
        "(env WAL_LAKE_MAX_FILES_PER_BATCH; default: no limit on the count)",
    )
    parser.add_argument(
        "--max-batch-size",
        metavar="SIZE",
        type=_size,
        default=env.get("WAL_LAKE_MAX_BATCH_SIZE", f"{DEFAULT_MAX_BATCH_BYTES // 2**20}m"),  # parsed by type=
        help="land at most SIZE of new files per batch, at least one file; a number of bytes with an "
        "optional k, m or g suffix, 0 for no limit (env WAL_LAKE_MAX_BATCH_SIZE; "
        f"default {DEFAULT_MAX_BATCH_BYTES // 2**20}m)",
    )
    return parser.parse_args(argv)


def _size(text: str) -> int:
    """'512m' -> bytes; a plain number is bytes; 0 means no limit."""
    units = {"k": 2**10, "m": 2**20, "g": 2**30}
    t = text.strip().lower().removesuffix("b")
    factor = units.get(t[-1:], 1)
    number = t[:-1] if t[-1:] in units else t
    try:
        value = int(number) * factor
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a size: {text!r} (e.g. 512m, 2g, 1048576; from --max-batch-size or WAL_LAKE_MAX_BATCH_SIZE)"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return value


def _one_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = next((line for line in lines if not line.startswith("An error occurred while calling")), None)
    return (text or type(exc).__name__)[:400]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.format not in FORMATS:
        print(
            f"ingest: error: unknown format '{args.format}' (choose from {', '.join(FORMATS)})",
            file=sys.stderr,
        )
        return 2
    from python_jobs.spark_session import SparkSetupError, get_spark

    try:
        spark = get_spark("wal_lake_ingest")
    except SparkSetupError as exc:
        print(f"ingest: error: {exc}", file=sys.stderr)
        return 2
    try:
        summary = run(
            spark,
            landing=args.landing,
            sources=args.sources,
            source_format=args.format,
            schema=args.target_schema,
            max_files_per_batch=args.max_files_per_batch,
            max_bytes_per_batch=args.max_batch_size or None,
        )
    except (LandingError, IngestError) as exc:
        print(f"ingest: error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, LandingError) else 1
    except Exception as exc:  # Spark and Delta failures: one line here, the details in Spark's log
        print(
            f"ingest: error: {_one_line(exc)} (rerun to resume: nothing is lost or doubled)", file=sys.stderr
        )
        return 1
    print(summary.line(), flush=True)
    return 0 if summary.balanced else 1
