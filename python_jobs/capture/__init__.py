"""Capture a Postgres database's changes through a wal2json logical slot into the landing zone.

    python -m python_jobs.capture --dsn "host=... dbname=app" --slot wal_lake --landing landing --once

Each round peeks complete transactions from the slot (``slot``, ``batch``), writes them to
``<landing>/<source_id>/<first commit LSN>-<end LSN>.jsonl`` and makes the file durable
(``files``), and only then advances the slot to that end, just past what the file holds
(``stream``). A crash at any point therefore replays transactions into a later file, never loses
one: the landing zone holds every decoded change at least once. ``--snapshot`` first lands every
user table's rows as of the slot's start, streamed into files of bounded size (``snapshot``).
``cli`` wires these from the command line; docs/capture.md is the contract.
"""

from python_jobs.capture.batch import Batch, complete_prefix
from python_jobs.capture.cli import main, run
from python_jobs.capture.files import (
    SNAPSHOT_SUFFIX,
    is_snapshot_file,
    landing_file_name,
    snapshot_file_name,
)
from python_jobs.capture.session import CaptureError
from python_jobs.capture.slot import peek
from python_jobs.capture.stream import Totals

__all__ = [
    "SNAPSHOT_SUFFIX",
    "Batch",
    "CaptureError",
    "Totals",
    "complete_prefix",
    "is_snapshot_file",
    "landing_file_name",
    "main",
    "peek",
    "run",
    "snapshot_file_name",
]
