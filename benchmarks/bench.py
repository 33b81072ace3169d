"""One benchmark run's Spark session and its measure: a timed stage, a check, dbt in-process.

Every stage module runs its steps through ``Bench.measure``, which times one call, records the
driver's peak memory over it (benchmarks/memory.py) and, for a dbt run, the models' own execution
time, and appends the ``Stage`` to the run's results. dbt runs in-process on the same session (as
in python_jobs/demo.py), with wal_lake's profiles, whichever project it runs. A check is recorded,
never raised: the report lists it, and a failed one makes the run exit 1.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from benchmarks.memory import MemoryMonitor, find_jvm
from benchmarks.results import Results, Stage

PROJECT_DIR = Path(__file__).resolve().parent.parent


class Bench:
    """The run's arguments, scratch directory, results and Spark session (started by ``start_spark``)."""

    def __init__(self, args: argparse.Namespace, scratch: Path, results: Results):
        self.args = args
        self.scratch = scratch
        self.results = results
        self.spark = None
        self.memory: MemoryMonitor | None = None
        self.node_seconds: dict[str, float] = {}  # the last dbt invocation's nodes, by name

    def log(self, text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)

    def measure(self, name: str, changes: int, fn, note: str = "") -> tuple[Stage, object]:
        self.log(f"{name}: started ({changes:,} changes)")
        self.memory.start_stage()
        t0 = time.monotonic()
        value = fn()
        seconds = time.monotonic() - t0
        stage = Stage(name, seconds, changes, self.memory.end_stage(), note=note)
        if isinstance(value, float):  # a dbt run returns the model's execution time
            stage.model_seconds = value
        self.results.stages.append(stage)
        self.log(
            f"{name}: {seconds:.1f}s, {stage.rate:,.0f} changes/s, driver peak {stage.peak_mb:,.0f} MB"
            + (f" (model {stage.model_seconds:.1f}s)" if stage.model_seconds is not None else "")
        )
        return stage, value

    def check(self, what: str, ok: bool, detail: str) -> None:
        self.results.checks.append((what, ok, detail))
        self.log(f"check {what}: {'ok' if ok else 'FAILED'} ({detail})")

    def dbt(self, *args: str, project: Path = PROJECT_DIR) -> float:
        """Run dbt in-process on the session (on ``project``, with wal_lake's profiles); return the
        summed execution time of its nodes."""
        from dbt.cli.main import dbtRunner

        result = dbtRunner().invoke(
            [*args, "--quiet", "--project-dir", str(project), "--profiles-dir", str(PROJECT_DIR)]
        )
        if not result.success:
            raise RuntimeError(f"dbt {' '.join(args)} failed: {result.exception}")
        nodes = result.result.results
        self.node_seconds = {r.node.name: float(r.execution_time) for r in nodes}
        if len(nodes) > 1 and args[0] == "run":
            self.log("  models: " + ", ".join(f"{r.node.name} {r.execution_time:.1f}s" for r in nodes))
        if args[0] == "build":
            self.log(f"  {len(nodes)} nodes; the slowest: " + _slowest(nodes))
        return float(sum(r.execution_time for r in nodes))

    def count(self, table: str) -> int:
        return self.spark.table(table).count()

    def start_spark(self) -> None:
        from python_jobs.spark_session import get_spark

        self.log("starting Spark (embedded, local target, scratch warehouse)")
        self.spark = get_spark("wal_lake_bench")
        self.memory = MemoryMonitor(find_jvm())
        self.log(f"Spark {self.spark.version}, driver JVM pid {self.memory.pid}")

    def parsed(self, files: list[str]):
        """The files' lines parsed with the ingestion job's line schema, as one struct column ``r``."""
        from pyspark.sql import functions as F

        from python_jobs.ingest.wal2json import RECORD_SCHEMA

        return self.spark.read.text(files).select(F.from_json("value", RECORD_SCHEMA).alias("r"))


def _slowest(nodes, n: int = 12) -> str:
    """The n slowest of a build's nodes, with their seconds, and the seconds of all its data tests."""
    top = sorted(nodes, key=lambda r: r.execution_time, reverse=True)[:n]
    tests = [r.execution_time for r in nodes if r.node.resource_type == "test"]
    return ", ".join(f"{r.node.name} {r.execution_time:.1f}s" for r in top) + (
        f"; {len(tests)} data tests {sum(tests):.1f}s in all" if tests else ""
    )
