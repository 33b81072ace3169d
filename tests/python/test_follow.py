"""The follower (``python -m python_jobs.follow``) and the status it reports (``python_jobs.status``).

One small wal2json sample (with its malformed lines), followed in the module's own warehouse:

1. run A: the first half of the files is in the landing zone; SIGTERM arrives while the first
   cycle lands it. The follower ends that step, starts no other (no dbt) and exits 0.
2. run B, two cycles: the first builds what run A landed; between the cycles the rest of the
   files appears, with a file of no known format; the second cycle quarantines that file, lands
   the rest and builds it. consumer_records then equals the sample's expected state.

Two dbt builds in all; the status's assertions ride on the same runs.
"""

from __future__ import annotations

import functools
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import redirect_stdout
from dataclasses import replace
from pathlib import Path

import pytest
from model_helpers import dbt_ls

from python_jobs import follow, status
from python_jobs.lsn import format_lsn
from testkit import sample

PROJECT_DIR = Path(__file__).resolve().parents[2]
SOURCE = "shop_wal2json"
UNKNOWN = "ZZZZ-not-a-capture.jsonl"  # sorts after the sample's files


def sample_files(zone: Path) -> list[Path]:
    return sorted(p for p in (zone / SOURCE).iterdir() if not p.name.startswith(("_", ".")))


def copy_in(files: list[Path], landing: Path) -> None:
    (landing / SOURCE).mkdir(parents=True, exist_ok=True)
    for path in files:
        shutil.copy(path, landing / SOURCE / path.name)


class SigtermOnFirstBatch(io.StringIO):
    """The follower's output; when the ingestion reports its first batch, SIGTERM this process and
    wait until the follower has taken the stop in (so the step after the ingestion is never begun)."""

    def __init__(self, stop: threading.Event) -> None:
        super().__init__()
        self.stop = stop
        self.sent = False

    def write(self, text: str) -> int:
        if text.startswith("batch ") and not self.sent:
            self.sent = True
            os.kill(os.getpid(), signal.SIGTERM)
            assert self.stop.wait(10), "SIGTERM did not stop the follower"
        return super().write(text)


def consumer_state(spark, schema: str, source_id: str) -> dict[str, list[dict]]:
    rows = spark.sql(
        "select source_schema, source_table, to_json(record) from "
        f"{schema}.consumer_records where consumer_name = 'all_tables' and source_id = '{source_id}'"
    ).collect()
    state: dict[str, list[dict]] = {}
    for schema_name, table, record in rows:
        state.setdefault(f"{schema_name}.{table}", []).append(json.loads(record))
    return state


@pytest.fixture(scope="module")
def followed(spark, schemas, tmp_path_factory):
    # SIGTERM must reach the follower's handler, which only the main thread can install.
    assert threading.current_thread() is threading.main_thread()
    zone = tmp_path_factory.mktemp("follow_sample")
    sample.generate(zone, seed=11, transactions=40, formats=(sample.WAL2JSON,), lines_per_file=60)
    files = sample_files(zone)
    assert len(files) >= 4, files
    half = len(files) // 2
    work = tmp_path_factory.mktemp("follow")
    landing, status_file = work / "landing", work / "status.json"
    argv = [
        "--landing",
        str(landing),
        "--raw-schema",
        schemas.raw,
        "--schema",
        schemas.models,
        "--status-file",
        str(status_file),
        "--lock-file",
        str(work / "follow.lock"),
        "--min-interval",
        "0",
        "--stop-timeout",
        "0",
    ]
    copy_in(files[:half], landing)

    stop_a = threading.Event()
    out_a = SigtermOnFirstBatch(stop_a)
    code_a = follow.main(argv, stop=stop_a, out=out_a)
    after_a = {
        "code": code_a,
        "out": out_a.getvalue(),
        "status_file": json.loads(status_file.read_text()),
        "status": status.source_status(spark, schemas.raw, schemas.models),
        "built": spark.catalog.tableExists(f"{schemas.models}.consumer_records"),
    }

    between = {}

    def more_files(cycle: int) -> None:
        between["status"] = status.source_status(spark, schemas.raw, schemas.models)
        between["newest"] = spark.sql(
            f"select max_by(struct(seq, commit_lsn, committed_at), seq) from {schemas.models}.sequin_events"
        ).first()[0]
        copy_in(files[half:], landing)
        (landing / SOURCE / UNKNOWN).write_text('{"hello": "world"}\n')

    out_b = io.StringIO()
    code_b = follow.main([*argv, "--cycles", "2"], out=out_b, between=more_files)
    return {
        "zone": zone,
        "landing": landing,
        "a": after_a,
        "between": between,
        "code_b": code_b,
        "out_b": out_b.getvalue(),
        "status_file": json.loads(status_file.read_text()),
        "state": consumer_state(spark, schemas.models, SOURCE),
        "status": status.source_status(spark, schemas.raw, schemas.models),
    }


def test_sigterm_ends_the_follower_between_steps(followed):
    a = followed["a"]
    assert a["code"] == 0, a["out"]
    assert "SIGTERM: stopping after this step" in a["out"]
    assert "stopped after 1 cycles" in a["out"]
    assert not a["built"]  # the ingestion step ended; dbt never started
    [landed] = a["status"]
    assert landed.frontier_lsn is not None and landed.consumer_records is None
    assert a["status_file"]["state"] == "stopped"


def test_the_follower_lands_new_files_and_ends_equal_to_the_source(followed):
    assert followed["code_b"] == 0, followed["out_b"]
    [(source, rows, problems)] = sample.compare_with_expected(followed["zone"], lambda _: followed["state"])
    assert source == SOURCE and rows > 0
    assert problems == []
    lines = [line for line in followed["out_b"].splitlines() if line.startswith("follow: cycle ")]
    assert len(lines) == 2, followed["out_b"]
    assert "(0 files landed" in lines[0] and f"{SOURCE}: newest visible commit" in lines[1]


def test_a_file_of_no_known_format_is_quarantined_and_the_rest_lands(followed):
    quarantined = followed["landing"] / follow.QUARANTINE / SOURCE / UNKNOWN
    assert quarantined.read_text() == '{"hello": "world"}\n'
    reason = quarantined.with_name(UNKNOWN + ".reason").read_text()
    assert "cannot detect the format" in reason
    assert not (followed["landing"] / SOURCE / UNKNOWN).exists()
    assert [Path(p).name for p in followed["status_file"]["quarantined"]] == [UNKNOWN]


def test_status_tells_what_is_visible_from_what_has_landed(followed):
    # Built (the first cycle of run B): what is visible is the newest change numbered.
    [built] = followed["between"]["status"]
    newest = followed["between"]["newest"]
    assert built.source_id == SOURCE
    assert built.last_seq == newest.seq
    assert built.consumer_records == status.Position(newest.seq, newest.commit_lsn, newest.committed_at)
    assert built.mirror_count == 3  # the sample's three tables
    assert built.mirrors == built.consumer_records
    assert built.frontier_lsn == newest.commit_lsn
    assert built.violations == 0
    assert built.built
    # Landed, not built (run A): a frontier, nothing visible.
    [landed] = followed["a"]["status"]
    assert landed.frontier_lsn == built.frontier_lsn and not landed.built
    # At the end: everything built; the malformed lines rejected, the trailing pending line waiting.
    manifest = json.loads((followed["zone"] / "manifest.json").read_text())["sources"][SOURCE]
    [end] = followed["status"]
    assert end.frontier_lsn > built.frontier_lsn
    assert end.consumer_records.commit_lsn == end.frontier_lsn
    assert end.rejects == manifest["expected_rejects"] > 0
    assert end.pending == manifest["pending_lines"]
    # The status file holds the same, with the lag.
    document = followed["status_file"]
    assert (document["state"], document["cycles"], document["failed_cycles"]) == ("stopped", 2, 0)
    [entry] = document["sources"]
    assert entry["frontier_lsn"] == format_lsn(end.frontier_lsn)
    assert entry["consumer_records"]["seq"] == end.consumer_records.seq
    assert entry["lag_seconds"] > 0
    # The follower's status (the ledger's figures as it keeps them, sequin_events read from the last
    # status' positions on) is the status read from the tables alone.
    assert {k: v for k, v in entry.items() if k != "lag_seconds"} == end.as_json()


def test_status_read_from_earlier_positions_is_the_status_read_from_all(spark, schemas, followed):
    [end] = followed["status"]
    read = functools.partial(status.source_status, spark, schemas.raw, schemas.models)
    assert read(since=[end]) == [end]
    earlier = followed["between"]["status"]
    assert earlier[0].consumer_records.seq < end.consumer_records.seq
    assert read(since=earlier) == [end]
    # Positions the log no longer has (rebuilt, numbered anew): read it all again.
    ahead = status.Position(end.last_seq + 1000, end.frontier_lsn, end.consumer_records.committed_at)
    assert read(since=[replace(end, consumer_records=ahead, mirrors=ahead)]) == [end]


def test_status_command_prints_a_table_and_json(spark, schemas, followed):
    [end] = followed["status"]
    args = ["--raw-schema", schemas.raw, "--schema", schemas.models]
    with redirect_stdout(io.StringIO()) as out:
        assert status.main([*args, "--json"]) == 0
    [printed] = json.loads(out.getvalue())["sources"]
    assert printed["frontier_lsn"] == format_lsn(end.frontier_lsn)
    assert (printed["pending"], printed["rejects"], printed["violations"]) == (end.pending, end.rejects, 0)
    with redirect_stdout(io.StringIO()) as out:
        assert status.main(args) == 0
    header, row = out.getvalue().splitlines()
    assert header.split()[:3] == ["source", "last", "seq"]
    assert row.split()[0] == SOURCE and format_lsn(end.frontier_lsn) in row.split()


def test_a_second_follower_is_refused(tmp_path):
    lock = tmp_path / "follow.lock"
    held = follow.hold_lock(lock)
    try:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "python_jobs.follow",
                "--landing",
                str(tmp_path),
                "--lock-file",
                str(lock),
            ],
            cwd=PROJECT_DIR,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        held.close()
    assert result.returncode == follow.EXIT_LOCKED, result.stderr
    assert f"another follower (pid {os.getpid()}" in result.stderr
    assert "one follower per warehouse" in result.stderr


def wait_for(condition, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.mark.postgres
def test_the_capture_thread_survives_a_lost_connection(postgres, tmp_path):
    """The follower's capture: its connection killed, it logs the cause, counts it, and carries on."""
    import psycopg

    dsn = postgres.create_database("t_follow_capture")
    slot = "t_follow_capture"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create table items (id int primary key, note text)")
        # Created here, so that the first insert is decoded whenever the capture gets going.
        conn.execute("select pg_create_logical_replication_slot(%s, 'wal2json')", (slot,))
    stop, out = threading.Event(), io.StringIO()
    argv = ["--dsn", dsn, "--slot", slot, "--landing", str(tmp_path), "--quiet", "--poll-interval", "0.2"]
    capture = follow.Capture(argv, stop, max_backoff=1, out=out)
    capture.start()
    try:

        def landed(note: str) -> bool:
            return any(note in p.read_text() for p in tmp_path.glob("*/*.jsonl"))

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("insert into items values (1, 'before the fault')")
            wait_for(lambda: landed("before the fault"), "the first row to land")
            conn.execute(
                "select pg_terminate_backend(pid) from pg_stat_activity "
                "where datname = current_database() and pid <> pg_backend_pid()"
            )
            wait_for(lambda: capture.state.failures >= 1, "the capture to see its connection go")
            conn.execute("insert into items values (2, 'after the fault')")
            wait_for(lambda: landed("after the fault"), "the second row to land")
        position = follow.slot_position(dsn, slot)
        assert position["slot"] == slot and position["bytes_behind"] >= 0, position
    finally:
        stop.set()
        capture.join(30)
    assert not capture.is_alive()
    assert "follow: capture failed (1 so far):" in out.getvalue()
    assert capture.state.last_error


def test_a_name_quarantined_twice_keeps_both_files(spark, tmp_path):
    landing = tmp_path / "landing"
    (landing / SOURCE).mkdir(parents=True)
    for text in ("first\n", "second\n"):
        path = landing / SOURCE / UNKNOWN
        path.write_text(text)
        follow._move_to_quarantine(spark, str(landing), SOURCE, str(path), "no known format")
        assert not path.exists()
    names = (p.name for p in (landing / follow.QUARANTINE / SOURCE).iterdir())
    kept = sorted(n for n in names if not n.endswith(".reason") and not n.startswith("."))  # .crc: Hadoop's
    assert len(kept) == 2 and kept[0] == UNKNOWN, kept
    texts = sorted((landing / follow.QUARANTINE / SOURCE / name).read_text() for name in kept)
    assert texts == ["first\n", "second\n"]


def bare_follower(tmp_path: Path, **options) -> follow.Follower:
    """A follower without Spark, for the loop's own logic (its steps replaced by the test)."""
    settings = {
        "landing": str(tmp_path / "landing"),
        "raw_schema": "unused_raw",
        "schema": "unused",
        "min_interval": 0.0,
        "max_idle": 300.0,
        "build_every": 0.0,
        "build_slice": 0.0,
        "max_backoff": 300.0,
        "status_file": tmp_path / "status.json",
        "cycles": None,
        "dsn": None,
        "slot": "unused",
    } | options
    (tmp_path / "landing").mkdir(exist_ok=True)
    return follow.Follower(None, follow.Options(**settings), threading.Event(), io.StringIO())


def test_with_nothing_new_the_next_cycle_waits_for_max_idle(tmp_path):
    follower = bare_follower(tmp_path, max_idle=1.0)
    landing = tmp_path / "landing"
    started = time.monotonic()
    follower.wait(started, None, follow.landing_signature(str(landing)))
    assert 1.0 <= time.monotonic() - started < 3.0
    # A new file ends the wait at once.
    follower.o.max_idle = 60.0
    threading.Timer(0.3, lambda: (landing / "new.jsonl").write_text("{}\n")).start()
    started = time.monotonic()
    follower.wait(started, None, follow.landing_signature(str(landing)))
    assert time.monotonic() - started < 3.0


def test_a_failing_cycle_writes_its_cause_count_and_next_retry_to_the_status_file(tmp_path, monkeypatch):
    """Fails first: the status file said nothing of a failed cycle until a cycle succeeded."""
    follower = bare_follower(tmp_path, max_backoff=0.5, max_idle=0.2, cycles=4)
    attempts = []

    def ingest():
        attempts.append(time.monotonic())
        if len(attempts) <= 2:
            raise follow.StepFailed("Postgres is gone")
        return type("Summary", (), {"files": 0})()

    monkeypatch.setattr(follower, "ingest", ingest)
    monkeypatch.setattr(follower, "new_tables", lambda: [])
    monkeypatch.setattr(follower, "dbt_build", lambda command, timings=None: None)
    monkeypatch.setattr(follow, "spark_alive", lambda spark: True)
    monkeypatch.setattr(follow.status_mod, "source_status", lambda *args, **kwargs: [])
    seen = []

    def between(cycles: int) -> None:
        document = json.loads(follower.o.status_file.read_text())
        seen.append((cycles, document, follow.datetime.now(follow.UTC)))

    follower.run(between)
    (one, first, at_first), (two, second, _), (three, third, _) = seen  # the fourth: then stopped
    assert (one, two, three) == (1, 2, 3)
    assert first["state"] == "failing"
    assert (first["failed_cycles"], first["failing_since"], first["failures"]) == (1, 1, {"ingest": 1})
    assert first["last_error"]["step"] == "ingest"
    assert first["last_error"]["cause"] == "StepFailed: Postgres is gone"
    retry = follow.datetime.fromisoformat(first["next_retry_at"])
    assert 0 < (retry - at_first).total_seconds() <= 0.5
    assert (second["state"], second["failed_cycles"], second["failing_since"]) == ("failing", 2, 2)
    # Retried after the backoff, not at once; then a success clears the failing state.
    assert attempts[1] - attempts[0] >= 0.5
    assert (third["state"], third["failed_cycles"], third["failing_since"]) == ("running", 2, 0)
    assert third["next_retry_at"] is None and third["last_error"]["cause"] == "StepFailed: Postgres is gone"
    assert "cycle 1: ingest failed (1 so far): StepFailed: Postgres is gone" in follower.out.getvalue()


def scripted_steps(follower: follow.Follower, files_landed: list[int], monkeypatch) -> list[str]:
    """Replace the follower's steps: each cycle's ingestion lands the next count of files; the dbt
    commands run are appended to the list returned."""
    landed = iter(files_landed)

    class Summary:
        def __init__(self) -> None:
            self.files = next(landed)

        def line(self) -> str:
            return f"landed {self.files} files"

    ran: list[str] = []

    def dbt_build(command, timings=None) -> None:
        # A build marks whether the status file existed as it started (the run before it wrote it).
        status = follower.o.status_file
        # "build": all of it, the history's data tests included; "scheduled": all of it but them;
        # "rest": what the cycle's run leaves out (DBT_BUILD_REST), "daily": the same with the
        # history's tests; "records": the run without the column catalog (DBT_RUN_RECORDS); a
        # round's slice: "slice a b" (the nodes it builds).
        name = {
            follow.DBT_RUN: "run",
            follow.DBT_RUN_RECORDS: "records",
            follow.DBT_BUILD: "build",
            follow.DBT_BUILD_SCHEDULED: "scheduled",
            follow.DBT_BUILD_REST: "rest",
            follow.DBT_BUILD_REST_DAILY: "daily",
        }.get(command) or "slice " + " ".join(command[len(follow.DBT_SLICE) + 1 :])
        marked = name in ("run", "records") or status.exists()
        ran.append(name if marked else f"{name} (no status)")

    monkeypatch.setattr(follower, "ingest", Summary)
    monkeypatch.setattr(follower, "new_tables", lambda: [])
    monkeypatch.setattr(follower, "dbt_build", dbt_build)
    monkeypatch.setattr(follow.status_mod, "source_status", lambda *args, **kwargs: [])
    rest = [("model.m", "m", "model"), *((f"test.{name}", name, "test") for name in "abc")]
    history = [("test.h", "h", "test")]  # a data test of the history's
    monkeypatch.setattr(follow, "rest_nodes", lambda with_history=False: rest + history * with_history)
    return ran


def test_cycles_run_the_models_and_every_build_every_seconds_the_whole_build(tmp_path, monkeypatch):
    """Every cycle with new files runs what consumers read (dbt run); the whole dbt build runs once
    per --build-every, after that run and after the status file says what it made visible, and a
    cycle with nothing new runs neither, unless the whole build of what landed is due. Fails first:
    every cycle with new files ran dbt build; then, a cycle due for the build ran the build alone,
    and the status file told a monitor what it made visible only once it ended; then, the build
    after the run ran the run's models a second time."""
    follower = bare_follower(tmp_path, build_every=0.6)
    ran = scripted_steps(follower, [1, 1, 1, 0, 1, 0, 0], monkeypatch)
    assert follower.cycle()  # new files; no build yet in this process: the build alone (the seeds)
    assert follower.cycle()  # new files, the tests ran just now
    assert follower.cycle()
    assert follower.cycle()  # nothing new, the tests of the last two cycles' files not yet due
    # Nothing landed is new to the column catalog (new_tables is stubbed): the runs leave it out.
    assert ran == ["build (no status)", "records", "records"]
    time.sleep(0.7)
    assert follower.cycle()  # new files, and the whole build is due: the run, then the rest of the build
    assert follower.cycle()  # nothing new, everything built and tested
    assert ran == ["build (no status)", "records", "records", "run", "rest"]
    reports = [line for line in follower.out.getvalue().splitlines() if line.startswith("follow: cycle")]
    assert "dbt build" in reports[0] and "dbt run" in reports[1] and "dbt" not in reports[3], reports
    assert "dbt run" in reports[4] and "dbt build" in reports[4], reports
    time.sleep(0.7)
    assert follower.cycle()  # nothing new, and everything landed has been through a build
    assert len(ran) == 5

    (tmp_path / "every").mkdir()
    every_cycle = bare_follower(tmp_path / "every", build_every=0.0)
    built = scripted_steps(every_cycle, [1, 1, 0], monkeypatch)
    assert every_cycle.cycle() and every_cycle.cycle() and every_cycle.cycle()
    assert built == ["build (no status)", "run", "rest"]


def test_with_build_slice_the_whole_builds_rest_runs_a_slice_a_cycle(tmp_path, monkeypatch):
    """With --build-slice, the cycle due for the whole build runs its run and the rest's models; the
    data tests follow, a slice a cycle, whether or not anything landed, while the cycles go on
    running what consumers read; the next build is due --build-every after the round started, if
    anything landed since. A failing slice ends the round, and the build runs alone until it passes.
    Fails first: the rest ran in one cycle, holding back the changes that landed meanwhile."""
    follower = bare_follower(tmp_path, build_every=1.0, build_slice=2.0)
    ran = scripted_steps(follower, [1, 1, 0, 1, 0, 0, 0, 1, 1], monkeypatch)

    def whole_build() -> tuple[str | None, str | None]:  # the status file's, after a cycle
        document = json.loads(follower.o.status_file.read_text())["whole_build"]
        return document["last_passed_at"], document["slices_done"]

    assert follower.cycle()  # the process' first build: all of it, alone
    first, under_way = whole_build()
    assert first is not None and under_way is None
    time.sleep(1.1)
    assert follower.cycle()  # new files, the build due: the run, then its first slice
    assert follower.round is not None and follower.tested
    assert whole_build() == (first, "1/3")
    assert follower.cycle()  # nothing new: the next slice (two tests of a second each, by guess)
    assert whole_build() == (first, "2/3")
    assert follower.cycle()  # new files: the run, and the last slice
    assert follower.round is None and not follower.tested
    passed, under_way = whole_build()
    assert passed > first and under_way is None
    assert follower.cycle()  # nothing new, the next build not due: nothing
    assert ran == ["build (no status)", "run", "slice m", "slice a b", "records", "slice c"]
    reports = [line for line in follower.out.getvalue().splitlines() if line.startswith("follow: cycle")]
    assert "dbt run" in reports[1] and "dbt build 1/3" in reports[1], reports
    assert "dbt build 2/3" in reports[2] and "dbt run" not in reports[2], reports
    assert "dbt run" in reports[3] and "dbt build 3/3" in reports[3], reports
    assert "dbt" not in reports[4], reports
    # A round under way does not wait for a new file; none under way, a cycle waits for one.
    follower.o.max_idle = 60.0
    follower.round = follow.Round([follow.DBT_SLICE], started=time.monotonic())
    started = time.monotonic()
    follower.wait(started, None, follow.landing_signature(follower.o.landing))
    assert time.monotonic() - started < 1.0
    follower.round = None

    time.sleep(1.1)  # what landed in the round's last cycle: due a round after the last one started
    recorded = follower.dbt_build

    def dbt_build(command, timings=None) -> None:
        recorded(command)
        if command[-1] == "c":
            raise ValueError("a data test failed")

    monkeypatch.setattr(follower, "dbt_build", dbt_build)
    monkeypatch.setattr(follow, "spark_alive", lambda spark: True)
    follower.node_seconds = {"model.m": 3.0, "test.a": 0.5, "test.b": 0.5, "test.c": 0.5}  # last timings
    assert follower.cycle()  # nothing new; the catalog behind: the run with it, then the models
    assert not follower.cycle()  # the three tests in one slice, failing
    assert follower.round is None
    monkeypatch.setattr(follower, "dbt_build", recorded)
    assert follower.cycle()  # new files: the build alone, whole (the history's tests not due)
    assert follower.cycle()  # new files: the run; the next build not due yet
    assert ran[6:] == ["run", "slice m", "slice a b c", "scheduled", "records"]


def test_the_historys_data_tests_run_in_the_first_whole_build_then_once_every_test_history_every(
    tmp_path, monkeypatch
):
    """The history's data tests (selector `history`) read the whole change log: the process' first
    whole build runs them, then the whole builds leave them out until --test-history-every has passed
    since the last build that ran them started; one that fails keeps them due. With --build-slice,
    the round that runs them lists them among its data tests. 0: every whole build runs them. The
    status file tells when they last passed. Fails first: every whole build ran them."""
    follower = bare_follower(tmp_path, build_every=0.0, test_history_every=0.5)
    ran = scripted_steps(follower, [1, 1, 1, 1, 1, 1], monkeypatch)
    recorded = follower.dbt_build
    failures = iter([None] * 4 + [ValueError("unique_sequin_events_seq failed")] + [None] * 3)

    def dbt_build(command, timings=None) -> None:
        recorded(command)
        if (failure := next(failures)) is not None:
            raise failure

    def history_passed_at() -> str | None:
        return json.loads(follower.o.status_file.read_text())["whole_build"]["history_tests_passed_at"]

    monkeypatch.setattr(follower, "dbt_build", dbt_build)
    monkeypatch.setattr(follow, "spark_alive", lambda spark: True)
    assert follower.cycle()  # the process' first build: all of it, the history's tests with it
    first = history_passed_at()
    assert first is not None
    assert follower.cycle()  # the run, then the rest without them
    assert history_passed_at() == first
    time.sleep(0.6)
    assert not follower.cycle()  # due again: the run, then the rest with them, which fails
    assert follower.cycle()  # the build alone, still with them, passing
    assert history_passed_at() > first
    assert ran == ["build (no status)", "run", "rest", "run", "daily", "build"]
    assert follower.cycle()  # the run, the rest without them
    assert ran[6:] == ["run", "rest"]

    (tmp_path / "sliced").mkdir()
    sliced = bare_follower(tmp_path / "sliced", build_every=0.3, build_slice=5.0, test_history_every=0.5)
    ran = scripted_steps(sliced, [1] * 6, monkeypatch)
    assert sliced.cycle()  # the first build, whole
    time.sleep(0.35)
    assert sliced.cycle() and sliced.cycle()  # a round without the history's tests: m, then a b c
    time.sleep(0.35)
    assert sliced.cycle() and sliced.cycle()  # the history's tests due: a round with them
    first_round, second_round = ["run", "slice m", "records", "slice a b c"], ["run", "slice m", "records"]
    assert ran == ["build (no status)", *first_round, *second_round, "slice a b c h"]
    assert sliced.history_passed_at is not None and sliced.history_tested == sliced.last_tested

    (tmp_path / "every").mkdir()
    every = bare_follower(tmp_path / "every", build_every=0.0, test_history_every=0.0)
    ran = scripted_steps(every, [1, 1, 1], monkeypatch)
    assert every.cycle() and every.cycle() and every.cycle()
    assert ran == ["build (no status)", "run", "daily", "run", "daily"]


def test_a_rounds_nodes_are_cut_into_slices_by_their_last_timings():
    tests = [(f"test.{n}", n) for n in "abcdef"]
    # None timed: a second each.
    assert follow.cut_slices(tests, {}, 2.5) == [["a", "b"], ["c", "d"], ["e", "f"]]
    # By the last timings; one untimed counts as the timed ones' mean; one over the budget alone.
    seconds = {"test.a": 1.0, "test.b": 6.0, "test.c": 0.5, "test.d": 0.5, "test.f": 3.0}
    assert follow.cut_slices(tests, seconds, 3.0) == [["a"], ["b"], ["c", "d"], ["e"], ["f"]]
    assert follow.cut_slices(tests, seconds, 100.0) == [list("abcdef")]
    assert follow.cut_slices([], seconds, 3.0) == []
    # A round's models: each alone (a guess of the whole budget) until a round has timed them.
    assert follow.cut_slices(tests[:3], {}, 3.0, guess=3.0) == [["a"], ["b"], ["c"]]
    assert follow.cut_slices(tests[:3], {"test.b": 1.0}, 3.0, guess=3.0) == [["a"], ["b"], ["c"]]
    assert follow.cut_slices(tests[:3], {"test.a": 1.0, "test.b": 1.0}, 3.0, guess=3.0) == [["a", "b"], ["c"]]


def test_after_a_failed_build_the_build_runs_alone_until_it_passes(tmp_path, monkeypatch):
    """A failing data test holds back the models it guards, as in any dbt build: the cycles after a
    failed build run the build alone (no dbt run before it) until it passes."""
    follower = bare_follower(tmp_path, build_every=0.3)
    ran = scripted_steps(follower, [1, 1, 1, 1, 1], monkeypatch)
    recorded = follower.dbt_build
    outcomes = iter([None, ValueError("a data test failed"), ValueError("a data test failed"), None])

    def dbt_build(command, timings=None) -> None:
        recorded(command)
        if command[0] == "build" and (failure := next(outcomes)) is not None:
            raise failure

    monkeypatch.setattr(follower, "dbt_build", dbt_build)
    monkeypatch.setattr(follow, "spark_alive", lambda spark: True)
    assert follower.cycle()  # the process' first build, alone, passing
    time.sleep(0.4)
    assert not follower.cycle()  # new files and the build due: the run, then a build that fails
    assert not follower.cycle()  # the build alone, failing again
    assert follower.cycle()  # the build alone, passing
    assert follower.cycle()  # new files: the run; the next build is not due yet
    assert [r.split()[0] for r in ran] == ["build", "run", "rest", "scheduled", "scheduled", "records"]
    assert follower.counters.failures == {"dbt": 2}


def test_the_column_catalog_runs_in_a_cycle_only_when_what_landed_is_new_to_it(tmp_path, monkeypatch):
    """column_registry and mirror_tables (the catalog) run in the cycles whose files show a column or
    type they lack (new_tables says so), until a run with them succeeds, and in every cycle that
    ends with the whole build, even one with nothing new; the other cycles run the rest of `fresh`.
    Fails first: every cycle ran the catalog; then, a build due in a cycle with nothing new ran its
    rest with the catalog's last sightings behind."""
    follower = bare_follower(tmp_path, build_every=1.0)
    ran = scripted_steps(follower, [1, 1, 1, 1, 1, 1, 1, 0], monkeypatch)
    news = iter([True, False, True, False, False, False, False, False])  # something new to the catalog

    def new_tables() -> list[str]:
        if next(news):
            follower.catalog_current = False
        return []

    monkeypatch.setattr(follower, "new_tables", new_tables)
    recorded = follower.dbt_build
    failures = iter([None, None, ValueError("Spark failed"), *[None] * 9])

    def dbt_build(command, timings=None) -> None:
        recorded(command)
        if (failure := next(failures)) is not None:
            raise failure

    monkeypatch.setattr(follower, "dbt_build", dbt_build)
    monkeypatch.setattr(follow, "spark_alive", lambda spark: True)
    assert follower.cycle()  # the process' first build: all of it
    assert follower.cycle()  # nothing new to the catalog
    assert not follower.cycle()  # a new column: the run with the catalog, which fails
    assert follower.cycle()  # nothing new, but the catalog is behind: with it again
    assert follower.cycle()  # caught up
    time.sleep(1.1)
    assert follower.cycle()  # the whole build is due: the catalog runs before its rest
    assert ran == ["build (no status)", "records", "run", "run", "records", "run", "rest"]
    assert follower.cycle()  # new files: without the catalog again
    time.sleep(1.1)
    assert follower.cycle()  # nothing new, the build due: the catalog catches up before the rest
    assert ran[7:] == ["records", "run", "rest"]


def test_a_cycle_between_builds_runs_what_consumers_read_and_the_rest_waits_for_the_build():
    """The run: consumer_records, the mirrors, their catalog and their parents; not the models whose
    cost grows with the history (record_history, the audit models) nor mirror_rejects, which wait
    for the build. The build after the run (`fresh_rest`) takes every other node and the tests of
    the run's models too: together they are the whole build, and no model runs twice."""

    def listed(command: tuple[str, ...], *options: str) -> set[str]:
        selection = [arg for arg in command if arg not in ("run", "build", "--quiet")]
        return set(dbt_ls(*options, *selection))

    run = listed(follow.DBT_RUN, "--resource-type", "model")
    assert {"consumer_records", "sequin_events", "source_records", "column_registry"} <= run
    assert {"mirror_tables", "stg_wal__events"} <= run
    # Between catalog changes: the same less the catalog.
    catalog = {"column_registry", "mirror_tables"}
    assert listed(follow.DBT_RUN_RECORDS, "--resource-type", "model") == run - catalog
    growing = {"record_history", "sequin_violations", "keyless_changes", "unannounced_ddl", "mirror_rejects"}
    assert not run & growing

    built = ("--resource-type", "model", "--resource-type", "seed", "--resource-type", "snapshot")
    built += ("--resource-type", "test")
    everything = listed(follow.DBT_BUILD, *built)
    rest = listed(follow.DBT_BUILD_REST, *built)
    daily = listed(follow.DBT_BUILD_REST_DAILY, *built)
    assert not run & daily
    assert run | daily == everything
    # Without the history's data tests, the run and the rest are what a scheduled run builds.
    assert run | rest == listed(follow.DBT_BUILD_SCHEDULED, *built)
    history_tests = listed(("--selector", "history"), "--resource-type", "test")
    assert {"unique_sequin_events_seq", "assert_consumer_records_match_sequin_events"} <= history_tests
    assert daily - rest == history_tests
    assert growing | {"not_null_consumer_records_seq"} <= rest
    # A round (--build-slice) is the rest too, and a slice builds only the nodes it names.
    for with_history, expected in ((False, rest), (True, daily)):
        nodes = follow.rest_nodes(with_history)
        names = [name for _, name, _ in nodes]
        assert set(names) == expected and len(names) == len(set(names))
        assert {kind for _, _, kind in nodes} <= {"model", "seed", "snapshot", "test"}
    assert listed((*follow.DBT_SLICE, "--select", "record_history"), *built) == {"record_history"}


# --- killed at random points, with a live Postgres ---------------------------------------------------

KILL_SEED = 41
KILL_PHASES = ("capture", "ingest", "dbt")
KILLS = 5
KILLED_SOURCE = "follow_kills"


class FollowerProcess:
    """The follower in a process of its own (its own Spark JVM, warehouse and metastore), capturing
    a live database: started, watched through its warehouse and landing files, killed."""

    def __init__(self, root: Path, dsn: str, slot: str) -> None:
        from testkit.faults.pipeline import jvm_tmp_env, short_run_conf

        self.root = root
        self.landing = root / "landing"
        self.status_file = root / "status.json"
        self.spark_dir = root / "spark"
        self.runs = 0
        self.argv = [
            sys.executable, "-m", "python_jobs.follow", "--landing", str(self.landing), "--dsn", dsn,
            "--slot", slot, "--source-id", KILLED_SOURCE, "--status-file", str(self.status_file),
            "--lock-file", str(root / "follow.lock"), "--min-interval", "0", "--max-backoff", "2",
        ]  # fmt: skip
        where = {
            "WAL_LAKE_SPARK_DIR": str(self.spark_dir),
            "WAL_LAKE_WAREHOUSE_DIR": str(self.spark_dir / "warehouse"),
        }
        with pytest.MonkeyPatch.context() as env:  # the profile's settings name the follower's directory
            for name, value in where.items():
                env.setenv(name, value)
            conf = short_run_conf()  # a cheaper JIT for a JVM that lives a minute
        self.env = {
            **os.environ,
            **where,
            "WAL_LAKE_RAW_SCHEMA": "wal_lake_raw",
            "WAL_LAKE_SCHEMA": "wal_lake",
            "DBT_TARGET_PATH": str(root / "dbt_target"),
            "DBT_LOG_PATH": str(root / "dbt_logs"),
            "WAL_LAKE_MIRROR_MODELS": str(Path(os.environ["WAL_LAKE_MIRROR_MODELS"]).parent / "follow_kills"),
            "WAL_LAKE_DRIVER_MEMORY": "2g",
            "WAL_LAKE_SPARK_CONF": ",".join(f"{k}={v}" for k, v in conf.items()),
            **jvm_tmp_env(root / "jvm_tmp"),
        }
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.runs += 1
        self.log = self.root / f"follow_{self.runs}.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                self.argv, cwd=PROJECT_DIR, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-25:])

    def watched(self, phase: str) -> set[str]:
        """The files whose appearance shows the phase at work: the capture's landing files, the
        ingestion's writes to the raw tables, dbt's to the models'."""
        from testkit.faults.pipeline import files_under

        warehouse = self.spark_dir / "warehouse"
        top = {
            "capture": self.landing,
            "ingest": warehouse / "wal_lake_raw.db",
            "dbt": warehouse / "wal_lake.db",
        }
        return files_under(top[phase])

    def kill_in(self, phase: str, delay: float, timeout: float = 600) -> None:
        """SIGKILL the process group (Python and its JVM) ``delay`` seconds after the phase writes
        its first new file. A restarted follower's first cycle may land nothing (the capture has
        not written yet) and then run the whole build alone: the next ingestion waits for it, four
        minutes and more on a slow 2-core machine while the other test worker runs."""
        before = self.watched(phase)
        deadline = time.monotonic() + timeout
        while not self.watched(phase) - before:
            assert self.proc.poll() is None, f"the follower exited before its {phase}:\n{self.tail()}"
            assert time.monotonic() < deadline, f"no {phase} within {timeout}s:\n{self.tail()}"
            time.sleep(0.02)
        time.sleep(delay)
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def status(self) -> dict | None:
        try:
            return json.loads(self.status_file.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None


def external_tables(spark, spark_dir: Path, tables: dict[str, str]) -> str:
    """Another warehouse's Delta tables, readable from this session through a schema of external
    tables at their locations (the other warehouse's metastore is its own)."""
    schema = "follow_kills_view"
    spark.sql(f"drop schema if exists {schema} cascade")
    spark.sql(f"create schema {schema}")
    for name, relative in tables.items():
        location = spark_dir / "warehouse" / relative
        spark.sql(f"create table {schema}.{name} using delta location '{location}'")
    return schema


@pytest.mark.postgres
def test_killed_at_random_points_and_postgres_restarted_the_follower_converges(tmp_path, request):
    """A workload runs while the follower captures, lands and builds; it is killed -9 at five
    seeded points in its capture, ingestion and dbt steps and started again each time. Then, the
    follower running, Postgres stops and starts again: the capture logs it, retries and catches up.
    At the end consumer_records equals the database's tables and every change is numbered once."""
    import random

    import psycopg

    from python_jobs.lsn import parse_lsn
    from testkit import oracle, workload
    from testkit.pg_server import PostgresServer, missing_requirements
    from testkit.warehouse import consumer_state, spark_query

    if problem := missing_requirements():
        pytest.skip(problem)
    rng = random.Random(KILL_SEED)
    server = PostgresServer(max_slots=4).start()  # its own: this test stops it for a while
    request.addfinalizer(server.stop)
    dsn = server.create_database("t_follow_kills")
    slot = "t_follow_kills"
    with psycopg.connect(dsn, autocommit=True) as conn:
        workload.create_tables(conn, "public")
        # Before any row: every change is decoded, whenever the first capture gets going.
        conn.execute("select pg_create_logical_replication_slot(%s, 'wal2json')", (slot,))
    workload.seed_rows(dsn, "public", KILL_SEED, rows=20)
    follower = FollowerProcess(tmp_path, dsn, slot)
    request.addfinalizer(follower.kill)
    phases = [*KILL_PHASES, *rng.sample(KILL_PHASES, KILLS - len(KILL_PHASES))]
    rng.shuffle(phases)
    kills = []
    for number, phase in enumerate(phases):
        follower.start()
        # Changes while it starts and runs: something to capture, land and build.
        chunk = threading.Thread(
            target=workload.run_workload,
            args=(dsn, KILL_SEED * 100 + number, 12),
            kwargs={"sessions": 2, "create": False},
        )
        chunk.start()
        delay = rng.uniform(0, {"capture": 0.3, "ingest": 1.0, "dbt": 4.0}[phase])
        follower.kill_in(phase, delay)
        chunk.join()
        kills.append(f"{phase} +{delay:.2f}s")
    assert {k.split()[0] for k in kills} == set(KILL_PHASES), kills

    # The last start: Postgres goes away while it runs, and comes back.
    landed = follower.watched("capture")
    follower.start()
    workload.run_workload(dsn, KILL_SEED * 100 + KILLS, 12, sessions=2, create=False)
    wait_for(lambda: follower.watched("capture") - landed, "this run's capture", timeout=300)
    server.pause()
    wait_for(lambda: "follow: capture failed" in follower.log.read_text(), "the capture to fail")
    time.sleep(3)  # a retry or two finds no server
    server.resume()
    workload.run_workload(dsn, KILL_SEED * 100 + KILLS + 1, 12, sessions=2, create=False)
    with psycopg.connect(dsn, autocommit=True) as conn:
        before_end = parse_lsn(conn.execute("select pg_current_wal_lsn()::text").fetchone()[0])
        conn.execute("insert into public.tags values ('the-end', 'last', 0, now())")

    def caught_up() -> bool:
        assert follower.proc.poll() is None, follower.tail()
        entry = next(iter((follower.status() or {}).get("sources", [])), None)
        visible = entry and entry["consumer_records"]
        return bool(
            visible
            and parse_lsn(visible["commit_lsn"]) > before_end
            and visible["commit_lsn"] == entry["frontier_lsn"]
            and entry["pending"] == 0
        )

    wait_for(caught_up, "the follower to catch up", timeout=900)
    follower.proc.send_signal(signal.SIGTERM)
    assert follower.proc.wait(180) == 0, follower.tail()
    capture = follower.status()["capture"]
    assert capture["failures"] >= 1 and capture["last_error"], capture

    # The test session's Spark only now (a fixture taken late): the followers ran on their own.
    spark = request.getfixturevalue("spark")
    schema = external_tables(
        spark,
        follower.spark_dir,
        {
            "consumer_records": "wal_lake.db/consumer_records",
            "sequin_events": "wal_lake.db/sequin_events",
            "sequin_violations": "wal_lake_audit.db/sequin_violations",
        },
    )
    with psycopg.connect(dsn) as conn:
        # No record of a keyless table; gauges' NaNs stream as nulls (only a snapshot carries them).
        skipped = (*workload.KEYLESS_TABLES, "gauges")
        tables = [t for t in oracle.user_tables(conn) if t.split(".")[1] not in skipped]
        types, keys = oracle.table_types(conn, tables)
        expected = oracle.postgres_state(conn, tables)
    actual = consumer_state(spark_query(spark), schema, KILLED_SOURCE)
    actual = {table: actual.get(table, []) for table in expected}
    problems = oracle.compare_states(expected, actual, types, keys)
    assert problems == [], f"after kills {kills}:\n" + "\n".join(problems[:20])
    numbered, positions = spark.sql(
        f"select count(*), count(distinct commit_lsn, commit_idx) from {schema}.sequin_events"
    ).first()
    assert numbered == positions > 0  # no change numbered twice
    assert spark.table(f"{schema}.sequin_violations").count() == 0
    spark.sql(f"drop schema {schema} cascade")  # external tables: their files stay where they are


def test_a_table_first_seen_in_a_later_batch_gets_its_mirror_model(spark, tmp_path, monkeypatch):
    """The mirror step reads only the batches landed since its last look, and misses no new table,
    nor a set of column types new to the column catalog or seen earlier than before (a late file).
    Fails without the catalog's check: catalog_current stays true after a new column."""
    from python_jobs import mirrors

    raw = "follow_new_tables_raw"
    spark.sql(f"drop schema if exists {raw} cascade")
    spark.sql(f"create schema {raw}")
    spark.sql(f"create table {raw}.wal_files (batch_id bigint) using delta")
    spark.sql(
        f"create table {raw}.wal_events (source_id string, source_schema string, source_table string,"
        " commit_lsn bigint, commit_idx int, column_types map<string, string>, batch_id bigint) using delta"
    )

    def land(batch: int, *tables: tuple[str, str], types="map('id', 'bigint')", lsn=None) -> None:
        lsn = batch * 100 if lsn is None else lsn
        rows = ", ".join(f"('{s}', 'public', '{t}', {lsn}, 0, {types}, {batch})" for s, t in tables)
        spark.sql(f"insert into {raw}.wal_events values {rows}")
        spark.sql(f"insert into {raw}.wal_files values ({batch})")

    def catalog_news() -> bool:
        """Whether the last look found something new to the catalog; then as after a run of it."""
        news = not follower.catalog_current
        follower.catalog_current = True
        return news

    generated = []
    monkeypatch.setattr(mirrors, "generate", lambda _spark, schema, sources=None: generated.append(sources))
    follower = bare_follower(tmp_path, raw_schema=raw)
    follower.spark = spark
    land(1, ("a", "orders"), ("a", "items"))
    assert follower.new_tables() == ["a"] and generated == [None]  # the first look: every table's
    assert catalog_news()
    land(2, ("a", "orders"), ("b", "users"))
    assert follower.new_tables() == ["b"] and generated == [None, ["b"]]
    assert catalog_news()
    assert follower.new_tables() == [] and len(generated) == 2  # nothing landed since
    land(3, ("a", "orders"))
    assert follower.new_tables() == [] and len(generated) == 2
    assert not catalog_news()  # the same columns and types, later
    land(4, ("a", "refunds"))
    assert follower.new_tables() == ["a"] and generated[-1] == ["a"]
    assert catalog_news()
    land(5, ("a", "orders"), types="map('id', 'bigint', 'note', 'text')")  # a column added
    assert follower.new_tables() == [] and catalog_news()
    land(6, ("a", "orders"), types="map('id', 'integer')")  # a type changed
    assert follower.new_tables() == [] and catalog_news()
    land(7, ("a", "orders"), lsn=50)  # a late file: seen before, but earlier than first seen
    assert follower.new_tables() == [] and catalog_news()
    land(8, ("a", "orders"), ("a", "refunds"), ("b", "users"))
    assert follower.new_tables() == [] and not catalog_news()
    spark.sql(f"drop schema {raw} cascade")


def test_a_table_folder_no_table_owns_is_removed_before_a_build(spark, tmp_path):
    """A kill between Delta's commit and the metastore's registration (or before the commit) leaves a
    folder that fails every later creation of that table; fails with the clearing turned off."""
    schema = "follow_unfinished"
    spark.sql(f"drop schema if exists {schema} cascade")
    spark.sql(f"create schema {schema}")
    spark.sql(f"create table {schema}.kept using delta as select 1 as id")
    root = Path(spark.catalog.getDatabase(schema).locationUri.removeprefix("file:"))
    (root / "cut_short").mkdir()
    (root / "cut_short" / "part-00000.snappy.parquet").write_bytes(b"not committed")
    with pytest.raises(Exception, match="NON_EMPTY_LOCATION"):
        spark.sql(f"create table {schema}.cut_short using delta as select 2 as id")
    assert follow.clear_unfinished_tables(spark, (schema, "no_such_schema")) == [f"{schema}.cut_short"]
    spark.sql(f"create table {schema}.cut_short using delta as select 2 as id")
    assert spark.table(f"{schema}.kept").first().id == 1 and spark.table(f"{schema}.cut_short").count() == 1
    assert follow.clear_unfinished_tables(spark, (schema,)) == []
    spark.sql(f"drop schema {schema} cascade")
