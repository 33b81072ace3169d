"""Live capture from a real Postgres: the server harness, the capture job, and the Python oracle.

One server for the whole session (the ``postgres`` fixture); every test works in its own database,
so its slot (= its source_id) sees only its own changes.
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest

from python_jobs import capture
from python_jobs.lsn import parse_lsn
from testkit import oracle, soak, workload
from testkit.pg_server import PostgresServer, missing_requirements

PROJECT_DIR = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
_counter = itertools.count()


# --- helpers ---------------------------------------------------------------------------------------


def fresh_database(postgres, label: str) -> str:
    return postgres.create_database(f"t_{label}_{next(_counter)}")


def peek_all(dsn: str, slot: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [data for _lsn, data in capture.peek(conn, slot, None, None)]


def reference_lines(dsn: str) -> list[str]:
    """The reference slot's lines up to where the capture slot now stands: what the capture says it
    landed. A transaction committed after the capture read its end belongs to its next run, and
    one can come at any moment: autovacuum's analyze commits catalog-only transactions, which
    wal2json decodes as an empty begin and commit."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        upto = parse_lsn(capture.slot.slot_info(conn, slot_name(dsn))["confirmed_flush_lsn"])
        return [data for _lsn, data in capture.peek(conn, slot_name(dsn, "reference"), upto, None)]


def dsn_dbname(dsn: str) -> str:
    return dict(part.split("=", 1) for part in dsn.split())["dbname"]


def slot_name(dsn: str, kind: str = "capture") -> str:
    """Slots are cluster-wide: name them after the test's database."""
    return f"{dsn_dbname(dsn)}_{kind}"


def source_id(dsn: str, kind: str = "capture") -> str:
    return f"{dsn_dbname(dsn)}.{slot_name(dsn, kind)}"


def create_reference_slot(dsn: str) -> None:
    """A slot nobody advances: peeking it later returns every change since now."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "select pg_create_logical_replication_slot(%s, 'wal2json')", (slot_name(dsn, "reference"),)
        )


def run_capture(
    dsn: str, landing: Path, *extra: str, kind: str = "capture", stop: threading.Event | None = None
) -> int:
    slot = slot_name(dsn, kind)
    argv = ["--dsn", dsn, "--slot", slot, "--landing", str(landing), "--quiet", *extra]
    return capture.main(argv, stop=stop)


def landed_files(landing: Path, source_id: str) -> list[Path]:
    return sorted((landing / source_id).glob("*.jsonl"))


def landed_lines(files: list[Path]) -> list[str]:
    return [line for path in files for line in path.read_text().splitlines()]


def database_truth(dsn: str):
    with psycopg.connect(dsn) as conn:
        tables = oracle.user_tables(conn)
        types, keys = oracle.table_types(conn, tables)
        return oracle.postgres_state(conn, tables), types, keys


def assert_replay_matches(dsn: str, lines: list[str]) -> None:
    expected, types, keys = database_truth(dsn)
    replayed = oracle.replay_wal2json(lines)
    for table in expected:
        replayed.setdefault(table, [])
    problems = oracle.compare_states(expected, replayed, types, keys)
    assert problems == [], "\n".join(problems[:30])


def prepare(dsn: str, seed: int, initial_rows: int = 30) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        workload.create_tables(conn, "public")
    workload.seed_rows(dsn, "public", seed, initial_rows)


# --- pure Python: no server ------------------------------------------------------------------------


def test_replay_of_real_fixture_equals_its_expected_state():
    lines = (FIXTURES / "wal2json" / "accounts.jsonl").read_text().splitlines()
    expected = json.loads((FIXTURES / "wal2json" / "accounts.expected.json").read_text())
    types = {
        "public.accounts": {
            "id": "bigint",
            "email": "text",
            "note": "text",
            "balance": "numeric(12,2)",
            "updated_at": "timestamp with time zone",
        },
        "public.memberships": {"account_id": "bigint", "team": "text", "role": "text"},
    }
    keys = {"public.accounts": ["id"], "public.memberships": ["account_id", "team"]}
    # Replaying a copy of the first transactions again (a slot replay) changes nothing.
    assert oracle.compare_states(expected, oracle.replay_wal2json(lines + lines[:8]), types, keys) == []
    changed = oracle.replay_wal2json(lines)
    changed["public.accounts"][0]["balance"] = 1
    assert oracle.compare_states(expected, changed, types, keys) == [
        "public.accounts (id)=(2,): balance expected Decimal('0.0'), got Decimal('1')"
    ]


def test_typed_values_compare_across_renderings():
    tv = oracle.typed_value
    assert tv("timestamp with time zone", "2026-01-01T00:00:00+00:00") == tv(
        "timestamp with time zone", "2026-01-01 00:00:00+00"
    )
    assert tv("timestamp with time zone", "2026-01-01 02:00:00+02") == tv(
        "timestamp with time zone", "2026-01-01T00:00:00+00:00"
    )
    assert tv("numeric(12,2)", "10.50") == tv("numeric(12,2)", 10.5)
    assert tv("boolean", "true") is True and tv("boolean", False) is False
    assert tv("jsonb", '{"a": 1.50}') == tv("jsonb", {"a": 1.5})
    assert tv("bytea", "\\x0102") == tv("bytea", "0102") == b"\x01\x02"
    assert tv("bigint", "7") == 7 and tv("text", None) is None
    record = {"id": "1", "balance": "10.50", "note": None}
    assert oracle.typed_record(record, {"id": "bigint", "balance": "numeric", "note": "text"}) == {
        "id": 1,
        "balance": oracle.Decimal("10.5"),
        "note": None,
    }


def test_complete_prefix_keeps_whole_transactions_only():
    rows = [
        ("0/10", '{"action":"B","xid":1,"lsn":"0/20","nextlsn":"0/30"}'),
        ("0/10", '{"action":"I","xid":1,"lsn":"0/10","schema":"s","table":"t","columns":[],"pk":[]}'),
        ("0/30", '{"action":"C","xid":1,"lsn":"0/20","nextlsn":"0/30"}'),
        ("0/40", '{"action":"M","xid":null,"lsn":"0/40","transactional":false,"prefix":"p","content":"x"}'),
        ("0/50", '{"action":"B","xid":2,"lsn":"0/60","nextlsn":"0/70"}'),
        ("0/50", '{"action":"I","xid":2,"lsn":"0/50","schema":"s","table":"t","columns":[],"pk":[]}'),
    ]
    batch = capture.complete_prefix(rows)
    assert [json.loads(line)["action"] for line in batch.lines] == ["B", "I", "C", "M"]
    assert (batch.first_commit_lsn, batch.last_commit_lsn, batch.advance_to) == (0x20, 0x40, 0x40)
    assert (batch.transactions, batch.changes) == (1, 2)
    assert capture.landing_file_name(0x20, 0x40) == "0000000000000020-0000000000000040.jsonl"
    assert capture.snapshot_file_name(0x20) < capture.landing_file_name(0x20, 0x20)


def test_snapshot_progress_line_says_tables_rows_rate_and_time_left():
    progress = capture.snapshot.Progress(3, 1_000_000, [1, 0], [300_000, 100_000])
    assert capture.snapshot.progress_line(progress, 20.0) == (
        "snapshot: 1 of 3 tables, 400,000 rows in 20 s (20,000 rows/s);"
        " about 1,000,000 rows in all, 30 s left"
    )
    # Estimates come from pg_class.reltuples, which can be stale: past it, no time left is guessed.
    progress.rows[1] = 800_000
    assert capture.snapshot.progress_line(progress, 20.0).endswith("(55,000 rows/s)")


# --- against a real Postgres -----------------------------------------------------------------------


@pytest.mark.postgres
def test_server_starts_and_stops():
    problem = missing_requirements()
    if problem:
        pytest.skip(problem)
    server = PostgresServer().start()
    base_dir = server.base_dir
    try:
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            assert conn.execute("show wal_level").fetchone()[0] == "logical"
            assert conn.execute("select inet_server_addr()::text").fetchone()[0] == "127.0.0.1/32"
    finally:
        server.stop()
    assert not base_dir.exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(server.dsn(), connect_timeout=2)


@pytest.mark.postgres
def test_landed_lines_equal_what_the_slot_decodes(postgres, tmp_path):
    dsn = fresh_database(postgres, "lines")
    prepare(dsn, seed=11, initial_rows=0)  # no snapshot: start empty
    create_reference_slot(dsn)
    assert run_capture(dsn, tmp_path, "--once") == 0  # creates the slot, lands nothing yet
    workload.run_workload(dsn, seed=11, transactions=80, sessions=3, create=False)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select pg_logical_emit_message(false, 'wal_lake', 'non-transactional')")
        conn.execute("select pg_logical_emit_message(true, 'wal_lake', 'transactional')")
    assert run_capture(dsn, tmp_path, "--once", "--max-changes-per-file", "40") == 0

    files = landed_files(tmp_path, source_id(dsn))
    assert len(files) > 3, "small --max-changes-per-file must rotate files"
    lines = landed_lines(files)
    assert lines == reference_lines(dsn)
    # Names sort in WAL order and name each file's first commit and where the slot went after it.
    previous_end = -1
    for path in files:
        records = [json.loads(line) for line in path.read_text().splitlines()]
        units = [r for r in records if r["action"] == "C" or r.get("transactional") is False]
        end = parse_lsn(units[-1].get("nextlsn") or units[-1]["lsn"])
        assert path.name == capture.landing_file_name(parse_lsn(units[0]["lsn"]), end)
        assert parse_lsn(units[0]["lsn"]) >= previous_end
        previous_end = end
    assert not list((tmp_path / source_id(dsn)).glob(".tmp-*")), "no temp files left"
    # A second run lands again nothing the first landed: only what was committed since (at most
    # an empty transaction of autovacuum's).
    assert run_capture(dsn, tmp_path, "--once") == 0
    again = landed_files(tmp_path, source_id(dsn))
    assert again[: len(files)] == files
    assert landed_lines(again) == reference_lines(dsn)
    assert_replay_matches(dsn, lines)


@pytest.mark.postgres
def test_crash_replays_and_never_loses(postgres, tmp_path, monkeypatch):
    dsn = fresh_database(postgres, "crash")
    prepare(dsn, seed=12, initial_rows=0)  # no snapshot: start empty
    create_reference_slot(dsn)
    assert run_capture(dsn, tmp_path, "--once") == 0
    source = tmp_path / source_id(dsn)

    # 1. A follow-mode capture process killed -9 in the middle of a workload.
    follower = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "python_jobs.capture",
            "--dsn",
            dsn,
            "--slot",
            slot_name(dsn),
            "--landing",
            str(tmp_path),
        ]
        + ["--poll-interval", "0.02", "--max-changes-per-file", "15", "--quiet"],
        cwd=PROJECT_DIR,
    )
    try:
        workload.run_workload(dsn, seed=12, transactions=120, sessions=3, create=False)
        deadline = time.monotonic() + 20
        while not list(source.glob("*.jsonl")) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        follower.send_signal(signal.SIGKILL)
        follower.wait()
    landed_before_kill = len(list(source.glob("*.jsonl")))
    assert landed_before_kill > 0

    # 2. More changes, and a capture that dies after making its files durable but before advancing.
    workload.run_workload(dsn, seed=13, transactions=60, sessions=2, create=False)
    stop = threading.Event()
    with monkeypatch.context() as patch:
        patch.setattr(capture.stream, "advance", lambda conn, slot, lsn: None)
        original = capture.complete_prefix
        calls = []

        def one_batch_then_stop(rows):
            calls.append(1)
            if len(calls) > 1:
                stop.set()  # "crash" after the first durable file
            return original(rows)

        patch.setattr(capture.stream, "complete_prefix", one_batch_then_stop)
        # Cut other than the restart's below: the replayed transactions land under other names.
        assert run_capture(dsn, tmp_path, "--once", "--max-changes-per-file", "20", stop=stop) == 0

    # 3. The restart lands everything; the slot replayed, nothing was lost. A heartbeat sent just
    # before a commit that then rolled back can be the last WAL record, not yet flushed, and a --once
    # capture stops at the flush position it reads as it starts (the reference, peeked later, would
    # hold it): flush first.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("checkpoint")
    assert run_capture(dsn, tmp_path, "--once", "--max-changes-per-file", "30") == 0
    reference = reference_lines(dsn)
    lines = landed_lines(landed_files(tmp_path, source.name))
    assert set(lines) == set(reference), "every decoded line landed, and nothing else"
    assert not Counter(reference) - Counter(lines), "every decoded line landed at least as often"
    assert Counter(lines) - Counter(reference), "the capture that did not advance was replayed"
    # Each file holds a stretch of the slot's lines and names sort by its first commit: read in name
    # order, the first copy of every line comes in the order the slot decoded them.
    assert list(dict.fromkeys(lines)) == reference
    assert_replay_matches(dsn, lines)


@pytest.mark.postgres
def test_a_steady_stream_lands_in_a_file_a_poll_interval_not_one_per_commit(postgres, tmp_path):
    dsn = fresh_database(postgres, "steady")
    prepare(dsn, seed=14, initial_rows=0)
    assert run_capture(dsn, tmp_path, "--once") == 0  # creates the slot
    stop = threading.Event()
    follower = threading.Thread(
        target=run_capture,
        args=(dsn, tmp_path, "--poll-interval", "1.0", "--max-changes-per-file", "1000000"),
        kwargs={"stop": stop},
    )
    follower.start()
    commits, started = 0, time.monotonic()
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while time.monotonic() - started < 4:  # commits as fast as one session makes them, for 4 s
                conn.execute("select pg_logical_emit_message(true, 'wal_lake', 'tick')")
                commits += 1
        deadline = time.monotonic() + 10
        while (
            len(landed_lines(landed_files(tmp_path, source_id(dsn)))) < 3 * commits
            and time.monotonic() < deadline
        ):
            time.sleep(0.1)
    finally:
        stop.set()
        follower.join()
    files = landed_files(tmp_path, source_id(dsn))
    assert len(landed_lines(files)) == 3 * commits, "every commit landed: begin, message, commit"
    # Drained to its end, the capture waits a poll interval before it peeks again: about a file a
    # second, where peeking at once again would land in each file what was committed during the
    # last peek and write (commits come faster than that: a peek never comes back empty).
    assert commits >= 100
    assert len(files) <= time.monotonic() - started + 2, f"{len(files)} files for {commits} commits"


@pytest.mark.postgres
def test_commit_right_after_a_non_transactional_message_is_not_skipped(postgres, tmp_path):
    """wal2json reports a non-transactional message at the end of its record, where the next commit
    record may start: a capture stopped right after landing the message must not confirm past that
    commit, or the restarted slot skips the whole transaction."""
    dsn = fresh_database(postgres, "message_commit")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create table t (id int primary key, v text)")
    create_reference_slot(dsn)
    assert run_capture(dsn, tmp_path, "--once") == 0
    with psycopg.connect(dsn) as writer, psycopg.connect(dsn, autocommit=True) as other:
        writer.execute("insert into t values (1, 'kept')")
        other.execute("select pg_logical_emit_message(false, 'heartbeat', 'beat')")
        writer.commit()
    reference = peek_all(dsn, slot_name(dsn, "reference"))
    message, begin = json.loads(reference[0]), json.loads(reference[1])
    assert message["action"] == "M" and begin["action"] == "B"
    assert message["lsn"] == begin["lsn"], "the interleaving this test is about"

    stop = threading.Event()
    original = capture.stream.write_durably

    def stop_after_first_file(*args):
        stop.set()
        return original(*args)

    capture.stream.write_durably = stop_after_first_file
    try:
        assert run_capture(dsn, tmp_path, "--once", "--max-changes-per-file", "1", stop=stop) == 0
    finally:
        capture.stream.write_durably = original
    assert landed_lines(landed_files(tmp_path, source_id(dsn))) == reference[:1], "stopped after the message"
    assert run_capture(dsn, tmp_path, "--once") == 0
    lines = landed_lines(landed_files(tmp_path, source_id(dsn)))
    assert lines == reference
    assert_replay_matches(dsn, lines)


@pytest.mark.postgres
def test_once_lands_a_message_written_just_before_it(postgres, tmp_path):
    """Postgres 15 writes a non-transactional message without flushing it, and decoding stops at the
    flush position: a ``--once`` capture started right after a heartbeat lands it (it waits for the
    WAL written before it to be flushed), instead of leaving it to its next run."""
    dsn = fresh_database(postgres, "message_once")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create table t (id int primary key)")
    assert run_capture(dsn, tmp_path, "--once") == 0
    for n in range(3):
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("insert into t values (%s)", (n,))
            conn.execute("select pg_logical_emit_message(false, 'heartbeat', %s)", (f"beat {n}",))
        assert run_capture(dsn, tmp_path, "--once") == 0
        records = [json.loads(line) for line in landed_lines(landed_files(tmp_path, source_id(dsn)))]
        beats = [r["content"] for r in records if r["action"] == "M"]
        assert beats == [f"beat {k}" for k in range(n + 1)], f"run {n}: landed {beats}"


@pytest.mark.postgres
def test_a_slot_that_could_not_be_validated_is_not_used(postgres, tmp_path, capsys, monkeypatch):
    """A transaction that outlives the validation's wait leaves the new slot unproven: the run fails
    and drops the slot (a rerun would otherwise stream from it as if it had been checked)."""
    dsn = fresh_database(postgres, "unvalidated")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create table t (id int primary key)")
    blocker = psycopg.connect(dsn)
    original = capture.slot.create_slot

    def create_then_open_a_transaction(conn, slot):
        start = original(conn, slot)
        blocker.execute("insert into t values (1)")  # still open when the validation waits
        return start

    monkeypatch.setattr(capture.slot, "create_slot", create_then_open_a_transaction)
    monkeypatch.setattr(capture.slot, "VALIDATION_TIMEOUT", 0.5)
    try:
        assert run_capture(dsn, tmp_path, "--once") == 1
        assert "could not be validated" in capsys.readouterr().err
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert capture.slot.slot_info(conn, slot_name(dsn)) is None
    finally:
        blocker.close()
    monkeypatch.setattr(capture.slot, "create_slot", original)
    assert run_capture(dsn, tmp_path, "--once") == 0


@pytest.mark.postgres
def test_snapshot_survives_a_truncate_of_several_tables(postgres, tmp_path, monkeypatch):
    """A transaction truncating the tables the other way round while the snapshot reads them. Read
    in one transaction that holds every table it has read, the two deadlocked and Postgres cancelled
    one of them; each table is now read in a transaction of its own (holding one table at a time),
    and the truncates, which commit after the snapshot's point, stream after it."""
    dsn = fresh_database(postgres, "snapshot_deadlock")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create table a (id int primary key); create table b (id int primary key)")
        conn.execute("insert into a values (1); insert into b values (2)")
    truncater = psycopg.connect(dsn)
    watcher = psycopg.connect(dsn, autocommit=True)
    original = capture.snapshot.read_table
    finished: list[BaseException | None] = []

    def truncate_the_other_way():
        try:
            waiting = "select count(*) from pg_locks where not granted and relation = 'b'::regclass"
            while watcher.execute(waiting).fetchone()[0] == 0:
                time.sleep(0.02)
            truncater.execute("truncate a")  # waits for the snapshot, which waits for it
            truncater.commit()
            finished.append(None)
        except BaseException as exc:  # reported below
            finished.append(exc)

    other = threading.Thread(target=truncate_the_other_way)

    def read_with_a_truncate_under_way(conn, snapshot_name, shape, *args):
        if shape.table == "a" and not other.is_alive() and not finished:
            truncater.execute("truncate b")  # the snapshot will wait for b first
            other.start()
        return original(conn, snapshot_name, shape, *args)

    monkeypatch.setattr(capture.snapshot, "read_table", read_with_a_truncate_under_way)
    try:
        assert run_capture(dsn, tmp_path, "--once", "--snapshot", "--snapshot-jobs", "1") == 0
        other.join(timeout=30)
    finally:
        truncater.close()
        watcher.close()
    assert finished == [None], "the truncate committed"
    assert run_capture(dsn, tmp_path, "--once") == 0
    lines = landed_lines(landed_files(tmp_path, source_id(dsn)))
    assert sum(json.loads(line)["action"] == "T" for line in lines) == 2
    assert_replay_matches(dsn, lines)


@pytest.mark.postgres
def test_the_slot_lock_is_free_when_the_capture_returns(postgres, tmp_path):
    """A capture restarted right after the last one returns must not find the slot locked: the
    lock goes with the session, and a closed connection's server process may still be exiting."""
    dsn = fresh_database(postgres, "relock")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(5):
            assert run_capture(dsn, tmp_path, "--once") == 0
            held = conn.execute(
                "select count(*) from pg_locks l join pg_stat_activity a using (pid)"
                " where l.locktype = 'advisory' and a.datname = current_database()"
            ).fetchone()[0]
            assert held == 0


@pytest.mark.postgres
def test_replay_from_an_older_position_only_duplicates(postgres, tmp_path):
    dsn = fresh_database(postgres, "older")
    prepare(dsn, seed=14, initial_rows=0)  # no snapshot: start empty
    create_reference_slot(dsn)
    assert run_capture(dsn, tmp_path, "--once") == 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        # The copy keeps the capture slot's current (older) position while the original advances.
        conn.execute(
            "select pg_copy_logical_replication_slot(%s, %s)", (slot_name(dsn), slot_name(dsn, "older"))
        )
    workload.run_workload(dsn, seed=14, transactions=60, sessions=2, create=False)
    assert run_capture(dsn, tmp_path, "--once", "--max-changes-per-file", "50") == 0
    source = source_id(dsn)
    first = landed_lines(landed_files(tmp_path, source))
    workload.run_workload(dsn, seed=15, transactions=20, sessions=2, create=False)
    # Re-read everything from the older position into the same source, with other file cuts.
    assert (
        run_capture(
            dsn, tmp_path, "--once", "--max-changes-per-file", "70", "--source-id", source, kind="older"
        )
        == 0
    )
    assert run_capture(dsn, tmp_path, "--once") == 0
    lines = landed_lines(landed_files(tmp_path, source))
    counts = Counter(lines)
    assert set(first) <= set(lines)
    assert any(count > 1 for count in counts.values()), "the replay produced duplicates"
    assert set(lines) == set(reference_lines(dsn)), "and nothing but duplicates"
    assert_replay_matches(dsn, lines)


@pytest.mark.postgres
def test_snapshot_lands_table_contents_then_streams(postgres, tmp_path):
    dsn = fresh_database(postgres, "snapshot")
    prepare(dsn, seed=16, initial_rows=60)
    before, types, keys = database_truth(dsn)
    assert run_capture(dsn, tmp_path, "--once", "--snapshot") == 0
    source = source_id(dsn)
    (snapshot_file,) = landed_files(tmp_path, source)
    assert snapshot_file.name.endswith("-snapshot.jsonl")
    records = [json.loads(line) for line in snapshot_file.read_text().splitlines()]
    assert [records[0]["action"], records[-1]["action"]] == ["B", "C"]
    assert {r["action"] for r in records[1:-1]} == {"R"}
    assert len({r["lsn"] for r in records}) == 1 and records[0]["xid"] == 0 and records[0]["snapshot"] is True
    assert sum(len(rows) for rows in before.values()) == len(records) - 2
    snapshot_state = oracle.replay_wal2json(snapshot_file.read_text().splitlines())
    assert oracle.compare_states(before, snapshot_state, types, keys) == []

    workload.run_workload(dsn, seed=16, transactions=80, sessions=3, create=False)
    assert run_capture(dsn, tmp_path, "--once", "--snapshot") == 0  # rerun: snapshot kept, streams on
    files = landed_files(tmp_path, source)
    assert files[0] == snapshot_file and len(files) > 1
    consistent_point = parse_lsn(records[0]["lsn"])
    first_streamed = json.loads(files[1].read_text().splitlines()[0])
    assert parse_lsn(first_streamed["lsn"]) > consistent_point
    assert_replay_matches(dsn, landed_lines(files))


@pytest.mark.postgres
def test_snapshot_taken_under_concurrent_writes(postgres, tmp_path):
    dsn = fresh_database(postgres, "snapshot_busy")
    prepare(dsn, seed=17, initial_rows=60)
    writer = threading.Thread(
        target=workload.run_workload, args=(dsn, 17, 150), kwargs={"sessions": 3, "create": False}
    )
    writer.start()
    time.sleep(0.1)
    try:
        assert run_capture(dsn, tmp_path, "--once", "--snapshot") == 0
    finally:
        writer.join()
    assert run_capture(dsn, tmp_path, "--once") == 0
    assert_replay_matches(dsn, landed_lines(landed_files(tmp_path, source_id(dsn))))


@pytest.mark.postgres
def test_capture_errors_are_one_line(postgres, tmp_path, capsys):
    dsn = fresh_database(postgres, "errors")
    bad_dsn = "host=127.0.0.1 port=1 user=nobody connect_timeout=2"
    assert capture.main(["--dsn", bad_dsn, "--landing", str(tmp_path), "--once"]) == 1
    assert "cannot connect to Postgres" in capsys.readouterr().err
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "select pg_create_logical_replication_slot(%s, 'test_decoding')", (slot_name(dsn, "other"),)
        )
        assert run_capture(dsn, tmp_path, "--once", kind="other") == 1
        assert "not a wal2json logical slot" in capsys.readouterr().err
        # Another capture process holds the slot.
        assert run_capture(dsn, tmp_path, "--once") == 0
        conn.execute("select pg_advisory_lock(hashtext(%s))", (f"wal_lake.capture.{slot_name(dsn)}",))
        assert run_capture(dsn, tmp_path, "--once") == 1
        assert "in use by another capture process" in capsys.readouterr().err
        # --snapshot on a slot whose snapshot never landed.
        conn.execute("select pg_drop_replication_slot(%s)", (slot_name(dsn, "other"),))
        conn.execute("select pg_create_logical_replication_slot(%s, 'wal2json')", (slot_name(dsn, "other"),))
        assert run_capture(dsn, tmp_path / "elsewhere", "--once", "--snapshot", kind="other") == 1
        assert "no snapshot was landed" in capsys.readouterr().err


@pytest.mark.postgres
@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_oracle_replay_equals_postgres(postgres, tmp_path, seed):
    """The pure-Python replay of the captured WAL is the table contents, for several seeds."""
    dsn = fresh_database(postgres, f"seed{seed}")
    prepare(dsn, seed)
    assert run_capture(dsn, tmp_path, "--once", "--snapshot") == 0
    workload.run_workload(dsn, seed=seed, transactions=150, sessions=4, create=False)
    assert run_capture(dsn, tmp_path, "--once", "--max-changes-per-file", "200") == 0
    assert_replay_matches(dsn, landed_lines(landed_files(tmp_path, source_id(dsn))))


WIDE_TABLE = """
create type mood as enum ('sad', 'ok', 'happy');
create domain posint as integer check (value > 0);
create table wide (
    id bigint primary key,
    i2 smallint, i4 integer, f4 real, f8 double precision, n numeric, n2 numeric(12, 2),
    b boolean, t text, vc varchar(20), ch char(5), by bytea, j json, jb jsonb,
    d date, ts timestamp, tstz timestamptz, tm time, tmtz timetz, iv interval,
    u uuid, arr integer[], tarr text[], ip inet, m mood, pi posint, mo money
);
"""
WIDE_ROWS = """
insert into wide values
 (1, -3, 2147483647, 1.1, 0.1, 123456789.000100, 10.50, true, 'quote " backslash \\ tab\t nl
 é ✓', 'v', 'ab', '\\x00ff10', '{"a": [1, 2.50, null], "b": {"c": "d"}}', '{"z": 1.0, "a": "x"}',
 '2026-02-28', '2026-01-01 12:34:56.789', '2026-06-30 23:59:59.999999+02', '08:00:01.5', '12:00:00+05:30',
 '1 day 02:03:04', 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11', '{1,NULL,3}', '{"a b","c,d",NULL,"e\\"f"}',
 '10.0.0.1/8', 'happy', 5, 12.34),
 (2, null, null, null, null, null, null, false, null, null, null, null, null, null, null, null, null,
  null, null, null, null, null, null, null, null, null, null),
 (3, 0, 0, -0.0, 1e300, -0.000001, 0, null, '', '', '', '\\x', '[]', '{}', '0001-01-01',
  '1999-12-31 23:59:59', '1970-01-01 00:00:00+00', '00:00:00', '00:00:00-08', '-1 mons +2 days',
  '00000000-0000-0000-0000-000000000000', '{}', '{}', '::1', 'sad', 1, -0.5);
"""


@pytest.mark.postgres
def test_snapshot_renders_values_as_wal2json_and_oracle_types_them(postgres, tmp_path):
    """Many column types: a snapshot R line carries the same columns as wal2json's I line for the
    same row, and the oracle's typed comparison finds to_jsonb and wal2json values equal."""
    dsn = fresh_database(postgres, "types")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(WIDE_TABLE)
        conn.execute("create table loose (v text); alter table loose replica identity full")
    create_reference_slot(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(WIDE_ROWS)
        conn.execute("insert into loose values ('no key')")
    assert run_capture(dsn, tmp_path, "--once", "--snapshot") == 0
    streamed = [json.loads(line, parse_float=str) for line in peek_all(dsn, slot_name(dsn, "reference"))]
    (snapshot_file,) = landed_files(tmp_path, source_id(dsn))
    snapshot = [json.loads(line, parse_float=str) for line in snapshot_file.read_text().splitlines()]
    inserts = {r["columns"][0]["value"]: r for r in streamed if r["action"] == "I" and r["table"] == "wide"}
    reads = {r["columns"][0]["value"]: r for r in snapshot if r["action"] == "R" and r["table"] == "wide"}
    assert sorted(reads) == sorted(inserts) == [1, 2, 3]
    for key, insert in inserts.items():
        assert reads[key]["columns"] == insert["columns"], f"row {key}"
        assert reads[key]["pk"] == insert["pk"]
    # A table without a key: wal2json says so with an empty pk, which the snapshot must say too.
    (loose_insert,) = [r for r in streamed if r["action"] == "I" and r["table"] == "loose"]
    (loose_read,) = [r for r in snapshot if r["action"] == "R" and r["table"] == "loose"]
    assert loose_insert["pk"] == [] and loose_read.get("pk") == []
    assert loose_read["columns"] == loose_insert["columns"]
    lines = snapshot_file.read_text().splitlines()
    assert_replay_matches(dsn, lines)


@pytest.mark.postgres
def test_snapshot_keeps_nan_and_infinities_that_the_stream_cannot(postgres, tmp_path):
    """wal2json 2.5 writes NaN and +-Infinity of numeric, real and double precision as JSON null,
    which no option changes: the stream cannot tell them from NULL. The snapshot reads the tables
    itself and carries them as text."""
    dsn = fresh_database(postgres, "nan")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create table special (id int primary key, n numeric, r real, d double precision)")
    create_reference_slot(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "insert into special values (1, 'NaN', 'Infinity', '-Infinity'),"
            " (2, '-Infinity', 'NaN', 'Infinity'), (3, null, 1.5, '-0.25')"
        )
    streamed = [json.loads(line) for line in peek_all(dsn, slot_name(dsn, "reference"))]
    (insert,) = [r for r in streamed if r["action"] == "I" and r["columns"][0]["value"] == 1]
    assert [c["value"] for c in insert["columns"]] == [1, None, None, None], "the stream's limit"

    assert run_capture(dsn, tmp_path, "--once", "--snapshot") == 0
    (snapshot_file,) = landed_files(tmp_path, source_id(dsn))
    lines = snapshot_file.read_text().splitlines()
    reads = {r["columns"][0]["value"]: r for r in map(json.loads, lines) if r["action"] == "R"}
    assert [c["value"] for c in reads[1]["columns"]] == [1, "NaN", "Infinity", "-Infinity"]
    assert [c["value"] for c in reads[2]["columns"]] == [2, "-Infinity", "NaN", "Infinity"]
    assert [c["value"] for c in reads[3]["columns"]] == [3, None, 1.5, -0.25]
    assert_replay_matches(dsn, lines)


@pytest.mark.postgres
@pytest.mark.parametrize("snapshot", [True, False], ids=["snapshot", "plain"])
def test_slot_broken_by_a_concurrent_truncate_is_created_again(postgres, tmp_path, capsys, snapshot):
    """Postgres 15.20 creates a slot that can never decode when, during its creation, a TRUNCATE
    commits between its full-snapshot and consistent points and a transaction writing the truncated
    table spans the consistent point ("could not map filenode ... to relation OID"). This is that
    interleaving, step by step; the capture job must notice before landing anything and start over."""
    dsn = fresh_database(postgres, "broken_slot")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "create table x (id int primary key, v text); create table other (id serial primary key)"
        )
        conn.execute("insert into x values (1, 'a')")
    sessions = [psycopg.connect(dsn) for _ in range(4)]
    results: list[int] = []
    try:
        sessions[0].execute("insert into other default values")  # slot creation waits for it
        extra = ("--snapshot",) if snapshot else ()
        creator = threading.Thread(
            target=lambda: results.append(
                capture.main(
                    ["--dsn", dsn, "--slot", slot_name(dsn), "--landing", str(tmp_path), "--once", *extra]
                )
            )
        )
        creator.start()
        time.sleep(0.5)
        sessions[1].execute("truncate x")  # a new relfilenode, in a transaction the slot waits for
        sessions[3].execute("insert into other default values")
        sessions[0].commit()  # the slot reaches its full snapshot
        time.sleep(0.5)
        sessions[1].commit()  # the truncate commits before the consistent point
        sessions[2].execute("insert into x values (2, 'b')")  # writes the new relfilenode, spans it
        time.sleep(0.2)
        sessions[3].commit()  # the slot becomes consistent
        time.sleep(0.5)
        sessions[2].commit()
        creator.join(timeout=60)
    finally:
        for session in sessions:
            session.close()
    assert results == [0]
    assert "cannot decode its first transactions" in capsys.readouterr().err
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("insert into x values (3, 'c')")
        conn.execute("truncate other")
    assert run_capture(dsn, tmp_path, "--once", *extra) == 0
    lines = landed_lines(landed_files(tmp_path, source_id(dsn)))
    assert any('"value":3' in line for line in lines)
    if snapshot:
        assert_replay_matches(dsn, lines)


@pytest.mark.postgres
def test_snapshot_reads_each_inherited_table_once_and_skips_unlogged_tables(postgres, tmp_path, capsys):
    """A parent's plain select also returns its children's rows (legacy partitioning, TimescaleDB),
    which the stream reports under the child: the snapshot reads each table ``ONLY``. An unlogged
    table writes no WAL, so no slot ever streams it: the snapshot leaves it out, with a warning."""
    dsn = fresh_database(postgres, "inherit")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "create table measures (id int primary key, v text);"
            " create table measures_2026 (check (id > 100)) inherits (measures);"
            " alter table measures_2026 add primary key (id);"
            " insert into measures values (1, 'parent');"
            " insert into measures_2026 values (101, 'child'), (102, 'child');"
            " create unlogged table scratch (id int primary key); insert into scratch values (1)"
        )
    slot = slot_name(dsn)
    assert (
        capture.main(["--dsn", dsn, "--slot", slot, "--landing", str(tmp_path), "--once", "--snapshot"]) == 0
    )
    assert "unlogged table public.scratch is not captured" in capsys.readouterr().err
    lines = landed_lines(landed_files(tmp_path, source_id(dsn)))
    reads = Counter(
        (r["table"], r["columns"][0]["value"]) for r in map(json.loads, lines) if r["action"] == "R"
    )
    assert reads == {("measures", 1): 1, ("measures_2026", 101): 1, ("measures_2026", 102): 1}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "update measures_2026 set v = 'changed' where id = 101; delete from measures where id = 1"
        )
    assert run_capture(dsn, tmp_path, "--once") == 0
    assert_replay_matches(dsn, landed_lines(landed_files(tmp_path, source_id(dsn))))


def snapshot_records(files: list[Path]) -> list[dict]:
    return [json.loads(line) for path in files if capture.is_snapshot_file(path.name) for line in path.open()]


def read_keys(records: list[dict]) -> Counter:
    """How often each row of a table with a key (table and key values) was read."""
    return Counter(
        (
            r["table"],
            json.dumps([c["value"] for c in r["columns"] if c["name"] in {k["name"] for k in r["pk"]}]),
        )
        for r in records
        if r["action"] == "R" and r["pk"]
    )


def fill_big_table(dsn: str, rows: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create table big (id bigint primary key, payload text)")
        conn.execute(
            "insert into big select n, repeat(md5(n::text), 8) from generate_series(1, %s) n", (rows,)
        )
        conn.execute("analyze big")


@pytest.mark.postgres
def test_snapshot_split_over_files_is_one_transaction_in_order(postgres, tmp_path):
    """With a small --snapshot-file-mb the snapshot lands in many files, read by two connections: one
    ``B`` at the head of the first, one ``C`` at the end of the last, every row once, names in order
    and before every streamed file, each file about the size asked for."""
    dsn = fresh_database(postgres, "snapshot_split")
    prepare(dsn, seed=18, initial_rows=80)
    file_mb = 0.004  # about 4 kB
    args = ("--once", "--snapshot", "--snapshot-file-mb", str(file_mb), "--snapshot-jobs", "2")
    assert run_capture(dsn, tmp_path, *args) == 0
    source = tmp_path / source_id(dsn)
    files = landed_files(tmp_path, source.name)
    assert len(files) > 5
    lsn = files[0].name[:16]
    assert [p.name for p in files] == [
        f"{lsn}-{lsn}-snapshot-{n:06d}.jsonl" for n in range(1, len(files) + 1)
    ], "parts numbered in order"
    line_bytes = max(len(line) for p in files for line in p.read_bytes().splitlines(keepends=True))
    assert all(p.stat().st_size <= 2 * file_mb * 1024 * 1024 + line_bytes for p in files)
    records = snapshot_records(files)
    assert [r["action"] for r in records].count("B") == 1 and records[0]["action"] == "B"
    assert [r["action"] for r in records].count("C") == 1 and records[-1]["action"] == "C"
    before, _types, _keys = database_truth(dsn)
    reads = read_keys(records)
    assert set(reads.values()) == {1}, reads.most_common(3)
    assert len([r for r in records if r["action"] == "R"]) == sum(len(v) for v in before.values())
    assert not list(source.glob(".*")), "no temporary or state file left"

    workload.run_workload(dsn, seed=18, transactions=60, sessions=2, create=False)
    assert run_capture(dsn, tmp_path, *args) == 0  # rerun: the snapshot is there, streams on
    streamed = landed_files(tmp_path, source.name)[len(files) :]
    assert streamed and all(p.name > files[-1].name for p in streamed)
    assert_replay_matches(dsn, landed_lines(landed_files(tmp_path, source.name)))


@pytest.mark.postgres
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_snapshot_killed_at_a_random_point_converges_on_rerun(postgres, tmp_path, seed):
    """A capture process killed -9 at a random moment of its snapshot (seed 0: stopped the moment it
    has written a part, so the kill lands mid-snapshot even on a fast machine), then run again: the
    rerun drops the slot the killed one created, removes its files and starts over (its exported
    snapshot died with it), or finishes what it had; the landing zone then equals the database."""
    import random

    dsn = fresh_database(postgres, f"snapshot_kill{seed}")
    prepare(dsn, seed=19 + seed, initial_rows=40)  # (re)creates the schema: first
    fill_big_table(dsn, 40_000)
    source = tmp_path / source_id(dsn)
    command = [sys.executable, "-m", "python_jobs.capture", "--dsn", dsn, "--slot", slot_name(dsn)]
    command += ["--landing", str(tmp_path), "--once", "--snapshot", "--snapshot-file-mb", "1", "--quiet"]
    child = subprocess.Popen(command, cwd=PROJECT_DIR)
    try:
        if seed == 0:
            deadline = time.monotonic() + 60
            while not list(source.glob(".snapshot-w*")) and time.monotonic() < deadline:
                time.sleep(0.002)
            child.send_signal(signal.SIGSTOP)  # the snapshot of 40,000 rows takes about half a second
        else:
            time.sleep(random.Random(seed).uniform(0.3, 2.0))
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    # Until the server notices the killed client, its backend still holds the slot.
    soak.wait_until_released(dsn, slot_name(dsn))
    if seed == 0:
        assert (source / ".snapshot-state.json").exists(), "killed in the middle of the snapshot"
    workload.run_workload(dsn, seed=19 + seed, transactions=40, sessions=2, create=False)
    assert run_capture(dsn, tmp_path, "--once", "--snapshot", "--snapshot-file-mb", "1") == 0
    files = landed_files(tmp_path, source.name)
    assert not list(source.glob(".*")), "no temporary or state file left"
    reads = read_keys(snapshot_records(files))
    assert reads[("big", "[1]")] == 1 and set(reads.values()) == {1}, "one snapshot, each row once"
    workload.run_workload(dsn, seed=29 + seed, transactions=40, sessions=2, create=False)
    assert run_capture(dsn, tmp_path, "--once") == 0
    assert_replay_matches(dsn, landed_lines(landed_files(tmp_path, source.name)))


@pytest.mark.postgres
def test_a_snapshot_interrupted_while_publishing_is_finished_by_the_rerun(postgres, tmp_path, monkeypatch):
    """Every part written and the slot validated, the run dies after renaming two of its files: the
    rerun renames the rest (in order) instead of starting over, and the slot is the same."""
    dsn = fresh_database(postgres, "snapshot_publish")
    prepare(dsn, seed=20, initial_rows=80)
    original = capture.snapshot.publish
    published: list[str] = []

    def die_after_two(temporary, name):
        if len(published) == 2:
            raise KeyboardInterrupt
        published.append(name)
        return original(temporary, name)

    monkeypatch.setattr(capture.snapshot, "publish", die_after_two)
    args = ("--once", "--snapshot", "--snapshot-file-mb", "0.004")
    assert run_capture(dsn, tmp_path, *args) == 130
    source = tmp_path / source_id(dsn)
    assert [p.name for p in landed_files(tmp_path, source.name)] == published
    with psycopg.connect(dsn, autocommit=True) as conn:
        slot_before = capture.slot.slot_info(conn, slot_name(dsn))
    monkeypatch.setattr(capture.snapshot, "publish", original)
    assert run_capture(dsn, tmp_path, *args) == 0
    files = landed_files(tmp_path, source.name)
    assert len(files) > 2 and files[:2] == [source / name for name in published]
    assert not list(source.glob(".*"))
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert (
            capture.slot.slot_info(conn, slot_name(dsn))["confirmed_flush_lsn"]
            == slot_before["confirmed_flush_lsn"]
        )
    workload.run_workload(dsn, seed=20, transactions=40, sessions=2, create=False)
    assert run_capture(dsn, tmp_path, "--once") == 0
    assert_replay_matches(dsn, landed_lines(landed_files(tmp_path, source.name)))


@pytest.mark.postgres
def test_a_failed_snapshot_leaves_a_state_file_only_with_the_slot_it_created(postgres, tmp_path, monkeypatch):
    """Failing before its slot exists, a snapshot forgets itself (a later run without --snapshot may
    create a slot of that name, which must not be taken for the failed run's); failing after, it
    leaves its state so that the rerun drops the slot and starts over."""
    dsn = fresh_database(postgres, "snapshot_failed")
    prepare(dsn, seed=21, initial_rows=20)
    source = tmp_path / source_id(dsn)

    def refuse(repl, slot):
        raise capture.CaptureError("no slot today")

    with monkeypatch.context() as patch:
        patch.setattr(capture.snapshot, "_create_exporting_slot", refuse)
        assert run_capture(dsn, tmp_path, "--once", "--snapshot") == 1
    assert not (source / ".snapshot-state.json").exists()

    def fail_reading(*args):
        raise capture.CaptureError("the disk is full")

    with monkeypatch.context() as patch:
        patch.setattr(capture.snapshot, "read_tables", fail_reading)
        assert run_capture(dsn, tmp_path, "--once", "--snapshot") == 1
    assert (source / ".snapshot-state.json").exists() and not list(source.glob(".snapshot-w*"))
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert capture.slot.slot_info(conn, slot_name(dsn)) is not None, "the failed run's slot"
    assert run_capture(dsn, tmp_path, "--once", "--snapshot") == 0
    assert not list(source.glob(".*"))
    workload.run_workload(dsn, seed=21, transactions=30, sessions=2, create=False)
    assert run_capture(dsn, tmp_path, "--once") == 0
    assert_replay_matches(dsn, landed_lines(landed_files(tmp_path, source.name)))


@pytest.mark.postgres
def test_a_new_slot_is_validated_without_bringing_its_changes_here(postgres, monkeypatch):
    """A new slot is checked by decoding everything written since its creation, which after a long
    snapshot of a busy database is a lot: the rows are counted in the server, not fetched."""
    dsn = fresh_database(postgres, "validate_count")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create table t (id int primary key, v text)")
        conn.execute("select pg_create_logical_replication_slot(%s, 'wal2json')", (slot_name(dsn),))
        conn.execute("insert into t select n, 'x' from generate_series(1, 500) n")
        upto = capture.slot.wal_flush_lsn(conn)
        assert capture.slot.decode_count(conn, slot_name(dsn), upto) == len(peek_all(dsn, slot_name(dsn)))

        def no_fetching(*args):
            raise AssertionError("the validation fetched the slot's rows")

        monkeypatch.setattr(capture.slot, "peek", no_fetching)
        assert capture.slot.validate_new_slot(conn, slot_name(dsn), log=print) is True
