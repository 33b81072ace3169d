"""Landing files: their names, and writing them so that each is either absent or complete.

A file is written to a hidden temporary file in its final directory (readers skip dot files),
fsynced, renamed and the directory fsynced: only then may the slot advance past what it holds.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from python_jobs.lsn import lsn_hex16

SNAPSHOT_SUFFIX = "-snapshot.jsonl"


def landing_file_name(first_commit_lsn: int, end_lsn: int) -> str:
    """``<first commit LSN>-<end LSN>.jsonl``, the end being where the slot stands after the file.

    Not the last commit's LSN: a non-transactional message and the next transaction's commit can
    share one LSN, and a file holding only the message would take the transaction's file's name.
    Ends strictly grow from one file to the next, and the message's file sorts first."""
    return f"{lsn_hex16(first_commit_lsn)}-{lsn_hex16(end_lsn)}.jsonl"


def snapshot_file_name(lsn: int) -> str:
    # "<lsn>-<lsn>-snapshot.jsonl" sorts before a streamed "<lsn>-<lsn>.jsonl" too ('-' < '.').
    return f"{lsn_hex16(lsn)}-{lsn_hex16(lsn)}{SNAPSHOT_SUFFIX}"


def has_snapshot(directory: Path) -> bool:
    return directory.is_dir() and any(p.name.endswith(SNAPSHOT_SUFFIX) for p in directory.iterdir())


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
