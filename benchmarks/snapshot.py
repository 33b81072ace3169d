"""The capture's initial snapshot of one large table: rows/s and the capture's peak memory.

    .venv/bin/python -m benchmarks.snapshot --rows 1000000 [--jobs 2] [--file-mb 256] [--keep]

Starts a throwaway Postgres (testkit.pg_server), fills ``bench (id bigint primary key, payload text)``
with ``--rows`` rows of about 250 bytes each (generate_series, in SQL), then runs
``python -m python_jobs.capture --snapshot --once`` as a child process and samples its resident
memory (the process and any of its children) every 50 ms. Prints rows, seconds, rows/s, peak memory,
the files and bytes written, and checks that the landed ``R`` lines are as many as the table's rows
(the exit status is 1 when they are not), and the CPU time the capture and Postgres used: on a
shared machine the rows/s depend on the load, the CPU time much less. The landing files are
deleted afterwards unless ``--keep``.

Disk: the table takes about 330 bytes a row in Postgres and its landing files about 450 bytes a row
(a 40M-row table: about 13 GB plus 18 GB).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg

from testkit.pg_server import PostgresServer

PROJECT_DIR = Path(__file__).resolve().parents[1]
SAMPLE_SECONDS = 0.05


def fill(dsn: str, rows: int) -> float:
    """Create and fill the table (the key is built after the rows: faster); the seconds it took."""
    started = time.monotonic()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create table bench (id bigint, payload text)")
        # 256 characters of hex a row: about the 250-byte payload of the measurements.
        conn.execute(
            "insert into bench select n, repeat(md5(n::text), 8) from generate_series(1, %s) n", (rows,)
        )
        conn.execute("alter table bench add primary key (id)")
        conn.execute("vacuum analyze bench")
    return time.monotonic() - started


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as handle:
                ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, []))
    return tree


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of ``pid`` so far (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Sampler(threading.Thread):
    """Samples the summed resident memory of a process tree until the process ends, and the CPU
    time of that tree and of the Postgres server's processes (the last value seen of each: a
    process's time once it exits is lost, so figures are within one sample of the truth)."""

    def __init__(self, process: subprocess.Popen, postmaster: int) -> None:
        super().__init__(daemon=True)
        self.process = process
        self.postmaster = postmaster
        self.peak = 0
        self.capture_cpu: dict[int, float] = {}
        self.postgres_cpu: dict[int, float] = {}
        self.postgres_start = {pid: cpu_seconds(pid) for pid in process_tree(postmaster)}

    def run(self) -> None:
        while self.process.poll() is None:
            tree = process_tree(self.process.pid)
            self.peak = max(self.peak, sum(rss_bytes(pid) for pid in tree))
            for pid in tree:
                self.capture_cpu[pid] = max(self.capture_cpu.get(pid, 0.0), cpu_seconds(pid))
            for pid in process_tree(self.postmaster):
                self.postgres_cpu[pid] = max(self.postgres_cpu.get(pid, 0.0), cpu_seconds(pid))
            time.sleep(SAMPLE_SECONDS)

    def cpu(self) -> tuple[float, float]:
        """CPU seconds of the capture and of Postgres during the snapshot."""
        postgres = sum(cpu - self.postgres_start.get(pid, 0.0) for pid, cpu in self.postgres_cpu.items())
        return sum(self.capture_cpu.values()), postgres


def count_reads(directory: Path) -> tuple[int, int, int]:
    """Files, bytes, and ``R`` lines landed in ``directory``."""
    files = sorted(directory.glob("*.jsonl"))
    reads = 0
    for path in files:
        with open(path, "rb") as handle:
            for line in handle:
                if line.startswith(b'{"action":"R"'):
                    reads += 1
    return len(files), sum(path.stat().st_size for path in files), reads


def run(rows: int, jobs: int, file_mb: float, keep: bool) -> int:
    landing = Path(tempfile.mkdtemp(prefix="wal_lake_snapshot_bench_"))
    try:
        with PostgresServer() as server:
            dsn = server.create_database("bench")
            fill_seconds = fill(dsn, rows)
            with psycopg.connect(dsn) as conn:
                table_bytes = conn.execute("select pg_total_relation_size('bench')").fetchone()[0]
            print(
                f"filled {rows:,} rows ({table_bytes / 2**20:,.0f} MiB in Postgres) in {fill_seconds:.1f} s",
                flush=True,
            )
            command = [sys.executable, "-m", "python_jobs.capture", "--dsn", dsn, "--slot", "bench"]
            command += ["--landing", str(landing), "--source-id", "bench", "--snapshot", "--once"]
            command += ["--snapshot-jobs", str(jobs), "--snapshot-file-mb", str(file_mb)]
            started = time.monotonic()
            postmaster = int((server.data_dir / "postmaster.pid").read_text().split()[0])
            child = subprocess.Popen(command, cwd=PROJECT_DIR)
            sampler = Sampler(child, postmaster)
            sampler.start()
            status = child.wait()
            seconds = time.monotonic() - started
            sampler.join()
        if status != 0:
            print(f"snapshot benchmark: the capture failed (exit status {status})", file=sys.stderr)
            return 1
        files, written, reads = count_reads(landing / "bench")
        capture_cpu, postgres_cpu = sampler.cpu()
        print(
            f"snapshot benchmark: {rows:,} rows in {seconds:.1f} s = {rows / seconds:,.0f} rows/s; "
            f"peak memory {sampler.peak / 2**20:,.0f} MiB; {files} files, {written / 2**20:,.0f} MiB "
            f"written; landed R lines {reads:,} {'=' if reads == rows else '!='} table rows {rows:,}"
        )
        print(
            f"CPU: capture {capture_cpu:.1f} s, Postgres {postgres_cpu:.1f} s; machine load average "
            f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
        )
        return 0 if reads == rows else 1
    finally:
        if keep:
            print(f"landing files kept in {landing}")
        else:
            shutil.rmtree(landing, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.snapshot", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rows", type=int, required=True, help="rows in the table")
    parser.add_argument("--jobs", type=int, default=2, help="--snapshot-jobs (default: %(default)s)")
    parser.add_argument(
        "--file-mb", type=float, default=256.0, help="--snapshot-file-mb (default: %(default)g)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the landing files")
    args = parser.parse_args(argv)
    if args.rows < 1:
        parser.error("--rows must be at least 1")
    return run(args.rows, args.jobs, args.file_mb, args.keep)


if __name__ == "__main__":
    sys.exit(main())
