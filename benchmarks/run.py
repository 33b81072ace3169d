"""wal_lake's throughput and incremental cost, side by side with its peers, measured in one run.

    .venv/bin/python -m benchmarks.run --changes 1000000          # make bench
    .venv/bin/python -m benchmarks.run --changes 10000000         # adds the 10M history
    .venv/bin/python -m benchmarks.run --changes 1000000 --wide   # 40-column, ~2 KB rows

The zones move a row to a new key in 1% of updates by default (``--key-move-ratio``), so the marts'
key-move path is part of every figure; ``--wide`` makes every table 40 columns of mixed types with
about 2 KB of values per row instead of 6 columns. The report names the variant that ran.

Generates seeded wal2json landing zones (benchmarks/generate.py), then on ONE Spark session (dbt runs
in-process on it, as in python_jobs/demo.py), in a scratch warehouse (WAL_LAKE_SPARK_DIR,
DBT_TARGET_PATH and DBT_LOG_PATH point into a temp dir; nothing is written into the repo):

1. per history (100k, 1M, 10M with ``--changes 10000000``; ``--histories``), in its own schemas:
   ingestion, ``dbt run -s sequin_events``, ``dbt run -s source_records consumer_records`` (the
   state step), ``dbt run -s column_registry tag:mirror mirror_tables mirror_rejects`` (the typed
   mirrors; ``--skip-mirrors`` leaves them out); then the held-back increment (10k changes) lands
   and each runs again: the incremental cost;
2. the physical reference on the main zone: ``spark.read.text`` + ``from_json`` + an aggregate;
3. the stack's floor on the main zone (``--skip-floor`` leaves it out): a parse and Delta append of
   the same files, then one ``dbt run`` of benchmarks/floor_project (a change log appended, the
   latest touch per record merged), and the same on the increment: what any dbt-on-Spark pipeline of
   wal_lake's shape pays on this machine, with none of wal_lake's work;
4. the peers on the main zone: a hand-written PySpark job (benchmarks/peer_pyspark.py) and DuckDB
   (benchmarks/peer_duckdb.py), with their row counts checked against wal_lake's;

and the Spark driver's peak memory (the JVM's resident set, polled from /proc) per stage. Prints a
table of figures, ratios and goal verdicts; ``--json`` writes them to a file too.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks import PeerResult
from benchmarks import generate as gen

PROJECT_DIR = Path(__file__).resolve().parent.parent

# The throughput and incremental-cost goals BENCHMARKS.md reports against.
GOAL_E2E_RATE = 50_000  # changes/s end to end at 1M
GOAL_E2E_VS_PARSE = 2.5
GOAL_INCREMENTAL_GROWTH = 1.3
GOAL_MART_VS_PEER = 1.2

# The state step, against the peer's: the one fold (source_records) and its projection onto the
# consumers (consumer_records), in one dbt invocation.
STATE_MODELS = ("source_records", "consumer_records")
STATE_STAGE = "dbt run " + " ".join(STATE_MODELS)
# The typed mirrors on top of source_records, in one dbt invocation: the column registry they read,
# one model per table, their catalog and their rejects (the mirror models are written by
# python_jobs.mirrors before the first run).
MIRROR_MODELS = ("column_registry", "tag:mirror", "mirror_tables", "mirror_rejects")
MIRROR_STAGE = "dbt run mirrors"
# The stack's floor (benchmarks/floor_project): a parse and Delta append of the same files, then the
# two trivial incremental models in one dbt run; in a schema of its own.
FLOOR_PROJECT = PROJECT_DIR / "benchmarks" / "floor_project"
FLOOR_SCHEMA = "bench_floor"
FLOOR_APPEND = "parse + Delta append"
FLOOR_DBT = "dbt run floor_log floor_state"


# --- memory -----------------------------------------------------------------------------------------


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


# --- measurements -----------------------------------------------------------------------------------


@dataclass
class Stage:
    name: str
    seconds: float
    changes: int
    peak_mb: float = 0.0
    model_seconds: float | None = None  # dbt's execution_time of the model, without dbt's own start-up
    note: str = ""

    @property
    def rate(self) -> float:
        return self.changes / self.seconds if self.seconds else 0.0


@dataclass
class Results:
    command: str
    changes: int
    increment: int
    knobs: dict
    stages: list[Stage] = field(default_factory=list)
    checks: list[tuple[str, bool, str]] = field(default_factory=list)
    goals: list[tuple[str, str, bool]] = field(default_factory=list)
    generated: dict = field(default_factory=dict)
    variant: str = ""

    def stage(self, name: str) -> Stage | None:
        return next((s for s in self.stages if s.name == name), None)


class Bench:
    def __init__(self, args: argparse.Namespace, scratch: Path, results: Results):
        self.args = args
        self.scratch = scratch
        self.results = results
        self.spark = None
        self.memory: MemoryMonitor | None = None

    # -- helpers

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
        if len(nodes) > 1 and args[0] == "run":
            self.log("  models: " + ", ".join(f"{r.node.name} {r.execution_time:.1f}s" for r in nodes))
        return float(sum(r.execution_time for r in nodes))

    def count(self, table: str) -> int:
        return self.spark.table(table).count()

    # -- the pieces

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

    def raw_parse(self, zone: gen.Zone, history: int) -> None:
        from pyspark.sql import functions as F

        files = zone.history_files()

        def parse() -> None:
            row = (
                self.parsed(files)
                .agg(
                    F.count("r.action").alias("n"),
                    F.max("r.lsn").alias("lsn"),
                    F.sum(F.size("r.columns") + F.size("r.identity") + F.size("r.pk")).alias("cols"),
                    F.max("r.table").alias("t"),
                )
                .collect()[0]
            )
            self.check(
                "raw parse line count", row.n == zone.lines - zone.increment_lines, f"{row.n:,} parsed lines"
            )

        self.measure("raw parse (read.text + from_json + count)", history, parse, note=f"{len(files)} files")

    # -- the stack's floor: the same shape, none of wal_lake's work

    def floor_dbt(self) -> float:
        """``dbt run`` of the floor project, with a target path of its own (wal_lake's partial parse
        stays valid)."""
        return self.dbt(
            "run",
            "--target-path",
            str(self.scratch / "floor_target"),
            "--vars",
            json.dumps({"floor_events": f"{FLOOR_SCHEMA}.events"}),
            project=FLOOR_PROJECT,
        )

    def floor_append(self, files: list[str], batch: int) -> None:
        """A parse and Delta append of the files: read.text, from_json, one append, nothing else."""
        from pyspark.sql import functions as F

        (
            self.parsed(files)
            .select(F.lit(batch).alias("batch"), "r.*")
            .write.format("delta")
            .mode("append")
            .saveAsTable(f"{FLOOR_SCHEMA}.events")
        )

    def floor(self, zone: gen.Zone, history: int, increment: list[str] | None = None) -> None:
        """The floor's stages on the history (increment None) or on the released increment's files."""
        schema = os.environ.get("WAL_LAKE_SCHEMA")
        os.environ["WAL_LAKE_SCHEMA"] = FLOOR_SCHEMA
        try:
            if increment is None:
                self.spark.sql(f"drop schema if exists {FLOOR_SCHEMA} cascade")
                self.spark.sql(f"create schema {FLOOR_SCHEMA}")
                files, batch, prefix, changes = zone.history_files(), 0, "[floor]", history
            else:
                files, batch, changes = increment, 1, zone.increment_changes
                prefix = f"[floor] +{_short(changes)}"
            self.measure(f"{prefix} {FLOOR_APPEND}", changes, lambda: self.floor_append(files, batch))
            self.measure(f"{prefix} {FLOOR_DBT}", changes, self.floor_dbt)
        finally:
            if schema is None:
                os.environ.pop("WAL_LAKE_SCHEMA", None)
            else:
                os.environ["WAL_LAKE_SCHEMA"] = schema

    def wal_lake(self, zone: gen.Zone, history: int) -> list[str]:
        """wal_lake's stages on the history, then on its increment; return the increment's files as
        released into the landing zone (none when the zone holds no increment)."""
        from python_jobs import mirrors
        from python_jobs.ingest import job as ingest

        tag = _short(history)
        raw, schema = f"bench_{tag}_raw", f"bench_{tag}"
        os.environ["WAL_LAKE_RAW_SCHEMA"] = raw
        os.environ["WAL_LAKE_SCHEMA"] = schema
        self.log(f"history {tag}: schemas {raw}, {schema}")

        def land() -> None:
            summary = ingest.run(self.spark, zone.root, schema=raw)
            self.log(summary.line())
            if not summary.balanced:
                raise RuntimeError("ingestion accounting does not balance")

        self.measure(f"[{tag}] ingest", history, land)
        # The views need the landed tables; the seed and views are a one-off, outside the timed runs.
        self.measure(
            f"[{tag}] setup: dbt seed + staging/intermediate views",
            0,
            lambda: (
                self.dbt("seed")
                + self.dbt("run", "-s", "staging", "intermediate", "--exclude", "int_record_touches")
            ),
        )
        self.measure(
            f"[{tag}] dbt run sequin_events", history, lambda: self.dbt("run", "-s", "sequin_events")
        )
        # The touches view (int_record_touches) reads sequin_events: a one-off once that exists.
        self.dbt("run", "-s", "int_record_touches")
        self.measure(f"[{tag}] {STATE_STAGE}", history, lambda: self.dbt("run", "-s", *STATE_MODELS))
        if not self.args.skip_mirrors:
            mirrors.generate(self.spark, raw)
            self.measure(f"[{tag}] {MIRROR_STAGE}", history, lambda: self.dbt("run", "-s", *MIRROR_MODELS))
        seq_rows = self.count(f"{schema}.sequin_events")
        live = self.count(f"{schema}.consumer_records")
        self.check(f"[{tag}] sequin_events rows", seq_rows == history, f"{seq_rows:,}, expected {history:,}")
        expected_live = zone.live_before_increment
        self.check(
            f"[{tag}] consumer_records rows", live == expected_live, f"{live:,}, expected {expected_live:,}"
        )
        self.results.generated[f"live_{tag}"] = live

        if not zone.increment_files:
            return []
        inc = zone.increment_changes
        released = gen.release_increment(zone)
        self.log(f"[{tag}] increment: {inc:,} changes in {len(zone.increment_files)} new file(s)")
        self.measure(f"[{tag}] +{_short(inc)} ingest", inc, land)
        self.measure(
            f"[{tag}] +{_short(inc)} dbt run sequin_events",
            inc,
            lambda: self.dbt("run", "-s", "sequin_events"),
        )
        self.measure(
            f"[{tag}] +{_short(inc)} {STATE_STAGE}",
            inc,
            lambda: self.dbt("run", "-s", *STATE_MODELS),
        )
        if not self.args.skip_mirrors:
            self.measure(
                f"[{tag}] +{_short(inc)} {MIRROR_STAGE}",
                inc,
                lambda: self.dbt("run", "-s", *MIRROR_MODELS),
            )
            self.check_mirrors(schema, tag)
        seq_rows = self.count(f"{schema}.sequin_events")
        live = self.count(f"{schema}.consumer_records")
        self.check(f"[{tag}] +increment sequin_events rows", seq_rows == history + inc, f"{seq_rows:,}")
        self.check(
            f"[{tag}] +increment consumer_records rows",
            live == zone.live,
            f"{live:,}, expected {zone.live:,}",
        )
        return released

    def check_mirrors(self, schema: str, tag: str) -> None:
        """Every mirror holds its table's live records: those of consumer_records (one consumer)."""
        live = {
            (r.source_table, r.n)
            for r in self.spark.sql(
                f"select source_table, count(*) as n from {schema}.consumer_records group by source_table"
            ).collect()
        }
        catalog = f"select distinct source_table, mirror_relation from {schema}.mirror_tables"
        rows = self.spark.sql(catalog).collect()
        mirrored = {(r.source_table, self.count(r.mirror_relation)) for r in rows}
        self.check(
            f"[{tag}] +increment mirrors rows", mirrored == live, f"{sorted(mirrored)} vs {sorted(live)}"
        )

    def peers(self, zone: gen.Zone, history: int, wal_lake_live: int) -> None:
        from benchmarks import peer_pyspark

        files = zone.history_files()
        out = self.scratch / "peer_pyspark"
        self.log(f"peer PySpark on {len(files)} files")
        self.memory.start_stage()
        result = peer_pyspark.run(self.spark, files, str(out))
        peak = self.memory.end_stage()
        self.results.stages.append(
            Stage("peer PySpark: log (parse, dedup, seq)", result.log_seconds, history, peak)
        )
        self.results.stages.append(
            Stage("peer PySpark: state (flatten)", result.state_seconds, history, peak)
        )
        self._peer_done("PySpark", result, f"driver peak {peak:,.0f} MB", history, wal_lake_live, out)

        if self.args.skip_duckdb:
            return
        try:
            import duckdb  # noqa: F401

            from benchmarks import peer_duckdb
        except ImportError:
            self.log(
                "peer DuckDB skipped: duckdb is not installed (pip install -r benchmarks/requirements.txt)"
            )
            return
        out = self.scratch / "peer_duckdb"
        out.mkdir(exist_ok=True)
        self.log(f"peer DuckDB ({self.args.duckdb_threads} threads) on {len(files)} files")
        me = MemoryMonitor(os.getpid())
        me.start_stage()
        result = peer_duckdb.run(files, str(out), threads=self.args.duckdb_threads)
        peak = me.end_stage()
        self.results.stages.append(
            Stage(
                "peer DuckDB: log (parse, dedup, seq)",
                result.log_seconds,
                history,
                peak,
                note="python process RSS",
            )
        )
        self.results.stages.append(
            Stage(
                "peer DuckDB: state (flatten)", result.state_seconds, history, peak, note="python process RSS"
            )
        )
        self._peer_done("DuckDB", result, f"process peak {peak:,.0f} MB", history, wal_lake_live, out)

    def _peer_done(
        self, name: str, result: PeerResult, peak: str, history: int, wal_lake_live: int, out: Path
    ) -> None:
        """Log a peer's figures, check its row counts against wal_lake's, remove its output."""
        self.log(f"peer {name}: log {result.log_seconds:.1f}s, state {result.state_seconds:.1f}s, {peak}")
        self.check(f"peer {name} log rows", result.log_rows == history, f"{result.log_rows:,}")
        self.check(
            f"peer {name} state rows == wal_lake consumer_records",
            result.state_rows == wal_lake_live,
            f"{result.state_rows:,} vs {wal_lake_live:,}",
        )
        shutil.rmtree(out, ignore_errors=True)


def _short(n: int) -> str:
    for unit, size in (("M", 1_000_000), ("k", 1_000)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n:,}"


# --- report -----------------------------------------------------------------------------------------


def evaluate(results: Results, main_tag: str, histories: list[int], increment: int) -> None:
    """Fill results.goals from the stages: (goal, measured, met)."""
    s = results.stage
    inc = _short(increment)
    ingest, seq, cons = (s(f"[{main_tag}] {x}") for x in ("ingest", "dbt run sequin_events", STATE_STAGE))
    parse = s("raw parse (read.text + from_json + count)")
    e2e_name = f"[{main_tag}] end to end (ingest + both marts)"
    if ingest and seq and cons:
        e2e = Stage(
            e2e_name,
            ingest.seconds + seq.seconds + cons.seconds,
            ingest.changes,
        )
        e2e.peak_mb = max(ingest.peak_mb, seq.peak_mb, cons.peak_mb)
        results.stages.append(e2e)
        results.goals.append(
            (
                f"end to end >= {GOAL_E2E_RATE:,} changes/s at {main_tag}",
                f"{e2e.rate:,.0f} changes/s",
                e2e.rate >= GOAL_E2E_RATE,
            )
        )
        if parse:
            ratio = e2e.seconds / parse.seconds
            results.goals.append(
                (
                    f"end to end <= {GOAL_E2E_VS_PARSE}x raw parse",
                    f"{ratio:.1f}x ({e2e.seconds:.1f}s / {parse.seconds:.1f}s)",
                    ratio <= GOAL_E2E_VS_PARSE,
                )
            )
    incs = {}
    for h in histories:
        tag = _short(h)
        parts = [s(f"[{tag}] +{inc} {x}") for x in ("ingest", "dbt run sequin_events", STATE_STAGE)]
        if all(parts):
            total = Stage(f"[{tag}] +{inc} incremental total", sum(p.seconds for p in parts), increment)
            total.peak_mb = max(p.peak_mb for p in parts)
            results.stages.append(total)
            incs[h] = total
    if len(incs) >= 2:
        small, large = incs[min(incs)], incs[max(incs)]
        ratio = large.seconds / small.seconds
        results.goals.append(
            (
                f"incremental +{inc} on {_short(max(incs))} "
                f"<= {GOAL_INCREMENTAL_GROWTH}x on {_short(min(incs))}",
                f"{ratio:.2f}x ({large.seconds:.1f}s / {small.seconds:.1f}s)",
                ratio <= GOAL_INCREMENTAL_GROWTH,
            )
        )
    for h in histories:
        tag = _short(h)
        mirrored, state = s(f"[{tag}] +{inc} {MIRROR_STAGE}"), s(f"[{tag}] +{inc} {STATE_STAGE}")
        if mirrored and state:
            ratio = mirrored.seconds / state.seconds
            results.goals.append(
                (
                    f"mirrors' +{inc} on {tag} <= the state step's ({', '.join(STATE_MODELS)})",
                    f"{ratio:.2f}x ({mirrored.seconds:.1f}s / {state.seconds:.1f}s)",
                    mirrored.seconds <= state.seconds,
                )
            )
    peer_log, peer_state = s("peer PySpark: log (parse, dedup, seq)"), s("peer PySpark: state (flatten)")
    for mart, peer in ((seq, peer_log), (cons, peer_state)):
        if mart and peer:
            ratio = mart.seconds / peer.seconds
            model = f"; model only {mart.model_seconds / peer.seconds:.2f}x" if mart.model_seconds else ""
            results.goals.append(
                (
                    f"{mart.name.split('] ')[1]} "
                    f"<= {GOAL_MART_VS_PEER}x peer PySpark {peer.name.split(': ')[1]}",
                    f"{ratio:.2f}x ({mart.seconds:.1f}s / {peer.seconds:.1f}s{model})",
                    ratio <= GOAL_MART_VS_PEER,
                )
            )
    floor_append, floor_dbt = s(f"[floor] {FLOOR_APPEND}"), s(f"[floor] {FLOOR_DBT}")
    if floor_append and parse:
        results.goals.append(
            (
                "(info) the floor's parse + Delta append vs raw parse",
                f"{floor_append.seconds / parse.seconds:.2f}x",
                True,
            )
        )
    if floor_append and ingest:
        results.goals.append(
            (
                "(info) ingest vs the floor's parse + Delta append",
                f"{ingest.seconds / floor_append.seconds:.2f}x",
                True,
            )
        )
    e2e = s(e2e_name)
    if floor_append and floor_dbt and e2e and parse:
        floor_total = floor_append.seconds + floor_dbt.seconds
        results.goals.append(
            (
                "(info) end to end vs the floor's (append + one dbt run)",
                f"{e2e.seconds / floor_total:.2f}x ({floor_total:.1f}s, "
                f"{floor_total / parse.seconds:.2f}x raw parse)",
                True,
            )
        )
    floor_inc = [s(f"[floor] +{inc} {x}") for x in (FLOOR_APPEND, FLOOR_DBT)]
    main_inc = next((total for h, total in incs.items() if _short(h) == main_tag), None)
    if all(floor_inc):
        floor_total = sum(p.seconds for p in floor_inc)
        results.stages.append(Stage(f"[floor] +{inc} total", floor_total, increment))
        if main_inc:
            results.goals.append(
                (
                    f"(info) +{inc} on {main_tag} vs the floor's +{inc}",
                    f"{main_inc.seconds / floor_total:.2f}x ({main_inc.seconds:.1f}s / {floor_total:.1f}s)",
                    True,
                )
            )
    if ingest and seq and peer_log:
        ratio = (ingest.seconds + seq.seconds) / peer_log.seconds
        results.goals.append(
            ("(info) ingest + sequin_events vs peer PySpark log (both from files)", f"{ratio:.2f}x", True)
        )
    if ingest and seq and cons and peer_log and peer_state:
        ratio = (ingest.seconds + seq.seconds + cons.seconds) / (peer_log.seconds + peer_state.seconds)
        results.goals.append(("(info) wal_lake end to end vs whole peer PySpark job", f"{ratio:.2f}x", True))


def variant(knobs: gen.Knobs) -> str:
    """What the zones hold, in words, for the report."""
    columns = gen.WIDE_COLUMNS if knobs.wide else gen.COLUMNS
    shape = "wide" if knobs.wide else "narrow"
    return (
        f"{shape}: {len(columns)} columns, TOAST-able doc of {knobs.doc_bytes} B; key moves in "
        f"{knobs.key_move_ratio:.1%} of updates; deletes {knobs.delete_ratio:.0%} of live-key touches, "
        f"doc left out of {knobs.omitted_ratio:.0%} of updates, {knobs.replay_ratio:.0%} of files copied"
    )


def report(results: Results, parse_seconds: float | None) -> str:
    out = [f"command: {results.command}", f"variant: {results.variant}"]
    main = results.generated.get(_short(results.changes))
    if main:
        out.append(
            f"main zone (increment included): {main['changes']:,} changes, "
            f"{main['bytes'] / 2**20:,.0f} MB in {main['files']} files + {main['copies']} copies; "
            f"{main['inserts']:,} inserts, {main['updates']:,} updates ({main['key_moves']:,} key moves, "
            f"{main['omitted']:,} without doc), {main['deletes']:,} deletes; {main['live']:,} live records"
        )
    out.append("")
    out.append(
        f"{'stage':<58} {'seconds':>8} {'changes':>11} {'changes/s':>11} {'vs parse':>8} {'peak MB':>8}"
    )
    out.append("-" * 109)
    for st in results.stages:
        vs = f"{st.seconds / parse_seconds:.2f}x" if parse_seconds and st.changes >= results.changes else ""
        model = f" (model {st.model_seconds:.1f}s)" if st.model_seconds is not None else ""
        out.append(
            f"{st.name:<58} {st.seconds:>8.1f} {st.changes:>11,} {st.rate:>11,.0f} {vs:>8} "
            f"{st.peak_mb:>8,.0f}{model}"
        )
    out += ["", "goals:"]
    for goal, measured, met in results.goals:
        verdict = "info   " if goal.startswith("(info)") else "MET    " if met else "NOT MET"
        out.append(f"  {verdict}  {goal:<62} {measured}")
    out += ["", "checks:"]
    for what, ok, detail in results.checks:
        out.append(f"  {'ok    ' if ok else 'FAILED'}  {what}: {detail}")
    return "\n".join(out)


# --- main -------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--changes", type=int, default=1_000_000, help="changes of the main zone (default 1M)"
    )
    parser.add_argument(
        "--histories",
        help="comma-separated history sizes for the incremental cost (default 100000,1000000 "
        "and the main size; 10000000 is added with --changes 10000000)",
    )
    parser.add_argument("--increment", type=int, default=10_000, help="new changes on top of each history")
    parser.add_argument(
        "--work", type=Path, help="scratch directory (default: a new temp dir, removed after)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    parser.add_argument("--skip-peers", action="store_true", help="no peer jobs")
    parser.add_argument("--skip-duckdb", action="store_true", help="no DuckDB peer")
    parser.add_argument("--skip-mirrors", action="store_true", help="no typed mirrors")
    parser.add_argument(
        "--skip-floor", action="store_true", help="no floor stages (benchmarks/floor_project)"
    )
    parser.add_argument("--duckdb-threads", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write the figures as JSON to this file")
    gen.add_knob_args(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    if args.histories:
        histories = sorted({int(h) for h in args.histories.split(",")} | {args.changes})
    else:
        histories = sorted({100_000, min(args.changes, 1_000_000), args.changes})
    scratch = args.work or Path(tempfile.mkdtemp(prefix="wal_lake_bench_"))
    scratch.mkdir(parents=True, exist_ok=True)
    # Before anything starts Spark or dbt: a scratch warehouse and dbt output outside the repo.
    os.environ["WAL_LAKE_SPARK_DIR"] = str(scratch / "spark")
    os.environ["DBT_TARGET_PATH"] = str(scratch / "dbt_target")
    os.environ["DBT_LOG_PATH"] = str(scratch / "dbt_logs")
    os.environ["WAL_LAKE_TARGET"] = "local"
    os.environ.setdefault("WAL_LAKE_CORES", str(os.cpu_count() or 2))
    # The mirror models must lie inside the project (a dbt model path): under target/, removed after.
    mirror_models = Path("target") / "bench_mirror_models" / scratch.name
    os.environ["WAL_LAKE_MIRROR_MODELS"] = str(mirror_models)
    os.chdir(PROJECT_DIR)  # profiles.yml's relative paths (conf/log4j2.properties)
    command = "python -m benchmarks.run " + " ".join(argv if argv is not None else sys.argv[1:])
    results = Results(command=command.strip(), changes=args.changes, increment=args.increment, knobs={})
    bench = Bench(args, scratch, results)
    print(
        f"scratch: {scratch}; histories {', '.join(_short(h) for h in histories)} + {_short(args.increment)}"
    )
    try:
        zones = {}
        for h in histories:
            knobs = gen.knobs_from(args, h, holdback=args.increment)
            bench.log(f"generating {_short(h)} + {_short(args.increment)} changes")
            zone = gen.generate(scratch / f"zone_{_short(h)}", knobs, progress=h >= 1_000_000)
            bench.log(
                f"generated {zone.changes:,} changes, {zone.lines:,} lines, {len(zone.files)} files + "
                f"{len(zone.copies)} copies in {zone.seconds:.1f}s "
                f"({zone.changes / zone.seconds:,.0f} changes/s); {zone.key_moves:,} key moves"
            )
            results.generated[_short(h)] = {
                k: getattr(zone, k)
                for k in (
                    "changes",
                    "lines",
                    "transactions",
                    "inserts",
                    "updates",
                    "deletes",
                    "omitted",
                    "key_moves",
                    "replayed_lines",
                    "live_before_increment",
                    "live",
                )
            } | {
                "files": len(zone.files),
                "copies": len(zone.copies),
                "bytes": sum(Path(p).stat().st_size for p in zone.landed_files() + zone.increment_files),
            }
            zones[h] = zone
        results.knobs = asdict(knobs) | {"changes": args.changes}
        results.variant = variant(knobs)
        print(f"variant: {results.variant}")
        bench.start_spark()
        # The smaller histories first: the first also warms the JVM up before the reference is timed.
        for h in histories:
            if h == args.changes:
                bench.raw_parse(zones[h], h)
                if not args.skip_floor:
                    bench.floor(zones[h], h)
            released = bench.wal_lake(zones[h], h)
            if h == args.changes and not args.skip_floor and released:
                bench.floor(zones[h], h, released)
        if not args.skip_peers:
            bench.peers(zones[args.changes], args.changes, results.generated[f"live_{_short(args.changes)}"])
    finally:
        if bench.spark is not None:
            evaluate(results, _short(args.changes), histories, args.increment)
            parse = results.stage("raw parse (read.text + from_json + count)")
            print("\n" + report(results, parse.seconds if parse else None))
            if args.json:
                args.json.write_text(json.dumps(asdict(results), indent=1, default=str))
        shutil.rmtree(PROJECT_DIR / mirror_models, ignore_errors=True)
        if not args.keep and not args.work:
            shutil.rmtree(scratch, ignore_errors=True)
    failed = [c for c in results.checks if not c[1]]
    met = sum(1 for g in results.goals if g[2] and not g[0].startswith("(info)"))
    goals = sum(1 for g in results.goals if not g[0].startswith("(info)"))
    shape = "wide" if args.wide else "narrow"
    print(
        f"\nbench: {_short(args.changes)} changes ({shape}), {goals} goals, {met} met, "
        f"{len(failed)} checks failed, {time.monotonic() - started:.0f}s in all"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
