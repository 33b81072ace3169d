"""The wal2json logical slot: create it (and make sure it can decode), check it, hold it, peek it,
advance it.

The slot is read with the SQL functions, never consumed: ``peek`` decodes without moving the slot,
and only ``advance``, called once the landed file is durable, moves it.
"""

from __future__ import annotations

import time

import psycopg
from psycopg import errors

from python_jobs.capture.session import CaptureError, first_line
from python_jobs.lsn import format_lsn, parse_lsn

PLUGIN = "wal2json"
# Exactly the options the project's parser is written against: format-version 2 with xids, LSNs,
# timestamps, primary keys and B/C records.
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
BROKEN_SLOT_MARKER = "could not map filenode"
SLOT_ATTEMPTS = 3
# Seconds a new slot's validation waits for the transactions open at its creation to end.
VALIDATION_TIMEOUT = 120.0
# Seconds a --once capture waits for the WAL written before it to be flushed (settled_lsn).
SETTLE_TIMEOUT = 5.0


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


def lock_slot(conn: psycopg.Connection, slot: str) -> None:
    """Keep a second capture process off ``slot`` for as long as ``conn`` is open.

    The SQL functions hold the slot only during each call; this advisory lock holds it in between.
    """
    locked = conn.execute("select pg_try_advisory_lock(hashtext(%s))", (f"wal_lake.capture.{slot}",))
    if not locked.fetchone()[0]:
        raise CaptureError(f"slot '{slot}' is in use by another capture process")


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


def drop_slot(conn: psycopg.Connection, slot: str) -> None:
    conn.execute("select pg_drop_replication_slot(%s)", (slot,))


def create_validated_slot(conn: psycopg.Connection, slot: str, log) -> None:
    """Create ``slot``, and create it again while it turns out broken (see ``validate_new_slot``)."""
    for _attempt in range(SLOT_ATTEMPTS):
        start = create_slot(conn, slot)
        log(f"created slot '{slot}' at {format_lsn(start)}")
        if validate_or_drop(conn, slot, log):
            return
    raise CaptureError(f"slot '{slot}' could not decode its first transactions")


def validate_or_drop(conn: psycopg.Connection, slot: str, log) -> bool:
    """``validate_new_slot``, dropping the slot unless it proved sound: a slot left behind unproven
    would be streamed from by the next run as if it had been checked."""
    try:
        sound = validate_new_slot(conn, slot, log)
    except CaptureError:
        drop_slot(conn, slot)
        raise
    if not sound:
        drop_slot(conn, slot)
    return sound


def wal_flush_lsn(conn: psycopg.Connection) -> int:
    return parse_lsn(conn.execute("select pg_current_wal_flush_lsn()::text").fetchone()[0])


def settled_lsn(conn: psycopg.Connection, timeout: float = SETTLE_TIMEOUT) -> int:
    """The WAL flush position, once it has reached every record written before this call (or after
    ``timeout`` seconds, as far as it got).

    Decoding stops at the flush position. A commit is flushed as it is written, but a
    non-transactional logical message (a heartbeat) is not: Postgres 15 writes it and leaves the
    flush to the WAL writer (``wal_writer_delay``, 200 ms by default), so a capture that asked for
    the flush position right after one would land it only in its next run."""
    written = parse_lsn(conn.execute("select pg_current_wal_insert_lsn()::text").fetchone()[0])
    deadline = time.monotonic() + timeout
    while (flushed := wal_flush_lsn(conn)) < written and time.monotonic() < deadline:
        time.sleep(0.02)
    return flushed


def validate_new_slot(conn: psycopg.Connection, slot: str, log, timeout: float | None = None) -> bool:
    """Decode (without consuming) past every transaction open when ``slot`` was created.

    Postgres 15.20 can create a logical slot, under concurrent TRUNCATE or DDL, whose first decode
    fails forever with "could not map filenode ... to relation OID" (reproduced here with
    EXPORT_SNAPSHOT about once in 40 creations under the soak workload). Only transactions open at
    the slot's start are exposed, so once they have ended and decoded cleanly the slot is sound; a
    broken one is reported (False) while nothing has been landed from it yet. A slot that cannot be
    checked (those transactions outlive ``timeout``) is an error, never taken as sound.
    """
    open_now = """
        select backend_xid::text from pg_stat_activity
        where datname = current_database() and backend_xid is not null
        union
        select transaction::text from pg_prepared_xacts where database = current_database()
    """
    timeout = VALIDATION_TIMEOUT if timeout is None else timeout
    waiting_for = {row[0] for row in conn.execute(open_now)}
    deadline = time.monotonic() + timeout
    while waiting_for:
        if time.monotonic() > deadline:
            raise CaptureError(
                f"slot '{slot}' could not be validated: {len(waiting_for)} transactions open at its "
                f"creation still run after {timeout:g}s (xids {', '.join(sorted(waiting_for)[:5])}); "
                "the slot is dropped, run again once they have ended"
            )
        time.sleep(0.05)
        waiting_for &= {row[0] for row in conn.execute(open_now)}
    upto = wal_flush_lsn(conn)
    try:
        decode_count(conn, slot, upto)
    except CaptureError as exc:
        if BROKEN_SLOT_MARKER in str(exc):
            log(f"slot '{slot}' cannot decode its first transactions ({exc})")
            return False
        raise
    return True


def peek(conn: psycopg.Connection, slot: str, upto_lsn: int | None, upto_nchanges: int | None):
    """The slot's ``(lsn, data)`` rows up to ``upto_lsn`` / about ``upto_nchanges``, not consumed."""
    return _peek(conn, "lsn::text, data", slot, upto_lsn, upto_nchanges).fetchall()


def decode_count(conn: psycopg.Connection, slot: str, upto_lsn: int) -> int:
    """Decode ``slot`` up to ``upto_lsn`` without consuming it, and count the rows: the rows stay in
    the server (a new slot's check decodes everything written during a snapshot, which can be
    far more than fits in this process)."""
    return _peek(conn, "count(*)", slot, upto_lsn, None).fetchone()[0]


def _peek(conn: psycopg.Connection, select: str, slot: str, upto_lsn: int | None, upto_nchanges: int | None):
    query = (
        f"select {select} from pg_logical_slot_peek_changes(%s, %s::pg_lsn, %s, "
        + ", ".join(["%s"] * len(WAL2JSON_OPTIONS))
        + ")"
    )
    params = (slot, format_lsn(upto_lsn) if upto_lsn is not None else None, upto_nchanges, *WAL2JSON_OPTIONS)
    try:
        return conn.execute(query, params)
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
