"""Accounting for every line: per planned file, lines read = landed + rejected + control + pending.

The lines are counted from the transforms' outcomes (a narrow frame, one action); the landed ones are
checked against the events written (the append's commit, else ``wal_events``), so a line lost between
the outcome and the write fails the batch before it is marked done. ``RunSummary`` adds the
batches of a run up and checks the identity for the run and over everything ever landed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from pyspark.sql import functions as F

from python_jobs.ingest.changeset import KIND_CONTROL as OUTCOME_CONTROL
from python_jobs.ingest.changeset import KIND_EVENT, KIND_REJECT, ChangeSet, union_all
from python_jobs.ingest.changeset import KIND_PENDING as OUTCOME_PENDING
from python_jobs.ingest.errors import IngestError
from python_jobs.ingest.ledger import FileState, PlannedFile

KIND_LANDED = "landed"
KIND_REJECTED = "rejected"
KIND_CONTROL = "control"
KIND_PENDING = "pending"
KINDS = (KIND_LANDED, KIND_REJECTED, KIND_CONTROL, KIND_PENDING)


@dataclass(frozen=True)
class FileOutcome:
    """What a batch made of one planned file: a row of ``wal_files`` without batch_id and done_at."""

    source_id: str
    landing_file: str
    source_format: str
    file_size: int | None
    from_line: int
    to_line: int
    next_line: int  # where the next batch starts reading: the first pending line, or past the end
    lines_read: int
    landed: int
    rejected: int
    control: int
    pending: int
    # The greatest commit_lsn of the events the batch landed from the file (None when it landed none):
    # over a source's rows, its frontier (ledger.frontiers_from_files).
    max_commit_lsn: int | None = None

    def row(self, batch_id: int) -> dict:
        return {**asdict(self), "batch_id": batch_id}

    def state(self) -> FileState:
        return FileState(
            self.source_id,
            self.landing_file,
            self.source_format,
            self.file_size,
            self.to_line,
            self.next_line,
        )


@dataclass(frozen=True)
class BatchResult:
    files: list[FileOutcome]
    frontiers: dict[str, int | None]  # per source of the batch, its frontier after the batch
    seconds: float = 0.0

    @property
    def landed(self) -> int:
        return sum(o.landed for o in self.files)

    @property
    def rejected(self) -> int:
        return sum(o.rejected for o in self.files)

    @property
    def control(self) -> int:
        return sum(o.control for o in self.files)

    @property
    def pending(self) -> int:
        return sum(o.pending for o in self.files)

    @property
    def lines_read(self) -> int:
        return sum(o.lines_read for o in self.files)


_KINDS_OF_OUTCOMES = {
    KIND_EVENT: KIND_LANDED,
    KIND_REJECT: KIND_REJECTED,
    OUTCOME_CONTROL: KIND_CONTROL,
    OUTCOME_PENDING: KIND_PENDING,
}


@dataclass(frozen=True)
class LineStats:
    """Per (file, kind) of the transforms' ``outcomes``: the count of lines, the first and the last,
    the greatest and the least ``commit_lsn`` among them (an event's; None for the other kinds), and
    the tables of its row changes (Debezium's; empty for wal2json)."""

    n: int
    first: int
    last: int
    lsn: int | None = None
    least_lsn: int | None = None
    tables: tuple[str, ...] = ()


def line_stats(sets: list[ChangeSet]) -> dict[tuple[str, str], LineStats]:
    """Every line's outcome counted per file, from the transforms' narrow ``outcomes`` (one action)."""
    outcomes = union_all([cs.outcomes for cs in sets])
    stats = outcomes.groupBy("landing_file", "kind").agg(
        F.count("*").alias("n"),
        F.min("landing_line").alias("first"),
        F.max("landing_line").alias("last"),
        F.max(F.when(F.col("kind") == KIND_EVENT, F.col("commit_lsn"))).alias("lsn"),
        F.min(F.when(F.col("kind") == KIND_EVENT, F.col("commit_lsn"))).alias("least_lsn"),
        F.collect_set(F.when(F.col("kind") == KIND_EVENT, F.col("source_table"))).alias("tables"),
    )
    return {
        (r.landing_file, _KINDS_OF_OUTCOMES[r.kind]): LineStats(
            r.n, r.first, r.last, r.lsn, r.least_lsn, tuple(sorted(r.tables))
        )
        for r in stats.collect()
    }


def check_wal_order(plan: list[PlannedFile], stats: dict[tuple[str, str], LineStats]) -> None:
    """Fail when a source's files are one table each and their names do not sort in WAL order: the
    layout of a Kafka Connect sink that writes one topic per table (Debezium's default routing),
    whose files sort by topic name. Two files next to each other by name, each of one table, of
    different tables, where the later-named one holds changes of transactions before the other's
    last: every file after the cut would otherwise land as late changes of a table whose later
    changes have landed. A replay or a copied file of one table's topic repeats that table, and a
    file of one topic for every table holds every table it touches: neither fails. Runs before
    anything of the batch is written."""
    by_source: dict[str, list[tuple[str, LineStats]]] = {}
    for p in sorted(plan, key=lambda p: (p.source_id, p.landing_file)):
        s = stats.get((p.landing_file, KIND_LANDED))
        if s is not None and s.lsn is not None:
            by_source.setdefault(p.source_id, []).append((p.landing_file, s))
    for source, files in by_source.items():
        for (before, a), (after, b) in zip(files, files[1:], strict=False):
            if len(a.tables) == 1 and len(b.tables) == 1 and a.tables != b.tables and b.least_lsn < a.lsn:
                raise IngestError(
                    f"files of source {source} do not sort in WAL order: {after} (changes of "
                    f"{b.tables[0]} from position {b.least_lsn}) is named after {before} (changes of "
                    f"{a.tables[0]} to position {a.lsn}): a landing zone of one topic per table; route "
                    "every table of the connector to one topic and land its files in offset order "
                    "(docs/contract.md, landing zone); nothing of the batch is written"
                )


def check_lines_counted(
    plan: list[PlannedFile], stats: dict[tuple[str, str], LineStats], counted: dict[str, int]
) -> None:
    """Fail when a planned file's outcomes do not cover exactly its lines from ``from_line`` to the
    last line counted when the batch numbered its blocks (``landing.read_lines``). A scan of the
    batch that split the file otherwise (other block offsets: the split settings or the cores changed
    between actions) would drop lines from the outcomes, and the file would be marked done without
    them. Runs before anything of the batch is written, so a rerun starts clean."""
    for p in plan:
        path, total = p.landing_file, counted.get(p.landing_file, 0)
        kinds = [stats[(path, k)] for k in KINDS if (path, k) in stats]
        seen, last = sum(s.n for s in kinds), max((s.last for s in kinds), default=p.from_line - 1)
        expected = max(total - p.from_line + 1, 0)
        if (seen, last) != (expected, max(total, p.from_line - 1)):
            raise IngestError(
                f"lines of {path} read in this batch ({seen:,}, to line {last:,}) differ from the lines "
                f"counted in it ({expected:,}, to line {total:,}): a scan of the batch split the file "
                "differently (spark.sql.files.* settings or the cluster's cores changed during the "
                "batch); nothing of the batch is written, run again"
            )


def check_rejects_counted(
    written: dict[str, int], stats: dict[tuple[str, str], LineStats], late: dict[str, int]
) -> None:
    """Fail when the rejects about to be written for a file are not the lines its outcomes reject
    (early, by their framing, and late, once parsed in full): the early rejects' text is read from the
    files again, and a scan split otherwise would leave some out of ``wal_rejects``."""
    expected = {path: s.n for (path, kind), s in stats.items() if kind == KIND_REJECTED}
    for path, n in late.items():
        expected[path] = expected.get(path, 0) + n
    for path in sorted(set(expected) | set(written)):
        if written.get(path, 0) != expected.get(path, 0):
            raise IngestError(
                f"rejects of {path} to write ({written.get(path, 0):,}) != its lines rejected "
                f"({expected.get(path, 0):,}): a scan of the batch read the file differently; "
                "nothing of them is written, run again"
            )


def landing_events(stats: dict[tuple[str, str], LineStats]) -> dict[str, tuple[int, int]]:
    """Per file, (its lines that land, their greatest commit_lsn) by the outcomes: what the events'
    append writes when no line turns out unusable once parsed in full (as ``written``)."""
    return {path: (s.n, s.lsn) for (path, kind), s in stats.items() if kind == KIND_LANDED}


def _outcome(
    p: PlannedFile,
    lines_in_file: int,
    stats: dict[tuple[str, str], LineStats],
    written: dict[str, tuple[int, int]],
    late: dict[str, int],
) -> FileOutcome:
    """One file's outcome, checked: the events written and the late rejects are the lines that land by
    the outcomes, the counts add up, and the pending lines are a tail of the file."""
    path = p.landing_file
    if lines_in_file == 0 and p.file_size:
        # Lines and plan meet by the file's name: a name read differently from the listing's would
        # otherwise account for nothing and pass, and the file would be marked done unread.
        raise IngestError(
            f"{path} has {p.file_size} bytes but no line of it was read; it is not marked done "
            "(an empty compressed file, or a path the job cannot match to what Spark read)"
        )
    to_line = max(lines_in_file, p.from_line - 1)
    n_read = to_line - p.from_line + 1
    counted = {k: stats[(path, k)].n if (path, k) in stats else 0 for k in KINDS}
    landed, max_lsn = written.get(path, (0, None))
    late_rejected = late.get(path, 0)
    if landed + late_rejected != counted[KIND_LANDED]:
        raise IngestError(
            f"events written for {path} ({landed:,}) + rejected once parsed ({late_rejected:,}) != its "
            f"lines that land ({counted[KIND_LANDED]:,}) (a transform bug)"
        )
    rejected = counted[KIND_REJECTED] + late_rejected
    control, pending = counted[KIND_CONTROL], counted[KIND_PENDING]
    # The lines counted are the lines of the file from from_line on: none lost between them.
    if landed + rejected + control + pending != n_read:
        raise IngestError(
            f"accounting identity broken for {path}: read {n_read} != landed {landed} + rejected "
            f"{rejected} + control {control} + pending {pending} (a transform bug)"
        )
    first_pending = stats[(path, KIND_PENDING)].first if pending else None
    if pending and to_line - first_pending + 1 != pending:
        raise IngestError(f"pending lines of {path} are not a tail of the file (a transform bug)")
    return FileOutcome(
        source_id=p.source_id,
        landing_file=path,
        source_format=p.source_format,
        file_size=p.file_size,
        from_line=p.from_line,
        to_line=to_line,
        next_line=first_pending if pending else to_line + 1,
        lines_read=n_read,
        landed=landed,
        rejected=rejected,
        control=control,
        pending=pending,
        max_commit_lsn=max_lsn if landed else None,
    )


def file_outcomes(
    plan: list[PlannedFile],
    stats: dict[tuple[str, str], LineStats],
    written: dict[str, tuple[int, int]],
    late: dict[str, int],
) -> tuple[list[FileOutcome], dict[str, int]]:
    """Per planned file its checked outcome; and per source the greatest commit_lsn landed.

    ``written``: per file, (events written, their greatest commit_lsn); ``late``: per file, the lines
    that land by the outcomes but were rejected once parsed in full."""
    last_line: dict[str, int] = {}
    for (path, _), s in stats.items():
        last_line[path] = max(s.last, last_line.get(path, 0))
    outcomes = [_outcome(p, last_line.get(p.landing_file, 0), stats, written, late) for p in plan]
    landed_max: dict[str, int] = {}
    for o in outcomes:
        if o.max_commit_lsn is not None:
            lsn = o.max_commit_lsn
            landed_max[o.source_id] = max(lsn, landed_max.get(o.source_id, lsn))
    return outcomes, landed_max


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

    def add(self, plan: list[PlannedFile], result: BatchResult) -> None:
        """Count a finished batch in."""
        self.reread += sum(self.run_pending.get(p.landing_file, 0) for p in plan)
        self.run_pending.update((o.landing_file, o.pending) for o in result.files)
        self.batches += 1
        self.files += len(plan)
        self.lines_read += result.lines_read
        self.landed += result.landed
        self.rejected += result.rejected
        self.control += result.control

    def batch_line(self, batch_id: int, plan: list[PlannedFile], result: BatchResult) -> str:
        """The progress line of a batch just added."""
        rate = result.lines_read / result.seconds if result.seconds else 0
        return (
            f"batch {batch_id}: {len(plan)} files, {result.lines_read:,} lines -> landed {result.landed:,}, "
            f"rejected {result.rejected:,}, control {result.control:,}, pending {result.pending:,} "
            f"({rate:,.0f} lines/s); done so far: {self.files} files, {self.lines_read:,} lines"
        )

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
