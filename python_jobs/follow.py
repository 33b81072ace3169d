"""``python -m python_jobs.follow``: keep the lake current, in one process with one warm Spark session.

Each cycle lands the landing zone's new files (the ingestion job's ``run``), writes the typed mirror
model of any table seen for the first time (``mirrors.generate``), runs dbt in-process on the same
Spark session (dbt-spark's session method finds it: no second JVM): ``dbt run`` of what consumers
read (``consumer_records``, the mirrors), and a whole ``dbt build`` once per ``--build-every`` (the
scheduled build; the history's data tests join it once per ``--test-history-every``), after the run
and once the status file says what the run made visible (its rest spread over the cycles that
follow, about ``--build-slice`` seconds of it each, so that it holds none back); then it prints
one line with each source's lag and writes the status file. A cycle starts as soon as the landing
zone shows a new or grown file (with nothing new, ``--max-idle`` after the previous one; at once while
a whole build's rest is under way), and never sooner than ``--min-interval`` after the previous one
started.

With ``--dsn`` it also captures: the capture job (``python_jobs.capture``) runs in a thread of this
process, following its slot and writing landing files, which the cycles then land. In-process rather
than a child process, so that a kill of the follower, whatever signal, ends the capture with it: a
child left behind by a ``kill -9`` would keep the slot (and its lock), and the restarted follower's
capture would be refused. The capture writes a file durably before it advances the slot, and every
step of a cycle is rerunnable (the ingestion's write-ahead plans, dbt's stamped incremental
models), so a kill at any point loses nothing: the restarted follower carries on.

Stopping: SIGTERM or Ctrl-C asks for a stop; the step running finishes, no other starts, the
capture finishes the file it is writing, and the follower exits 0. A step still running
``--stop-timeout`` seconds later is abandoned by exiting at once (safe, as any kill). A second
Ctrl-C exits at once. One follower per warehouse: a lock file (``--lock-file``) refuses a second one
with exit status 3; the local target's metastore lock refuses a manual ingestion or dbt run meanwhile.

Faults: a landing file the ingestion cannot open or whose format it cannot tell is moved to
``<landing>/_quarantine/<source>/`` with a ``.reason`` file beside it, and the cycle goes on; a
malformed line is a reject, as always. A failed step (ingestion, dbt, Spark, the capture's Postgres)
is logged with its cause and counted, and the cycle is tried again after a backoff (doubling up to
``--max-backoff``); nothing is skipped. A dead JVM (killed, out of memory) ends the follower with
exit status 1: only a new process can have a Spark session again.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, TextIO

from python_jobs import status as status_mod
from python_jobs.lsn import format_lsn

EXIT_LOCKED = 3
QUARANTINE = "_quarantine"
# The whole build: what a scheduled run builds (selectors.yml: `scheduled`), every model, seed and
# snapshot and the data tests but the history's, once every --build-every; and once every
# --test-history-every, every data test (`DBT_BUILD`): the history's tests (selector `history`: the
# uniqueness and order of every change, an independent fold of the whole log) read all of it, so
# their cost grows with the history. Unit tests check the models' code, not the data: they belong
# in CI, not in every cycle.
DBT_BUILD = ("build", "--exclude-resource-type", "unit_test", "--quiet")
DBT_BUILD_SCHEDULED = ("build", "--selector", "scheduled", "--quiet")
# A cycle runs what consumers read and what it needs (selectors.yml: `fresh`). The rest
# (record_history, the audit models, mirror_rejects, the seeds, the snapshot, the data tests) runs
# at most every --build-every seconds, right after a cycle's run (`fresh_rest`: the run's models are
# not run twice, their tests are run): its cost grows with the history, not with a cycle's changes.
DBT_RUN = ("run", "--selector", "fresh", "--quiet")
# The same less the column catalog (column_registry, mirror_tables; `fresh_records`): what a cycle
# runs when nothing it landed shows a column or a type the catalog lacks, or one earlier than the
# catalog's first sight of it. The mirrors read only those from the catalog; the catalog's last
# sightings catch up at the next whole build, whose run takes all of `fresh`.
DBT_RUN_RECORDS = ("run", "--selector", "fresh_records", "--quiet")
DBT_BUILD_REST = ("build", "--selector", "fresh_rest", "--exclude-resource-type", "unit_test", "--quiet")
# The same with the history's data tests (`fresh_rest_daily`), once every --test-history-every.
DBT_BUILD_REST_DAILY = (
    "build", "--selector", "fresh_rest_daily", "--exclude-resource-type", "unit_test", "--quiet",
)  # fmt: skip
# With --build-slice, the rest runs a slice a cycle (a round): first its models, seeds and snapshot,
# then its data tests, as many a cycle as their last timings fit in the slice's seconds. A slice
# builds the nodes it names, and not their tests (indirect selection), which a later slice runs.
DBT_LIST = (
    "ls", "--exclude-resource-type", "unit_test", "--output", "json",
    "--output-keys", "unique_id", "name", "resource_type", "--log-level", "none",
)  # fmt: skip
DBT_SLICE = ("build", "--indirect-selection", "empty", "--exclude-resource-type", "unit_test", "--quiet")
STAMP_CONF = "spark.databricks.delta.commitInfo.userMetadata"


class FollowLocked(RuntimeError):
    """Another follower holds the warehouse."""


class StepFailed(RuntimeError):
    """A step of a cycle failed; the message is its cause in one line."""


class SparkGone(RuntimeError):
    """The session's JVM has died (killed, out of memory): no retry in this process can succeed."""


def spark_alive(spark) -> bool:
    try:
        return not spark.sparkContext._jsc.sc().isStopped()
    except Exception:  # py4j cannot reach the JVM
        return False


def cause(exc: BaseException) -> str:
    """An exception as one line: its first line that is not py4j's call header."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = next((line for line in lines if not line.startswith("An error occurred while calling")), None)
    return f"{type(exc).__name__}: {(text or '')[:400]}" if text else type(exc).__name__


# --- the lock --------------------------------------------------------------------------------------


def spark_dir() -> Path:
    return Path(os.environ.get("WAL_LAKE_SPARK_DIR", ".spark"))


def hold_lock(path: Path) -> IO[str]:
    """An exclusive lock on ``path`` for this process (the kernel drops it when the process ends,
    however it ends), or FollowLocked naming the holder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = path.open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "a process"
        handle.close()
        raise FollowLocked(
            f"another follower ({holder}) holds {path}: one follower per warehouse; stop it first, "
            "or read its status file"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}, started {datetime.now(UTC).isoformat(timespec='seconds')}\n")
    handle.flush()
    return handle


# --- stopping --------------------------------------------------------------------------------------


class Stopper:
    """SIGTERM and Ctrl-C ask for a stop, between steps. The handlers only raise a flag (a signal
    handler runs on the main thread, which may be inside a lock that ``Event.set`` takes); a
    watcher thread turns it into ``stop``, and exits the process if the stop has not finished
    ``timeout`` seconds later. A second Ctrl-C raises KeyboardInterrupt at once."""

    def __init__(self, stop: threading.Event, timeout: float, out: TextIO) -> None:
        self.stop = stop
        self.timeout = timeout
        self.out = out
        self.signal_name: str | None = None
        self.finished = threading.Event()
        self._previous: dict[int, object] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in (signal.SIGTERM, signal.SIGINT):
            self._previous[signum] = signal.signal(signum, self._handle)
        threading.Thread(target=self._watch, name="follow-stop", daemon=True).start()

    def restore(self) -> None:
        self.finished.set()
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum, _frame) -> None:
        if self.signal_name is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal_name = signal.Signals(signum).name

    def _watch(self) -> None:
        while not self.finished.is_set():
            if self.signal_name is not None and not self.stop.is_set():
                print(f"follow: {self.signal_name}: stopping after this step", file=self.out, flush=True)
                self.stop.set()
            if self.stop.is_set() and self.timeout > 0:
                if not self.finished.wait(self.timeout):
                    print(
                        f"follow: the current step did not end within {self.timeout:.0f}s of the stop: "
                        "exiting now (safe: every step is rerunnable)",
                        file=self.out,
                        flush=True,
                    )
                    os._exit(1)
                return
            time.sleep(0.2)


def sleep_until(deadline: float, stop: threading.Event, wake: Callable[[], bool] | None = None) -> None:
    """Sleep until ``deadline`` (monotonic), ``stop``, or ``wake()`` is true; polled, never blocking
    on the event (see Stopper)."""
    while not stop.is_set() and time.monotonic() < deadline:
        if wake is not None and wake():
            return
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


@dataclass
class Backoff:
    first: float = 2.0
    limit: float = 300.0
    current: float = 0.0

    def next(self) -> float:
        self.current = min(self.limit, self.current * 2 if self.current else self.first)
        return self.current

    def reset(self) -> None:
        self.current = 0.0


# --- the landing zone ------------------------------------------------------------------------------


def landing_signature(landing: str) -> frozenset | None:
    """The visible files of a local landing zone with their sizes; None for a path only Spark reads
    (s3a://, hdfs://...), which is then listed by the ingestion at every interval."""
    if "://" in landing:
        return None
    root = Path(landing)
    if not root.is_dir():
        return frozenset()
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
        for name in files:
            if not name.startswith((".", "_")):
                path = Path(folder, name)
                try:
                    found.append((str(path.relative_to(root)), path.stat().st_size))
                except FileNotFoundError:
                    continue  # moved away meanwhile
    return frozenset(found)


def quarantine_unusable(spark, landing: str, raw_schema: str, out: TextIO) -> list[str]:
    """Move every landing file that no batch has planned and that the ingestion cannot open or
    tell the format of to ``<landing>/_quarantine/<source>/``, a ``.reason`` file beside it; return
    their paths. A file already in a plan is left where it is (its batch must run as planned)."""
    from python_jobs.ingest.landing import LandingError, list_files, probe

    planned: set[str] = set()
    if spark.catalog.tableExists(f"{raw_schema}.wal_batches"):
        rows = spark.sql(f"select distinct landing_file from {raw_schema}.wal_batches").collect()
        planned = {r[0] for r in rows}
    moved = []
    for f in list_files(spark, landing, None):
        if f.path in planned:
            continue
        try:
            probe(spark, f.path, detect=True)
        except LandingError as exc:
            _move_to_quarantine(spark, landing, f.source_id, f.path, str(exc))
            print(f"follow: quarantined {f.path}: {exc}", file=out, flush=True)
            moved.append(f.path)
    return moved


def _move_to_quarantine(spark, landing: str, source_id: str, path: str, reason: str) -> None:
    jvm = spark.sparkContext._jvm
    src = jvm.org.apache.hadoop.fs.Path(path)
    fs = src.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    folder = jvm.org.apache.hadoop.fs.Path(jvm.org.apache.hadoop.fs.Path(landing, QUARANTINE), source_id)
    fs.mkdirs(folder)
    name = src.getName()
    if fs.exists(jvm.org.apache.hadoop.fs.Path(folder, name)):  # a file of that name was set aside before
        name = f"{name}.{datetime.now(UTC):%Y%m%dT%H%M%S%f}"
    dst = jvm.org.apache.hadoop.fs.Path(folder, name)
    note = fs.create(jvm.org.apache.hadoop.fs.Path(folder, name + ".reason"), True)
    try:
        note.write(bytearray(f"{datetime.now(UTC).isoformat()} {reason}\n".encode()))
    finally:
        note.close()
    if not fs.rename(src, dst):
        raise StepFailed(f"cannot move {path} to {dst.toString()}")


def clear_unfinished_tables(spark, schemas: tuple[str, ...]) -> list[str]:
    """Remove the folders under these schemas' locations that no table of the metastore owns; their
    names (schema.folder).

    dbt creates a table in two steps: Delta writes its files (and commits them), then the metastore
    registers the table. A kill between the two leaves a folder no table owns, where every later
    ``create table`` of that name fails (DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION): the follower
    would fail every cycle. Nothing reads such a folder (dbt knows its relations through the
    metastore, and builds one it does not know from scratch), so removing it loses nothing."""
    jvm = spark.sparkContext._jvm
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    removed = []
    for schema in schemas:
        if not spark.catalog.databaseExists(schema):
            continue
        root = jvm.org.apache.hadoop.fs.Path(spark.catalog.getDatabase(schema).locationUri)
        fs = root.getFileSystem(hadoop)
        if not fs.exists(root):
            continue
        owned = {
            r.tableName.lower()
            for r in spark.sql(f"show tables in `{schema}`").collect()
            if not r.isTemporary
        }
        for entry in fs.listStatus(root):
            name = entry.getPath().getName()
            if entry.isDirectory() and not name.startswith(("_", ".")) and name.lower() not in owned:
                fs.delete(entry.getPath(), True)
                removed.append(f"{schema}.{name}")
    return removed


# --- capture ---------------------------------------------------------------------------------------


@dataclass
class CaptureState:
    failures: int = 0
    last_error: str | None = None
    running: bool = False


class Capture(threading.Thread):
    """The capture job following its slot, restarted with backoff whenever it fails (Postgres gone,
    slot in use by another capture): its own thread, its own connection."""

    def __init__(self, argv: list[str], stop: threading.Event, max_backoff: float, out: TextIO) -> None:
        super().__init__(name="follow-capture", daemon=True)
        from python_jobs.capture.cli import parse_args

        self.args = parse_args(argv)
        self.stop = stop
        self.backoff = Backoff(limit=max_backoff)
        self.out = out
        self.state = CaptureState()

    def run(self) -> None:
        from python_jobs.capture.cli import run as capture_run

        while not self.stop.is_set():
            started = time.monotonic()
            self.state.running = True
            try:
                capture_run(self.args, self.stop)
            except Exception as exc:  # CaptureError, psycopg's errors, OSError: all retried
                self.state.failures += 1
                self.state.last_error = cause(exc)
                if time.monotonic() - started > 60:
                    self.backoff.reset()  # it had been running: a new fault, start the backoff again
                delay = self.backoff.next()
                print(
                    f"follow: capture failed ({self.state.failures} so far): {self.state.last_error}; "
                    f"retrying in {delay:.0f}s",
                    file=self.out,
                    flush=True,
                )
                sleep_until(time.monotonic() + delay, self.stop)
            finally:
                self.state.running = False


def slot_position(dsn: str, slot: str) -> dict:
    """The slot's confirmed position against Postgres' current one (a short connection of its own)."""
    from python_jobs.capture.session import connect

    try:
        with connect(dsn, connect_timeout=5) as conn:
            row = conn.execute(
                "select confirmed_flush_lsn::text, pg_current_wal_lsn()::text, "
                "pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint "
                "from pg_replication_slots where slot_name = %s",
                (slot,),
            ).fetchone()
    except Exception as exc:  # Postgres gone: the line says so, the cycle goes on
        return {"slot": slot, "error": cause(exc)}
    if row is None:
        return {"slot": slot, "error": "no such slot yet"}
    return {"slot": slot, "confirmed_lsn": row[0], "current_lsn": row[1], "bytes_behind": row[2]}


# --- a cycle ---------------------------------------------------------------------------------------


@dataclass
class Counters:
    cycles: int = 0
    failed_cycles: int = 0
    failing_since: int = 0  # failed cycles in a row, up to the last one
    failures: dict[str, int] = field(default_factory=dict)  # per step
    last_error: dict | None = None
    next_retry_at: datetime | None = None  # while failing: when the failed cycle runs again
    quarantined: list[str] = field(default_factory=list)


@dataclass
class Options:
    landing: str
    raw_schema: str
    schema: str
    min_interval: float
    max_idle: float
    build_every: float  # seconds between two whole dbt builds; 0: every cycle
    build_slice: float  # seconds of the whole build's rest a cycle runs, about; 0: all of it at once
    max_backoff: float
    status_file: Path | None
    cycles: int | None
    dsn: str | None
    slot: str
    # seconds between two whole builds that run the history's data tests; 0: every whole build
    test_history_every: float = 86400.0


@dataclass
class Round:
    """The whole build's rest, run a slice a cycle: the slices' dbt commands, in order, and when the
    round started (the whole build's time once its last slice passes)."""

    slices: list[tuple[str, ...]]
    started: float
    done: int = 0
    history: bool = False  # its slices run the history's data tests


def cut_slices(
    nodes: list[tuple[str, str]], seconds: dict[str, float], budget: float, guess: float | None = None
) -> list[list[str]]:
    """The dbt nodes ``(unique_id, name)``, in order, cut into slices of about ``budget`` seconds by
    each node's time the last time it ran (one it has no time for counts as ``guess``, by default
    the mean of those it has, or a second); a node longer than the budget is a slice alone."""
    if guess is None:
        known = [seconds[uid] for uid, _ in nodes if uid in seconds]
        guess = sum(known) / len(known) if known else 1.0
    slices: list[list[str]] = []
    total = 0.0
    for uid, name in nodes:
        cost = seconds.get(uid, guess)
        if not slices or (slices[-1] and total + cost > budget):
            slices.append([])
            total = 0.0
        slices[-1].append(name)
        total += cost
    return slices


class Follower:
    def __init__(self, spark, options: Options, stop: threading.Event, out: TextIO) -> None:
        self.spark = spark
        self.o = options
        self.stop = stop
        self.out = out
        self.counters = Counters()
        self.capture: Capture | None = None
        self.built = False  # dbt has built everything landed so far, as far as this process knows
        self.tested = False  # and a whole dbt build (every model, the data tests) has passed on it
        self.last_tested: float | None = None  # when the last successful whole dbt build started
        self.build_failing = False  # the last whole dbt build failed
        # The last dbt build of this process succeeded (else none yet, or it failed: the next one
        # first clears what a cut-short table creation left, clear_unfinished_tables).
        self.last_build_ok = False
        # The whole build's rest under way, a slice a cycle (--build-slice), and each dbt node's
        # seconds the last time it ran: the next round's slices are cut by them.
        self.round: Round | None = None
        self.node_seconds: dict[str, float] = {}
        # The same for the nodes a round's slice ran: a model's time in the process' first build,
        # on tables that had little history to merge, says nothing of its time in a round.
        self.slice_seconds: dict[str, float] = {}
        self.build_passed_at: datetime | None = None  # when the last whole build (or round) passed
        # When the last whole build that ran the history's data tests started (monotonic), and
        # when it passed.
        self.history_tested: float | None = None
        self.history_passed_at: datetime | None = None
        # Per table and set of column types landed, the least position it was seen at (once read;
        # the tables with column types are its keys' first three fields);
        # whether the catalog (column_registry, mirror_tables) holds every column and type landed,
        # each from its first sight; and whether a run since the last that took the catalog left
        # it out (its last sightings are behind).
        self.type_sets: dict[tuple, tuple] | None = None
        self.catalog_current = False
        self.catalog_behind = False
        self.seen_batch = 0  # the batches up to which type_sets has read wal_events
        self.last_report: tuple[list, dict | None] = ([], None)  # the sources and slot last reported
        # The ingestion ledger, from one cycle to the next (this follower is the raw schema's one
        # writer: it holds the warehouse's lock); a failed ingestion leaves none.
        self.carry = None  # python_jobs.ingest.job.Carry, made at the first ingestion

    def log(self, message: str) -> None:
        print(f"follow: {message}", file=self.out, flush=True)

    # The steps. Each raises on failure; the cycle logs, counts, and retries it later.

    def ingest(self):
        from python_jobs.ingest import job as ingest
        from python_jobs.ingest.landing import LandingError

        if self.carry is None:
            self.carry = ingest.Carry()

        def land():
            return ingest.run(
                self.spark, self.o.landing, schema=self.o.raw_schema, out=self.out, carry=self.carry
            )

        try:
            return land()
        except LandingError as first:
            moved = quarantine_unusable(self.spark, self.o.landing, self.o.raw_schema, self.out)
            if not moved:
                raise
            self.counters.quarantined += moved
            self.log(f"{len(moved)} file(s) quarantined after: {first}; landing the rest")
            return land()

    def new_tables(self) -> list[str]:
        """Write the mirror models of tables seen for the first time; the sources they belong to.

        The first cycle writes every table's (a new checkout has none); later ones read only the
        batches landed since the last look (Delta skips the files of older batches), and write the
        models of their sources when a table is new. The same read tells whether the catalog needs
        a run (`catalog_current`): a set of column types not seen before, or seen at an earlier
        position than before (a late file), may add a column, a type, or an earlier first sight."""
        from python_jobs import mirrors

        raw = self.o.raw_schema
        if not self.spark.catalog.tableExists(f"{raw}.wal_events"):
            return []
        upto = self.carry.last_done(raw) if self.carry is not None else None
        if upto is None:
            upto = self.spark.sql(f"select max(batch_id) from {raw}.wal_files").first()[0] or 0
        if self.type_sets is not None and upto == self.seen_batch:
            return []
        # A map is not a grouping key; its entries are (as column_registry groups them).
        landed = self.spark.sql(
            f"select source_id, source_schema, source_table, map_entries(column_types) as entries, "
            f"min(struct(commit_lsn, commit_idx)) as first_seen from {raw}.wal_events "
            f"where batch_id > {self.seen_batch} and batch_id <= {upto} and column_types is not null "
            f"group by source_id, source_schema, source_table, map_entries(column_types)"
        ).collect()
        type_sets = dict(self.type_sets or {})
        for row in landed:
            key = (row.source_id, row.source_schema, row.source_table, tuple(map(tuple, row.entries)))
            first_seen = tuple(-1 if value is None else value for value in row.first_seen)
            if key not in type_sets or first_seen < type_sets[key]:
                type_sets[key] = first_seen
                self.catalog_current = False
        new = {key[:3] for key in type_sets} - {key[:3] for key in self.type_sets or {}}
        if self.type_sets is None:
            mirrors.generate(self.spark, raw)
        elif new:
            mirrors.generate(self.spark, raw, sources=sorted({t[0] for t in new}))
        self.type_sets, self.seen_batch = type_sets, upto
        return sorted({t[0] for t in new})

    def build_due(self) -> bool:
        """Whether the cycle ends with the whole ``dbt build`` (every model, seed, the snapshot and
        the data tests): what has landed has not been through one, and the last is ``build_every``
        seconds old or more."""
        return (
            self.round is None
            and not self.tested
            and (self.last_tested is None or time.monotonic() - self.last_tested >= self.o.build_every)
        )

    def history_due(self) -> bool:
        """Whether the next whole build runs the history's data tests too: none of this process
        has, or the last that did started ``test_history_every`` seconds ago or more."""
        return (
            self.o.test_history_every == 0
            or self.history_tested is None
            or time.monotonic() - self.history_tested >= self.o.test_history_every
        )

    def build_command(self, rest: bool, history: bool) -> tuple[str, ...]:
        """The whole build's dbt command: its rest after a cycle's run, or all of it; with the
        history's data tests, or without."""
        if rest:
            return DBT_BUILD_REST_DAILY if history else DBT_BUILD_REST
        return DBT_BUILD if history else DBT_BUILD_SCHEDULED

    def build_passed(self, started: float, history: bool) -> None:
        """A whole build (or a round's last slice) passed; ``started``: when it (the round) started."""
        now = datetime.now(UTC)
        self.last_tested, self.build_passed_at = started, now
        if history:
            self.history_tested, self.history_passed_at = started, now

    def build_alone(self) -> bool:
        """Whether the next whole build runs alone, whole, with no ``dbt run`` before it: the
        process' first (it loads the seeds the models read) and any after a failed one (a failing
        data test holds back the models it guards until it passes, as in any dbt build)."""
        return self.last_tested is None or self.build_failing

    def sliced(self) -> bool:
        """Whether a whole build due after a cycle's run runs its rest a slice a cycle."""
        return self.o.build_every > 0 and self.o.build_slice > 0

    def plan_round(self, history: bool) -> list[tuple[str, ...]]:
        """The slices of the whole build's rest (``history``: with the history's data tests): its
        models, seeds and snapshot (none reads another; each alone until a round has timed it), then
        its data tests (which read them), cut by their last timings."""
        nodes = rest_nodes(history)
        built = [(uid, name) for uid, name, kind in nodes if kind != "test"]
        tests = [(uid, name) for uid, name, kind in nodes if kind == "test"]
        slices = cut_slices(built, self.slice_seconds, self.o.build_slice, guess=self.o.build_slice)
        slices += cut_slices(tests, self.node_seconds, self.o.build_slice)
        return [(*DBT_SLICE, "--select", *names) for names in slices]

    def build_slice(self) -> str:
        """Run the round's next slice; ``N/M`` (slices done, of how many) for the cycle's line. The
        round ends when its last slice passes; a failing slice ends it too, and the next whole
        build runs alone."""
        r = self.round
        self.build_failing = True
        try:
            self.dbt_build(r.slices[r.done], timings=self.slice_seconds)
        except BaseException:
            self.round, self.tested = None, False
            raise
        self.build_failing = False
        r.done += 1
        if r.done == len(r.slices):
            self.round = None
            self.build_passed(r.started, r.history)
        return f"{r.done}/{len(r.slices)}"

    def dbt_build(
        self, command: tuple[str, ...] = DBT_BUILD, timings: dict[str, float] | None = None
    ) -> None:
        """Run dbt; each node's seconds go to ``node_seconds`` (and ``timings``, if given)."""
        if not self.last_build_ok:
            schema = self.o.schema
            for name in clear_unfinished_tables(self.spark, (schema, f"{schema}_audit", f"{schema}_mirror")):
                self.log(f"removed {name}: the files of a table whose creation was cut short, no table's")
        self.last_build_ok = False
        try:
            result = invoke_dbt(command)
        finally:
            # A model that failed between its stamp and its post-hook leaves the stamp set on the
            # session: no later commit (the next cycle's ingestion) may carry it.
            self.spark.conf.unset(STAMP_CONF)
        self.last_build_ok = bool(result.success)
        for r in result.result or []:
            if getattr(r, "node", None) is not None and r.execution_time:
                self.node_seconds[r.node.unique_id] = r.execution_time
                if timings is not None:
                    timings[r.node.unique_id] = r.execution_time
        if result.success:
            return
        if result.exception is not None:
            raise StepFailed(cause(result.exception))
        failed = [
            f"{r.node.name} {r.status}: {' '.join((r.message or '').split())[:200]}"
            for r in (result.result or [])
            if str(r.status) in ("error", "fail")
        ]
        raise StepFailed("; ".join(failed[:5]) + (f" (+{len(failed) - 5} more)" if len(failed) > 5 else ""))

    def cycle(self) -> bool:
        """One cycle; True when every step succeeded. Steps start only while no stop is asked."""
        number = self.counters.cycles + 1
        started = time.monotonic()
        timings: dict[str, float] = {}
        step = "ingest"
        due = False
        landed = 0
        try:
            # "dbt run": what consumers read, when something landed; then, with it visible and the
            # status file saying so, "dbt build" when due (its models find nothing new to merge).
            for step in ("ingest", "mirrors", "dbt run", "dbt build"):
                if self.stop.is_set():
                    return False
                t0 = time.monotonic()
                if step == "ingest":
                    summary = self.ingest()
                    landed = summary.files
                    if landed:
                        self.built = self.tested = False
                        print(summary.line(), file=self.out, flush=True)
                elif step == "mirrors":
                    self.new_tables()
                elif step == "dbt run":
                    due = self.build_due()  # decided once: the build step below asks the same
                    if due and self.build_alone():
                        continue
                    # Before the build's rest, the catalog's last sightings catch up (unannounced_ddl
                    # reads them), even when nothing new landed.
                    if self.built and not (due and self.catalog_behind):
                        continue
                    catalog = due or not self.catalog_current
                    self.dbt_build(DBT_RUN if catalog else DBT_RUN_RECORDS)
                    self.built, self.catalog_current, self.catalog_behind = True, True, not catalog
                    if due:
                        self.refresh_status()
                else:
                    # With the run's models current (run this cycle or before), the rest of the
                    # build: a slice a cycle (a round), or all of it at once; a build that runs
                    # alone: all of it. Either with the history's data tests when they are due.
                    history = due and self.history_due()
                    if due and self.sliced() and not self.build_alone():
                        self.round = Round(self.plan_round(history), started=t0, history=history)
                        self.tested = True  # what has landed so far; a landing makes it False again
                    if self.round is not None:
                        done = self.build_slice()  # before the clock is read
                        timings[f"dbt build {done}"] = time.monotonic() - t0
                        continue
                    if not due:
                        continue
                    rest = self.built and not self.build_alone()
                    self.build_failing = True
                    self.dbt_build(self.build_command(rest, history))
                    self.built, self.tested, self.build_failing = True, True, False
                    self.build_passed(t0, history)
                    self.catalog_current, self.catalog_behind = True, False
                timings[step] = time.monotonic() - t0
        except Exception as exc:
            step = "dbt" if step.startswith("dbt") else step  # the failures' keys: ingest, mirrors, dbt
            self.counters.failures[step] = self.counters.failures.get(step, 0) + 1
            self.counters.failed_cycles += 1
            self.counters.last_error = {
                "step": step,
                "cause": cause(exc),
                "at": datetime.now(UTC).isoformat(timespec="seconds"),
            }
            self.log(f"cycle {number}: {step} failed ({self.counters.failures[step]} so far): {cause(exc)}")
            if not spark_alive(self.spark):
                raise SparkGone(f"Spark's JVM is gone ({cause(exc)})") from exc
            return False
        finally:
            self.counters.cycles = number
        self.counters.failing_since = 0
        self.counters.next_retry_at = None
        self.report(number, time.monotonic() - started, landed, timings)
        return True

    def sources(self, number: int) -> list[status_mod.SourceStatus]:
        """Each source's status, read from the tables (a failure is logged, not retried: the status
        is a report). The ledger's figures come from the ingestion's ledger as this process keeps
        it (it is the ledger's one writer), and the pass over sequin_events starts from the last
        status' positions."""
        figures = self.carry.figures(self.o.raw_schema) if self.carry is not None else None
        ledger = status_mod.LedgerFigures(*figures) if figures is not None else None
        try:
            return status_mod.source_status(
                self.spark, self.o.raw_schema, self.o.schema, ledger=ledger, since=self.last_report[0]
            )
        except Exception as exc:
            self.log(f"cycle {number}: status failed: {cause(exc)}")
            return []

    def refresh_status(self) -> None:
        """The status file, written again with what the tables show now: between the cycle's
        ``dbt run``, which made its changes visible, and the whole build that follows it, so that a
        monitor sees them when they are visible, not a build later."""
        number = self.counters.cycles + 1
        self.last_report = (self.sources(number), self.last_report[1])
        self.write_status("running", datetime.now(UTC))

    def report(self, number: int, seconds: float, landed: int, timings: dict[str, float]) -> None:
        now = datetime.now(UTC)
        sources = self.sources(number)
        slot = slot_position(self.o.dsn, self.o.slot) if self.o.dsn is not None else None
        steps = ", ".join(f"{k} {v:.1f}s" for k, v in timings.items())
        parts = [f"cycle {number} in {seconds:.1f}s ({landed} files landed; {steps})"]
        parts += [source_summary(s, now) for s in sources] or ["nothing landed yet"]
        if slot is not None:
            parts.append(slot_summary(slot))
        self.log("; ".join(parts))
        self.last_report = (sources, slot)
        self.write_status("running", now)

    def write_status(self, state: str, now: datetime) -> None:
        if self.o.status_file is None:
            return
        sources, slot = self.last_report
        document = {
            "state": state,
            "pid": os.getpid(),
            "written_at": _iso(now),
            "cycles": self.counters.cycles,
            "failed_cycles": self.counters.failed_cycles,
            "failing_since": self.counters.failing_since,
            "failures": self.counters.failures,
            "last_error": self.counters.last_error,
            "next_retry_at": _iso(self.counters.next_retry_at) if state == "failing" else None,
            "quarantined": self.counters.quarantined,
            # The last whole build that passed (the data tests, the models the cycles leave out),
            # the last that ran the history's data tests too, and a round under way: its slices
            # done, of how many.
            "whole_build": {
                "last_passed_at": _iso(self.build_passed_at) if self.build_passed_at is not None else None,
                "history_tests_passed_at": (
                    _iso(self.history_passed_at) if self.history_passed_at is not None else None
                ),
                "slices_done": f"{r.done}/{len(r.slices)}" if (r := self.round) is not None else None,
            },
            "capture": None,
            "sources": [],
        }
        if self.capture is not None:
            document["capture"] = {
                **(slot or {"slot": self.o.slot}),
                "running": self.capture.state.running,
                "failures": self.capture.state.failures,
                "last_error": self.capture.state.last_error,
            }
        for s in sources:
            entry = s.as_json()
            entry["lag_seconds"] = lag_seconds(s, now)
            document["sources"].append(entry)
        write_atomically(self.o.status_file, json.dumps(document, indent=2) + "\n")

    def run(self, between: Callable[[int], None] | None = None) -> None:
        """Cycles until stopped (or ``cycles`` of them): the first at once, then each as soon as the
        landing zone changes, a failed one again after its backoff, never more often than
        ``min_interval``."""
        backoff = Backoff(limit=self.o.max_backoff)
        retry_at: float | None = None
        last_start: float | None = None
        seen: frozenset | None = None  # the landing zone as the last cycle started
        while not self.stop.is_set():
            if last_start is not None:
                self.wait(last_start, retry_at, seen)
                if self.stop.is_set():
                    break
            # Taken before the cycle: a file arriving while it runs starts the next one.
            seen = landing_signature(self.o.landing)
            last_start = time.monotonic()
            if self.cycle():
                backoff.reset()
                retry_at = None
            elif not self.stop.is_set():
                delay = backoff.next()
                retry_at = time.monotonic() + delay
                self.counters.failing_since += 1
                self.counters.next_retry_at = datetime.now(UTC) + timedelta(seconds=delay)
                self.log(f"retrying in {delay:.0f}s")
                # A monitor sees the failure at once, with its cause and when it is tried again.
                self.write_status("failing", datetime.now(UTC))
            if self.o.cycles is not None and self.counters.cycles >= self.o.cycles:
                break
            if between is not None:
                between(self.counters.cycles)

    def wait(self, last_start: float, retry_at: float | None, seen: frozenset | None) -> None:
        """Until the next cycle is due: a retry's time, else a change of the landing zone or
        ``max_idle`` (for a zone only Spark lists, the interval alone); and the minimum interval in
        any case."""
        if retry_at is not None:
            sleep_until(retry_at, self.stop)
        elif seen is not None and self.round is None:  # a round under way goes on with nothing new
            landing = self.o.landing
            wake = lambda: landing_signature(landing) != seen  # noqa: E731
            sleep_until(last_start + self.o.max_idle, self.stop, wake=wake)
        sleep_until(last_start + self.o.min_interval, self.stop)


def invoke_dbt(command: tuple[str, ...]):
    """dbt in-process on this project, on the session dbt-spark finds (the follower's)."""
    from dbt.cli.main import dbtRunner

    from python_jobs.spark_session import PROJECT_DIR

    return dbtRunner().invoke(
        [*command, "--project-dir", str(PROJECT_DIR), "--profiles-dir", str(PROJECT_DIR)]
    )


def rest_nodes(history: bool = False) -> list[tuple[str, str, str]]:
    """The nodes of the whole build's rest (``history``: with the history's data tests),
    ``(unique_id, name, resource_type)``: listed afresh for each round (a new table's mirror brings
    its own tests)."""
    result = invoke_dbt((*DBT_LIST, "--selector", "fresh_rest_daily" if history else "fresh_rest"))
    if not result.success:
        raise StepFailed(f"dbt ls failed: {cause(result.exception) if result.exception else result.result}")
    nodes = map(json.loads, result.result or [])
    return [(node["unique_id"], node["name"], node["resource_type"]) for node in nodes]


def _iso(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


def lag_seconds(s: status_mod.SourceStatus, now: datetime) -> float | None:
    visible = s.consumer_records
    if visible is None or visible.committed_at is None:
        return None
    committed = visible.committed_at
    if committed.tzinfo is None:
        committed = committed.replace(tzinfo=UTC)
    return round((now - committed).total_seconds(), 3)


def source_summary(s: status_mod.SourceStatus, now: datetime) -> str:
    lag = lag_seconds(s, now)
    visible = s.consumer_records
    newest = (
        f"newest visible commit {visible.committed_at:%Y-%m-%d %H:%M:%S} ({lag:.1f}s ago), seq {visible.seq}"
        if visible is not None and lag is not None
        else "nothing visible yet"
    )
    frontier = format_lsn(s.frontier_lsn) if s.frontier_lsn is not None else "-"
    violations = s.violations if s.violations is not None else "-"
    return (
        f"{s.source_id}: {newest}, frontier {frontier}"
        + ("" if s.built else " (not all built)")
        + f", pending {s.pending}, rejects {s.rejects}, violations {violations}"
    )


def slot_summary(slot: dict) -> str:
    if "error" in slot:
        return f"slot {slot['slot']}: {slot['error']}"
    return (
        f"slot {slot['slot']}: confirmed {slot['confirmed_lsn']}, Postgres at {slot['current_lsn']} "
        f"({slot['bytes_behind']:,} bytes behind)"
    )


def write_atomically(path: Path, text: str) -> None:
    """Readers see the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temporary, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


# --- the command line ------------------------------------------------------------------------------


def _positive_float(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    env = os.environ
    parser = argparse.ArgumentParser(
        prog="python -m python_jobs.follow",
        description="Keep the lake current: land new files, write new tables' mirror models and run "
        "dbt (consumer_records and the mirrors; a whole dbt build every --build-every seconds), cycle "
        "after cycle, in one process with one Spark session; with --dsn, capture from a Postgres slot "
        "too. SIGTERM or Ctrl-C stops it between steps. docs/operations.md.",
    )
    parser.add_argument(
        "--landing",
        metavar="PATH",
        default=env.get("WAL_LAKE_LANDING"),
        required="WAL_LAKE_LANDING" not in env,
        help="the landing zone (env WAL_LAKE_LANDING)",
    )
    parser.add_argument(
        "--dsn",
        default=env.get("WAL_LAKE_CAPTURE_DSN"),
        help="capture from this Postgres (libpq string; env WAL_LAKE_CAPTURE_DSN); without it, the "
        "follower lands what another capture or a Kafka Connect sink writes",
    )
    parser.add_argument("--slot", default="wal_lake", help="the capture's slot (default %(default)s)")
    parser.add_argument("--source-id", help="the capture's folder (default <database>.<slot>)")
    parser.add_argument(
        "--snapshot", action="store_true", help="the capture creates its slot with an initial snapshot"
    )
    parser.add_argument(
        "--min-interval",
        type=_positive_float,
        default=float(env.get("WAL_LAKE_FOLLOW_MIN_INTERVAL", "10")),
        help="seconds between the starts of two cycles, at least "
        "(env WAL_LAKE_FOLLOW_MIN_INTERVAL; default 10)",
    )
    parser.add_argument(
        "--max-idle",
        type=_positive_float,
        default=300.0,
        help="with nothing new, run a cycle anyway (it lands nothing, and refreshes the status "
        "file) this many seconds after the last one started (default 300)",
    )
    parser.add_argument(
        "--build-every",
        type=_positive_float,
        default=float(env.get("WAL_LAKE_FOLLOW_BUILD_EVERY", "600")),
        help="seconds between two cycles that run the whole dbt build (every model, seed, the snapshot "
        "and the data tests but the history's: `dbt build --selector scheduled`); the cycles between run "
        "consumer_records, the mirrors and what they need (dbt run). 0: the whole build every cycle "
        "(env WAL_LAKE_FOLLOW_BUILD_EVERY; default 600)",
    )
    parser.add_argument(
        "--test-history-every",
        type=_positive_float,
        default=float(env.get("WAL_LAKE_FOLLOW_TEST_HISTORY_EVERY", "86400")),
        help="seconds between two whole builds that also run the history's data tests (selector "
        "`history`: they read the whole change log, so their cost grows with it); the process' first "
        "whole build runs them. 0: every whole build (env WAL_LAKE_FOLLOW_TEST_HISTORY_EVERY; default "
        "86400, daily)",
    )
    parser.add_argument(
        "--build-slice",
        type=_positive_float,
        default=float(env.get("WAL_LAKE_FOLLOW_BUILD_SLICE", "10")),
        help="spread the whole build over the cycles that follow its run, about this many seconds of "
        "it a cycle (its models, seeds and snapshot, then its data tests): the cycles go on showing "
        "new changes meanwhile. 0: all of it in one cycle (env WAL_LAKE_FOLLOW_BUILD_SLICE; default 10)",
    )
    parser.add_argument(
        "--status-file",
        type=Path,
        default=Path(env.get("WAL_LAKE_FOLLOW_STATUS", str(spark_dir() / "follow_status.json"))),
        help="the JSON status written after each cycle (env WAL_LAKE_FOLLOW_STATUS; "
        "default $WAL_LAKE_SPARK_DIR/follow_status.json)",
    )
    parser.add_argument(
        "--lock-file",
        type=Path,
        default=spark_dir() / "follow.lock",
        help="one follower per warehouse (default $WAL_LAKE_SPARK_DIR/follow.lock)",
    )
    parser.add_argument("--cycles", type=int, help="stop after this many cycles (default: run until stopped)")
    parser.add_argument(
        "--max-backoff",
        type=_positive_float,
        default=300.0,
        help="longest wait before a retry (default 300 s)",
    )
    parser.add_argument(
        "--stop-timeout",
        type=_positive_float,
        default=120.0,
        help="after SIGTERM, exit at once if the running step has not ended within this many seconds "
        "(0: wait for it; default 120)",
    )
    status_mod.add_schema_options(parser)
    args = parser.parse_args(argv)
    if args.cycles is not None and args.cycles < 1:
        parser.error("--cycles must be at least 1")
    return args


def capture_argv(args: argparse.Namespace) -> list[str]:
    argv = ["--dsn", args.dsn, "--slot", args.slot, "--landing", args.landing, "--quiet"]
    if args.source_id:
        argv += ["--source-id", args.source_id]
    if args.snapshot:
        argv.append("--snapshot")
    return argv


def main(
    argv: list[str] | None = None,
    stop: threading.Event | None = None,
    out: TextIO | None = None,
    between: Callable[[int], None] | None = None,
) -> int:
    """Follow until stopped; the exit status. ``stop``: an event that stops it as SIGTERM does (for
    callers in-process); ``between``: called after each cycle with the cycle count (tests)."""
    args = parse_args(argv)
    out = out or sys.stdout
    stop = stop or threading.Event()
    try:
        lock = hold_lock(args.lock_file)
    except FollowLocked as exc:
        print(f"follow: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_LOCKED
    stopper = Stopper(stop, args.stop_timeout, out)
    stopper.install()
    try:
        return _follow(args, stop, out, between)
    except KeyboardInterrupt:
        print("follow: interrupted (safe: the next start carries on)", file=out, flush=True)
        return 130
    finally:
        stop.set()
        stopper.restore()
        lock.close()


def _follow(args: argparse.Namespace, stop: threading.Event, out: TextIO, between) -> int:
    # dbt reads its schemas from the environment (profiles.yml, the sources): the same as ours.
    os.environ["WAL_LAKE_RAW_SCHEMA"] = args.raw_schema
    os.environ["WAL_LAKE_SCHEMA"] = args.schema
    if "://" not in args.landing:
        Path(args.landing).mkdir(parents=True, exist_ok=True)
    from python_jobs.spark_session import SparkSetupError, get_spark

    try:
        spark = get_spark("wal_lake_follow")
    except SparkSetupError as exc:
        print(f"follow: error: {exc}", file=sys.stderr, flush=True)
        return 1
    options = Options(
        landing=args.landing,
        raw_schema=args.raw_schema,
        schema=args.schema,
        min_interval=args.min_interval,
        max_idle=args.max_idle,
        build_every=args.build_every,
        build_slice=args.build_slice,
        max_backoff=args.max_backoff,
        status_file=args.status_file,
        cycles=args.cycles,
        dsn=args.dsn,
        slot=args.slot,
        test_history_every=args.test_history_every,
    )
    follower = Follower(spark, options, stop, out)
    if args.dsn is not None:
        follower.capture = Capture(capture_argv(args), stop, args.max_backoff, out)
        follower.capture.start()
    follower.log(
        f"following {args.landing} into {args.raw_schema} and {args.schema}"
        + (f", capturing slot {args.slot}" if args.dsn is not None else "")
        + f"; cycles at least {args.min_interval:g}s apart"
    )
    try:
        follower.run(between)
    except SparkGone as exc:
        stop.set()
        follower.log(f"{exc}: exiting; start it again (a service manager does): nothing is lost")
        return 1
    finally:
        stop.set()
        if follower.capture is not None:
            follower.capture.join(timeout=30)
        follower.write_status("stopped", datetime.now(UTC))
    c = follower.counters
    follower.log(f"stopped after {c.cycles} cycles ({c.failed_cycles} failed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
