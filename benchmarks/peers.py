"""The peers on the main zone: a hand-written PySpark job and DuckDB, each timed as its two steps.

Each peer reads the history's files and writes a change log (parse, dedup, seq) and the state
(flatten), as wal_lake's marts do (benchmarks/peer_pyspark.py, benchmarks/peer_duckdb.py). The
PySpark peer runs on the run's session (the driver's peak memory); DuckDB in this process (its
resident set), and only where duckdb is installed. Checks: a peer's log holds every change and its
state as many rows as wal_lake's consumer_records. A peer's output is removed after its checks.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from benchmarks import PeerResult
from benchmarks import generate as gen
from benchmarks.bench import Bench
from benchmarks.memory import MemoryMonitor
from benchmarks.results import PEER_LOG, PEER_STATE, Stage


def peer_stages(bench: Bench, zone: gen.Zone, history: int, wal_lake_live: int) -> None:
    """Both peers on the history's files, unless ``--skip-duckdb`` or duckdb is not installed."""
    from benchmarks import peer_pyspark

    files = zone.history_files()
    out = bench.scratch / "peer_pyspark"
    bench.log(f"peer PySpark on {len(files)} files")
    bench.memory.start_stage()
    result = peer_pyspark.run(bench.spark, files, str(out))
    peak = bench.memory.end_stage()
    _add_stages(bench, "PySpark", result, history, peak)
    _peer_done(bench, "PySpark", result, f"driver peak {peak:,.0f} MB", history, wal_lake_live, out)

    if bench.args.skip_duckdb:
        return
    try:
        import duckdb  # noqa: F401

        from benchmarks import peer_duckdb
    except ImportError:
        bench.log("peer DuckDB skipped: duckdb is not installed (pip install -r benchmarks/requirements.txt)")
        return
    out = bench.scratch / "peer_duckdb"
    out.mkdir(exist_ok=True)
    bench.log(f"peer DuckDB ({bench.args.duckdb_threads} threads) on {len(files)} files")
    me = MemoryMonitor(os.getpid())
    me.start_stage()
    result = peer_duckdb.run(files, str(out), threads=bench.args.duckdb_threads)
    peak = me.end_stage()
    _add_stages(bench, "DuckDB", result, history, peak, note="python process RSS")
    _peer_done(bench, "DuckDB", result, f"process peak {peak:,.0f} MB", history, wal_lake_live, out)


def _add_stages(
    bench: Bench, name: str, result: PeerResult, history: int, peak: float, note: str = ""
) -> None:
    """A peer's two steps as stages (the peak is the whole job's: one figure for both)."""
    for step, seconds in ((PEER_LOG, result.log_seconds), (PEER_STATE, result.state_seconds)):
        bench.results.stages.append(Stage(f"peer {name}: {step}", seconds, history, peak, note=note))


def _peer_done(
    bench: Bench, name: str, result: PeerResult, peak: str, history: int, wal_lake_live: int, out: Path
) -> None:
    """Log a peer's figures, check its row counts against wal_lake's, remove its output."""
    bench.log(f"peer {name}: log {result.log_seconds:.1f}s, state {result.state_seconds:.1f}s, {peak}")
    bench.check(f"peer {name} log rows", result.log_rows == history, f"{result.log_rows:,}")
    bench.check(
        f"peer {name} state rows == wal_lake consumer_records",
        result.state_rows == wal_lake_live,
        f"{result.state_rows:,} vs {wal_lake_live:,}",
    )
    shutil.rmtree(out, ignore_errors=True)
