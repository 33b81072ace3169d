"""Landing files: their names, and writing them so that each is either absent or complete.

A file is written to a hidden temporary file in its final directory (readers skip dot files),
fsynced, renamed and the directory fsynced: only then may the slot advance past what it holds.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from python_jobs.capture.session import CaptureError
from python_jobs.lsn import lsn_hex16

SNAPSHOT_SUFFIX = "-snapshot.jsonl"


def landing_file_name(first_commit_lsn: int, end_lsn: int) -> str:
    """``<first commit LSN>-<end LSN>.jsonl``, the end being where the slot stands after the file.

    Not the last commit's LSN: a non-transactional message and the next transaction's commit can
    share one LSN, and a file holding only the message would take the transaction's file's name.
    Ends strictly grow from one file to the next, and the message's file sorts first."""
    return f"{lsn_hex16(first_commit_lsn)}-{lsn_hex16(end_lsn)}.jsonl"


SNAPSHOT_NAME = re.compile(r"[0-9A-F]{16}-[0-9A-F]{16}-snapshot(-[0-9]{6})?\.jsonl")
# A snapshot's unpublished parts: hidden (readers skip dot files), named so a rerun finds them.
SNAPSHOT_PART_PREFIX = ".snapshot-"
SNAPSHOT_PART_SUFFIX = ".partial"


def snapshot_file_name(lsn: int, part: int = 1, parts: int = 1) -> str:
    """``<lsn>-<lsn>-snapshot.jsonl`` for a snapshot in one file, ``<lsn>-<lsn>-snapshot-<part>.jsonl``
    (6 digits from 000001) for each of a snapshot's several files. Either sorts before a streamed
    ``<lsn>-<lsn>.jsonl`` ('-' < '.'), and the parts sort in their order."""
    head = f"{lsn_hex16(lsn)}-{lsn_hex16(lsn)}"
    return f"{head}{SNAPSHOT_SUFFIX}" if parts == 1 else f"{head}-snapshot-{part:06d}.jsonl"


def is_snapshot_file(name: str) -> bool:
    return SNAPSHOT_NAME.fullmatch(name) is not None


def has_snapshot(directory: Path) -> bool:
    return directory.is_dir() and any(is_snapshot_file(p.name) for p in directory.iterdir())


def sync_directory(directory: Path) -> None:
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


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
    sync_directory(temporary.parent)
    return target


def write_durably(directory: Path, name: str, lines: Iterable[str]) -> Path:
    """Write ``lines`` to ``directory/name`` so that the file is either absent or complete and synced."""
    return publish(write_temporary(directory, lines), name)


def read_json_file(path: Path, what: str) -> dict | None:
    """A state file written by ``write_durably``: its JSON, or None when there is none. ``what`` names
    it in the error an unreadable one gives (the run stops rather than guess where it was)."""
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CaptureError(f"cannot read {what} {path}: {exc}") from exc


class PartWriter:
    """Rows streamed into a numbered series of hidden temporary files of about ``file_bytes`` each.

    ``write`` takes whole lines (each ends with a newline) and buffers up to a block before writing
    it (through ``block_filter`` when given), so memory stays a block whatever the table's size; a
    file is closed and synced once it reaches ``file_bytes``, always at a line's end. ``mark`` and
    ``rollback`` undo what was written since the mark (a table whose read must start again). Nothing
    is published here.
    """

    BLOCK_BYTES = 1 << 20

    def __init__(
        self,
        directory: Path,
        label: str,
        file_bytes: int,
        first_line: bytes = b"",
        block_filter: Callable[[bytearray], bytes | bytearray] | None = None,
    ) -> None:
        self.directory = directory
        self.block_filter = block_filter
        self.label = label
        self.file_bytes = file_bytes
        self.block_bytes = min(self.BLOCK_BYTES, file_bytes)
        self.parts: list[Path] = []
        self.bytes_written = len(first_line)
        # Callers on a hot path may append lines to ``buffer`` themselves and call ``flush`` once it
        # holds ``block_bytes``: one method call a block instead of one a line.
        self.buffer = bytearray()
        self._handle = None
        self._open_next()
        self._handle.write(first_line)  # not through the buffer: flush counts the lines it writes

    def _open_next(self) -> None:
        path = (
            self.directory
            / f"{SNAPSHOT_PART_PREFIX}{self.label}-{len(self.parts) + 1:06d}{SNAPSHOT_PART_SUFFIX}"
        )
        self.parts.append(path)
        self._handle = open(path, "wb")  # noqa: SIM115 (closed by _close_current)

    def _close_current(self) -> None:
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._handle.close()

    def write(self, line: bytes | memoryview) -> None:
        self.buffer += line
        if len(self.buffer) >= self.block_bytes:
            self.flush()

    def flush(self) -> int:
        """Write the buffer out (starting a new file when this one is full); the lines written."""
        if not self.buffer:
            return 0
        block = self.block_filter(self.buffer) if self.block_filter else self.buffer
        self._handle.write(block)
        self.bytes_written += len(block)
        self.buffer.clear()
        if self._handle.tell() >= self.file_bytes:
            self._close_current()
            self._open_next()
        return block.count(b"\n")

    def mark(self) -> tuple[int, int, int]:
        self.flush()
        return len(self.parts), self._handle.tell(), self.bytes_written

    def rollback(self, mark: tuple[int, int, int]) -> None:
        parts, offset, bytes_written = mark
        self.buffer.clear()
        self._handle.close()
        for path in self.parts[parts:]:
            path.unlink(missing_ok=True)
        del self.parts[parts:]
        self._handle = open(self.parts[-1], "r+b")  # noqa: SIM115 (closed by _close_current)
        self._handle.truncate(offset)
        self._handle.seek(offset)
        self.bytes_written = bytes_written

    def close(self) -> list[Path]:
        """Flush and sync; the parts that hold anything, in order (empty ones are removed)."""
        self.flush()
        self._close_current()
        kept = []
        for path in self.parts:
            if path.stat().st_size:
                kept.append(path)
            else:
                path.unlink()
        self.parts = kept
        return kept


def merge_small_parts(parts: list[Path], file_bytes: int) -> list[Path]:
    """Append each part to the one before it while both fit in ``file_bytes`` together: several
    writers each leave a partly filled last file, and a small snapshot stays one file. Copies at
    most ``file_bytes`` per writer."""
    merged: list[Path] = []
    for path in parts:
        if merged and merged[-1].stat().st_size + path.stat().st_size <= file_bytes:
            with open(merged[-1], "ab") as target, open(path, "rb") as source:
                shutil.copyfileobj(source, target, PartWriter.BLOCK_BYTES)
                target.flush()
                os.fsync(target.fileno())
            path.unlink()
        else:
            merged.append(path)
    return merged
