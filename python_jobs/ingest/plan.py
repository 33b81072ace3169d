"""Planning a batch: which files it reads, from which line, in which format; and writing that plan ahead.

A batch takes the new files (names never planned), in ``(source_id, path)`` order, up to a count and a
size, plus, for every source with new files, the files whose trailing transaction was pending, from
their first pending line. Once the plan is in ``wal_batches`` the batch's input is fixed
(docs/ingestion.md).
"""

from __future__ import annotations

from datetime import UTC, datetime

from pyspark.sql import SparkSession

from python_jobs.ingest.changeset import FORMAT_DEBEZIUM, FORMAT_WAL2JSON
from python_jobs.ingest.errors import IngestError
from python_jobs.ingest.landing import LandingFile, probe
from python_jobs.ingest.ledger import BATCHES, SCHEMAS, FileState, Ledger, PlannedFile

FORMAT_AUTO = "auto"
FORMATS = (FORMAT_AUTO, FORMAT_WAL2JSON, FORMAT_DEBEZIUM)

# Landing text (new files, as stored) per batch by default. A batch parses, frames and caches all of its
# lines at once, so its memory grows with it; this keeps a backlog of any size within a 4 GB driver
# (a 6.5 GB landing zone in one batch ran it out of heap; batches of 1 GiB ran with no full GC). About
# 1.5M wal2json changes per batch. A batch also pays a fixed cost (commits, plans, broadcasts), so
# fewer, larger batches land a backlog faster (BENCHMARKS.md, "Memory and batch size").
DEFAULT_MAX_BATCH_BYTES = 1024 * 2**20


def plan_new_batch(
    spark: SparkSession,
    listed: list[LandingFile],
    states: dict[str, FileState],
    source_format: str,
    max_files: int | None,
    max_bytes: int | None,
) -> list[PlannedFile]:
    """The next batch's files: pending tails first, then the new files; [] when nothing is new.

    The limits grow with what is pending (``_carried``): a batch that reads pending tails again takes
    at least as many new files and bytes as it re-reads. A transaction spread over k files (a large
    snapshot) is then re-read in about log2(k) batches, about twice its size in all, where fixed
    limits re-read it k/2 times (k²/2 file reads)."""
    new = [f for f in listed if f.path not in states]
    carried_files, carried_bytes = _carried(states, {f.source_id for f in new})
    if max_files:
        new = new[: max(max_files, carried_files)]
    if max_bytes:
        new = within_bytes(new, max(max_bytes, carried_bytes))
    if not new:
        return []
    return _pending_tails(states, {f.source_id for f in new}) + _new_files(spark, new, states, source_format)


def _carried(states: dict[str, FileState], sources: set[str]) -> tuple[int, int]:
    """(files, bytes) that a batch of new files of ``sources`` reads again: their sources' pending
    files, counted whole."""
    pending = [s for s in states.values() if s.pending and s.source_id in sources]
    return len(pending), sum(s.file_size or 0 for s in pending)


def _pending_tails(states: dict[str, FileState], sources: set[str]) -> list[PlannedFile]:
    """The files of ``sources`` whose trailing transaction waits for its commit (``check_present``
    has made sure that they are all still there)."""
    return [
        PlannedFile(s.source_id, s.landing_file, s.source_format, s.next_line, s.file_size, None)
        for s in sorted(states.values(), key=lambda s: s.landing_file)
        if s.pending and s.source_id in sources
    ]


def _new_files(
    spark: SparkSession, new: list[LandingFile], states: dict[str, FileState], source_format: str
) -> list[PlannedFile]:
    """The new files from line 1, each with its format: the one asked for, else detected from the file,
    else the format its source had so far, else wal2json. Every file is opened once to fail early."""
    known = {s.source_id: s.source_format for s in states.values()}
    planned = []
    for f in new:
        if source_format == FORMAT_AUTO:
            fmt = probe(spark, f.path, detect=True) or known.get(f.source_id) or FORMAT_WAL2JSON
        else:
            probe(spark, f.path, detect=False)
            fmt = source_format
        known.setdefault(f.source_id, fmt)
        modified_at = datetime.fromtimestamp(f.modified_ms / 1000, UTC)
        planned.append(PlannedFile(f.source_id, f.path, fmt, 1, f.size, modified_at))
    return planned


def within_bytes(files: list[LandingFile], max_bytes: int) -> list[LandingFile]:
    """The leading files whose sizes add up to at most ``max_bytes``; always at least one, so a file
    larger than the limit lands in a batch of its own."""
    taken, total = [], 0
    for f in files:
        if taken and total + f.size > max_bytes:
            break
        taken.append(f)
        total += f.size
    return taken


def check_unchanged(listed: list[LandingFile], states: dict[str, FileState], plan: list[PlannedFile]) -> None:
    """Fail when a listed file's size differs from the one planned or landed: landing files are immutable."""
    sizes = {p.landing_file: p.file_size for p in plan}
    sizes.update({path: s.file_size for path, s in states.items()})
    for f in listed:
        if f.path in sizes and sizes[f.path] != f.size:
            raise IngestError(
                f"landing file changed after it was planned or landed ({sizes[f.path]} -> {f.size} bytes): "
                f"{f.path}; landing files must be immutable (write them elsewhere, then move them in)"
            )


def check_present(
    listed: list[LandingFile],
    states: dict[str, FileState],
    plan: list[PlannedFile],
    sources: list[str] | None,
) -> None:
    """Fail, naming the file, when a file that is still to be read is gone from the landing zone: a
    file of the unfinished batch ``plan``, or a file of a listed source (``sources``, None for all)
    whose trailing transaction (or Debezium's waiting events) is pending. Landing files stay until
    landed: without this, the pending lines would never land, and the files after them would land
    without them."""
    present = {f.path for f in listed}
    for p in sorted(plan, key=lambda p: p.landing_file):
        if p.landing_file not in present:
            raise IngestError(
                f"planned landing file is gone: {p.landing_file} (batch being resumed, from line "
                f"{p.from_line}); landing files stay until landed: put it back, then run again"
            )
    for s in sorted(states.values(), key=lambda s: s.landing_file):
        if s.pending and (sources is None or s.source_id in sources) and s.landing_file not in present:
            raise IngestError(
                f"pending landing file is gone: {s.landing_file} (lines {s.next_line} to {s.to_line} "
                "wait for the end of their transaction); landing files stay until landed: put it back, "
                "then run again"
            )


def write_plan(ledger: Ledger, batch_id: int, planned_at: datetime, plan: list[PlannedFile]) -> None:
    """Append the plan to ``wal_batches`` in one commit, and check that no other run planned this batch:
    the table's latest commit is this run's append, or else the batch's plan as stored is this one."""
    rows = [p.row(batch_id, planned_at) for p in plan]
    ledger.append(BATCHES, ledger.spark.createDataFrame(rows, SCHEMAS[BATCHES]), batch_id)
    if ledger.rows_committed(BATCHES, batch_id) == len(rows):
        return  # committed by this run: another run's plan of this batch would have made it skip
    _, stored = ledger.plan_of(batch_id)
    if {(p.landing_file, p.from_line) for p in stored} != {(p.landing_file, p.from_line) for p in plan}:
        raise IngestError(
            f"batch {batch_id} was planned by another ingestion run at the same time; run one at a time"
        )
