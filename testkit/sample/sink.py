"""The sink: one source's lines into rotated files named after their first LSN, with the file anomalies.

Files are rotated every ``lines_per_file`` lines and named ``%016X.jsonl`` after the first LSN they
hold, so names sort in WAL order. The sink also counts what it writes, for the manifest.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from pathlib import Path

# What a written line is, for the manifest's counts.
CHANGE, CONTROL, MALFORMED = "change", "control", "malformed"


@dataclass
class SourceStats:
    lines: int = 0
    changes_written: int = 0
    distinct_positions: int = 0
    control_lines: int = 0
    malformed_lines: int = 0
    duplicate_change_lines: int = 0
    pending_lines: int = 0
    files: list[str] = field(default_factory=list)
    anomalies: dict[str, str] = field(default_factory=dict)


class Sink:
    """Writes one source's lines to rotated files, adding the split, replay and copy anomalies.

    File ``n`` (0-based) ends mid-transaction when ``n == 0`` (a split transaction); file 2 starts
    with a replay of the last two complete transactions of file 1; file 3 is copied verbatim under
    a name that sorts right after it. Other rotations happen between transactions.
    """

    REPLAY_TRANSACTIONS = 2
    COPIED_FILE = 3  # 0-based

    def __init__(self, folder: Path, lines_per_file: int, compress: bool):
        self.folder = folder
        self.lines_per_file = lines_per_file
        self.compress = compress
        self.stats = SourceStats()
        self.fh = None
        self.path: Path | None = None
        self.file_lines = 0
        self.first_lsn = -1
        self.opened = 0  # files opened so far, copies not counted
        self.recent: list[list[tuple[int, str, str]]] = []  # complete transactions of this file
        self.kinds_in_copied_file: dict[str, str] = {}  # line -> kind, to count the copy's lines
        folder.mkdir(parents=True, exist_ok=True)

    def _open(self, first_lsn: int) -> None:
        suffix = ".jsonl.gz" if self.compress else ".jsonl"
        self.path = self.folder / f"{first_lsn:016X}{suffix}"
        if self.path.exists():  # two files starting at one LSN cannot happen in WAL; be loud
            raise RuntimeError(f"refusing to overwrite {self.path}")
        self.fh = gzip.open(self.path, "wt", compresslevel=1) if self.compress else open(self.path, "w")
        self.file_lines = 0
        self.first_lsn = first_lsn
        self.stats.files.append(self.path.name)
        self.opened += 1

    def _close(self) -> None:
        if self.fh is None:
            return
        self.fh.close()
        self.fh = None
        if self.opened - 1 == self.COPIED_FILE:
            self._copy(self.path)

    def _copy(self, path: Path) -> None:
        name = path.name.split(".", 1)
        copy = path.with_name(f"{name[0]}_copy.{name[1]}")
        copy.write_bytes(path.read_bytes())
        opener = gzip.open if self.compress else open
        with opener(copy, "rt") as fh:
            for line in fh:
                self._count(line.rstrip("\n"), None, duplicate=True)
        self.stats.files.append(copy.name)
        self.stats.anomalies["copied_file"] = f"{path.name} -> {copy.name}"

    def _count(self, line: str, kind: str | None, duplicate: bool) -> None:
        if kind is None:  # classify a copied line
            kind = self.kinds_in_copied_file.get(line, MALFORMED)
        self.stats.lines += 1
        if kind == CHANGE:
            self.stats.changes_written += 1
            if duplicate:
                self.stats.duplicate_change_lines += 1
            else:
                self.stats.distinct_positions += 1
        elif kind == CONTROL:
            self.stats.control_lines += 1
        else:
            self.stats.malformed_lines += 1

    def _write(self, lsn: int, line: str, kind: str, duplicate: bool = False) -> None:
        if self.fh is None:
            self._open(lsn)
        self.fh.write(line)
        self.fh.write("\n")
        self.file_lines += 1
        if self.opened - 1 == self.COPIED_FILE:  # remember what it holds, to count its copy
            self.kinds_in_copied_file[line] = kind
        self._count(line, kind, duplicate)

    def _rotate(self) -> None:
        self._close()
        if self.opened == 2 and len(self.recent) >= self.REPLAY_TRANSACTIONS + 1:
            replay = self.recent[-self.REPLAY_TRANSACTIONS :]
            self.stats.anomalies["replayed_transactions"] = (
                f"last {self.REPLAY_TRANSACTIONS} transactions of {self.stats.files[-1]} "
                "again at the start of the next file"
            )
            for txn_lines in replay:
                for lsn, line, kind in txn_lines:
                    self._write(lsn, line, kind, duplicate=True)
            self.recent = list(replay)
        else:
            self.recent = []

    def write_transaction(self, lines: list[tuple[int, str, str]]) -> None:
        split_pending = self.opened == 1 and "split_transaction" not in self.stats.anomalies
        full = self.file_lines >= self.lines_per_file
        # The first file stays open past its size until a transaction straddles its end, so that
        # every landing zone holds a split transaction (unless the first file grows far too big).
        if self.fh is not None and full and (not split_pending or self.file_lines >= 3 * self.lines_per_file):
            self._rotate()
        if self._splits(lines):
            self._write_split(lines)
            return
        for lsn, line, kind in lines:
            self._write(lsn, line, kind)
        self.recent.append(lines)
        del self.recent[: -self.REPLAY_TRANSACTIONS - 1]

    def _splits(self, lines: list[tuple[int, str, str]]) -> bool:
        """Whether this transaction is the one to split across the end of the first file."""
        return (
            self.fh is not None
            and self.opened == 1
            and "split_transaction" not in self.stats.anomalies
            and self.file_lines + len(lines) > self.lines_per_file
            and len(lines) >= 2
            and lines[len(lines) // 2][0] > self.first_lsn  # the second half's file needs a name of its own
        )

    def _write_split(self, lines: list[tuple[int, str, str]]) -> None:
        cut = len(lines) // 2
        for lsn, line, kind in lines[:cut]:
            self._write(lsn, line, kind)
        self._close()
        self.recent = []
        for lsn, line, kind in lines[cut:]:
            self._write(lsn, line, kind)
        self.stats.anomalies["split_transaction"] = f"{self.stats.files[-2]} -> {self.stats.files[-1]}"

    def write_malformed(self, lsn: int, lines: list[str]) -> None:
        for line in lines:
            self._write(lsn, line, MALFORMED)

    def close(self) -> None:
        self._close()
