"""Follow mode's lag: from a commit in Postgres to the change visible in consumer_records and the mirrors.

    .venv/bin/python -m benchmarks.lag --rate 1000 --minutes 10 [--min-interval 10] [--build-every S]
        [--build-slice S]

Starts a throwaway Postgres (testkit.pg_server, with ``track_commit_timestamp`` on), creates one
table and a wal2json slot, and starts the follower (``python -m python_jobs.follow --dsn ...``) as a
child process on a warehouse of its own in a temporary directory. Once its first cycle has built
the table's first rows (Spark's start-up and the first build are not the steady state), a client
writes ``--rate`` changes a second for ``--minutes``: transactions of ``--changes-per-transaction``
upserts over a key space of ``--keys`` rows (an insert at a key's first touch, an update after), paced
on a fixed schedule, so that a client that falls behind catches up rather than lowering the rate.
Then it waits until everything written is visible, stops the follower with SIGTERM and reports.

How the lag is measured. Each transaction's commit time is Postgres' own commit timestamp
(``pg_xact_commit_timestamp`` of its xid, read after the run): the same clock and the same value
that wal2json sends and ``committed_at`` holds. A change is visible in a table from the table's own
Delta commit that makes it so, the moment a query sees it: each consumer model stamps its commits
with the ``seq`` it applied up to (``macros/consumer_stamp.sql``), and the commit's time is in its
log (``_delta_log/*.json``, ``commitInfo.timestamp``, the same machine's clock). A stamp's ``seq``
maps to the commit time of its change through the follower's status file, which shows, per source,
the seq and commit time of the newest change visible in ``consumer_records`` and in every mirror
(``python_jobs.status``); the benchmark polls that file every 0.1 s and keeps each new one. For the
mirrors, a change is visible once it is in every mirror. Every change counts once (percentiles are
over changes, not transactions).

The same lag is also reported as the status file shows it: from the commit to the first status
whose newest visible commit time is at or after the change's own, seen on the benchmark's clock.
That adds to the Delta commit the cycle's later steps (the mirrors after ``consumer_records``) and
the status' own reads: the figure a monitor reading the file gets.

The report: p50, p95 and max lag to ``consumer_records`` and to the mirrors; the rate held; the
backlog's trend (the last minute's p95 against the first minute's, goal ratio at most 1.2: a ratio
above it means the follower falls behind); the cycles' count and length; and the follower's own
shown lag (each status' ``lag_seconds``, the age of the newest visible change when it was
written) against the measurement: the shown lag is the lag of a cycle's newest change, the
measured lag of its oldest can be up to a cycle longer, so the two should differ by less than a
cycle. Exit status 1 when something written never became visible.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from python_jobs.status import STAMP_PREFIX
from testkit.pg_server import PostgresServer

PROJECT_DIR = Path(__file__).resolve().parents[1]
SOURCE = "lag.bench"
SLOT = "lag_bench"
POLL_SECONDS = 0.1
P95_GOAL_SECONDS = 60.0
BACKLOG_GOAL_RATIO = 1.2


@dataclass
class Written:
    """What the client committed: per transaction its xid and changes; the rate it held."""

    transactions: list[tuple[int, int]] = field(default_factory=list)  # (xid, changes)
    started: float = 0.0
    ended: float = 0.0
    behind_max: float = 0.0  # how far the client ever fell behind its schedule, in seconds

    @property
    def changes(self) -> int:
        return sum(n for _, n in self.transactions)


def write_steadily(
    dsn: str, rate: float, seconds: float, per_transaction: int, keys: int, seed: int
) -> Written:
    """``rate`` changes a second for ``seconds``, on a fixed schedule."""
    rng = random.Random(seed)
    written = Written()
    interval = per_transaction / rate
    with psycopg.connect(dsn) as conn:
        written.started = time.monotonic()
        deadline = written.started + seconds
        number = 0
        while True:
            due = written.started + number * interval
            if due >= deadline:
                break
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
            else:
                written.behind_max = max(written.behind_max, now - due)
            ids = rng.sample(range(1, keys + 1), per_transaction)
            xid = conn.execute("select txid_current()").fetchone()[0]
            conn.execute(
                "insert into bench_lag (id, payload, touched) select id, md5(id::text || %s), now()"
                " from unnest(%s::bigint[]) as id"
                " on conflict (id) do update set payload = excluded.payload, touched = excluded.touched",
                (str(number), ids),
            )
            conn.commit()
            written.transactions.append((xid, per_transaction))
            number += 1
        written.ended = time.monotonic()
    return written


def commit_times(dsn: str, xids: list[int]) -> dict[int, datetime]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "select x, pg_xact_commit_timestamp(x::text::xid) from unnest(%s::bigint[]) as x", (xids,)
        ).fetchall()
    return {x: at for x, at in rows}


@dataclass
class Seen:
    """One status file the benchmark saw: when (its clock, wall time), and what it said."""

    at: datetime
    cycles: int
    visible: datetime | None  # newest commit visible in consumer_records
    mirrors: datetime | None  # newest commit visible in every mirror
    shown_lag: float | None  # the follower's lag_seconds
    pending: int
    built: bool
    seq: int | None = None  # the seq of the newest change visible in consumer_records
    mirror_seq: int | None = None  # and in every mirror


def _time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


class Watcher(threading.Thread):
    """Polls the follower's status file; keeps every new one."""

    def __init__(self, path: Path) -> None:
        super().__init__(name="lag-watcher", daemon=True)
        self.path = path
        self.seen: list[Seen] = []
        self.stop = threading.Event()
        self._last: float | None = None

    def run(self) -> None:
        while not self.stop.is_set():
            self.poll()
            time.sleep(POLL_SECONDS)

    def poll(self) -> None:
        try:
            mtime = self.path.stat().st_mtime_ns
            if mtime == self._last:
                return
            document = json.loads(self.path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return
        self._last = mtime
        at = datetime.now(UTC)
        entry = next((s for s in document["sources"] if s["source_id"] == SOURCE), None)
        if entry is None or document["state"] != "running":
            return
        visible = entry["consumer_records"]
        self.seen.append(
            Seen(
                at=at,
                cycles=document["cycles"],
                visible=_time(visible["committed_at"]) if visible else None,
                mirrors=_time(entry["mirrors"]["committed_at"]) if entry["mirrors"] else None,
                shown_lag=entry["lag_seconds"],
                pending=entry["pending"],
                built=bool(visible) and visible["commit_lsn"] == entry["frontier_lsn"],
                seq=visible["seq"] if visible else None,
                mirror_seq=entry["mirrors"]["seq"] if entry["mirrors"] else None,
            )
        )

    def latest(self) -> Seen | None:
        return self.seen[-1] if self.seen else None


def status_marks(seen: list[Seen], attribute: str) -> list[tuple[datetime, datetime]]:
    """(when, the newest commit visible then): each status the benchmark saw."""
    return [(s.at, getattr(s, attribute)) for s in seen if getattr(s, attribute) is not None]


def stamped_commits(table: Path) -> list[tuple[datetime, int]]:
    """A consumer model's Delta commits that carry its stamp: (the commit's time, the seq applied up
    to), from the table's own log (``_delta_log/*.json``, ``commitInfo``), in version order."""
    found = []
    for path in sorted((table / "_delta_log").glob("*.json")):
        for line in path.read_text().splitlines():
            info = json.loads(line).get("commitInfo") if line.strip() else None
            metadata = (info or {}).get("userMetadata") or ""
            if metadata.startswith(STAMP_PREFIX):
                at = datetime.fromtimestamp(info["timestamp"] / 1000, UTC)
                found.append((at, int(metadata.removeprefix(STAMP_PREFIX).split(",", 1)[0])))
    return found


def commit_marks(
    commits: list[tuple[datetime, int]], seen: list[Seen], seq_attribute: str, attribute: str
) -> list[tuple[datetime, datetime]]:
    """(when, the newest commit visible then), at each stamped commit of the table: a stamp's seq
    maps to its change's commit time through the statuses, which show each seq they make visible
    with it; a stamp no status showed takes the greatest seq below it that one did (earlier: never
    in the follower's favour)."""
    known = sorted(
        {
            (getattr(s, seq_attribute), getattr(s, attribute))
            for s in seen
            if getattr(s, seq_attribute) is not None
        }
    )
    seqs = [seq for seq, _ in known]
    marks = []
    for at, stamp in commits:
        below = bisect.bisect_right(seqs, stamp)
        if below:
            marks.append((at, known[below - 1][1]))
    return marks


def lags(commits: list[tuple[datetime, int]], marks: list[tuple[datetime, datetime]]) -> list[float | None]:
    """Per change, seconds from its commit to the first mark showing it (None: never shown)."""
    result: list[float | None] = []
    marks = sorted(marks)
    for committed, changes in commits:
        shown = next((at for at, visible in marks if visible >= committed), None)
        lag = (shown - committed).total_seconds() if shown is not None else None
        result.extend([lag] * changes)
    return result


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile: the smallest value with at least q% of the values at or below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def describe(name: str, values: list[float | None], first: list[bool], last: list[bool]) -> tuple[str, dict]:
    """One line: p50, p95 and max; the p95 of the first minute's changes and of the last minute's
    (by commit time), and their ratio."""
    missing = sum(v is None for v in values)
    shown = [v for v in values if v is not None]
    if not shown:
        return f"{name}: nothing became visible", {"missing": missing}
    early = [v for v, f in zip(values, first, strict=True) if f and v is not None]
    late = [v for v, f in zip(values, last, strict=True) if f and v is not None]
    figures = {
        "p50": percentile(shown, 50),
        "p95": percentile(shown, 95),
        "max": max(shown),
        "first_minute_p95": percentile(early, 95) if early else None,
        "last_minute_p95": percentile(late, 95) if late else None,
        "missing": missing,
    }
    ratio = None
    if figures["first_minute_p95"] and figures["last_minute_p95"] is not None:
        ratio = figures["last_minute_p95"] / figures["first_minute_p95"]
    figures["backlog_ratio"] = ratio
    trend = (
        f"; last minute's p95 {figures['last_minute_p95']:.1f} s / first minute's "
        f"{figures['first_minute_p95']:.1f} s = {ratio:.2f} (goal <= {BACKLOG_GOAL_RATIO}: "
        f"{'steady' if ratio <= BACKLOG_GOAL_RATIO else 'the backlog grows'})"
        if ratio is not None
        else ""
    )
    line = (
        f"{name}: lag p50 {figures['p50']:.1f} s, p95 {figures['p95']:.1f} s, max {figures['max']:.1f} s"
        + trend
        + (f"; {missing:,} changes never visible" if missing else "")
    )
    return line, figures


def follower_env(root: Path) -> dict[str, str]:
    """The follower's own warehouse, metastore, dbt target and mirror models (a path inside the
    project, as dbt needs it, removed afterwards)."""
    return {
        **os.environ,
        "WAL_LAKE_TARGET": "local",
        "WAL_LAKE_SPARK_DIR": str(root / "spark"),
        "WAL_LAKE_WAREHOUSE_DIR": str(root / "spark" / "warehouse"),
        "DBT_TARGET_PATH": str(root / "dbt_target"),
        "DBT_LOG_PATH": str(root / "dbt_logs"),
        "WAL_LAKE_MIRROR_MODELS": str(Path("target") / "bench_lag_mirrors" / root.name),
    }


def wait_until(condition, seconds: float, follower: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if follower.poll() is not None:
            raise RuntimeError(f"the follower exited ({follower.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {seconds:.0f} s")
        time.sleep(POLL_SECONDS)


def run(args: argparse.Namespace) -> int:
    root = Path(tempfile.mkdtemp(prefix="wal_lake_lag_bench_"))
    env = follower_env(root)
    log_path = root / "follow.log"
    status_file = root / "status.json"
    follower: subprocess.Popen | None = None
    try:
        with PostgresServer(settings={"track_commit_timestamp": "on"}) as server:
            dsn = server.create_database("lag")
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(
                    "create table bench_lag (id bigint primary key, payload text, touched timestamptz)"
                )
                conn.execute("select pg_create_logical_replication_slot(%s, 'wal2json')", (SLOT,))
                conn.execute("insert into bench_lag values (0, 'first', now())")
            command = [sys.executable, "-m", "python_jobs.follow", "--landing", str(root / "landing")]
            command += [
                "--dsn",
                dsn,
                "--slot",
                SLOT,
                "--source-id",
                SOURCE,
                "--status-file",
                str(status_file),
            ]
            command += ["--lock-file", str(root / "follow.lock"), "--min-interval", str(args.min_interval)]
            if args.build_every is not None:
                command += ["--build-every", str(args.build_every)]
            if args.build_slice is not None:
                command += ["--build-slice", str(args.build_slice)]
            log = open(log_path, "w")  # noqa: SIM115 (closed with the process)
            follower = subprocess.Popen(
                command,
                cwd=PROJECT_DIR,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            watcher = Watcher(status_file)
            watcher.start()
            started = time.monotonic()
            wait_until(
                lambda: (s := watcher.latest()) is not None and s.visible is not None,
                args.start_timeout,
                follower,
                "the follower's first build",
            )
            print(f"follower ready in {time.monotonic() - started:.0f} s (Spark, first build)", flush=True)
            print(f"writing {args.rate:g} changes/s for {args.minutes:g} min", flush=True)
            written = write_steadily(
                dsn, args.rate, args.minutes * 60, args.changes_per_transaction, args.keys, args.seed
            )
            commits = commit_times(dsn, [x for x, _ in written.transactions])
            newest = max(commits.values())
            print(
                f"written; waiting for the follower to show everything (commit {newest:%H:%M:%S.%f})",
                flush=True,
            )
            wait_until(
                lambda: (
                    (s := watcher.latest()) is not None
                    and s.visible is not None
                    and s.visible >= newest
                    and s.mirrors is not None
                    and s.mirrors >= newest
                ),
                args.drain_timeout,
                follower,
                "everything visible",
            )
            follower.send_signal(signal.SIGTERM)
            follower.wait(300)
            watcher.stop.set()
            watcher.poll()
        warehouse = Path(env["WAL_LAKE_WAREHOUSE_DIR"])
        tables = {
            "consumer_records": [warehouse / "wal_lake.db" / "consumer_records"],
            "mirrors": sorted(p.parent for p in (warehouse / "wal_lake_mirror.db").glob("*/_delta_log")),
        }
        stamped = {name: [stamped_commits(t) for t in found] for name, found in tables.items()}
        return report(args, written, commits, watcher.seen, stamped, follower.returncode)
    except RuntimeError as exc:
        tail = log_path.read_text(errors="replace").splitlines()[-15:] if log_path.exists() else []
        print(f"lag benchmark: {exc}\n" + "\n".join(tail), file=sys.stderr)
        return 1
    finally:
        if follower is not None and follower.poll() is None:
            os.killpg(follower.pid, signal.SIGKILL)
            follower.wait(60)
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
        models = PROJECT_DIR / env["WAL_LAKE_MIRROR_MODELS"]
        shutil.rmtree(models, ignore_errors=True)
        if models.parent.is_dir() and not any(models.parent.iterdir()):
            models.parent.rmdir()


def report(
    args,
    written: Written,
    commits: dict[int, datetime],
    seen: list[Seen],
    stamped: dict[str, list[list[tuple[datetime, int]]]],
    code: int,
) -> int:
    ordered = sorted((commits[x], n) for x, n in written.transactions)
    start, end = ordered[0][0], ordered[-1][0]
    # The first and the last minute of writing, by commit time (under two minutes: each half).
    window = min(60.0, (end - start).total_seconds() / 2)
    first = [(at - start).total_seconds() < window for at, n in ordered for _ in range(n)]
    last = [(end - at).total_seconds() < window for at, n in ordered for _ in range(n)]
    seconds = written.ended - written.started
    cycles = [s for s in seen if s.visible is not None]
    lengths = [
        (b.at - a.at).total_seconds() for a, b in zip(cycles, cycles[1:], strict=False) if b.cycles > a.cycles
    ]
    cycle_line = (
        f"{len(lengths) + 1} cycles seen, {statistics.mean(lengths):.1f} s apart on average "
        f"(max {max(lengths):.1f} s)"
        if lengths
        else f"{len(cycles)} cycles seen"
    )
    print(
        f"\nlag benchmark: {args.rate:g} changes/s asked for {args.minutes:g} min; held "
        f"{written.changes / seconds:,.1f} changes/s ({written.changes:,} changes in "
        f"{len(written.transactions):,} transactions over {seconds:.1f} s; the client at most "
        f"{written.behind_max:.2f} s behind its schedule); follower: {cycle_line}; exit status {code}"
    )
    # Visible: from the model's own Delta commit (what a query sees), and, as before, from the
    # status file written after the cycle (which adds the cycle's later steps and the status' reads).
    results, shown_in_status = {}, {}
    for name, attribute, seq_attribute in (
        ("consumer_records", "visible", "seq"),
        ("mirrors", "mirrors", "mirror_seq"),
    ):
        per_table = [lags(ordered, commit_marks(c, seen, seq_attribute, attribute)) for c in stamped[name]]
        committed = [
            None if not per_table or any(v is None for v in values) else max(values)
            for values in zip(*per_table, strict=True)
        ] or [None] * written.changes
        line, figures = describe(f"{name} (its Delta commit)", committed, first, last)
        results[name] = figures
        print(line)
        line, figures = describe(
            f"{name} (the status file)", lags(ordered, status_marks(seen, attribute)), first, last
        )
        shown_in_status[name] = figures
        print(line)
    # The follower's own figure: each status' lag_seconds, the age of its newest visible change
    # when written. The measurement's lag of that same change differs only by the status' write to
    # the benchmark's sight; the measurement's percentiles (over every change) run up to a cycle higher.
    steady = [s for s in cycles if s.shown_lag is not None and s.visible is not None and s.visible >= start]
    if steady and lengths and shown_in_status["consumer_records"].get("p95") is not None:
        shown = [s.shown_lag for s in steady]
        sight = max((s.at - s.visible).total_seconds() - s.shown_lag for s in steady)
        gap = shown_in_status["consumer_records"]["p95"] - percentile(shown, 95)
        cycle = max(lengths)
        print(
            f"the follower's shown lag (lag_seconds, {len(shown)} cycles): "
            f"p50 {percentile(shown, 50):.1f} s, p95 {percentile(shown, 95):.1f} s, max {max(shown):.1f} s; "
            f"the same changes measured here: at most {sight:.2f} s more; "
            f"the measured p95 minus the shown p95: {gap:.1f} s, "
            f"{'within' if abs(gap) <= cycle else 'NOT within'} a cycle ({cycle:.1f} s at most)"
        )
    cr, by_status = results["consumer_records"], shown_in_status["consumer_records"]
    verdict = "p95 <= 60 s" if cr.get("p95") is not None and cr["p95"] <= P95_GOAL_SECONDS else "p95 > 60 s"
    ratio = cr.get("backlog_ratio")
    print(
        f"verdict: consumer_records {verdict} from its commits"
        + (f" ({by_status['p95']:.1f} s by the status file)" if by_status.get("p95") is not None else "")
        + "; backlog "
        + (
            "not measured (under two minutes)"
            if ratio is None
            else ("steady" if ratio <= BACKLOG_GOAL_RATIO else "grows")
        )
        + f"; machine load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    missing = [f.get("missing") for f in (*results.values(), *shown_in_status.values())]
    return 1 if any(missing) or code != 0 else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lag", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=1000.0, help="changes a second (default: %(default)g)")
    parser.add_argument(
        "--minutes", type=float, default=10.0, help="how long to write (default: %(default)g)"
    )
    parser.add_argument(
        "--min-interval",
        type=float,
        default=10.0,
        help="the follower's --min-interval (default: %(default)g)",
    )
    parser.add_argument(
        "--build-every",
        type=float,
        help="the follower's --build-every (default: the follower's own; 0: dbt build every cycle)",
    )
    parser.add_argument(
        "--build-slice",
        type=float,
        help="the follower's --build-slice (default: the follower's own; 0: the whole build in one cycle)",
    )
    parser.add_argument(
        "--changes-per-transaction",
        type=int,
        default=10,
        help="rows each transaction upserts (default: %(default)s)",
    )
    parser.add_argument("--keys", type=int, default=100_000, help="the key space (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=1, help="drives the keys chosen (default: %(default)s)")
    parser.add_argument(
        "--start-timeout",
        type=float,
        default=600.0,
        help="seconds for the follower's first build (default: %(default)g)",
    )
    parser.add_argument(
        "--drain-timeout",
        type=float,
        default=900.0,
        help="seconds for the last changes to show after the writing ends (default: %(default)g)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the follower's warehouse, landing zone and log"
    )
    args = parser.parse_args(argv)
    if args.rate <= 0 or args.minutes <= 0 or args.changes_per_transaction < 1:
        parser.error("--rate, --minutes and --changes-per-transaction must be positive")
    if args.changes_per_transaction > args.keys:
        parser.error("--keys must be at least --changes-per-transaction")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
