"""The faulted warehouse, whose runs are killed, and the undisturbed reference it must equal.

- ``Warehouse``: one landing zone and one warehouse; every run is a pipeline step in a process of
  its own (``python -m testkit.faults step``), in a session of its own so that a SIGKILL takes the
  whole process group, Python and its Spark JVM, as when a machine dies. ``run_and_kill`` watches
  the warehouse every 20 ms and kills at the run's kill point; a run that ends first is recorded as
  such. A step that completed a run may stay and be the next run (``complete(serve=True)``,
  ``next_run``): one JVM start fewer.
- ``Reference``: the same pipeline and dump on a Spark session of this process, since nothing kills
  it; its tables are the steps' schemas in that session's warehouse, dropped first and at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

from python_jobs.spark_session import PROJECT_DIR
from testkit.faults.pipeline import (
    PARSE_STATE,
    RAW_SCHEMA,
    SCHEMA,
    dump_tables,
    files_under,
    jvm_tmp_env,
    pipeline,
    pipeline_env,
)
from testkit.faults.plan import Kill


class Warehouse:
    """One landing zone and one warehouse; runs pipeline steps in fresh processes against them."""

    def __init__(self, root: Path, max_files_per_batch: int, parse_state: Path | None = None):
        self.root = root
        self.landing = root / "landing"
        self.spark_dir = root / "spark"
        self.warehouse = self.spark_dir / "warehouse"
        self.max_files_per_batch = max_files_per_batch
        self.parse_state = parse_state
        self.landing.mkdir(parents=True, exist_ok=True)
        self.runs = 0
        self.requests = root / "requests"
        # A step process that completed a run and waits to run once more (``step`` with ``serve``).
        self.server: subprocess.Popen | None = None

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(pipeline_env(self.root / f"target_{self.runs}", self.root / "logs"))
        env["WAL_LAKE_SPARK_DIR"] = str(self.spark_dir)
        env.update(jvm_tmp_env(self.root / "jvm_tmp"))
        env.setdefault("WAL_LAKE_CORES", "2")
        # A few thousand rows: the default 4g only lets the heap grow (two steps run at once).
        env.setdefault("WAL_LAKE_DRIVER_MEMORY", "2g")
        return env

    def start(self, dump: Path | None = None, serve: bool = False) -> subprocess.Popen:
        self.runs += 1
        if self.parse_state is not None:
            target = self.root / f"target_{self.runs}"
            target.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.parse_state, target / PARSE_STATE)
        cmd = [sys.executable, "-m", "testkit.faults", "step", "--landing", str(self.landing)]
        cmd += ["--max-files-per-batch", str(self.max_files_per_batch)]
        if dump is not None:
            cmd += ["--dump", str(dump)]
        if serve:
            self.requests.mkdir(exist_ok=True)
            cmd += ["--serve", str(self.requests)]
        log = open(self.root / f"run_{self.runs}.log", "w")  # noqa: SIM115 (closed with the process)
        proc = subprocess.Popen(
            cmd, cwd=PROJECT_DIR, env=self.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        proc.log = log  # type: ignore[attr-defined]
        return proc

    def finish(self, proc: subprocess.Popen, timeout: float = 900) -> int:
        try:
            rc = proc.wait(timeout)
        finally:
            proc.log.close()  # type: ignore[attr-defined]
        return rc

    def complete(self, tag: str, serve: bool = False) -> dict[str, list[str]]:
        """Run a step to completion and return its dump; fail with the log tail otherwise. ``serve``:
        the process stays, waiting to be the next run (``next_run``)."""
        dump = self.root / f"dump_{tag}.json"
        proc = self.start(dump, serve=serve)
        if serve:
            while not dump.exists() and proc.poll() is None:
                time.sleep(0.05)
            if not dump.exists():
                self._failed(tag, self.finish(proc))
            self.server = proc
        else:
            rc = self.finish(proc)
            if rc != 0:
                self._failed(tag, rc)
        return json.loads(dump.read_text())

    def _failed(self, tag: str, rc: int) -> None:
        tail = (self.root / f"run_{self.runs}.log").read_text().splitlines()[-25:]
        raise RuntimeError(f"pipeline step '{tag}' in {self.root} exited {rc}:\n" + "\n".join(tail))

    def request(self, **request) -> None:
        tmp = self.requests / "request.tmp"
        tmp.write_text(json.dumps(request))
        tmp.rename(self.requests / "request.json")

    def next_run(self) -> subprocess.Popen:
        """A run without a dump, ending its process: the waiting one's last run if there is one (it
        saves a JVM start and a cold first run), else a new process."""
        if self.server is None:
            return self.start()
        proc, self.server = self.server, None
        self.request(dump=None, last=True)
        return proc

    def stop_server(self, kill: bool = False) -> None:
        if self.server is not None:
            proc, self.server = self.server, None
            if kill:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                self.request(stop=True)
            self.finish(proc)

    def written(self) -> set[str]:
        """Every file under the warehouse."""
        return files_under(self.warehouse)

    def run_and_kill(self, kill: Kill) -> None:
        """Run a step and SIGKILL its process group at the kill point (unless it ends first)."""
        before = self.written()
        kind, _, arg = kill.point.partition(":")
        merge_table = self.warehouse / f"{SCHEMA}.db" / arg if kind == "mid-merge" else None
        merge_commits = _commits(merge_table) if merge_table else set()
        merge_data = _data_files(merge_table) if merge_table else set()
        proc = self.next_run()
        started = time.monotonic()
        while proc.poll() is None:
            if kind == "seconds":
                hit = time.monotonic() - started >= float(arg)
            elif kind == "files":
                hit = len(self.written() - before) >= int(arg)
            else:
                new = sorted(_data_files(merge_table) - merge_data)
                commits = _commits(merge_table)
                if commits - merge_commits:  # it committed between two looks: wait for the next one
                    merge_commits, merge_data = commits, _data_files(merge_table)
                    hit = False
                else:
                    hit = bool(new)
            if hit:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                kill.happened = True
                latest = sorted(self.written() - before, key=_mtime)
                kill.at = _short(latest[-1], self.warehouse) if latest else "nothing written yet"
                kill.at += f" ({len(latest)} files written, {time.monotonic() - started:.1f}s)"
                break
            time.sleep(0.02)
        self.finish(proc)
        # A killed JVM can leave the Derby metastore's lock files; Derby reclaims them on the next boot.


class Reference:
    """The undisturbed reference: the same pipeline and dump as a step's, run on a Spark session of
    this process (the test session's, warm already), with a landing zone of its own. Nothing kills
    it, so it needs no process of its own: no JVM to start, no cold first run. Its tables are the
    steps' schemas in that session's warehouse, dropped first and at the end."""

    SCHEMAS = (RAW_SCHEMA, SCHEMA, f"{SCHEMA}_audit")

    def __init__(self, spark, root: Path, max_files_per_batch: int, parse_state: Path | None = None):
        self.spark = spark
        self.root = root
        self.landing = root / "landing"
        self.landing.mkdir(parents=True, exist_ok=True)
        self.max_files_per_batch = max_files_per_batch
        self.target = root / "target"
        self.target.mkdir(exist_ok=True)
        if parse_state is not None:
            shutil.copyfile(parse_state, self.target / PARSE_STATE)
        warehouse = Path(spark.conf.get("spark.sql.warehouse.dir").removeprefix("file:")).resolve()
        self.dirs = [warehouse / f"{schema}.db" for schema in self.SCHEMAS]
        self.drop()

    def drop(self) -> None:
        for schema in self.SCHEMAS:
            self.spark.sql(f"drop schema if exists {schema} cascade")

    def written(self) -> set[str]:
        """Every file under the reference's schemas (what a step's whole warehouse holds)."""
        return files_under(*self.dirs)

    def run(self, tag: str, verify: bool = False) -> dict[str, list[str]]:
        """One pipeline run over what has been delivered, then the dump; fail with the log's tail."""
        env = pipeline_env(self.target, self.root / "logs")
        log_path = self.root / f"run_{tag}.log"
        with mock.patch.dict(os.environ, env), log_path.open("w") as log:
            ok = pipeline(self.spark, self.landing, self.max_files_per_batch, dbt_args=("--quiet",), out=log)
        if not ok:
            tail = "\n".join(log_path.read_text().splitlines()[-25:])
            logs = self.root / "logs"
            raise RuntimeError(f"the reference's run '{tag}' failed (dbt's log in {logs}):\n{tail}")
        if verify:
            from testkit.warehouse import spark_query
            from testkit.warehouse import verify as verify_state

            if verify_state(spark_query(self.spark), self.landing, SCHEMA):
                raise RuntimeError("the reference's consumer_records differ from the sample's expected state")
        return dump_tables(self.spark, self.landing)


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except FileNotFoundError:
        return 0.0


def _commits(table: Path | None) -> set[str]:
    log = table / "_delta_log" if table else None
    return {p.name for p in log.glob("*.json")} if log and log.is_dir() else set()


def _data_files(table: Path | None) -> set[str]:
    return {p.name for p in table.glob("*.parquet")} if table and table.is_dir() else set()


def _short(path: str, root: Path) -> str:
    return os.path.relpath(path, root)
