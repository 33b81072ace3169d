"""Soak test: many seeds of random workload, captured live, checked against the Python oracle.

    python -m testkit.soak --seeds 1-20 --transactions 400
    scripts/soak.sh --seeds 7 --keep --landing landing/soak

For each seed, in its own database (so its slot is its own source_id): create the workload's tables
and some rows, start the workload from several sessions, take the capture's initial snapshot while
they write, keep capturing in follow mode in a separate process and kill it (SIGKILL) at a
seed-chosen moment, then drain the slot with a fresh capture. The workload's edge tables
(``workload.create_edges``) change, and their columns are altered, added and renamed, right after the
snapshot. Two checks per seed:

1. the landed lines are exactly the lines a never-advanced reference slot decodes, each at least
   once (crashes replay, never lose or invent), apart from the snapshot and from what Postgres
   committed by itself after the last capture started;
2. ``oracle.replay_wal2json`` over the landed files equals ``oracle.postgres_state`` of the tables
   (after the edge tables' DDL, as ``oracle.as_table_rows`` shapes the replayed rows).

Mismatches are printed per seed; the exit status is 1 if any seed had one. Without ``--dsn`` a
throwaway server is started (testkit/pg_server.py). The landing zone is kept with ``--keep``,
for the ingestion job and dbt to be run over it.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import contextmanager, nullcontext, redirect_stdout
from pathlib import Path

import psycopg
from psycopg import sql

from python_jobs import capture
from python_jobs.capture.slot import settled_lsn
from python_jobs.lsn import parse_lsn
from testkit import oracle, workload
from testkit.pg_server import PostgresServer

PROJECT_DIR = Path(__file__).resolve().parent.parent


def parse_seeds(text: str) -> list[int]:
    """``1-5,9`` -> [1, 2, 3, 4, 5, 9]."""
    seeds: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        seeds.extend(range(int(low), int(high or low) + 1))
    return seeds


def with_dbname(dsn: str, dbname: str) -> str:
    return psycopg.conninfo.make_conninfo(dsn, dbname=dbname)


def create_database(admin_dsn: str, name: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        for (slot,) in conn.execute(
            "select slot_name from pg_replication_slots where database = %s", (name,)
        ).fetchall():
            conn.execute("select pg_drop_replication_slot(%s)", (slot,))
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))


def run_seed(admin_dsn: str, seed: int, args: argparse.Namespace, landing: Path) -> tuple[list[str], str]:
    rng = random.Random(f"soak-{seed}")
    dbname = f"soak_{seed}"
    dsn = with_dbname(admin_dsn, dbname)
    slot, reference = f"soak_{seed}", f"soak_{seed}_reference"
    source_id = f"{dbname}.{slot}"
    source_dir = landing / source_id
    create_database(admin_dsn, dbname)
    with psycopg.connect(dsn, autocommit=True) as conn:
        workload.create_tables(conn, "public")
        workload.create_edges(conn)
    workload.seed_rows(dsn, "public", seed, rng.randint(0, 80))
    target = ["--slot", slot, "--landing", str(landing), "--quiet"]
    base = ["--dsn", dsn, *target]
    stats: list[workload.Stats] = []
    failures: list[BaseException] = []

    def write(count: int, tag: int) -> None:
        try:
            stats.append(workload.run_workload(dsn, seed * 1000 + tag, count, args.sessions, create=False))
        except BaseException as exc:  # reported below
            failures.append(exc)

    with psycopg.connect(dsn, autocommit=True) as conn:
        # Never advanced: it decodes everything from before the capture slot's start.
        conn.execute("select pg_create_logical_replication_slot(%s, 'wal2json')", (reference,))

    # Phase 1: the initial snapshot is taken while sessions write.
    first = rng.randint(args.transactions // 4, args.transactions // 2)
    writer = threading.Thread(target=write, args=(first, 1))
    writer.start()
    time.sleep(rng.random() * 0.3)
    if run_capture([*base, "--once", "--snapshot"]) != 0:
        writer.join()
        return [f"seed {seed}: capture --snapshot failed"], ""
    writer.join()
    # The edge tables' DDL and changes, after the snapshot: only the stream carries them.
    workload.edge_changes(dsn)

    # Phase 2: a follow-mode capture process, killed -9 at a seed-chosen moment.
    # The DSN reaches the child through its environment, not its command line, which `ps` shows
    # to every user of the machine (with --dsn, the password of the server under test).
    follower = subprocess.Popen(
        [sys.executable, "-m", "python_jobs.capture", *target, "--poll-interval", "0.05"]
        + ["--max-changes-per-file", str(rng.choice([20, 100, 1000]))],
        cwd=PROJECT_DIR,
        env=os.environ | {"WAL_LAKE_CAPTURE_DSN": dsn},
    )
    writer = threading.Thread(target=write, args=(args.transactions - first, 2))
    writer.start()
    time.sleep(rng.random() * 1.5)
    follower.send_signal(signal.SIGKILL)
    follower.wait()
    wait_until_released(dsn, slot)
    writer.join()
    if failures:
        return [f"seed {seed}: workload failed: {failures[0]!r}"], ""

    # Phase 3: a capture that dies after its files are durable but before the slot advances
    # (every file it wrote is replayed by the next one), then drain what is left.
    if rng.random() < 0.7:
        with _slot_never_advances() as stop:
            cut = str(rng.choice([30, 300]))
            if run_capture([*base, "--once", "--max-changes-per-file", cut], stop) != 0:
                return [f"seed {seed}: capture without advancing failed"], ""
    # What the final capture is asked for: everything written before it starts, the workload's last
    # heartbeat included once flushed (settled_lsn). Postgres may commit more on its own afterwards
    # (autovacuum's analyze: an empty B/C transaction), which the reference slot, peeked later,
    # decodes too; those were never the capture's to land.
    with psycopg.connect(dsn) as conn:
        settled = settled_lsn(conn)
    if run_capture([*base, "--once", "--max-changes-per-file", str(rng.choice([50, 500]))]) != 0:
        return [f"seed {seed}: final capture failed"], ""

    files = sorted(source_dir.glob("*.jsonl"))
    lines = [line for path in files for line in path.read_text().splitlines()]
    problems: list[str] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        decoded = [data for _lsn, data in capture.peek(conn, reference, None, None)]
        conn.execute("select pg_drop_replication_slot(%s)", (reference,))
        tables = oracle.user_tables(conn)
        types, keys = oracle.table_types(conn, tables)
        expected = oracle.postgres_state(conn, tables)
    snapshots = [path for path in files if capture.is_snapshot_file(path.name)]
    if not snapshots or files[: len(snapshots)] != snapshots:
        problems.append(
            f"seed {seed}: expected the snapshot's files first in name order: {[p.name for p in files[:3]]}"
        )
    consistent_point = int(snapshots[0].name[:16], 16) if snapshots else 0
    streamed = transactions_of(
        line for path in files[len(snapshots) :] for line in path.read_text().splitlines()
    )
    reference_txs = transactions_of(decoded)
    missing = [lsn for lsn in reference_txs if consistent_point <= lsn < settled and lsn not in streamed]
    if missing:
        problems.append(
            f"seed {seed}: {len(missing)} decoded transactions never landed, first at {missing[0]:X}"
        )
    extra = [lsn for lsn, tx in streamed.items() if reference_txs.get(lsn) != tx]
    if extra:
        problems.append(
            f"seed {seed}: {len(extra)} landed transactions differ from the slot's, first at {extra[0]:X}"
        )
    early = [lsn for lsn in streamed if lsn < consistent_point]
    if early:
        problems.append(f"seed {seed}: {len(early)} streamed transactions precede the snapshot point")
    replayed = oracle.replay_wal2json(lines)
    for table in expected:
        replayed.setdefault(table, [])
    # After DDL the stream does not carry, the replayed rows in the table's shape of today.
    for table, changes in workload.SCHEMA_CHANGES.items():
        replayed[table] = oracle.as_table_rows(replayed[table], changes)
    problems.extend(f"seed {seed}: {p}" for p in oracle.compare_states(expected, replayed, types, keys))
    duplicates = sum(count - 1 for count in Counter(lines).values())
    committed = sum(s.committed for s in stats)
    rolled_back = sum(s.rolled_back for s in stats)
    rows = sum(len(v) for v in expected.values())
    summary = (
        f"seed {seed}: {committed} committed, {rolled_back} rolled back; {len(files)} files, "
        f"{len(lines)} lines ({duplicates} replayed); {rows} rows in {len(expected)} tables: "
        + ("OK" if not problems else f"{len(problems)} MISMATCHES")
    )
    return problems, summary


def wait_until_released(dsn: str, slot: str, timeout: float = 30.0) -> None:
    """Waits until the killed capture's server backend is gone: until then it still holds the slot
    and the capture lock, and the next capture would rightly refuse to start."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            busy = conn.execute(
                "select exists (select 1 from pg_replication_slots where slot_name = %s and active)"
                " or exists (select 1 from pg_locks where locktype = 'advisory' and pid != pg_backend_pid())",
                (slot,),
            ).fetchone()[0]
            if not busy:
                return
            time.sleep(0.1)


def run_capture(argv: list[str], stop: threading.Event | None = None) -> int:
    """The capture job in this process, its summary line silenced (errors still go to stderr)."""
    with redirect_stdout(io.StringIO()):
        return capture.main(argv, stop=stop)


@contextmanager
def _slot_never_advances():
    """The capture "crashes" right after its first durable file: the slot is not advanced. Yields
    the stop event to pass to that capture."""
    stop = threading.Event()
    original = capture.stream.advance

    def crash_instead(conn, slot, lsn):
        stop.set()

    capture.stream.advance = crash_instead
    try:
        yield stop
    finally:
        capture.stream.advance = original


def transactions_of(lines) -> dict[int, tuple[str, ...]]:
    """Commit LSN -> the transaction's lines (B … C); a replayed transaction must repeat them exactly."""
    result: dict[int, tuple[str, ...]] = {}
    current: list[str] = []
    for line in lines:
        record = json.loads(line)
        if record["action"] == "M" and record.get("transactional") is False:
            continue  # belongs to no transaction
        current.append(line)
        if record["action"] == "C":
            lsn = parse_lsn(record["lsn"])
            if result.setdefault(lsn, tuple(current)) != tuple(current):
                result[lsn] = ("<conflicting copies>",)
            current = []
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m testkit.soak",
        description="Run seeded random workloads through live capture and compare the Python oracle's replay "
        "of the landed WAL with the tables in Postgres.",
    )
    parser.add_argument(
        "--seeds", default="1-5", help="seeds to run, e.g. 1-20 or 3,7,9 (default: %(default)s)"
    )
    parser.add_argument(
        "--transactions", type=int, default=300, help="transactions per seed (default: %(default)s)"
    )
    parser.add_argument("--sessions", type=int, default=4, help="concurrent sessions (default: %(default)s)")
    parser.add_argument(
        "--dsn", help="an existing server to use (needs createdb, wal2json); default: a throwaway one"
    )
    parser.add_argument("--landing", help="landing zone directory (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the landing zone (and print where it is)")
    parser.add_argument(
        "--max-problems", type=int, default=20, help="mismatches printed per seed (default: %(default)s)"
    )
    args = parser.parse_args(argv)

    landing = Path(args.landing) if args.landing else Path(tempfile.mkdtemp(prefix="wal_lake_soak_"))
    failed = 0
    started = time.monotonic()
    server_cm = nullcontext(None) if args.dsn else PostgresServer()
    with server_cm as server:
        admin_dsn = args.dsn or server.dsn()
        for seed in parse_seeds(args.seeds):
            problems, summary = run_seed(admin_dsn, seed, args, landing)
            print(summary or f"seed {seed}: FAILED", flush=True)
            for problem in problems[: args.max_problems]:
                print(f"  {problem}", flush=True)
            failed += bool(problems)
    print(
        f"soak: {len(parse_seeds(args.seeds)) - failed} of {len(parse_seeds(args.seeds))} seeds OK "
        f"in {time.monotonic() - started:.0f}s" + (f"; landing zone kept in {landing}" if args.keep else "")
    )
    if not args.keep and not args.landing:
        import shutil

        shutil.rmtree(landing, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
