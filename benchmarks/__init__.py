"""Benchmarks of wal_lake against its peers (see BENCHMARKS.md): ``python -m benchmarks.run``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PeerResult:
    """What a peer job measured: seconds of its log and state steps, and the rows of each."""

    log_seconds: float
    state_seconds: float
    log_rows: int
    state_rows: int

    @property
    def seconds(self) -> float:
        return self.log_seconds + self.state_seconds
