"""Where the time of one ingestion run and one dbt run of each mart goes: Spark stages by call site.

    .venv/bin/python -m benchmarks.profile --changes 200000

Generates a zone (benchmarks/generate.py) in a scratch directory, runs ingestion and the two marts
on one Spark session as benchmarks.run does, and prints for each step the Spark stages that ran
(from the driver's status store, which Spark keeps with the UI off): wall time, summed task time,
tasks, and the Python or SQL call site that started them. Nothing is written into the repo.

    .venv/bin/python -m benchmarks.profile --changes 1000000 --ingest-only --timeline --warm-full

``--timeline`` also prints the ingestion run as a timeline: each batch's steps (the files' blocks
read, the transform built on the driver, the framing and outcome counts, each ledger commit) and
each Spark stage of 0.3 s or more, by their start and end. ``--warm-full`` warms the JVM up on the
same zone (another schema) instead of a small one: a cold first run at 1M took 1.75 times a warm one.

    .venv/bin/python -m benchmarks.profile --changes 1000000 --increments 3

``--increments N`` then lands N increments of ``--holdback`` changes (10,000) one after the other,
each as the benchmark's +10k does (one ingestion, one ``dbt run`` of the marts), and prints the
ingestion's steps and the dbt run's statements as a timeline: each statement dbt sent to Spark
(its first words), from its execution to its rows fetched, and the gaps between them (dbt's own
work: parsing, compiling, its Python). The first increment of a process pays for its JIT; the
later ones are what a scheduled run pays.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks import generate as gen
from benchmarks import use_scratch


def _stages(spark) -> list[dict]:
    """Completed stages so far: id, name, wall seconds, task seconds, tasks."""
    sc = spark.sparkContext
    store = sc._jsc.sc().statusStore()
    jvm = sc._jvm
    # stageList(statuses, details, withSummaries, unsortedQuantiles, taskStatus): Scala defaults
    # are not visible through py4j, so every argument is given.
    quantiles = sc._gateway.new_array(jvm.double, 0)
    stages = store.stageList(None, False, False, quantiles, jvm.java.util.ArrayList())
    out = []
    for i in range(stages.size()):
        s = stages.apply(i)
        if s.completionTime().isEmpty() or s.submissionTime().isEmpty():
            continue
        started = s.submissionTime().get().getTime() / 1000
        ended = s.completionTime().get().getTime() / 1000
        out.append(
            {
                "id": s.stageId(),
                "attempt": s.attemptId(),
                "name": s.name(),
                "started": started,
                "wall": ended - started,
                "task": s.executorRunTime() / 1000,
                "tasks": s.numCompleteTasks(),
                "input_mb": s.inputBytes() / 2**20,
                "shuffle_mb": (s.shuffleReadBytes() + s.shuffleWriteBytes()) / 2**20,
            }
        )
    return out


# The ingestion job's steps a timeline shows (functions of python_jobs.ingest.job), and what each is.
_STEPS = {
    "extract": "the files' blocks counted, lines numbered",
    "transform": "the transform built (driver only)",
    "line_stats": "framing and every line's outcome counted",
    "_events_written": "the events written counted",
}


@contextmanager
def _timed_steps(events: list[tuple[float, float, str]]) -> Iterator[None]:
    """While inside, each call of the job's ``_STEPS`` and of ``Ledger.append`` adds (start, end,
    what) to ``events``, in epoch seconds."""
    from python_jobs.ingest import job
    from python_jobs.ingest.ledger import Ledger

    def timed(fn, what):
        def call(*args, **kwargs):
            started = time.time()
            try:
                return fn(*args, **kwargs)
            finally:
                label = what(args) if callable(what) else what
                events.append((started, time.time(), label))

        return call

    saved = {name: getattr(job, name) for name in _STEPS}
    saved_append = Ledger.append
    for name, what in _STEPS.items():
        setattr(job, name, timed(saved[name], what))
    Ledger.append = timed(saved_append, lambda args: f"commit to {args[1]}")
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(job, name, fn)
        Ledger.append = saved_append


def _statement_label(sql: str) -> str:
    """A statement's model (from dbt's query comment) and its first words."""
    text = " ".join(sql.split())
    node = ""
    if text.startswith("/*") and "*/" in text:
        comment, text = text[2:].split("*/", 1)
        try:
            node = json.loads(comment).get("node_id", "").rsplit(".", 1)[-1]
        except ValueError:
            pass
    return f"{node or '-':<17} {text.strip()[:100]}"


@contextmanager
def _timed_statements(events: list[tuple[float, float, str]]) -> Iterator[None]:
    """While inside, each statement dbt-spark's session cursor executes adds (start, end, its first
    words) to ``events``, in epoch seconds; its end is when its rows were fetched, if they were."""
    from dbt.adapters.spark.session import Cursor

    saved = {name: getattr(Cursor, name) for name in ("execute", "fetchall", "fetchone")}

    def execute(self, sql, *parameters):
        started = time.time()
        try:
            return saved["execute"](self, sql, *parameters)
        finally:
            events.append((started, time.time(), _statement_label(sql)))
            self._wal_lake_event = len(events) - 1

    def fetching(name):
        def fetch(self):
            try:
                return saved[name](self)
            finally:
                index = getattr(self, "_wal_lake_event", None)
                if index is not None:
                    started, _, what = events[index]
                    events[index] = (started, time.time(), what)

        return fetch

    Cursor.execute = execute
    Cursor.fetchall = fetching("fetchall")
    Cursor.fetchone = fetching("fetchone")
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(Cursor, name, fn)


def _print_rows(t0: float, rows: list[tuple[float, float, str]]) -> None:
    """Timeline rows (start, end, what), in epoch seconds, by start: seconds from ``t0``."""
    for started, ended, what in sorted(rows):
        print(f"  {started - t0:>7.1f} -> {ended - t0:>7.1f} {ended - started:>6.1f}s  {what}")


def print_statements(label: str, fn) -> None:
    """Run ``fn`` (a dbt invocation) and print each statement it sent to Spark by start and end, with
    the time between statements (dbt's own work) summed."""
    events: list[tuple[float, float, str]] = []
    t0 = time.time()
    with _timed_statements(events):
        fn()
    seconds = time.time() - t0
    in_statements = sum(b - a for a, b, _ in events)
    print(
        f"\n{label}: {seconds:.1f}s wall; {len(events)} statements, {in_statements:.1f}s in them, "
        f"{seconds - in_statements:.1f}s between them; seconds from its start:"
    )
    _print_rows(t0, events)


def print_timeline(spark, label: str, fn) -> None:
    """Run ``fn`` and print its steps and its Spark stages of 0.3 s or more by start and end."""
    before = {(s["id"], s["attempt"]) for s in _stages(spark)}
    steps: list[tuple[float, float, str]] = []
    t0 = time.time()
    with _timed_steps(steps):
        fn()
    seconds = time.time() - t0
    rows = [(a, b, f"step   {what}") for a, b, what in steps]
    for s in _stages(spark):
        if (s["id"], s["attempt"]) not in before and s["wall"] >= 0.3:
            what = f"stage {s['id']:>5} {s['task']:>6.1f} task-s {s['tasks']:>4} tasks  {s['name'][:60]}"
            rows.append((s["started"], s["started"] + s["wall"], what))
    print(f"\n{label}: {seconds:.1f}s wall; timeline, seconds from its start:")
    _print_rows(t0, rows)


def profile_step(spark, label: str, fn) -> None:
    before = {(s["id"], s["attempt"]) for s in _stages(spark)}
    t0 = time.monotonic()
    fn()
    seconds = time.monotonic() - t0
    new = [s for s in _stages(spark) if (s["id"], s["attempt"]) not in before]
    stage_wall = sum(s["wall"] for s in new)
    print(f"\n{label}: {seconds:.1f}s wall; {len(new)} stages, {stage_wall:.1f}s in stages (sequential sum)")
    by_site: dict[str, list] = {}
    for s in new:
        agg = by_site.setdefault(s["name"], [0, 0.0, 0.0, 0, 0.0, 0.0])
        agg[0] += 1
        agg[1] += s["wall"]
        agg[2] += s["task"]
        agg[3] += s["tasks"]
        agg[4] += s["input_mb"]
        agg[5] += s["shuffle_mb"]
    print(f"  {'stages':>6} {'wall s':>7} {'task s':>7} {'tasks':>6} {'in MB':>7} {'shfl MB':>7}  call site")
    for name, (n, wall, task, tasks, inp, shuffle) in sorted(by_site.items(), key=lambda kv: -kv[1][1])[:15]:
        print(f"  {n:>6} {wall:>7.1f} {task:>7.1f} {tasks:>6} {inp:>7.0f} {shuffle:>7.0f}  {name[:90]}")
    print("  longest stages:")
    for s in sorted(new, key=lambda s: -s["wall"])[:6]:
        print(
            f"  stage {s['id']:>5} {s['wall']:>7.1f} {s['task']:>7.1f} {s['tasks']:>6} {s['input_mb']:>7.0f} "
            f"{s['shuffle_mb']:>7.0f}  {s['name'][:70]}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__.split("\n")[0])
    parser.add_argument("--changes", type=int, default=200_000)
    parser.add_argument("--ingest-only", action="store_true", help="profile the ingestion job only")
    parser.add_argument("--timeline", action="store_true", help="print the ingestion run as a timeline too")
    parser.add_argument(
        "--warm-full", action="store_true", help="warm up on the same zone, not on a small one"
    )
    parser.add_argument(
        "--increments", type=int, default=0, help="then land this many increments, one at a time (default 0)"
    )
    parser.add_argument("--holdback", type=int, default=10_000, help="changes per increment (default 10,000)")
    gen.add_knob_args(parser)
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="wal_lake_profile_"))
    use_scratch(scratch, "profile")
    try:
        increments = max(args.increments, 0)
        knobs = gen.knobs_from(args, args.changes, args.holdback if increments else 0, max(increments, 1))
        zone = gen.generate(scratch / "zone", knobs, progress=False)
        from benchmarks.bench import Bench
        from benchmarks.results import Results
        from python_jobs.ingest import job as ingest
        from python_jobs.spark_session import get_spark

        spark = get_spark("wal_lake_profile")
        bench = Bench(args, scratch, Results("profile", args.changes, 0, {}))
        bench.spark = spark
        # Warm the JVM up first, in another schema.
        if args.warm_full:
            warm_root = zone.root
        else:
            small = gen.Knobs(changes=5_000, keys=1_000)
            warm_root = gen.generate(scratch / "warm", small, progress=False).root
        with open(os.devnull, "w") as devnull:
            ingest.run(spark, warm_root, schema="profile_warm", out=devnull)
        step = print_timeline if args.timeline else profile_step
        step(
            spark,
            f"ingest {args.changes:,} changes",
            lambda: ingest.run(spark, zone.root, schema="profile_raw"),
        )
        if args.ingest_only:
            return 0
        bench.dbt("seed")
        bench.dbt("run", "-s", "staging", "intermediate", "--exclude", "int_record_touches")
        profile_step(spark, "dbt run -s sequin_events", lambda: bench.dbt("run", "-s", "sequin_events"))
        bench.dbt("run", "-s", "int_record_touches")  # the touches view reads sequin_events
        profile_step(
            spark,
            "dbt run -s source_records consumer_records",
            lambda: bench.dbt("run", "-s", "source_records", "consumer_records"),
        )
        marts = ("sequin_events", "source_records", "consumer_records")
        for n in range(1, increments + 1):
            gen.release_increment(zone, n)
            label = f"+{args.holdback:,} #{n}"
            step(spark, f"{label}: ingest", lambda: ingest.run(spark, zone.root, schema="profile_raw"))
            print_statements(f"{label}: dbt run of the marts", lambda: bench.dbt("run", "-s", *marts))
            print("  models: " + ", ".join(f"{name} {s:.1f}s" for name, s in bench.node_seconds.items()))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
