"""The initial snapshot (``--snapshot``): every user table's rows as one wal2json-shaped transaction,
streamed to as many landing files as it needs.

The slot is created through a replication connection with ``EXPORT_SNAPSHOT``; worker connections
import that snapshot and ``COPY`` each table out, Postgres rendering every row as its ``R`` (read)
line, straight into hidden temporary files of bounded size (``files.PartWriter``): memory stays a
block per worker whatever the tables' size. Once every table is read and the slot is validated, the
files are published in order under names that sort before every streamed file: the first holds the
``B`` record, the last the ``C`` record, all at the slot's consistent point.

A state file in the landing folder (``.snapshot-state.json``, hidden) says how far a snapshot got, so
that a rerun after a kill converges: killed while reading, the exported snapshot died with its
connection, so the rerun drops the slot and starts over; killed while publishing, it publishes the
rest.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import errors, sql

from python_jobs.capture.files import (
    SNAPSHOT_PART_PREFIX,
    SNAPSHOT_PART_SUFFIX,
    PartWriter,
    has_snapshot,
    merge_small_parts,
    publish,
    read_json_file,
    snapshot_file_name,
    sync_directory,
    write_durably,
)
from python_jobs.capture.session import CaptureError, connect, first_line, pin_settings
from python_jobs.capture.slot import (
    PLUGIN,
    SLOT_ATTEMPTS,
    explain_plugin_error,
    validate_or_drop,
)
from python_jobs.lsn import format_lsn, parse_lsn

# wal2json prints these types as bare JSON numbers, booleans as true/false, bytea as hex without the
# \x prefix, and every other type as its text output. It prints NaN and infinities as null, which
# loses them; the snapshot keeps them as their text instead ("NaN", "Infinity", "-Infinity").
NUMBER_TYPE_OIDS = frozenset({20, 21, 23, 26, 700, 701, 1700})  # int8 int2 int4 oid float4 float8 numeric
INTEGER_TYPE_OIDS = frozenset({20, 21, 23, 26})  # no NaN: their cast to text is their output
BOOL_TYPE_OID = 16
BYTEA_TYPE_OID = 17
STRING_TYPE_OIDS = frozenset({25, 1043})  # text, varchar: their text output is their value
READ_ATTEMPTS = 5
STATE_FILE = ".snapshot-state.json"
DEFAULT_FILE_MB = 256.0
DEFAULT_JOBS = 2
PROGRESS_SECONDS = 10.0
# Seconds a rerun waits for the server to notice that a killed snapshot's replication connection is
# gone (its slot stays active until then and cannot be dropped).
DROP_WAIT = 30.0


@dataclass
class TableShape:
    schema: str
    table: str
    columns: list[tuple[str, str, int]]  # name, format_type, type oid; in attnum order
    pk: list[tuple[str, str]]  # name, format_type; in attnum order, as wal2json lists them
    estimated_rows: int = 0
    unlogged: bool = False

    @property
    def name(self) -> str:
        return f"{self.schema}.{self.table}"


@dataclass
class SnapshotOptions:
    file_bytes: int = int(DEFAULT_FILE_MB * 1024 * 1024)
    jobs: int = DEFAULT_JOBS


@dataclass
class Progress:
    """What the workers have done, read by the coordinator's progress lines: one counter per worker
    for each, written by that worker only."""

    tables_total: int = 0
    rows_estimated: int = 0
    tables: list[int] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)

    @property
    def tables_done(self) -> int:
        return sum(self.tables)

    @property
    def rows_done(self) -> int:
        return sum(self.rows)


def snapshot_unless_landed(
    dsn: str, slot: str, slot_exists: bool, landing_dir: Path, log, warn, options: SnapshotOptions
) -> int:
    """Take the snapshot when ``slot`` is new; when it is not, the earlier run's snapshot must be in
    ``landing_dir`` for the stream to continue it. The rows landed now (0 when none).

    What a killed snapshot left is settled first (``settle_interrupted``)."""
    slot_exists, rows = settle_interrupted(dsn, slot, slot_exists, landing_dir, log)
    if not slot_exists:
        return take_snapshot(dsn, slot, landing_dir, log, warn, options)
    if not has_snapshot(landing_dir):
        raise CaptureError(
            f"--snapshot: slot '{slot}' already exists but no snapshot was landed in "
            f"{landing_dir}; drop the slot (select pg_drop_replication_slot(...)) to start over, "
            "or run without --snapshot"
        )
    if rows is None:
        log(f"snapshot already landed in {landing_dir}; streaming from slot '{slot}'")
    return rows or 0


# --- a snapshot a kill interrupted -------------------------------------------------------------------


def read_state(landing_dir: Path) -> dict | None:
    return read_json_file(landing_dir / STATE_FILE, "the snapshot's state file")


def write_state(landing_dir: Path, state: dict) -> None:
    write_durably(landing_dir, STATE_FILE, [json.dumps(state)])


def clear_state(landing_dir: Path) -> None:
    (landing_dir / STATE_FILE).unlink(missing_ok=True)
    sync_directory(landing_dir)


def remove_parts(landing_dir: Path) -> None:
    for path in landing_dir.glob(f"{SNAPSHOT_PART_PREFIX}*{SNAPSHOT_PART_SUFFIX}"):
        path.unlink()


def settle_interrupted(
    dsn: str, slot: str, slot_exists: bool, landing_dir: Path, log
) -> tuple[bool, int | None]:
    """Finish or undo what a killed snapshot of ``slot`` left in ``landing_dir``: whether the slot
    exists now, and the rows of a snapshot published now (None when there was none to publish).

    - Killed while publishing (every file was written and the slot validated): the files not yet
      renamed are published, in order.
    - Killed while reading: its exported snapshot died with its replication connection, so the rest
      cannot be read as of the same moment. The slot it created is dropped and its files removed:
      the snapshot starts over.
    """
    state = read_state(landing_dir)
    if state is None:
        return slot_exists, None
    if state.get("slot") != slot:
        raise CaptureError(
            f"--snapshot: {landing_dir / STATE_FILE} belongs to an unfinished snapshot of slot "
            f"'{state.get('slot')}', not '{slot}'; rerun with --slot {state.get('slot')}, or remove the "
            f"file and the {SNAPSHOT_PART_PREFIX}*{SNAPSHOT_PART_SUFFIX} files beside it"
        )
    if state.get("phase") == "publishing":
        publish_parts(landing_dir, state["parts"])
        clear_state(landing_dir)
        log(f"snapshot: published the rest of an interrupted snapshot ({state['rows']} rows)")
        return slot_exists, state["rows"]
    if slot_exists:
        log(f"snapshot: the last snapshot of slot '{slot}' was interrupted; dropping the slot to start over")
        with connect(dsn) as conn:
            drop_when_inactive(conn, slot)
    remove_parts(landing_dir)
    clear_state(landing_dir)
    return False, None


def drop_when_inactive(conn: psycopg.Connection, slot: str, timeout: float = DROP_WAIT) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn.execute("select pg_drop_replication_slot(%s)", (slot,))
            return
        except errors.ObjectInUse as exc:
            if time.monotonic() > deadline:
                raise CaptureError(
                    f"slot '{slot}' of an interrupted snapshot is still in use after {timeout:g}s: "
                    f"{first_line(exc)}"
                ) from exc
            time.sleep(0.2)
        except errors.UndefinedObject:
            return


def publish_parts(landing_dir: Path, parts: list[list[str]]) -> None:
    """Rename each ``[temporary, final]`` in order; those already renamed are skipped."""
    for temporary, final in parts:
        if (landing_dir / temporary).exists():
            publish(landing_dir / temporary, final)
        elif not (landing_dir / final).exists():
            raise CaptureError(
                f"snapshot: {landing_dir / temporary} is missing, and so is {final}; remove "
                f"{landing_dir / STATE_FILE}, drop the slot and take the snapshot again"
            )


# --- taking a snapshot ---------------------------------------------------------------------------


def take_snapshot(dsn: str, slot: str, landing_dir: Path, log, warn, options: SnapshotOptions) -> int:
    """Create ``slot`` with an exported snapshot and land every table's rows as of its start.

    The files are published only once the new slot has decoded past every transaction that was
    open when it was created (see ``validate_new_slot``); a slot that cannot is dropped and the
    snapshot taken again."""
    landing_dir.mkdir(parents=True, exist_ok=True)
    remove_parts(landing_dir)
    for attempt in range(1, SLOT_ATTEMPTS + 1):
        write_state(landing_dir, {"slot": slot, "phase": "reading"})
        started = time.monotonic()
        try:
            result = _snapshot_once(dsn, slot, landing_dir, log, warn, options)
            with connect(dsn) as conn:
                pin_settings(conn)
                validated = validate_or_drop(conn, slot, log)
        except BaseException:
            remove_parts(landing_dir)
            _forget_unless_slot_created(dsn, slot, landing_dir)
            raise
        if validated:
            names = [
                snapshot_file_name(result.lsn, n, len(result.parts)) for n in range(1, len(result.parts) + 1)
            ]
            parts = [[path.name, name] for path, name in zip(result.parts, names, strict=True)]
            state = {"slot": slot, "phase": "publishing", "rows": result.rows, "parts": parts}
            write_state(landing_dir, state)
            publish_parts(landing_dir, parts)
            clear_state(landing_dir)
            seconds = time.monotonic() - started
            log(
                f"snapshot: {result.rows:,} rows of {result.tables} tables in {seconds:.1f} s "
                f"({result.rows / max(seconds, 1e-9):,.0f} rows/s), {len(parts)} files, "
                f"{result.bytes:,} bytes at {format_lsn(result.lsn)} -> {names[0]}"
                + (f" .. {names[-1]}" if len(names) > 1 else "")
            )
            return result.rows
        remove_parts(landing_dir)
        log(
            f"snapshot attempt {attempt} of {SLOT_ATTEMPTS}: dropped slot '{slot}', taking the snapshot again"
        )
    clear_state(landing_dir)
    raise CaptureError(f"slot '{slot}' could not decode its first transactions in {SLOT_ATTEMPTS} attempts")


def _forget_unless_slot_created(dsn: str, slot: str, landing_dir: Path) -> None:
    """After a failed attempt: the state file stays only when the attempt created the slot (a rerun
    drops it). Kept with no slot, a later run without ``--snapshot`` could create one of that name,
    which a still later ``--snapshot`` run would take for this attempt's and drop."""
    try:
        with connect(dsn) as conn:
            exists = conn.execute(
                "select 1 from pg_replication_slots where slot_name = %s", (slot,)
            ).fetchone()
    except (CaptureError, psycopg.Error):
        return  # cannot tell: keep it (a rerun with --snapshot drops a slot of that name, if any)
    if exists is None:
        clear_state(landing_dir)


@dataclass
class SnapshotResult:
    lsn: int
    parts: list[Path]
    rows: int
    bytes: int
    tables: int


def _snapshot_once(
    dsn: str, slot: str, landing_dir: Path, log, warn, options: SnapshotOptions
) -> SnapshotResult:
    """Create ``slot`` exporting a snapshot, and write the snapshot to unpublished temporary files."""
    try:
        repl = psycopg.connect(dsn, autocommit=True, replication="database")
    except psycopg.OperationalError as exc:
        raise CaptureError(f"cannot open a replication connection: {first_line(exc)}") from exc
    try:
        lsn, snapshot_name = _create_exporting_slot(repl, slot)
        # The exported snapshot lives while the replication connection stays idle and open.
        with connect(dsn) as lister:
            pin_settings(lister)
            lister.autocommit = False
            _enter_snapshot(lister, snapshot_name)
            timestamp = lister.execute("select now()::text").fetchone()[0]
            tables = snapshot_tables(lister, warn)
            lister.rollback()
        head = f'"xid":0,"timestamp":{_json(timestamp)},"lsn":{_json(format_lsn(lsn))}'
        begin = ('{"action":"B",' + head + ',"snapshot":true}\n').encode()
        commit = ('{"action":"C",' + head + ',"snapshot":true}\n').encode()
        parts, rows, written = read_tables(dsn, snapshot_name, tables, head, begin, landing_dir, log, options)
    finally:
        repl.close()
    # The C record ends the last file that holds anything (the first always holds the B record).
    with open(parts[-1], "ab") as handle:
        handle.write(commit)
        handle.flush()
        os.fsync(handle.fileno())
    return SnapshotResult(lsn, parts, rows, written + len(commit), len(tables))


def _enter_snapshot(conn: psycopg.Connection, snapshot_name: str) -> None:
    """Start a transaction of ``conn`` (not autocommit) inside the exported snapshot."""
    conn.execute("set transaction isolation level repeatable read, read only")
    conn.execute(sql.SQL("set transaction snapshot {}").format(sql.Literal(snapshot_name)))


def _create_exporting_slot(repl: psycopg.Connection, slot: str) -> tuple[int, str]:
    """The snapshot's position and the exported snapshot's name."""
    try:
        row = repl.execute(
            sql.SQL("CREATE_REPLICATION_SLOT {} LOGICAL {} EXPORT_SNAPSHOT").format(
                sql.Identifier(slot), sql.Identifier(PLUGIN)
            )
        ).fetchone()
    except psycopg.Error as exc:
        raise (
            explain_plugin_error(exc) or CaptureError(f"cannot create slot '{slot}': {first_line(exc)}")
        ) from exc
    # The snapshot holds what committed before the consistent point, and a streamed transaction
    # may commit exactly at it: the snapshot takes the position just below, so the two positions
    # never collide and the snapshot orders first.
    return parse_lsn(row[1]) - 1, row[2]


def user_tables(conn: psycopg.Connection) -> list[TableShape]:
    """Every ordinary table the slot decodes, with its columns, primary key and estimated row count
    from the catalog, biggest first; unlogged tables too (``snapshot_tables`` leaves them out)."""
    rows = conn.execute(
        """
        select n.nspname, c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.atttypid::int,
               coalesce(a.attnum = any(i.indkey), false), c.relpersistence = 'u',
               greatest(c.reltuples, 0)::bigint
        from pg_class c
        join pg_namespace n on n.oid = c.relnamespace
        join pg_attribute a on a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped
        left join pg_index i on i.indrelid = c.oid and i.indisprimary
        where c.relkind = 'r'
          and n.nspname not in ('pg_catalog', 'information_schema')
          and n.nspname not like 'pg\\_%%'
        order by n.nspname, c.relname, a.attnum
        """
    ).fetchall()
    shapes: dict[tuple[str, str], TableShape] = {}
    for schema, table, column, type_name, type_oid, in_pk, unlogged, estimated in rows:
        shape = shapes.setdefault((schema, table), TableShape(schema, table, [], [], estimated, unlogged))
        shape.columns.append((column, type_name, type_oid))
        if in_pk:
            shape.pk.append((column, type_name))
    return sorted(shapes.values(), key=lambda shape: -shape.estimated_rows)


def snapshot_tables(conn: psycopg.Connection, warn) -> list[TableShape]:
    """``user_tables`` without the unlogged ones: they write no WAL, so no slot streams their
    changes, and a snapshot of them would never change again."""
    tables = []
    for shape in user_tables(conn):
        if shape.unlogged:
            warn(f"snapshot: unlogged table {shape.name} is not captured (it writes no WAL to stream)")
        else:
            tables.append(shape)
    return tables


def _json(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def render_value_sql(column: sql.Composable, type_oid: int) -> sql.Composable:
    """SQL rendering a column's value as wal2json 2.5 writes it (see pg_decode_write_value): the
    type's output function (``format('%s', v)``), bare for numbers, ``true``/``false``, bytea as hex
    without ``\\x``, and a JSON string (``to_json``, whose escaping is wal2json's) for everything
    else; ``null`` for NULL. NaN and infinities, which wal2json turns into null, stay their text."""
    text = sql.SQL("format('%s', {})").format(column)
    if type_oid in INTEGER_TYPE_OIDS:
        rendered = sql.SQL("{}::text").format(column)
    elif type_oid in NUMBER_TYPE_OIDS:
        rendered = sql.SQL(
            "case when {text} in ('NaN', 'Infinity', '-Infinity') then to_json({text})::text else {text} end"
        ).format(text=text)
    elif type_oid == BOOL_TYPE_OID:
        rendered = sql.SQL("case when {} then 'true' else 'false' end").format(column)
    elif type_oid == BYTEA_TYPE_OID:
        rendered = sql.SQL("to_json(encode({}, 'hex'))::text").format(column)
    elif type_oid in STRING_TYPE_OIDS:
        rendered = sql.SQL("to_json({})::text").format(column)
    else:
        rendered = sql.SQL("to_json({})::text").format(text)
    # Not coalesce: format('%s', null) is an empty text, not null.
    return sql.SQL("case when {} is null then 'null' else {} end").format(column, rendered)


def copy_query(shape: TableShape, head: str) -> sql.Composed:
    """``COPY`` of the table's own rows (``only``: a parent's select also returns its children's
    rows, which the stream reports under the child), one ``R`` line each, as wal2json renders an
    insert's columns."""
    return sql.SQL("copy (select {} from only {}.{}) to stdout").format(
        read_line_sql(shape, head), sql.Identifier(shape.schema), sql.Identifier(shape.table)
    )


def read_line_sql(shape: TableShape, head: str) -> sql.Composed:
    """The SQL expression of a row's ``R`` line: ``{"action":"R",<head>,"schema":…}``."""
    pk = ",".join(f'{{"name":{_json(name)},"type":{_json(type_name)}}}' for name, type_name in shape.pk)
    pieces: list[sql.Composable] = [
        sql.Literal(
            '{"action":"R",'
            + head
            + f',"schema":{_json(shape.schema)},"table":{_json(shape.table)},"columns":['
        )
    ]
    for n, (name, type_name, oid) in enumerate(shape.columns):
        lead = ("," if n else "") + f'{{"name":{_json(name)},"type":{_json(type_name)},"value":'
        pieces += [sql.Literal(lead), render_value_sql(sql.Identifier(name), oid), sql.Literal("}")]
    # As wal2json: "pk": [] for a table without a key (an absent "pk" means include-pk was off).
    pieces.append(sql.Literal(f'],"pk":[{pk}]}}'))
    return sql.SQL(" || ").join(pieces)


def unescape_copy_text(block: bytes | bytearray) -> bytes | bytearray:
    """COPY's text format doubles each backslash of a value (and escapes control characters, which
    a JSON text never holds raw): undoubling them gives the line back."""
    return block.replace(b"\\\\", b"\\")


# --- reading the tables --------------------------------------------------------------------------


def read_tables(
    dsn: str,
    snapshot_name: str,
    tables: list[TableShape],
    head: str,
    begin: bytes,
    landing_dir: Path,
    log,
    options: SnapshotOptions,
) -> tuple[list[Path], int, int]:
    """Read ``tables`` inside the exported snapshot with up to ``options.jobs`` connections, biggest
    table first to whichever is free. The parts in publishing order (the first starts with
    ``begin``), the rows and the bytes written."""
    jobs = max(1, min(options.jobs, len(tables)))
    work: queue.SimpleQueue[TableShape] = queue.SimpleQueue()
    for shape in tables:
        work.put(shape)
    progress = Progress(len(tables), sum(shape.estimated_rows for shape in tables), [0] * jobs, [0] * jobs)
    failed = threading.Event()
    errors_seen: list[BaseException] = []
    writers = [
        PartWriter(landing_dir, f"w{n}", options.file_bytes, begin if n == 0 else b"", unescape_copy_text)
        for n in range(jobs)
    ]

    def worker(n: int) -> None:
        try:
            with connect(dsn) as conn:
                pin_settings(conn)
                conn.autocommit = False
                while not failed.is_set():
                    try:
                        shape = work.get_nowait()
                    except queue.Empty:
                        return
                    read_table(conn, snapshot_name, shape, head, writers[n], progress, n, failed, log)
                    progress.tables[n] += 1
        except BaseException as exc:
            errors_seen.append(exc)
            failed.set()

    threads = [threading.Thread(target=worker, args=(n,), daemon=True) for n in range(jobs)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    next_report = started + PROGRESS_SECONDS
    for thread in threads:
        while thread.is_alive():
            thread.join(timeout=0.2)
            if time.monotonic() >= next_report and not failed.is_set():
                log(progress_line(progress, time.monotonic() - started))
                next_report += PROGRESS_SECONDS
    parts: list[Path] = []
    for writer in writers:
        parts += writer.close()
    if errors_seen:
        raise errors_seen[0]
    return (
        merge_small_parts(parts, options.file_bytes),
        progress.rows_done,
        sum(writer.bytes_written for writer in writers),
    )


def progress_line(progress: Progress, seconds: float) -> str:
    done = progress.rows_done
    rate = done / max(seconds, 1e-9)
    line = (
        f"snapshot: {progress.tables_done} of {progress.tables_total} tables, {done:,} rows"
        f" in {seconds:.0f} s ({rate:,.0f} rows/s)"
    )
    if progress.rows_estimated > done and rate > 0:
        left = (progress.rows_estimated - done) / rate
        line += f"; about {progress.rows_estimated:,} rows in all, {left:.0f} s left"
    return line


def read_table(
    conn: psycopg.Connection,
    snapshot_name: str,
    shape: TableShape,
    head: str,
    writer: PartWriter,
    progress: Progress,
    worker: int,
    failed: threading.Event,
    log,
) -> None:
    """Stream one table's ``R`` lines into ``writer``, in a transaction of its own inside the
    exported snapshot (one table's lock at a time).

    A transaction that locks tables exclusively (``truncate b, a``) can still deadlock with the read,
    and Postgres may cancel the read to break it: what the table wrote is undone and it is read
    again inside the same exported snapshot. A table dropped since the snapshot is left out: its
    rows are gone from the database too."""
    query = copy_query(shape, head)
    for attempt in range(1, READ_ATTEMPTS + 1):
        mark = writer.mark()
        rows_before = progress.rows[worker]
        try:
            _enter_snapshot(conn, snapshot_name)
            # The hot loop: one COPY message a row (each a whole line), appended to the writer's
            # buffer, which is written out a block at a time.
            buffer, block_bytes = writer.buffer, writer.block_bytes
            with conn.cursor().copy(query) as copy:
                read = copy.read
                while line := read():
                    buffer += line
                    if len(buffer) >= block_bytes:
                        progress.rows[worker] += writer.flush()
                        if failed.is_set():
                            raise CaptureError("snapshot: stopped, another reader failed")
            progress.rows[worker] += writer.flush()
            conn.rollback()
            return
        except errors.DeadlockDetected as exc:
            conn.rollback()
            writer.rollback(mark)
            progress.rows[worker] = rows_before
            if attempt == READ_ATTEMPTS:
                message = f"snapshot: reading {shape.name} deadlocked {attempt} times: {first_line(exc)}"
                raise CaptureError(message) from exc
        except errors.UndefinedTable:
            conn.rollback()
            writer.rollback(mark)
            progress.rows[worker] = rows_before
            log(f"snapshot: table {shape.name} was dropped since the snapshot; left out")
            return
