"""A process's peak memory per stage, read from /proc: the Spark driver's JVM (or, for DuckDB, this
process).

The driver is the java process below this one (pyspark starts it). A stage's peak is the highest
VmRSS polled every 0.2 s over the stage and, where resetting the high-water mark at its start is
allowed (``clear_refs`` 5), the VmHWM at its end if higher. Without a process, every peak is 0.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def find_jvm(root: int | None = None) -> int | None:
    """The java process below this one (the Spark driver pyspark started)."""
    queue = [root or os.getpid()]
    while queue:
        pid = queue.pop()
        for child in _children(pid):
            try:
                if (Path("/proc") / str(child) / "comm").read_text().strip() == "java":
                    return child
            except OSError:
                continue
            queue.append(child)
    return None


def _status_kb(pid: int, key: str) -> int:
    for line in (Path("/proc") / str(pid) / "status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


class MemoryMonitor:
    """Peak resident set of a process per stage: VmHWM after resetting it (clear_refs 5) at the start
    of the stage, and polled VmRSS as a fallback where the reset is not allowed."""

    def __init__(self, pid: int | None):
        self.pid = pid
        self.peak_kb = 0
        self._stop = threading.Event()
        self._thread = None
        self.can_reset = False

    def start_stage(self) -> None:
        if not self.pid:
            return
        try:
            (Path("/proc") / str(self.pid) / "clear_refs").write_text("5")
            self.can_reset = True
        except OSError:
            self.can_reset = False
        self.peak_kb = _status_kb(self.pid, "VmRSS")
        self._stop.clear()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(0.2):
            try:
                self.peak_kb = max(self.peak_kb, _status_kb(self.pid, "VmRSS"))
            except OSError:
                return

    def end_stage(self) -> float:
        """Peak MB of the stage."""
        if not self.pid:
            return 0.0
        self._stop.set()
        if self._thread:
            self._thread.join()
        peak = self.peak_kb
        if self.can_reset:
            peak = max(peak, _status_kb(self.pid, "VmHWM"))
        return peak / 1024
