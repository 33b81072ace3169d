"""Benchmarks of wal_lake against its peers (see BENCHMARKS.md): ``python -m benchmarks.run``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parent.parent


def use_scratch(scratch: Path, schema: str | None = None) -> None:
    """Point Spark's warehouse and dbt's output into ``scratch`` (nothing is written into the
    repository), on the embedded target, with ``schema`` (and ``<schema>_raw``) when given; the
    working directory becomes the project's, for profiles.yml's relative paths. Call it before
    anything starts Spark or dbt."""
    os.environ["WAL_LAKE_SPARK_DIR"] = str(scratch / "spark")
    os.environ["DBT_TARGET_PATH"] = str(scratch / "dbt_target")
    os.environ["DBT_LOG_PATH"] = str(scratch / "dbt_logs")
    os.environ["WAL_LAKE_TARGET"] = "local"
    if schema:
        os.environ["WAL_LAKE_RAW_SCHEMA"] = f"{schema}_raw"
        os.environ["WAL_LAKE_SCHEMA"] = schema
    os.environ.setdefault("WAL_LAKE_CORES", str(os.cpu_count() or 2))
    os.chdir(PROJECT_DIR)


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
