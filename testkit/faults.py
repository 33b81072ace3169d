"""Fault injection: kill -9 the pipeline at random points, rerun it, compare with an undisturbed run.

The pipeline is one process that lands the landing zone (the ingestion job) and runs the dbt models
on the same Spark session (``step``). ``inject`` builds a seeded sample landing zone, delivers it in
two rounds, and runs the pipeline twice over it in separate warehouses:

- the reference: each round once, undisturbed (and checked against the sample's expected state),
  on the injector's own Spark session (``Reference``: the test session's under pytest), since
  nothing kills it; the faulted steps then also run on other JIT and code-generation settings than
  the run they must equal (``STEP_JVM_OPTIONS``);
- the faulted run: each round's pipeline is killed with SIGKILL (the whole process group: Python
  and its Spark JVM, as when a machine dies) at random points, then rerun until it completes. Kill
  points are counted in files written under the warehouse since the run started (Delta data
  files and commits of every table, so a point falls before, inside or after any write of the
  ingestion job or of a dbt MERGE), or in seconds (during start-up and reading), or are "mid-merge":
  a model's new data files exist and its Delta commit does not yet. The process that completes
  round 1 stays and is round 2's first run (killed mid-merge): one JVM start fewer. Then every
  landing file is delivered again under a new name and two pipelines are started at once: one
  gives way, the other recovers round 2 and lands the replay.

After every round the faulted warehouse must equal the reference, table by table and row for row
(timestamps of the run itself left out); after the replay, the raw tables' rows of the reference's
batches must equal the reference's and the replay's batches hold only copies. The figures (kills,
rows lost, rows duplicated) end in one summary line. Each step's log (run_<n>.log, the reference's
run_round<n>.log) says how long its parts took (``step:`` lines). ``scripts/faults.sh`` runs many
kills; the test suite runs a few (tests/python/test_faults.py).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

from python_jobs.ingest.ledger import DEFAULT_SCHEMA as RAW_SCHEMA
from python_jobs.spark_session import PROJECT_DIR

SCHEMA = "wal_lake"
RAW_TABLES = ("wal_events", "wal_rejects", "wal_frontier", "wal_files", "wal_batches")
MODEL_TABLES = ("sequin_events", "consumer_records", "record_history")
AUDIT_TABLES = ("sequin_violations",)  # built in <schema>_audit (models/audit)
# Columns that record when a run happened (or a copy's mtime), not what it produced.
RUN_COLUMNS = {"ingested_at", "updated_at", "done_at", "planned_at", "modified_at"}
LANDING_MARK = "<landing>"
# What the comparisons read.
MODELS = ("+consumer_records", "+record_history", "+sequin_violations")
# dbt's parsed project, saved once and copied into every run's target: no run parses it again.
PARSE_STATE = "partial_parse.msgpack"
# A step is a short-lived JVM on a few thousand rows: its time goes to start-up, query planning and
# compiling code, not to throughput. The client compiler only (with room for all of Spark's code) and
# no whole-stage code generation make it several times cheaper; what it writes is the same.
STEP_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
STEP_SPARK_CONF = {"spark.sql.codegen.wholeStage": "false"}


# --- the pipeline step (the process that gets killed) ---------------------------------------------


def pipeline_env(target: Path, logs: Path) -> dict[str, str]:
    """The variables a pipeline run (or dbt's parse for one) sees: the local target, the steps'
    schemas, dbt's target and log directories."""
    return {
        "WAL_LAKE_TARGET": "local",
        "WAL_LAKE_SCHEMA": SCHEMA,
        "WAL_LAKE_RAW_SCHEMA": RAW_SCHEMA,
        "DBT_TARGET_PATH": str(target),
        "DBT_LOG_PATH": str(logs),
    }


def files_under(*tops: Path) -> set[str]:
    """Every file under the folders (looked at every 20 ms while a run may be killed: no stat)."""
    return {os.path.join(d, name) for top in tops for d, _, names in os.walk(top) for name in names}


def dump_tables(spark, landing: Path) -> dict[str, list[str]]:
    """Every raw and model table as sorted JSON rows, run timestamps left out and the landing root
    replaced by a mark (the reference and the faulted run land the same files from two folders)."""
    from pyspark.sql import functions as F

    root = str(landing.resolve())
    tables = {}
    names = [f"{RAW_SCHEMA}.{t}" for t in RAW_TABLES] + [f"{SCHEMA}.{t}" for t in MODEL_TABLES]
    names += [f"{SCHEMA}_audit.{t}" for t in AUDIT_TABLES]
    for name in names:
        if not spark.catalog.tableExists(name):
            tables[name] = []
            continue
        df = spark.table(name)
        cols = [c for c in df.columns if c not in RUN_COLUMNS]
        rows = df.select(F.to_json(F.struct(*cols)).alias("j")).collect()
        tables[name] = sorted(r.j.replace(root, LANDING_MARK) for r in rows)
    return tables


def pipeline(
    spark,
    landing: Path,
    max_files_per_batch: int,
    dbt_args: tuple[str, ...] = (),
    out=None,
) -> bool:
    """Land what is new, then build the models the comparisons read (seeding a fresh warehouse first).
    ``out``: where to write how long each part took (the ingestion, each dbt node)."""
    from dbt.cli.main import dbtRunner

    from python_jobs.ingest import job

    started = time.monotonic()
    summary = job.run(
        spark, str(landing.resolve()), schema=RAW_SCHEMA, max_files_per_batch=max_files_per_batch or None
    )
    print(summary.line(), flush=True)
    if out:
        print(f"step: ingestion {time.monotonic() - started:.1f}s", file=out, flush=True)

    def dbt(*args: str) -> bool:
        started = time.monotonic()
        result = dbtRunner().invoke(
            [*args, "--project-dir", str(PROJECT_DIR), "--profiles-dir", str(PROJECT_DIR), *dbt_args]
        )
        if out:
            nodes = getattr(result.result, "results", None) or []
            each = ", ".join(f"{r.node.name} {r.execution_time:.1f}s" for r in nodes)
            print(f"step: dbt {args[0]} {time.monotonic() - started:.1f}s ({each})", file=out, flush=True)
        return bool(result.success)

    if not spark.catalog.tableExists(f"{SCHEMA}.consumer_records") and not dbt("seed"):
        return False
    return dbt("run", "--select", *MODELS)


def short_run_conf() -> dict[str, str]:
    """Spark settings for a short-lived process (STEP_JVM_OPTIONS) on top of the profile's."""
    from python_jobs.spark_session import local_spark_conf

    options = local_spark_conf().get("spark.driver.extraJavaOptions", "")
    return {"spark.driver.extraJavaOptions": f"{options} {STEP_JVM_OPTIONS}".strip(), **STEP_SPARK_CONF}


def step(
    landing: Path,
    dump: Path | None,
    max_files_per_batch: int,
    serve: Path | None = None,
) -> int:
    """The process that gets killed: the pipeline on a Spark session of its own, then the dump.

    ``serve``: after the dump, wait for a request (``serve/request.json``, as ``Warehouse.request``
    writes it) to run once more in the same process, whose JVM is started and warm already."""
    from python_jobs.spark_session import SparkSetupError, get_spark

    started = time.monotonic()
    try:
        spark = get_spark("wal_lake_faults", extra_conf=short_run_conf())
    except SparkSetupError as exc:
        print(f"faults: error: {exc}", file=sys.stderr, flush=True)
        return 2
    print(f"step: Spark session {time.monotonic() - started:.1f}s", flush=True)
    while True:
        if not pipeline(spark, landing, max_files_per_batch, dbt_args=("--quiet",), out=sys.stdout):
            return 1
        if dump is not None:
            started = time.monotonic()
            tmp = dump.with_suffix(".tmp")
            tmp.write_text(json.dumps(dump_tables(spark, landing)))
            tmp.rename(dump)
            print(f"step: dump {time.monotonic() - started:.1f}s", flush=True)
        if serve is None:
            return 0
        request = _next_request(serve)
        if request.get("stop"):
            return 0
        dump = Path(request["dump"]) if request.get("dump") else None
        if request.get("last"):
            serve = None


def _next_request(serve: Path, patience: float = 1800) -> dict:
    """The injector's next request; a stop when none comes (the injector failed and left)."""
    path = serve / "request.json"
    deadline = time.monotonic() + patience
    while not path.exists():
        if time.monotonic() > deadline:
            return {"stop": True}
        time.sleep(0.02)
    request = json.loads(path.read_text())
    path.unlink()
    return request


# --- the injector ---------------------------------------------------------------------------------


@dataclass
class Kill:
    round: int
    point: str  # "files:N", "seconds:S" or "mid-merge:<table>"
    at: str = ""  # what was last written when the process died
    happened: bool = False


@dataclass
class Report:
    kills: list[Kill] = field(default_factory=list)
    concurrent_exit_codes: list[int] = field(default_factory=list)
    concurrent_errors: list[str] = field(default_factory=list)
    comparisons: list[str] = field(default_factory=list)  # "<phase>: equal" or the differences
    rows_lost: int = 0
    rows_duplicated: int = 0
    rows_compared: int = 0
    replayed_lines: int = 0

    @property
    def injected(self) -> int:
        return sum(k.happened for k in self.kills)

    @property
    def ok(self) -> bool:
        return (
            self.rows_lost == 0
            and self.rows_duplicated == 0
            and all(c.endswith(": equal") for c in self.comparisons)
        )

    def line(self) -> str:
        verdict = "ok" if self.ok else "FAILED"
        return (
            f"faults: {self.injected} kills injected ({len(self.kills) - self.injected} runs ended "
            f"before their kill point), 2 concurrent runs (exit codes {self.concurrent_exit_codes}), "
            f"{self.replayed_lines:,} lines replayed; {len(self.comparisons)} comparisons of "
            f"{self.rows_compared:,} rows: {self.rows_lost} lost, {self.rows_duplicated} duplicated "
            f"[{verdict}]"
        )


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


def compare(phase: str, expected: dict[str, list[str]], found: dict[str, list[str]], report: Report) -> None:
    """Row-for-row comparison of two dumps; counts rows lost and rows duplicated."""
    differences = []
    for table in sorted(expected):
        want, got = Counter(expected[table]), Counter(found.get(table, []))
        lost, extra = sum((want - got).values()), sum((got - want).values())
        report.rows_compared += len(expected[table])
        report.rows_lost += lost
        report.rows_duplicated += extra
        if lost or extra:
            sample = next(iter((want - got) or (got - want)))
            differences.append(f"{table}: {lost} lost, {extra} extra (e.g. {sample[:200]})")
    report.comparisons.append(f"{phase}: " + ("; ".join(differences) if differences else "equal"))


def deliver(sample: Path, landing: Path, files: list[tuple[str, str]], prefix: str = "") -> int:
    """Copy sample files into a landing zone the way a writer must: under a hidden name, then renamed
    in. Returns the number of lines delivered."""
    lines = 0
    for source, name in files:
        target_dir = landing / source / prefix if prefix else landing / source
        target_dir.mkdir(parents=True, exist_ok=True)
        tmp = target_dir / f".{name}.part"
        shutil.copyfile(sample / source / name, tmp)
        tmp.rename(target_dir / name)
        lines += sum(1 for _ in (sample / source / name).open("rb"))
    return lines


def plan_kills(rng: random.Random, rounds: int, kills: int, files_per_round: list[int]) -> list[Kill]:
    """Spread the kills over the rounds; the first of round 2 is mid-merge of a model, others random."""
    plan = []
    for i in range(kills):
        rnd = 1 + (i * rounds) // kills if kills >= rounds else rounds - i
        first_of_round = not any(k.round == rnd for k in plan)
        roll = rng.random()
        if rnd > 1 and first_of_round:
            point = f"mid-merge:{rng.choice(['sequin_events', 'source_records', 'consumer_records'])}"
        elif roll < 0.15:
            point = f"seconds:{rng.uniform(1.0, 10.0):.1f}"
        else:
            # A kill run resumes where the last one died, so aim within the first half of a full run.
            point = f"files:{rng.randint(1, max(1, files_per_round[rnd - 1] // 2))}"
        plan.append(Kill(rnd, point))
    return plan


def parse_project(target: Path) -> Path:
    """dbt's parse of the project as the faulted runs see it (their schemas), saved for them to copy."""
    from dbt.cli.main import dbtRunner

    with mock.patch.dict(os.environ, pipeline_env(target, target / "logs")):
        result = dbtRunner().invoke(
            ["parse", "--quiet", "--project-dir", str(PROJECT_DIR), "--profiles-dir", str(PROJECT_DIR)]
        )
    if not result.success:
        raise RuntimeError(f"dbt parse failed: {result.exception}")
    return target / PARSE_STATE


def inject(
    spark,
    workdir: Path,
    kills: int,
    seed: int,
    transactions: int = 200,
    max_files_per_batch: int = 3,
    out=sys.stdout,
) -> Report:
    """The reference on ``spark`` (``Reference``), the faulted runs in step processes of their own,
    all under ``workdir``."""
    from testkit.sample import generate

    def say(text: str) -> None:
        print(text, file=out, flush=True)

    started = time.monotonic()
    rng = random.Random(seed)
    report = Report()
    sample = workdir / "sample"
    if sample.exists():
        shutil.rmtree(sample)
    generate(sample, seed=seed, transactions=transactions)
    manifest = json.loads((sample / "manifest.json").read_text())
    files = [(s, name) for s, info in sorted(manifest["sources"].items()) for name in info["files"]]
    # Round 1: the first half of every source's files; round 2: the rest (an incremental MERGE).
    halves: list[list[tuple[str, str]]] = [[], []]
    for source, info in sorted(manifest["sources"].items()):
        cut = len(info["files"]) // 2
        halves[0] += [(source, n) for n in info["files"][:cut]]
        halves[1] += [(source, n) for n in info["files"][cut:]]
    say(f"faults: seed {seed}, {transactions} transactions, {len(files)} files in 2 rounds; {kills} kills")

    parse_state = parse_project(workdir / "parsed")
    ref = Reference(spark, workdir / "reference", max_files_per_batch, parse_state)
    faulted = Warehouse(workdir / "faulted", max_files_per_batch, parse_state)
    expected: list[dict[str, list[str]]] = []
    files_per_round = []
    for rnd, half in enumerate(halves, 1):
        deliver(sample, ref.landing, half)
        if rnd == 2:  # what the check against the expected state reads
            shutil.copyfile(sample / "manifest.json", ref.landing / "manifest.json")
            for source in manifest["sources"].values():
                shutil.copyfile(sample / source["expected_state"], ref.landing / source["expected_state"])
        before = ref.written()
        t0 = time.monotonic()
        expected.append(ref.run(f"round{rnd}", verify=rnd == 2))
        files_per_round.append(len(ref.written() - before))
        say(
            f"  reference round {rnd}: {files_per_round[-1]} files written in the warehouse, "
            f"{time.monotonic() - t0:.0f}s"
        )
    ref.drop()
    if not expected[-1][f"{SCHEMA}.consumer_records"]:
        raise RuntimeError("the reference run built no consumer_records")

    plan = plan_kills(rng, 2, kills, files_per_round)
    report.kills = plan
    # Round 2's first kill (mid-merge of a model, or the run ending first) comes after its ingestion:
    # the replayed files can then go in before the runs at once without joining round 2's batches.
    fold_replay = any(k.round == 2 for k in plan)
    try:
        _faulted_rounds(sample, files, halves, faulted, plan, expected, fold_replay, report, say)
    finally:
        faulted.stop_server(kill=True)  # none is left unless something above failed
    say(f"{report.line()} in {time.monotonic() - started:.0f}s")
    return report


def _faulted_rounds(sample, files, halves, faulted, plan, expected, fold_replay, report, say) -> None:
    for rnd, half in enumerate(halves, 1):
        deliver(sample, faulted.landing, half)
        for kill in (k for k in plan if k.round == rnd):
            faulted.run_and_kill(kill)
            outcome = f"killed after {kill.at}" if kill.happened else "ended before the kill point"
            say(f"  round {rnd}: kill at {kill.point}: {outcome}")
        if rnd == 1:
            # The process that completes round 1 waits to be round 2's first run (to be killed).
            compare("round 1", expected[0], faulted.complete("round1", serve=fold_replay), report)
            say(f"  {report.comparisons[-1]}")
            continue
        faulted.stop_server()
        phase = "round 2"
        if fold_replay:
            # Every file again, under new names that sort after the originals: a whole landing zone
            # replayed, landed by the run that goes through below.
            report.replayed_lines = deliver(sample, faulted.landing, files, prefix="replay")
            phase = "round 2 with all files replayed"
        # Two pipelines at once on one warehouse: on the local target one must give way (the embedded
        # metastore admits one Spark process) with a one-line error; either way the next run converges.
        dumps = [faulted.root / "dump_concurrent_a.json", faulted.root / "dump_concurrent_b.json"]
        procs = [faulted.start(dumps[0]), faulted.start(dumps[1])]
        report.concurrent_exit_codes = [faulted.finish(p) for p in procs]
        for rc, proc in zip(report.concurrent_exit_codes, procs, strict=True):
            if rc != 0:
                report.concurrent_errors.append(_last_error(Path(proc.log.name)))  # type: ignore[attr-defined]
        say(
            f"  round 2: two pipelines started at once: exit codes {report.concurrent_exit_codes}"
            + "".join(f"; {e}" for e in report.concurrent_errors)
        )
        winners = [d for d, rc in zip(dumps, report.concurrent_exit_codes, strict=True) if rc == 0]
        if winners:  # the run that went through is round 2's result; no extra run needed
            phase += " (two runs at once)"
            found = json.loads(winners[0].read_text())
        else:
            found = faulted.complete("round2")
        if fold_replay:
            check_replay(phase, expected[1], found, report)
            for line in report.comparisons[-2:]:
                say(f"  {line}")
        else:
            compare(phase, expected[1], found, report)
            say(f"  {report.comparisons[-1]}")
            report.replayed_lines = deliver(sample, faulted.landing, files, prefix="replay")
            check_replay("all files replayed", expected[1], faulted.complete("replayed"), report)
            for line in report.comparisons[-2:]:
                say(f"  {line}")


def _last_error(log: Path) -> str:
    lines = [line for line in log.read_text().splitlines() if "error" in line.lower()]
    return lines[-1].strip()[:300] if lines else "(no error line in the log)"


def _is_replay(row: dict) -> bool:
    return "/replay/" in row.get("landing_file", "")


def check_replay(
    phase: str, expected: dict[str, list[str]], found: dict[str, list[str]], report: Report
) -> None:
    """After replaying every file the models (and audit tables) must equal the reference; the raw
    tables' rows of the reference's batches must equal the reference's, row for row; later batches
    (the replay's) may hold only copies of landed events from replayed files, each replayed line
    accounted for (landed, rejected, control, or pending behind a transaction not yet proven
    complete)."""
    raw = {t for t in expected if t.startswith(f"{RAW_SCHEMA}.")}
    models = {t: v for t, v in expected.items() if t not in raw}
    compare(f"{phase}: the models", models, {t: found[t] for t in models}, report)

    problems = []
    batches = {json.loads(r)["batch_id"] for r in expected[f"{RAW_SCHEMA}.wal_batches"]}
    rows = {t: [(text, json.loads(text)) for text in found[t]] for t in raw}
    kept = {t: [text for text, r in rows[t] if r["batch_id"] in batches] for t in raw}
    before = Report()
    compare("raw rows of the reference's batches", {t: expected[t] for t in raw}, kept, before)
    if not before.comparisons[-1].endswith(": equal"):
        problems.append(before.comparisons[-1])
        report.rows_lost += before.rows_lost
        report.rows_duplicated += before.rows_duplicated
    report.rows_compared += before.rows_compared
    later = {t: [r for _, r in rows[t] if r["batch_id"] not in batches] for t in raw}

    def payload(row: dict) -> str:
        return json.dumps(
            {k: v for k, v in row.items() if k not in ("landing_file", "landing_line", "batch_id")}
        )

    events = f"{RAW_SCHEMA}.wal_events"
    known = {payload(json.loads(r)) for r in expected[events]}
    copies = later[events]
    invented = [r for r in copies if not _is_replay(r) or payload(r) not in known]
    if invented:
        problems.append(f"{len(invented)} events of the replay's batches are not copies of landed ones")
        report.rows_duplicated += len(invented)
    stray = [r for r in later[f"{RAW_SCHEMA}.wal_rejects"] if not _is_replay(r)]
    if stray:
        problems.append(f"{len(stray)} rejects of the replay's batches are not from replayed files")
        report.rows_duplicated += len(stray)
    accounted = {"landed": 0, "rejected": 0, "control": 0, "pending": 0, "lines": 0}
    last: dict[str, dict] = {}
    for row in later[f"{RAW_SCHEMA}.wal_files"]:
        if not _is_replay(row):
            # An earlier file's pending tail, read again: still waiting for its transaction's end.
            if row["landed"] or row["rejected"]:
                problems.append(f"{row['landing_file']} landed rows again in batch {row['batch_id']}")
            continue
        accounted["landed"] += row["landed"]
        if row["batch_id"] >= last.get(row["landing_file"], {}).get("batch_id", -1):
            last[row["landing_file"]] = row
    for row in last.values():
        for key in ("rejected", "control", "pending"):
            accounted[key] += row[key]
        accounted["lines"] += row["to_line"]
    if accounted["landed"] != len(copies):
        problems.append(
            f"wal_files counts {accounted['landed']} replayed events landed, wal_events holds {len(copies)}"
        )
    if accounted["lines"] != report.replayed_lines:
        problems.append(f"{accounted['lines']} of {report.replayed_lines} replayed lines were read")
        report.rows_lost += report.replayed_lines - accounted["lines"]
    verdict = "equal" if not problems else "; ".join(problems)
    report.comparisons.append(
        f"{phase}: raw tables keep the reference's batches, {len(copies):,} replayed events landed as "
        f"copies, {accounted['pending']:,} lines pending behind an unfinished transaction: {verdict}"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m testkit.faults", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    st = sub.add_parser("step", help="one pipeline run: land, run the models (the process that is killed)")
    st.add_argument("--landing", type=Path, required=True)
    st.add_argument("--dump", type=Path)
    st.add_argument("--max-files-per-batch", type=int, default=3, help="0: all new files in one batch")
    st.add_argument("--serve", type=Path, help="after the run, wait for requests in this folder to run again")
    inj = sub.add_parser("inject", help="kill, rerun and compare with an undisturbed run")
    inj.add_argument("--workdir", type=Path, required=True, help="scratch directory (emptied first)")
    inj.add_argument("--kills", type=int, default=6)
    inj.add_argument("--seed", type=int, default=1)
    inj.add_argument("--transactions", type=int, default=200)
    inj.add_argument("--max-files-per-batch", type=int, default=3)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command == "step":
        return step(args.landing, args.dump, args.max_files_per_batch, args.serve)
    if args.workdir.exists():
        shutil.rmtree(args.workdir)
    args.workdir.mkdir(parents=True)
    # The reference's session: its warehouse and metastore in the work directory, not the project's.
    os.environ["WAL_LAKE_SPARK_DIR"] = str(args.workdir.resolve() / "reference" / "spark")
    os.chdir(PROJECT_DIR)
    from python_jobs.spark_session import get_spark

    spark = get_spark("wal_lake_faults_reference")
    try:
        report = inject(
            spark, args.workdir, args.kills, args.seed, args.transactions, args.max_files_per_batch
        )
    finally:
        spark.stop()
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
