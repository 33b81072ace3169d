"""Streaming: land the slot's complete transactions file by file, advancing the slot after each.

The order is the whole rule: a file is durable before the slot moves past what it holds, so a crash
at any point replays transactions into a later file and never loses one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg

from python_jobs.capture.batch import complete_prefix
from python_jobs.capture.files import landing_file_name, write_durably
from python_jobs.capture.slot import advance, peek
from python_jobs.lsn import format_lsn


@dataclass
class Totals:
    files: int = 0
    transactions: int = 0
    changes: int = 0
    snapshot_rows: int = 0
    resnapshot_rows: int = 0


def drain(
    conn: psycopg.Connection,
    slot: str,
    landing_dir: Path,
    max_changes: int,
    totals: Totals,
    log,
    stop: threading.Event,
    upto_lsn: int | None = None,
    rewrite: Callable[[list[str]], list[str]] | None = None,
    until_caught_up: bool = False,
) -> bool:
    """Land every complete transaction available now (up to ``upto_lsn``); True if any was landed.

    ``stop`` is checked between files: once set, the file being written is finished and no other
    is started. ``rewrite`` (the re-snapshot's watcher) sees every batch's lines, whole transactions
    in WAL order, before they are written, and may add lines to them. ``until_caught_up``: return
    after the first file that a peek did not fill (the slot held less than ``max_changes`` rows),
    so that a follower waits before the next instead of landing each commit in a file of its own.
    """
    landed_any = False
    while not stop.is_set():
        rows = peek(conn, slot, upto_lsn, max_changes)
        batch = complete_prefix(rows)
        if batch.advance_to is None:
            return landed_any
        lines = batch.lines if rewrite is None else rewrite(batch.lines)
        added = len(lines) - len(batch.lines)
        name = landing_file_name(batch.first_commit_lsn, batch.advance_to)
        path = write_durably(landing_dir, name, lines)
        advance(conn, slot, batch.advance_to)
        totals.files += 1
        totals.transactions += batch.transactions
        totals.changes += batch.changes + added
        landed_any = True
        log(
            f"landed {path.name}: {batch.transactions} transactions, {batch.changes + added} changes; "
            f"slot at {format_lsn(batch.advance_to)}"
        )
        if until_caught_up and len(rows) < max_changes:
            return landed_any
    return landed_any


def follow(
    conn: psycopg.Connection,
    slot: str,
    landing_dir: Path,
    max_changes: int,
    totals: Totals,
    log,
    stop: threading.Event,
    poll_interval: float,
    rewrite: Callable[[list[str]], list[str]] | None = None,
) -> None:
    """Keep draining until ``stop`` is set, waiting ``poll_interval`` seconds whenever the slot is
    empty or has been drained to its end. A steady stream is landed in a file a ``poll_interval``
    (or ``max_changes`` rows, when more comes): at 1,000 changes a second, files of about 1,000 rows
    a second rather than one of a few rows for each peek (a file per commit or two, thousands a
    minute, each a file for the ingestion to list, open and record)."""
    while not stop.is_set():
        drain(conn, slot, landing_dir, max_changes, totals, log, stop, rewrite=rewrite, until_caught_up=True)
        # Not stop.wait(): the SIGTERM handler runs on this same thread, and wait() holds the
        # lock that set() takes at moments a signal can arrive.
        time.sleep(poll_interval)
