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

One part a module: zones.py (the zones generated), bench.py (the session and a timed stage),
history.py, reference.py, floor.py and peers.py (stages 1 to 4 above), memory.py (the driver's
peak), goals.py (the goals and their verdicts), report.py (what is printed); results.py holds what
they share (the stages' names, ``Stage``, ``Results``). This module is the command line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from benchmarks import generate as gen
from benchmarks import use_scratch
from benchmarks.bench import PROJECT_DIR, Bench
from benchmarks.floor import floor
from benchmarks.goals import evaluate
from benchmarks.history import history_stages
from benchmarks.peers import peer_stages
from benchmarks.reference import raw_parse
from benchmarks.report import report, summary
from benchmarks.results import RAW_PARSE, Results, short
from benchmarks.zones import generate_zones


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
    histories = _histories(args)
    scratch, mirror_models = _scratch(args)
    command = "python -m benchmarks.run " + " ".join(argv if argv is not None else sys.argv[1:])
    results = Results(command=command.strip(), changes=args.changes, increment=args.increment, knobs={})
    bench = Bench(args, scratch, results)
    print(f"scratch: {scratch}; histories {', '.join(short(h) for h in histories)} + {short(args.increment)}")
    try:
        zones = generate_zones(bench, histories)
        bench.start_spark()
        _stages(bench, zones, histories)
    finally:
        _finish(bench, histories, scratch, mirror_models)
    print(summary(results, args.wide, time.monotonic() - started))
    return 1 if any(not ok for _, ok, _ in results.checks) else 0


def _histories(args: argparse.Namespace) -> list[int]:
    """The history sizes: ``--histories`` and the main size, or 100k, up to 1M, and the main size."""
    if args.histories:
        return sorted({int(h) for h in args.histories.split(",")} | {args.changes})
    return sorted({100_000, min(args.changes, 1_000_000), args.changes})


def _scratch(args: argparse.Namespace) -> tuple[Path, Path]:
    """The scratch directory and the mirror models' folder (relative to the project), with the
    environment pointing into them; the working directory becomes the project's."""
    scratch = args.work or Path(tempfile.mkdtemp(prefix="wal_lake_bench_"))
    scratch.mkdir(parents=True, exist_ok=True)
    use_scratch(scratch)
    # The mirror models must lie inside the project (a dbt model path): under target/, removed after.
    mirror_models = Path("target") / "bench_mirror_models" / scratch.name
    os.environ["WAL_LAKE_MIRROR_MODELS"] = str(mirror_models)
    return scratch, mirror_models


def _stages(bench: Bench, zones: dict[int, gen.Zone], histories: list[int]) -> None:
    """Every stage, the smaller histories first: the first also warms the JVM up before the
    reference is timed."""
    args = bench.args
    for h in histories:
        if h == args.changes:
            raw_parse(bench, zones[h], h)
            if not args.skip_floor:
                floor(bench, zones[h], h)
        released = history_stages(bench, zones[h], h)
        if h == args.changes and not args.skip_floor and released:
            floor(bench, zones[h], h, released)
    if not args.skip_peers:
        peer_stages(
            bench, zones[args.changes], args.changes, bench.results.generated[f"live_{short(args.changes)}"]
        )


def _finish(bench: Bench, histories: list[int], scratch: Path, mirror_models: Path) -> None:
    """The goals and the report (when Spark started; ``--json`` too), then the scratch removed."""
    args, results = bench.args, bench.results
    if bench.spark is not None:
        evaluate(results, short(args.changes), histories, args.increment)
        parse = results.stage(RAW_PARSE)
        print("\n" + report(results, parse.seconds if parse else None))
        if args.json:
            args.json.write_text(json.dumps(asdict(results), indent=1, default=str))
    shutil.rmtree(PROJECT_DIR / mirror_models, ignore_errors=True)
    if not args.keep and not args.work:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
