"""Cutting the rows a slot peek returns after the last complete transaction: a file holds whole
transactions only, and the slot advances to the end of the last one landed."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from python_jobs.capture.session import CaptureError
from python_jobs.lsn import parse_lsn

ACTION_BEGIN = "B"
ACTION_COMMIT = "C"
ACTION_MESSAGE = "M"


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
    transaction, at the end of its record). Decoding skips a record that starts below the confirmed
    position, so confirming the message's own LSN skips the message and nothing else: the next commit
    record may start exactly there (and one byte further would skip that whole transaction).
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
            batch.advance_to = message_lsn
        else:
            raise CaptureError(f"unexpected wal2json record outside a transaction at {row_lsn}: {data[:200]}")
    return batch
