"""``python -m python_jobs.capture``: arguments, the run they describe, and the exit status."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

import psycopg

from python_jobs.capture.resnapshot import DEFAULT_CHUNK_ROWS, Resnapshot, Watcher
from python_jobs.capture.session import CaptureError, connect, first_line, pin_settings
from python_jobs.capture.slot import (
    check_slot,
    create_validated_slot,
    lock_slot,
    settled_lsn,
    slot_info,
)
from python_jobs.capture.snapshot import (
    DEFAULT_FILE_MB,
    DEFAULT_JOBS,
    SnapshotOptions,
    snapshot_unless_landed,
)
from python_jobs.capture.stream import Totals, drain, follow


def run(args: argparse.Namespace, stop: threading.Event) -> Totals:
    """Capture as ``args`` say until the slot is drained (``--once``) or ``stop`` is set."""
    log = _quiet if args.quiet else _to_stderr
    conn = connect(args.dsn)
    totals = Totals()
    try:
        pin_settings(conn)
        source_id = args.source_id or f"{conn.info.dbname}.{args.slot}"
        landing_dir = Path(args.landing) / source_id
        check_slot(conn, args.slot, open_slot(conn, args, landing_dir, totals, log))
        lock_slot(conn, args.slot)
        log(f"capturing slot '{args.slot}' of database '{conn.info.dbname}' into {landing_dir}")
        max_changes = args.max_changes_per_file
        watcher = Watcher(args.slot)

        def drain_to(upto: int) -> None:
            drain(
                conn, args.slot, landing_dir, max_changes, totals, log, stop, upto_lsn=upto, rewrite=watcher
            )

        resnapshot = Resnapshot(
            conn, args.slot, landing_dir, watcher, drain_to, stop, log, args.resnapshot_chunk_rows
        )
        totals.resnapshot_rows = resnapshot.run(args.resnapshot)
        if args.once:
            drain_to(settled_lsn(conn))
        else:
            follow(conn, args.slot, landing_dir, max_changes, totals, log, stop, args.poll_interval, watcher)
        print(summary_line(args, source_id, totals, slot_info(conn, args.slot)), flush=True)
    finally:
        release(conn)
    return totals


def release(conn: psycopg.Connection) -> None:
    """Give the slot's lock back before closing: a closed session's server process releases it only
    as it exits, which a capture started right after this one could beat."""
    try:
        if not conn.closed:
            conn.execute("select pg_advisory_unlock_all()")
    except psycopg.Error:
        pass  # the session is gone, and its locks with it
    finally:
        conn.close()


def open_slot(
    conn: psycopg.Connection, args: argparse.Namespace, landing_dir: Path, totals: Totals, log
) -> dict | None:
    """The slot's catalog row, once the slot exists: created (with its snapshot) when it did not."""
    info = slot_info(conn, args.slot)
    if args.snapshot:
        options = SnapshotOptions(int(args.snapshot_file_mb * 1024 * 1024), args.snapshot_jobs)
        totals.snapshot_rows = snapshot_unless_landed(
            args.dsn, args.slot, info is not None, landing_dir, log, _to_stderr, options
        )
        return slot_info(conn, args.slot)
    if info is None:
        create_validated_slot(conn, args.slot, log)
        return slot_info(conn, args.slot)
    return info


def summary_line(args: argparse.Namespace, source_id: str, totals: Totals, final: dict | None) -> str:
    return (
        f"capture: source {source_id}: {totals.files} files, {totals.transactions} transactions, "
        f"{totals.changes} changes"
        + (f", {totals.snapshot_rows} snapshot rows" if args.snapshot else "")
        + (
            f", {totals.resnapshot_rows} re-snapshot rows"
            if totals.resnapshot_rows or args.resnapshot
            else ""
        )
        + f"; slot '{args.slot}' confirmed at {final['confirmed_flush_lsn'] if final else '?'}"
    )


def _quiet(message: str) -> None:
    pass


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m python_jobs.capture",
        description=(
            "Capture Postgres changes through a wal2json logical slot into JSON Lines landing files "
            "(<landing>/<source_id>/<first commit LSN>-<end LSN>.jsonl). The slot advances only "
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
        help="follow mode (the default): seconds to wait once the slot is drained; a steady stream lands "
        "a file about this often (default: %(default)s)",
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
        "one transaction of R (read) records, in as many files as it needs",
    )
    parser.add_argument(
        "--snapshot-file-mb",
        type=float,
        default=DEFAULT_FILE_MB,
        help="--snapshot: start a new snapshot file after about this many MiB (default: %(default)g)",
    )
    parser.add_argument(
        "--snapshot-jobs",
        type=int,
        default=DEFAULT_JOBS,
        help="--snapshot: tables read at once, each through its own connection (default: %(default)s)",
    )
    parser.add_argument(
        "--resnapshot",
        action="append",
        default=[],
        metavar="SCHEMA.TABLE",
        help="read this table again while streaming (repeatable): its landed state is reset and "
        "replaced by its rows, read in primary-key chunks between watermarks written into the WAL; "
        "a run that was stopped is resumed by the next one",
    )
    parser.add_argument(
        "--resnapshot-chunk-rows",
        type=int,
        default=DEFAULT_CHUNK_ROWS,
        help="--resnapshot: rows read (and held in memory) per chunk (default: %(default)s)",
    )
    parser.add_argument("--quiet", action="store_true", help="only print the one-line summary")
    args = parser.parse_args(argv)
    if args.max_changes_per_file < 1:
        parser.error("--max-changes-per-file must be at least 1")
    if args.resnapshot_chunk_rows < 1:
        parser.error("--resnapshot-chunk-rows must be at least 1")
    if args.snapshot_jobs < 1:
        parser.error("--snapshot-jobs must be at least 1")
    if args.snapshot_file_mb * 1024 * 1024 < 1:
        parser.error("--snapshot-file-mb must be more than 0")
    return args


def main(argv: list[str] | None = None, stop: threading.Event | None = None) -> int:
    """Run the capture; the exit status. SIGTERM sets ``stop`` (a new event unless one is passed):
    the file being written is finished, then the job exits."""
    args = parse_args(argv)
    if stop is None:
        stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda _signum, _frame: stop.set())
    try:
        run(args, stop)
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
