"""Capture a Postgres database's changes through a wal2json logical slot into the landing zone.

    python -m python_jobs.capture --dsn "host=... dbname=app" --slot wal_lake --landing landing --once

Each round peeks complete transactions from the slot with exactly the options the project's parser
is written against (``format-version 2`` with xids, LSNs, timestamps, primary keys and B/C records),
writes them to ``<landing>/<source_id>/<first commit LSN>-<last commit LSN>.jsonl`` (16 hex digits
each, so names sort in WAL order), makes the file durable (temporary file in the same directory,
fsync, rename, fsync of the directory) and only then advances the slot past the last commit. A crash
at any point therefore replays transactions into a later file, never loses one: the landing zone
holds every decoded change at least once.

``--snapshot`` creates the slot through a replication connection with ``EXPORT_SNAPSHOT``, reads every
user table inside that snapshot and lands the rows as one wal2json-shaped transaction of ``R`` (read)
records at the slot's consistent point, in a file whose name sorts before every streamed file.

The capture session pins the settings that shape wal2json's text (UTC time zone, ISO dates, hex
bytea, shortest exact floats), so the same row renders the same way in a snapshot and in the stream.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import errors, sql
from psycopg.types.string import TextLoader

from python_jobs.lsn import format_lsn, lsn_hex16, parse_lsn

PLUGIN = "wal2json"
WAL2JSON_OPTIONS = (
    "format-version",
    "2",
    "include-xids",
    "1",
    "include-lsn",
    "1",
    "include-timestamp",
    "1",
    "include-pk",
    "1",
    "include-transaction",
    "1",
)
SESSION_SETTINGS = {
    "TimeZone": "UTC",
    "DateStyle": "ISO, MDY",
    "IntervalStyle": "postgres",
    "bytea_output": "hex",
    "extra_float_digits": "1",
}

ACTION_BEGIN = "B"
ACTION_COMMIT = "C"
ACTION_MESSAGE = "M"
ACTION_READ = "R"

# wal2json prints these types as bare JSON numbers (NaN and infinities as null), booleans as
# true/false, bytea as hex without the \x prefix, and every other type as its text output.
NUMBER_TYPE_OIDS = frozenset({20, 21, 23, 26, 700, 701, 1700})  # int8 int2 int4 oid float4 float8 numeric
BOOL_TYPE_OID = 16
BYTEA_TYPE_OID = 17
SNAPSHOT_SUFFIX = "-snapshot.jsonl"
BROKEN_SLOT_MARKER = "could not map filenode"
SLOT_ATTEMPTS = 3


class CaptureError(RuntimeError):
    """A failure worth one line to the user (connection, plugin, slot state)."""


# --- landing files -------------------------------------------------------------------------------


def write_temporary(directory: Path, lines: Iterable[str]) -> Path:
    """Write ``lines`` to a synced hidden temporary file in ``directory`` (readers skip dot files)."""
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=".tmp-", suffix=".partial", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            for line in lines:
                handle.write(line)
                handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        os.unlink(tmp_name)
        raise
    return Path(tmp_name)


def publish(temporary: Path, name: str) -> Path:
    """Rename a synced temporary file to its landing name and sync the directory entry."""
    target = temporary.parent / name
    os.replace(temporary, target)
    dir_fd = os.open(temporary.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return target


def write_durably(directory: Path, name: str, lines: Iterable[str]) -> Path:
    """Write ``lines`` to ``directory/name`` so that the file is either absent or complete and synced."""
    return publish(write_temporary(directory, lines), name)


def landing_file_name(first_commit_lsn: int, last_commit_lsn: int) -> str:
    return f"{lsn_hex16(first_commit_lsn)}-{lsn_hex16(last_commit_lsn)}.jsonl"


def snapshot_file_name(lsn: int) -> str:
    # "<lsn>-<lsn>-snapshot.jsonl" sorts before a streamed "<lsn>-<lsn>.jsonl" too ('-' < '.').
    return f"{lsn_hex16(lsn)}-{lsn_hex16(lsn)}{SNAPSHOT_SUFFIX}"


# --- reading complete transactions ---------------------------------------------------------------


@dataclass
class Batch:
    """The complete transactions (and non-transactional messages) at the head of a peek."""

    lines: list[str] = field(default_factory=list)
    first_commit_lsn: int | None = None
    last_commit_lsn: int | None = None
    advance_to: int | None = None
    transactions: int = 0
    changes: int = 0


def complete_prefix(rows: list[tuple[str, str]]) -> Batch:
    """Cut peeked ``(row lsn, data)`` rows after the last complete unit.

    A unit is a transaction (``B`` … ``C``; the ``C`` row's LSN is the end of the commit record, where
    the slot may advance to) or a non-transactional logical message (one row outside any
    transaction; advancing one byte past it skips it on the next read).
    """
    batch = Batch()
    pending: list[str] = []
    pending_changes = 0
    in_transaction = False
    for row_lsn, data in rows:
        record = json.loads(data)
        action = record.get("action")
        if action == ACTION_BEGIN:
            in_transaction = True
            pending = [data]
            pending_changes = 0
        elif action == ACTION_COMMIT:
            pending.append(data)
            commit_lsn = parse_lsn(record["lsn"])
            batch.lines.extend(pending)
            batch.changes += pending_changes
            batch.transactions += 1
            batch.first_commit_lsn = (
                batch.first_commit_lsn if batch.first_commit_lsn is not None else commit_lsn
            )
            batch.last_commit_lsn = commit_lsn
            batch.advance_to = parse_lsn(row_lsn)
            pending, pending_changes, in_transaction = [], 0, False
        elif in_transaction:
            pending.append(data)
            pending_changes += 1
        elif action == ACTION_MESSAGE and record.get("transactional") is False:
            message_lsn = parse_lsn(record["lsn"])
            batch.lines.append(data)
            batch.changes += 1
            batch.first_commit_lsn = (
                batch.first_commit_lsn if batch.first_commit_lsn is not None else message_lsn
            )
            batch.last_commit_lsn = message_lsn
            batch.advance_to = message_lsn + 1
        else:
            raise CaptureError(f"unexpected wal2json record outside a transaction at {row_lsn}: {data[:200]}")
    return batch


# --- the capture session -------------------------------------------------------------------------


def connect(dsn: str, **kwargs) -> psycopg.Connection:
    try:
        conn = psycopg.connect(dsn, autocommit=True, **kwargs)
    except psycopg.OperationalError as exc:
        where = dsn or "the PG* environment"
        raise CaptureError(f"cannot connect to Postgres ({where}): {first_line(exc)}") from exc
    return conn


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def pin_settings(conn: psycopg.Connection) -> None:
    for name, value in SESSION_SETTINGS.items():
        conn.execute("select set_config(%s, %s, false)", (name, value))


def slot_info(conn: psycopg.Connection, slot: str) -> dict | None:
    row = conn.execute(
        "select plugin, slot_type, database, confirmed_flush_lsn::text, active_pid"
        " from pg_replication_slots where slot_name = %s",
        (slot,),
    ).fetchone()
    if row is None:
        return None
    return dict(
        zip(("plugin", "slot_type", "database", "confirmed_flush_lsn", "active_pid"), row, strict=True)
    )


def check_slot(conn: psycopg.Connection, slot: str, info: dict) -> None:
    dbname = conn.info.dbname
    if info["slot_type"] != "logical" or info["plugin"] != PLUGIN:
        raise CaptureError(
            f"slot '{slot}' exists but is not a {PLUGIN} logical slot (plugin {info['plugin']})"
        )
    if info["database"] != dbname:
        raise CaptureError(f"slot '{slot}' belongs to database '{info['database']}', not '{dbname}'")
    if info["active_pid"] is not None:
        raise CaptureError(f"slot '{slot}' is in use by another process (pid {info['active_pid']})")


def explain_plugin_error(exc: psycopg.Error) -> CaptureError | None:
    text = str(exc)
    if isinstance(exc, errors.UndefinedFile) or "could not access file" in text:
        return CaptureError(f"the {PLUGIN} output plugin is not installed on the server: {first_line(exc)}")
    if "may not be used as an output plugin" in text:
        return CaptureError(
            f"the server does not allow {PLUGIN} as an output plugin: add it to output_plugin_libraries "
            f"({first_line(exc)})"
        )
    return None


def create_slot(conn: psycopg.Connection, slot: str) -> int:
    try:
        row = conn.execute(
            "select lsn::text from pg_create_logical_replication_slot(%s, %s)", (slot, PLUGIN)
        ).fetchone()
    except errors.DuplicateObject as exc:
        raise CaptureError(f"slot '{slot}' was created concurrently by someone else") from exc
    except psycopg.Error as exc:
        raise (
            explain_plugin_error(exc) or CaptureError(f"cannot create slot '{slot}': {first_line(exc)}")
        ) from exc
    return parse_lsn(row[0])


def peek(conn: psycopg.Connection, slot: str, upto_lsn: int | None, upto_nchanges: int | None):
    query = (
        "select lsn::text, data from pg_logical_slot_peek_changes(%s, %s::pg_lsn, %s, "
        + ", ".join(["%s"] * len(WAL2JSON_OPTIONS))
        + ")"
    )
    params = (slot, format_lsn(upto_lsn) if upto_lsn is not None else None, upto_nchanges, *WAL2JSON_OPTIONS)
    try:
        return conn.execute(query, params).fetchall()
    except errors.ObjectInUse as exc:
        raise CaptureError(f"slot '{slot}' is in use by another process: {first_line(exc)}") from exc
    except psycopg.Error as exc:
        raise (
            explain_plugin_error(exc) or CaptureError(f"reading slot '{slot}' failed: {first_line(exc)}")
        ) from exc


def advance(conn: psycopg.Connection, slot: str, lsn: int) -> None:
    try:
        conn.execute("select pg_replication_slot_advance(%s, %s::pg_lsn)", (slot, format_lsn(lsn)))
    except errors.ObjectInUse as exc:
        raise CaptureError(f"slot '{slot}' is in use by another process: {first_line(exc)}") from exc


# --- snapshot --------------------------------------------------------------------------------------


@dataclass
class TableShape:
    schema: str
    table: str
    columns: list[tuple[str, str, int]]  # name, format_type, type oid; in attnum order
    pk: list[tuple[str, str]]  # name, format_type; in attnum order, as wal2json lists them


def user_tables(conn: psycopg.Connection) -> list[TableShape]:
    """Every ordinary table the slot decodes, with its columns and primary key from the catalog."""
    rows = conn.execute(
        """
        select n.nspname, c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.atttypid::int,
               coalesce(a.attnum = any(i.indkey), false)
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
    for schema, table, column, type_name, type_oid, in_pk in rows:
        shape = shapes.setdefault((schema, table), TableShape(schema, table, [], []))
        shape.columns.append((column, type_name, type_oid))
        if in_pk:
            shape.pk.append((column, type_name))
    return list(shapes.values())


def render_value(text: str | None, type_oid: int) -> str:
    """A column value as wal2json 2.5 writes it (see pg_decode_write_value)."""
    if text is None:
        return "null"
    if type_oid in NUMBER_TYPE_OIDS:
        if text.lower().lstrip("-") in ("nan", "infinity"):
            return "null"
        return text
    if type_oid == BOOL_TYPE_OID:
        return "true" if text in ("t", "true") else "false"
    if type_oid == BYTEA_TYPE_OID:
        return json.dumps(text[2:], ensure_ascii=False)
    return json.dumps(text, ensure_ascii=False)


def _json(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def snapshot_lines(conn: psycopg.Connection, lsn: int, timestamp: str) -> tuple[list[str], int]:
    """The snapshot as one wal2json-shaped transaction; ``conn`` is inside the exported snapshot."""
    lsn_text = _json(format_lsn(lsn))
    head = f'"xid":0,"timestamp":{_json(timestamp)},"lsn":{lsn_text}'
    lines = ['{"action":"B",' + head + ',"snapshot":true}']
    rows_read = 0
    for shape in user_tables(conn):
        columns = sql.SQL(", ").join(sql.Identifier(name) for name, _type, _oid in shape.columns)
        query = sql.SQL("select {} from {}.{}").format(
            columns, sql.Identifier(shape.schema), sql.Identifier(shape.table)
        )
        pk = ",".join(f'{{"name":{_json(name)},"type":{_json(type_name)}}}' for name, type_name in shape.pk)
        prefix = (
            '{"action":"R",'
            + head
            + f',"schema":{_json(shape.schema)},"table":{_json(shape.table)},"columns":['
        )
        cursor = conn.cursor()
        # Fetch every column as the text its output function produces, as wal2json does.
        for _name, _type, oid in shape.columns:
            cursor.adapters.register_loader(oid, TextLoader)
        for values in cursor.execute(query):
            rendered = ",".join(
                f'{{"name":{_json(name)},"type":{_json(type_name)},"value":{render_value(value, oid)}}}'
                for (name, type_name, oid), value in zip(shape.columns, values, strict=True)
            )
            suffix = f'],"pk":[{pk}]}}' if shape.pk else "]}"
            lines.append(prefix + rendered + suffix)
            rows_read += 1
    lines.append('{"action":"C",' + head + ',"snapshot":true}')
    return lines, rows_read


def take_snapshot(dsn: str, slot: str, landing_dir: Path, log) -> int:
    """Create ``slot`` with an exported snapshot and land every table's rows as of its start.

    The snapshot file is published only once the new slot has decoded past every transaction that
    was open when it was created (see ``validate_new_slot``); a slot that cannot is dropped and the
    snapshot taken again."""
    for attempt in range(1, SLOT_ATTEMPTS + 1):
        temporary, consistent_point, rows_read = _snapshot_once(dsn, slot, landing_dir)
        try:
            with connect(dsn) as conn:
                pin_settings(conn)
                if validate_new_slot(conn, slot, log):
                    path = publish(temporary, snapshot_file_name(consistent_point))
                    log(f"snapshot: {rows_read} rows at {format_lsn(consistent_point)} -> {path.name}")
                    return rows_read
                conn.execute("select pg_drop_replication_slot(%s)", (slot,))
        finally:
            temporary.unlink(missing_ok=True)
        log(
            f"snapshot attempt {attempt} of {SLOT_ATTEMPTS}: dropped slot '{slot}', taking the snapshot again"
        )
    raise CaptureError(f"slot '{slot}' could not decode its first transactions in {SLOT_ATTEMPTS} attempts")


def _snapshot_once(dsn: str, slot: str, landing_dir: Path) -> tuple[Path, int, int]:
    try:
        repl = psycopg.connect(dsn, autocommit=True, replication="database")
    except psycopg.OperationalError as exc:
        raise CaptureError(f"cannot open a replication connection: {first_line(exc)}") from exc
    try:
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
        consistent_point, snapshot_name = parse_lsn(row[1]) - 1, row[2]
        # The exported snapshot lives while the replication connection stays idle and open.
        reader = connect(dsn)
        try:
            pin_settings(reader)
            reader.autocommit = False
            reader.execute("set transaction isolation level repeatable read, read only")
            reader.execute(sql.SQL("set transaction snapshot {}").format(sql.Literal(snapshot_name)))
            timestamp = reader.execute("select now()::text").fetchone()[0]
            lines, rows_read = snapshot_lines(reader, consistent_point, timestamp)
            reader.rollback()
        finally:
            reader.close()
    finally:
        repl.close()
    return write_temporary(landing_dir, lines), consistent_point, rows_read


def validate_new_slot(conn: psycopg.Connection, slot: str, log, timeout: float = 120) -> bool:
    """Decode (without consuming) past every transaction open when ``slot`` was created.

    Postgres 15.20 can create a logical slot, under concurrent TRUNCATE or DDL, whose first decode
    fails forever with "could not map filenode ... to relation OID" (reproduced here with
    EXPORT_SNAPSHOT about once in 40 creations under the soak workload). Only transactions open at
    the slot's start are exposed, so once they have ended and decoded cleanly the slot is sound; a
    broken one is reported (False) while nothing has been landed from it yet.
    """
    open_now = """
        select backend_xid::text from pg_stat_activity
        where datname = current_database() and backend_xid is not null
        union
        select transaction::text from pg_prepared_xacts where database = current_database()
    """
    waiting_for = {row[0] for row in conn.execute(open_now)}
    deadline = time.monotonic() + timeout
    while waiting_for:
        if time.monotonic() > deadline:
            count = len(waiting_for)
            log(f"slot '{slot}': {count} transactions open at its creation still run after {timeout:.0f}s")
            log(f"slot '{slot}': not validated (see validate_new_slot)")
            return True
        time.sleep(0.05)
        waiting_for &= {row[0] for row in conn.execute(open_now)}
    upto = parse_lsn(conn.execute("select pg_current_wal_flush_lsn()::text").fetchone()[0])
    try:
        peek(conn, slot, upto, None)
    except CaptureError as exc:
        if BROKEN_SLOT_MARKER in str(exc):
            log(f"slot '{slot}' cannot decode its first transactions ({exc})")
            return False
        raise
    return True


# --- the loop --------------------------------------------------------------------------------------


@dataclass
class Totals:
    files: int = 0
    transactions: int = 0
    changes: int = 0
    snapshot_rows: int = 0


class Stop:
    """Set by SIGTERM/SIGINT: finish the current file, then exit."""

    requested = False


def drain(conn, slot: str, landing_dir: Path, max_changes: int, totals: Totals, log, upto_lsn=None) -> bool:
    """Land every complete transaction available now (up to ``upto_lsn``); True if any was landed."""
    landed_any = False
    while not Stop.requested:
        rows = peek(conn, slot, upto_lsn, max_changes)
        batch = complete_prefix(rows)
        if batch.advance_to is None:
            return landed_any
        name = landing_file_name(batch.first_commit_lsn, batch.last_commit_lsn)
        path = write_durably(landing_dir, name, batch.lines)
        advance(conn, slot, batch.advance_to)
        totals.files += 1
        totals.transactions += batch.transactions
        totals.changes += batch.changes
        landed_any = True
        log(
            f"landed {path.name}: {batch.transactions} transactions, {batch.changes} changes; "
            f"slot at {format_lsn(batch.advance_to)}"
        )
    return landed_any


def run(args: argparse.Namespace) -> Totals:
    log = (
        (lambda message: None)
        if args.quiet
        else (lambda message: print(message, file=sys.stderr, flush=True))
    )
    conn = connect(args.dsn)
    totals = Totals()
    try:
        pin_settings(conn)
        source_id = args.source_id or f"{conn.info.dbname}.{args.slot}"
        landing_dir = Path(args.landing) / source_id
        info = slot_info(conn, args.slot)
        if args.snapshot:
            has_snapshot = landing_dir.is_dir() and any(
                p.name.endswith(SNAPSHOT_SUFFIX) for p in landing_dir.iterdir()
            )
            if info is None:
                totals.snapshot_rows = take_snapshot(args.dsn, args.slot, landing_dir, log)
            elif not has_snapshot:
                raise CaptureError(
                    f"--snapshot: slot '{args.slot}' already exists but no snapshot was landed in "
                    f"{landing_dir}; drop the slot (select pg_drop_replication_slot(...)) to start over, "
                    "or run without --snapshot"
                )
            else:
                log(f"snapshot already landed in {landing_dir}; streaming from slot '{args.slot}'")
            info = slot_info(conn, args.slot)
        elif info is None:
            for attempt in range(1, SLOT_ATTEMPTS + 1):
                start = create_slot(conn, args.slot)
                log(f"created slot '{args.slot}' at {format_lsn(start)}")
                if validate_new_slot(conn, args.slot, log):
                    break
                conn.execute("select pg_drop_replication_slot(%s)", (args.slot,))
                if attempt == SLOT_ATTEMPTS:
                    raise CaptureError(f"slot '{args.slot}' could not decode its first transactions")
            info = slot_info(conn, args.slot)
        check_slot(conn, args.slot, info)
        # The SQL functions hold the slot only during each call; this lock keeps a second capture
        # process off the same slot between calls.
        locked = conn.execute("select pg_try_advisory_lock(hashtext(%s))", (f"wal_lake.capture.{args.slot}",))
        if not locked.fetchone()[0]:
            raise CaptureError(f"slot '{args.slot}' is in use by another capture process")
        log(f"capturing slot '{args.slot}' of database '{conn.info.dbname}' into {landing_dir}")
        if args.once:
            end = parse_lsn(conn.execute("select pg_current_wal_flush_lsn()::text").fetchone()[0])
            drain(conn, args.slot, landing_dir, args.max_changes_per_file, totals, log, upto_lsn=end)
        else:
            while not Stop.requested:
                if not drain(conn, args.slot, landing_dir, args.max_changes_per_file, totals, log):
                    time.sleep(args.poll_interval)
        final = slot_info(conn, args.slot)
        totals_line = (
            f"capture: source {source_id}: {totals.files} files, {totals.transactions} transactions, "
            f"{totals.changes} changes"
            + (f", {totals.snapshot_rows} snapshot rows" if args.snapshot else "")
            + f"; slot '{args.slot}' confirmed at {final['confirmed_flush_lsn'] if final else '?'}"
        )
        print(totals_line, flush=True)
    finally:
        conn.close()
    return totals


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m python_jobs.capture",
        description=(
            "Capture Postgres changes through a wal2json logical slot into JSON Lines landing files "
            "(<landing>/<source_id>/<first commit LSN>-<last commit LSN>.jsonl). The slot advances only "
            "after a file is durable, so a crash replays changes and never loses them."
        ),
    )
    parser.add_argument(
        "--dsn",
        default=os.environ.get("WAL_LAKE_CAPTURE_DSN", ""),
        help="libpq connection string; default: the PG* environment variables (PGHOST, PGPORT, ...)",
    )
    parser.add_argument(
        "--slot", default="wal_lake", help="logical slot name, created if absent (default: %(default)s)"
    )
    parser.add_argument("--landing", default="landing", help="landing zone directory (default: %(default)s)")
    parser.add_argument(
        "--source-id", help="folder name of this stream in the landing zone (default: <database>.<slot>)"
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="land what the slot holds now, then exit")
    mode.add_argument(
        "--poll-interval",
        type=float,
        default=1.0,
        help="follow mode (the default): seconds to wait when the slot is empty (default: %(default)s)",
    )
    parser.add_argument(
        "--max-changes-per-file",
        type=int,
        default=10000,
        help="start a new file after about this many rows; a transaction is never split "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--snapshot",
        action="store_true",
        help="create the slot with an exported snapshot and first land every user table's rows as "
        "one transaction of R (read) records",
    )
    parser.add_argument("--quiet", action="store_true", help="only print the one-line summary")
    args = parser.parse_args(argv)
    if args.max_changes_per_file < 1:
        parser.error("--max-changes-per-file must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def request_stop(signum, _frame):
        Stop.requested = True

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, request_stop)
    try:
        run(args)
    except CaptureError as exc:
        print(f"capture: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("capture: interrupted", file=sys.stderr)
        return 130
    except psycopg.OperationalError as exc:
        print(f"capture: error: lost the connection to Postgres: {first_line(exc)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
