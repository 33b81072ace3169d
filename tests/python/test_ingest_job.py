"""The ingestion job end to end on small landing zones: exactly once, split transactions, duplicates,
rejects, accounting, crashes and the command line."""

from __future__ import annotations

import gzip
import io
import itertools
import json
import re
import shutil
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
from model_helpers import file_statistics

from python_jobs.ingest import cli, job, plan
from python_jobs.ingest import landing as landing_module
from python_jobs.ingest.landing import LandingFile, list_files
from python_jobs.ingest.ledger import (
    BATCHES,
    EVENTS,
    FILES,
    FRONTIER,
    REJECTS,
    Ledger,
    PlannedFile,
    frontiers_from_files,
    totals,
)
from python_jobs.lsn import parse_lsn

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "wal2json" / "accounts.jsonl"
FIXTURE_LINES = FIXTURE.read_text().splitlines(keepends=True)
LAST_COMMIT = 0x15315D8
_schemas = itertools.count()


@pytest.fixture
def schema() -> str:
    return f"ingest_test_{next(_schemas)}"


@pytest.fixture
def landing(tmp_path) -> Path:
    (tmp_path / "landing" / "src").mkdir(parents=True)
    return tmp_path / "landing"


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(lines))
    return path


def ingest(spark, landing: Path, schema: str, **options) -> tuple[job.RunSummary, str]:
    out = io.StringIO()
    summary = job.run(spark, str(landing), schema=schema, out=out, **options)
    return summary, out.getvalue()


def rows(spark, schema: str, table: str) -> list[dict]:
    return [r.asDict() for r in spark.table(f"{schema}.{table}").collect()]


def frontier(spark, schema: str) -> int | None:
    """The source's frontier as wal_frontier holds it; the job's own, from the wal_files rows, is the same."""
    ledger = Ledger(spark, schema)
    recorded = ledger.frontiers()
    assert frontiers_from_files(ledger.file_rows()) == recorded
    return recorded.get("src")


def test_spark_python_workers_run_the_interpreter_of_the_job(spark):
    """The plan, the file outcomes and the ledger rows are frames built from Python rows, which go
    through Spark's Python workers: those run this process's interpreter (the virtual environment),
    not the first ``python3`` on the PATH, which may be another Python version."""
    ran_in = spark.sparkContext.parallelize([0], 1).map(lambda _: sys.executable).first()
    assert ran_in == sys.executable


def test_fixture_lands_once_and_a_rerun_adds_nothing(spark, landing, schema):
    shutil.copy(FIXTURE, landing / "src" / "0001.jsonl")
    summary, out = ingest(spark, landing, schema)
    assert (summary.landed, summary.rejected, summary.control, summary.pending_end) == (15, 0, 14, 0)
    assert summary.balanced
    assert "batch 1: 1 files, 29 lines" in out
    assert (
        "lines read 29 = landed 15 + rejected 0 + control 14 + pending 0; overall 29 = 15 + 0 + 14 + 0 [ok]"
        in (summary.line())
    )
    events = rows(spark, schema, EVENTS)
    assert len(events) == 15 and {e["batch_id"] for e in events} == {1}
    assert all(e["landing_file"].endswith("/src/0001.jsonl") for e in events)
    assert frontier(spark, schema) == LAST_COMMIT
    # Nothing rejected, nothing committed to wal_rejects: its history is its creation alone.
    assert [r.operation for r in spark.sql(f"describe history {schema}.{REJECTS}").collect()] == [
        "CREATE TABLE"
    ]

    again, _ = ingest(spark, landing, schema)
    assert again.batches == 0
    assert len(rows(spark, schema, EVENTS)) == 15
    assert totals(Ledger(spark, schema).file_rows()) == {
        "landed": 15,
        "rejected": 0,
        "control": 14,
        "pending": 0,
        "lines": 29,
    }


def test_wal_events_keeps_statistics_only_of_the_columns_its_readers_filter_by(spark, landing, schema):
    shutil.copy(FIXTURE, landing / "src" / "0001.jsonl")
    ingest(spark, landing, schema)
    added = file_statistics(spark, f"{schema}.{EVENTS}")
    assert len(added) >= 1 and all(stats["numRecords"] > 0 for stats in added)
    expected = {
        "source_id",
        "commit_lsn",
        "commit_idx",
        "batch_id",
        "action",
        "source_format",
        "source_table",
    }
    assert all(set(stats["nullCount"]) == expected for stats in added), added[0]["nullCount"]


def test_the_frontiers_follow_from_the_files_done_not_from_the_frontier_table(
    spark, landing, schema, monkeypatch
):
    """A run reads the files done (each row with the greatest commit_lsn it landed) and the last plan,
    not wal_frontier, whether it has something to land or not."""
    lines = FIXTURE.read_text().splitlines(keepends=True)
    (landing / "src" / "0001.jsonl").write_text("".join(lines[:14]))
    ingest(spark, landing, schema)
    read: list[str] = []
    original = Ledger.frontiers
    monkeypatch.setattr(Ledger, "frontiers", lambda self: read.append(self.schema) or original(self))
    again, _ = ingest(spark, landing, schema)
    assert (again.batches, read) == (0, [])
    (landing / "src" / "0002.jsonl").write_text("".join(lines[14:20]))
    more, _ = ingest(spark, landing, schema)
    assert (more.batches, more.balanced, read) == (1, True, [])
    landed = [r.max_commit_lsn for r in spark.table(f"{schema}.{FILES}").where("landed > 0").collect()]
    assert landed and None not in landed


def test_the_last_plan_is_read_from_the_mark_on_its_commit(spark, landing, schema, monkeypatch):
    """The last plan's batch id comes from the mark on wal_batches' latest commit, with no scan of
    the table; after a commit of anything else to it, from a scan."""
    (landing / "src" / "0001.jsonl").write_text("".join(FIXTURE_LINES[:14]))
    ingest(spark, landing, schema)
    (landing / "src" / "0002.jsonl").write_text("".join(FIXTURE_LINES[14:]))
    second, _ = ingest(spark, landing, schema)
    assert second.batches == 1
    scanned: list[str] = []
    original = Ledger.table
    monkeypatch.setattr(Ledger, "table", lambda self, table: scanned.append(table) or original(self, table))
    ledger = Ledger(spark, schema)
    assert (ledger.last_planned(), scanned) == (2, [])
    spark.sql(f"alter table {schema}.{BATCHES} set tblproperties ('wal_lake.test' = 'not a plan')")
    assert (ledger.last_planned(), scanned) == (2, [BATCHES])


def test_a_batch_prepares_its_appends_while_it_frames(spark, landing, schema, monkeypatch, caplog):
    """Each batch has the state its appends check (the txnAppId versions of the tables' latest
    snapshots) computed beside its framing, before its events are appended; preparing computes that
    state on the snapshot the table's writes use, and a table it cannot prepare costs a warning, not
    the batch."""
    (landing / "src" / "0001.jsonl").write_text("".join(FIXTURE_LINES[:14]))
    calls: list[tuple] = []
    prepare, append = Ledger.prepare_appends, Ledger.append

    def preparing(self, tables):
        calls.append(("prepare", tables))
        prepare(self, tables)

    def appending(self, table, df, batch_id):
        calls.append(("append", table))
        append(self, table, df, batch_id)

    monkeypatch.setattr(Ledger, "prepare_appends", preparing)
    monkeypatch.setattr(Ledger, "append", appending)
    ingest(spark, landing, schema)
    assert calls.index(("prepare", (EVENTS, FILES))) < calls.index(("append", EVENTS))

    jvm = spark.sparkContext._jvm
    identifier = jvm.org.apache.spark.sql.catalyst.TableIdentifier(EVENTS, jvm.scala.Some(schema))
    log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, identifier)
    spark.sql(f"alter table {schema}.{EVENTS} set tblproperties ('wal_lake.test' = 'a commit')")
    none = jvm.scala.Option.empty()
    assert not log.update(False, none, none)._computedStateTriggered()
    with caplog.at_level("WARNING", logger="python_jobs.ingest.ledger"):
        Ledger(spark, schema).prepare_appends((EVENTS, "no_such_table"))
    assert log.update(False, none, none)._computedStateTriggered()
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and f"{schema}.no_such_table" in warned[0], warned


def test_a_batch_frames_and_counts_its_lines_while_its_plan_commits(spark, landing, schema, monkeypatch):
    """The write-ahead plan's commit (mostly a wait on Delta's log) runs beside the batch's framing and
    outcome counts, which write nothing; the events are appended only after the plan has committed."""
    (landing / "src" / "0001.jsonl").write_text("".join(FIXTURE_LINES[:14]))
    counting = threading.Event()
    calls: list[str] = []
    write_plan, count_outcomes, append = job.write_plan, job.count_outcomes, Ledger.append

    def planning(*args, **kwargs):
        # Commits only once the batch has started counting: a batch that counted after the plan's
        # commit would wait here for the timeout.
        calls.append("plan written" if counting.wait(timeout=20) else "plan written before any count")
        write_plan(*args, **kwargs)

    def counted(*args, **kwargs):
        counting.set()
        calls.append("counting")
        return count_outcomes(*args, **kwargs)

    def appending(self, table, df, batch_id):
        calls.append(f"append {table}")
        append(self, table, df, batch_id)

    monkeypatch.setattr(job, "write_plan", planning)
    monkeypatch.setattr(job, "count_outcomes", counted)
    monkeypatch.setattr(Ledger, "append", appending)
    summary, _ = ingest(spark, landing, schema)
    assert summary.landed == len(rows(spark, schema, EVENTS)) > 0 and summary.balanced
    assert calls.index("counting") < calls.index("plan written") < calls.index(f"append {BATCHES}")
    assert calls.index(f"append {BATCHES}") < calls.index(f"append {EVENTS}")


def test_a_transaction_split_across_files_lands_once_when_complete(spark, landing, schema):
    # Line 5 opens xid 726, line 9 commits it: cut it after line 7.
    write(landing / "src" / "0001.jsonl", FIXTURE_LINES[:7])
    first, _ = ingest(spark, landing, schema)
    assert (first.landed, first.control, first.pending_end) == (2, 2, 3)
    assert len(rows(spark, schema, EVENTS)) == 2
    assert frontier(spark, schema) == 0x152DAC8  # held by the open transaction

    write(landing / "src" / "0002.jsonl", FIXTURE_LINES[7:])
    second, _ = ingest(spark, landing, schema)
    assert second.lines_read == 3 + 22 and second.landed == 13 and second.pending_end == 0
    events = rows(spark, schema, EVENTS)
    assert len(events) == 15
    assert len({(e["commit_lsn"], e["commit_idx"]) for e in events}) == 15
    split = sorted(
        (e["commit_idx"], e["landing_file"][-10:], e["landing_line"]) for e in events if e["xid"] == 726
    )
    assert split == [(0, "0001.jsonl", 6), (1, "0001.jsonl", 7), (2, "0002.jsonl", 1)]
    assert frontier(spark, schema) == LAST_COMMIT
    assert totals(Ledger(spark, schema).file_rows()) == {
        "landed": 15,
        "rejected": 0,
        "control": 14,
        "pending": 0,
        "lines": 29,
    }


def test_a_message_after_the_last_commit_moves_the_frontier_to_its_own_position(spark, landing, schema):
    # A non-transactional message is whole by itself. Landed after the last commit (here alone in its
    # file, as a capture that stops right after one writes it), the frontier goes up to its LSN:
    # behind it, the models would hold the message back, and read past its batch once it moved on.
    message_lsn = LAST_COMMIT + 0x100
    message = {
        "action": "M",
        "xid": None,
        "timestamp": None,
        "lsn": f"0/{message_lsn:X}",
        "transactional": False,
        "prefix": "wal_lake.workload",
        "content": "beat",
    }
    write(landing / "src" / "0001.jsonl", FIXTURE_LINES)
    write(landing / "src" / "0002.jsonl", [json.dumps(message) + "\n"])
    summary, _ = ingest(spark, landing, schema)
    assert (summary.landed, summary.rejected, summary.pending_end) == (16, 0, 0)
    messages = [
        (e["commit_lsn"], e["commit_idx"]) for e in rows(spark, schema, EVENTS) if e["action"] == "message"
    ]
    assert (message_lsn, -1) in messages
    assert frontier(spark, schema) == message_lsn


def test_a_pending_file_that_disappears_stops_the_run_naming_it(spark, landing, schema):
    """A file whose trailing transaction waits for its commit stays until landed: removed, the run
    stops with an error that names it, whether new files came or not, and lands nothing meanwhile."""
    pending = write(landing / "src" / "0001.jsonl", FIXTURE_LINES[:7])
    first, _ = ingest(spark, landing, schema)
    assert first.pending_end == 3
    pending.unlink()
    with pytest.raises(job.IngestError, match=r"pending landing file is gone.*0001\.jsonl"):
        ingest(spark, landing, schema)
    write(landing / "src" / "0002.jsonl", FIXTURE_LINES[7:])
    with pytest.raises(job.IngestError, match=r"pending landing file is gone.*0001\.jsonl"):
        ingest(spark, landing, schema)
    assert len(rows(spark, schema, EVENTS)) == 2  # nothing of 0002 landed without its first part
    write(pending, FIXTURE_LINES[:7])  # put back, the run goes on where it stopped
    second, _ = ingest(spark, landing, schema)
    assert (second.landed, second.pending_end) == (13, 0) and second.balanced


def test_a_file_of_an_unfinished_batch_that_disappears_stops_the_run_naming_it(spark, landing, schema):
    path = write(landing / "src" / "0001.jsonl", FIXTURE_LINES)
    ledger = Ledger(spark, schema)
    ledger.ensure_tables()
    listed = list_files(spark, str(landing), None)
    planned = plan.plan_new_batch(spark, listed, {}, "auto", None, None)
    plan.write_plan(ledger, 1, datetime.now(UTC), planned)  # a crash right after the plan was written
    path.unlink()
    write(landing / "src" / "0002.jsonl", FIXTURE_LINES[:3])
    with pytest.raises(job.IngestError, match=r"planned landing file is gone.*0001\.jsonl"):
        ingest(spark, landing, schema)


def test_listing_ignores_hidden_files_that_come_and_go_meanwhile(spark, landing):
    """A writer's temporary files (hidden names) appear and vanish while the zone is listed: the
    listing never fails on one and never returns one. Hadoop's recursive listing asked each file's
    permissions through ``ls`` and failed on a file just removed (184 of 200 listings here)."""
    import threading

    write(landing / "src" / "0001.jsonl", FIXTURE_LINES)
    (landing / "src" / "sub").mkdir()
    write(landing / "src" / "sub" / "0002.jsonl", FIXTURE_LINES[:2])
    stop = threading.Event()

    def churn():
        n = 0
        while not stop.is_set():
            temporary = [landing / "src" / f".tmp-{n}-{k}.partial" for k in range(20)]
            for path in temporary:
                path.write_text("x")
            for path in temporary:
                path.unlink()
            n += 1

    writer = threading.Thread(target=churn, daemon=True)
    writer.start()
    try:
        listings = [list_files(spark, str(landing), None) for _ in range(100)]
    finally:
        stop.set()
        writer.join()
    names = {tuple(Path(f.path).name for f in listed) for listed in listings}
    assert names == {("0001.jsonl", "0002.jsonl")}


def test_a_landed_file_that_changes_stops_the_run_naming_it(spark, landing, schema):
    """Landing files are immutable: one that grew after it landed is not read again from its end or
    landed twice; the run stops before it plans, naming the file and both sizes."""
    path = write(landing / "src" / "0001.jsonl", FIXTURE_LINES)
    first, _ = ingest(spark, landing, schema)
    landed = len(rows(spark, schema, EVENTS))
    assert first.landed == landed > 0
    size = path.stat().st_size
    write(path, [*FIXTURE_LINES, FIXTURE_LINES[0]])
    with pytest.raises(
        job.IngestError,
        match=rf"landing file changed after it was planned or landed \({size} -> \d+ bytes\).*0001\.jsonl",
    ):
        ingest(spark, landing, schema)
    assert len(rows(spark, schema, EVENTS)) == landed


SPLIT_SETTINGS = ("spark.sql.files.maxPartitionBytes", "spark.sql.files.openCostInBytes")


@pytest.fixture
def resplit(spark, monkeypatch):
    """``resplit(module, name)``: right after ``module.name`` returns, the batch's later scans split
    the files in 200-byte blocks, as a cluster whose cores changed between two actions would."""
    saved = {key: spark.conf.get(key, None) for key in SPLIT_SETTINGS}

    def after(module, name):
        original = getattr(module, name)

        def wrapper(*args, **kwargs):
            result = original(*args, **kwargs)
            spark.conf.set("spark.sql.files.maxPartitionBytes", "200")
            spark.conf.set("spark.sql.files.openCostInBytes", "0")
            return result

        monkeypatch.setattr(module, name, wrapper)

    yield after
    for key, value in saved.items():
        spark.conf.unset(key) if value is None else spark.conf.set(key, value)


def test_lines_lost_to_a_scan_split_otherwise_fail_the_batch_before_it_writes(
    spark, landing, schema, resplit, monkeypatch
):
    """The lines are counted when the batch numbers its blocks; a later scan that splits the file
    otherwise drops blocks from the join. The batch fails naming the file, before anything is
    written, and a rerun lands every line once."""
    write(landing / "src" / "0001.jsonl", FIXTURE_LINES)
    resplit(landing_module, "_blocks")
    with pytest.raises(job.IngestError, match=r"lines of \S*0001\.jsonl read in this batch .* split"):
        ingest(spark, landing, schema)
    assert rows(spark, schema, EVENTS) == [] and rows(spark, schema, FILES) == []
    monkeypatch.undo()
    summary, _ = ingest(spark, landing, schema)
    assert (summary.landed, summary.control, summary.pending_end) == (15, 14, 0) and summary.balanced
    assert len(rows(spark, schema, EVENTS)) == 15


def test_rejects_lost_to_a_scan_split_otherwise_fail_the_batch_before_they_are_written(
    spark, landing, schema, resplit, monkeypatch
):
    """The early rejects' text is read from the file again when they are written, after the events:
    a scan split otherwise would leave some out of wal_rejects while the file is marked done. The
    batch fails before writing them; a rerun writes every reject once."""
    bad = [f"not json {n}\n" for n in range(12)]
    write(landing / "src" / "0001.jsonl", [*FIXTURE_LINES[:4], *bad, *FIXTURE_LINES[4:]])
    resplit(job, "_events_written")
    with pytest.raises(job.IngestError, match=r"rejects of \S*0001\.jsonl to write"):
        ingest(spark, landing, schema)
    assert rows(spark, schema, REJECTS) == [] and rows(spark, schema, FILES) == []
    monkeypatch.undo()
    summary, _ = ingest(spark, landing, schema)
    assert (summary.landed, summary.rejected, summary.pending_end) == (15, 12, 0) and summary.balanced
    assert sorted(r["landing_line"] for r in rows(spark, schema, REJECTS)) == list(range(5, 17))


def test_a_batch_pins_how_its_files_are_split(spark, landing, schema, monkeypatch):
    """Every action of a batch sees the same split settings, minPartitionNum included (unset, Spark
    takes the cores registered when each scan is planned); the session's own are back afterwards."""
    write(landing / "src" / "0001.jsonl", FIXTURE_LINES)
    seen = []
    original = job._run_batch

    def watch(ledger, *args, **kwargs):
        seen.append({key: ledger.spark.conf.get(key, None) for key in job.SPLIT_SETTINGS})
        return original(ledger, *args, **kwargs)

    monkeypatch.setattr(job, "_run_batch", watch)
    before = {key: spark.conf.get(key, None) for key in job.SPLIT_SETTINGS}
    ingest(spark, landing, schema)
    assert seen and seen[0]["spark.sql.files.minPartitionNum"] == str(spark.sparkContext.defaultParallelism)
    assert all(seen[0][key] is not None for key in job.SPLIT_SETTINGS)
    assert {key: spark.conf.get(key, None) for key in job.SPLIT_SETTINGS} == before


def test_one_file_per_batch_rereads_the_pending_tail(spark, landing, schema):
    write(landing / "src" / "0001.jsonl", FIXTURE_LINES[:7])
    write(landing / "src" / "0002.jsonl", FIXTURE_LINES[7:])
    summary, out = ingest(spark, landing, schema, max_files_per_batch=1)
    assert summary.batches == 2 and summary.reread == 3
    assert (summary.lines_read - summary.reread, summary.landed, summary.pending_end) == (29, 15, 0)
    assert summary.balanced and "batch 2:" in out
    assert len(rows(spark, schema, EVENTS)) == 15


def test_copied_and_late_files_land_again_as_duplicates_but_a_reread_adds_nothing(spark, landing, schema):
    shutil.copy(FIXTURE, landing / "src" / "0002.jsonl")
    with gzip.open(landing / "src" / "0003.jsonl.gz", "wt") as gz:
        gz.write(FIXTURE.read_text())
    summary, _ = ingest(spark, landing, schema)
    assert summary.landed == 30
    events = rows(spark, schema, EVENTS)
    positions = sorted((e["commit_lsn"], e["commit_idx"]) for e in events)
    assert positions == sorted(2 * list(set(positions))) and len(set(positions)) == 15

    # A late file (its name sorts before the landed ones) still lands.
    write(landing / "src" / "0001.jsonl", FIXTURE_LINES[:4])
    late, _ = ingest(spark, landing, schema)
    assert (late.batches, late.landed) == (1, 2)
    assert frontier(spark, schema) == LAST_COMMIT
    assert ingest(spark, landing, schema)[0].batches == 0
    assert len(rows(spark, schema, EVENTS)) == 32


def test_malformed_lines_end_in_rejects_with_file_line_and_reason(spark, landing, schema):
    path = write(
        landing / "src" / "0001.jsonl", [*FIXTURE_LINES[:4], "not json at all\n", "\n", *FIXTURE_LINES[4:9]]
    )
    summary, _ = ingest(spark, landing, schema)
    assert (summary.landed, summary.rejected, summary.control) == (5, 2, 4) and summary.balanced
    rejects = sorted(rows(spark, schema, REJECTS), key=lambda r: r["landing_line"])
    assert [(r["landing_line"], r["raw_line"], r["reason"]) for r in rejects] == [
        (5, "not json at all", "malformed JSON"),
        (6, "", "empty line"),
    ]
    assert all(r["landing_file"] == f"file:{path}" and r["batch_id"] == 1 for r in rejects)


def _crash_at(monkeypatch, table: str):
    original = Ledger.append

    def append(self, name, df, batch_id):
        if name == table:
            raise RuntimeError(f"simulated crash before writing {name}")
        return original(self, name, df, batch_id)

    monkeypatch.setattr(Ledger, "append", append)


def _positions(spark, schema: str) -> list[tuple]:
    """The landed events' lines and positions, sorted: what must not depend on how batches are cut."""
    return sorted(
        (e["landing_file"], e["landing_line"], e["commit_lsn"], e["commit_idx"], e["record_pk"])
        for e in rows(spark, schema, EVENTS)
    )


def _landed(spark, schema: str) -> dict[str, list]:
    def key(r: dict) -> tuple:
        return tuple(
            sorted((k, str(v)) for k, v in r.items() if k not in ("ingested_at", "updated_at", "done_at"))
        )

    return {
        table: sorted(map(key, rows(spark, schema, table))) for table in (EVENTS, REJECTS, FRONTIER, FILES)
    }


def test_a_crash_at_any_write_then_a_rerun_gives_the_undisturbed_result(spark, landing, schema, monkeypatch):
    # Complete transactions, a malformed line and an open tail: every table gets rows.
    write(landing / "src" / "0001.jsonl", [*FIXTURE_LINES[:11], "{oops\n", *FIXTURE_LINES[11:16]])
    undisturbed = f"{schema}_undisturbed"
    ingest(spark, landing, undisturbed)
    expected = _landed(spark, undisturbed)

    # (wal_frontier is a view over wal_files: the done mark moves the frontier in its own commit.)
    for table in (EVENTS, REJECTS, FILES):
        with monkeypatch.context() as patch:
            _crash_at(patch, table)
            with pytest.raises(RuntimeError, match=f"simulated crash before writing {table}"):
                ingest(spark, landing, schema)
    summary, out = ingest(spark, landing, schema)
    assert "resuming an unfinished batch" in out and summary.batches == 1
    assert _landed(spark, schema) == expected
    assert len({r["batch_id"] for r in rows(spark, schema, BATCHES)}) == 1
    assert ingest(spark, landing, schema)[0].batches == 0
    assert _landed(spark, schema) == expected


def _make_frontier_a_table(spark, schema: str) -> list[tuple]:
    """Turn a raw schema into one an earlier version landed: wal_frontier a Delta table of the rows
    the view gives, wal_files without the greatest commit_lsn of its rows. The frontier rows, as
    (source_id, frontier_lsn, batch_id)."""
    frontier_rows = spark.table(f"{schema}.{FRONTIER}").collect()
    spark.sql(f"drop view {schema}.{FRONTIER}")
    spark.createDataFrame(
        frontier_rows, "source_id string, frontier_lsn bigint, batch_id bigint, updated_at timestamp"
    ).write.format("delta").saveAsTable(f"{schema}.{FRONTIER}")
    spark.sql(f"update {schema}.{FILES} set max_commit_lsn = null")
    return sorted((r.source_id, r.frontier_lsn, r.batch_id) for r in frontier_rows)


def _is_view(spark, name: str) -> bool:
    return spark.catalog.getTable(name).tableType == "VIEW"


def test_a_frontier_table_of_an_earlier_version_becomes_the_view_and_keeps_its_rows(spark, landing, schema):
    """An earlier version appended wal_frontier as a table beside the done mark, and its wal_files rows
    may lack their greatest commit_lsn. The next run fills those in from wal_events, replaces the
    table by the view with the same rows, and lands as a ledger that never had the table."""
    write(landing / "src" / "0001.jsonl", FIXTURE_LINES[:11])
    undisturbed = f"{schema}_undisturbed"
    ingest(spark, landing, undisturbed)
    assert _is_view(spark, f"{undisturbed}.{FRONTIER}")
    write(landing / "src" / "0002.jsonl", FIXTURE_LINES[11:])
    ingest(spark, landing, undisturbed)
    expected = _landed(spark, undisturbed)

    (landing / "src" / "0002.jsonl").unlink()
    ingest(spark, landing, schema)
    recorded = _make_frontier_a_table(spark, schema)
    assert [(source, batch) for source, _, batch in recorded] == [("src", 1)]
    assert not _is_view(spark, f"{schema}.{FRONTIER}")
    write(landing / "src" / "0002.jsonl", FIXTURE_LINES[11:])
    summary, _ = ingest(spark, landing, schema)
    assert summary.batches == 1 and summary.balanced and _is_view(spark, f"{schema}.{FRONTIER}")
    assert _landed(spark, schema) == expected  # max_commit_lsn filled in, the frontier's rows the same
    assert frontier(spark, schema) == LAST_COMMIT


def test_a_frontier_table_that_wal_files_cannot_give_back_is_left_and_the_run_says_why(
    spark, landing, schema
):
    """A frontier table ahead of what wal_files and wal_events give (their rows deleted, say) is not
    replaced: the run stops before any batch, names the source and the two frontiers, and the
    table keeps its rows."""
    write(landing / "src" / "0001.jsonl", FIXTURE_LINES[:11])
    ingest(spark, landing, schema)
    [(_, lsn, _)] = _make_frontier_a_table(spark, schema)
    spark.sql(f"update {schema}.{FRONTIER} set frontier_lsn = frontier_lsn + 1")
    write(landing / "src" / "0002.jsonl", FIXTURE_LINES[11:])
    with pytest.raises(
        job.IngestError, match=rf"cannot give back, for src \(the table {lsn + 1}, wal_files {lsn}\)"
    ):
        ingest(spark, landing, schema)
    assert not _is_view(spark, f"{schema}.{FRONTIER}")
    assert [(r.frontier_lsn, r.batch_id) for r in spark.table(f"{schema}.{FRONTIER}").collect()] == [
        (lsn + 1, 1)
    ]
    assert {r["batch_id"] for r in rows(spark, schema, FILES)} == {1}  # nothing landed meanwhile


def test_runs_that_carry_the_ledger_land_as_runs_that_read_it_and_a_failed_run_carries_nothing(
    spark, landing, schema, monkeypatch
):
    """The follower's runs carry the ledger from one to the next (job.Carry) instead of reading it
    again: the same files, cut the same way, land the same rows as runs that read it; a carried run
    reads none of the ledger's tables; a run that fails leaves nothing to carry, so the next reads
    the ledger and resumes the unfinished batch, as after any crash."""
    cuts = [FIXTURE_LINES[:7], [*FIXTURE_LINES[7:11], "{oops\n", *FIXTURE_LINES[11:16]], FIXTURE_LINES[16:]]
    read_landing = landing.parent / "read_landing"
    (read_landing / "src").mkdir(parents=True)
    read_schema = f"{schema}_read"
    carry = job.Carry()
    reads: list[str] = []
    for name in ("file_rows", "frontiers", "last_planned"):
        original = getattr(Ledger, name)

        def reading(self, _original=original, _name=name):
            reads.append(_name)
            return _original(self)

        monkeypatch.setattr(Ledger, name, reading)
    for number, lines in enumerate(cuts[:2], start=1):
        write(landing / "src" / f"{number:04}.jsonl", lines)
        write(read_landing / "src" / f"{number:04}.jsonl", lines)
        reads.clear()
        carried, _ = ingest(spark, landing, schema, carry=carry)
        assert reads == [], reads  # (the first run of a new schema creates its ledger: nothing to read)
        read, _ = ingest(spark, read_landing, read_schema)
        assert reads or number == 1  # a run without a carry reads the ledger
        assert (carried.landed, carried.rejected, carried.pending_end, carried.overall) == (
            read.landed,
            read.rejected,
            read.pending_end,
            read.overall,
        )
    write(landing / "src" / "0003.jsonl", cuts[2])
    write(read_landing / "src" / "0003.jsonl", cuts[2])
    with monkeypatch.context() as patch:
        _crash_at(patch, FILES)
        with pytest.raises(RuntimeError, match="simulated crash"):
            ingest(spark, landing, schema, carry=carry)
    assert carry.known is None
    reads.clear()
    summary, out = ingest(spark, landing, schema, carry=carry)
    assert "resuming an unfinished batch" in out and summary.batches == 1
    assert sorted(reads) == ["file_rows", "last_planned"]
    ingest(spark, read_landing, read_schema)

    def landed(name: str) -> dict[str, list]:
        def key(r: dict) -> tuple:
            return tuple(
                sorted(
                    (k, str(v).replace("read_landing", "landing"))
                    for k, v in r.items()
                    if k not in ("ingested_at", "updated_at", "done_at")
                )
            )

        return {
            table: sorted(map(key, rows(spark, name, table))) for table in (EVENTS, REJECTS, FRONTIER, FILES)
        }

    assert landed(schema) == landed(read_schema)


def test_cli_fails_with_one_clear_line(spark, tmp_path, capsys):
    assert cli.main(["--landing", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.strip().startswith("ingest: error: landing path not found")

    assert cli.main(["--landing", str(tmp_path), "--format", "avro"]) == 2
    assert "unknown format 'avro'" in capsys.readouterr().err

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "0001.jsonl.gz").write_bytes(b"this is not gzip")
    assert cli.main(["--landing", str(tmp_path), "--target-schema", "ingest_test_cli"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ingest: error: cannot read landing file") and "0001.jsonl.gz" in err
    assert len(err.splitlines()) == 1

    with pytest.raises(job.IngestError, match="format 'avro' is not available"):
        job.transform_for("avro")
    with pytest.raises(SystemExit) as help_exit:
        cli.parse_args(["--help"])
    assert help_exit.value.code == 0


class _ShuffledListing:
    """A Hadoop FileSystem whose listings come back in a shuffled order (as object stores and some
    file systems may return them); everything else goes to the real one. Records what it returned."""

    def __init__(self, fs, rng, returned: list[list[str]]):
        self._fs, self._rng, self.returned = fs, rng, returned

    def __getattr__(self, name):
        return getattr(self._fs, name)

    def _shuffled(self, statuses) -> list:
        found = list(statuses)
        self._rng.shuffle(found)
        self.returned.append([st.getPath().toString() for st in found])
        return found

    def listStatus(self, path):  # noqa: N802 (Hadoop's name)
        return self._shuffled(self._fs.listStatus(path))

    def listFiles(self, path, recursive):  # noqa: N802
        it, found = self._fs.listFiles(path, recursive), []
        while it.hasNext():
            found.append(it.next())
        return _Iterator(self._shuffled(found))


class _Iterator:
    def __init__(self, items):
        self._items = list(items)

    def hasNext(self):  # noqa: N802
        return bool(self._items)

    def next(self):
        return self._items.pop(0)


def test_a_landing_zone_listed_out_of_order_lands_as_if_listed_in_order(spark, landing, schema, monkeypatch):
    import random

    from python_jobs.ingest import landing as landing_module

    # One transaction split across three files, a second source, and a later file per source.
    (landing / "other").mkdir()
    write(landing / "src" / "0001.jsonl", FIXTURE_LINES[:5])
    write(landing / "src" / "0002.jsonl", FIXTURE_LINES[5:9])
    write(landing / "src" / "0003.jsonl", FIXTURE_LINES[9:])
    write(landing / "other" / "0001.jsonl", FIXTURE_LINES[:12])
    write(landing / "other" / "0002.jsonl", FIXTURE_LINES[12:])
    in_order = f"{schema}_in_order"
    in_order_summary, _ = ingest(spark, landing, in_order, max_files_per_batch=2)
    expected = _landed(spark, in_order)
    assert len(expected[EVENTS]) == 30

    original, rng, returned = landing_module._fs, random.Random(5), []

    def shuffled_fs(session, path):
        hpath, fs = original(session, path)
        return hpath, _ShuffledListing(fs, rng, returned)

    monkeypatch.setattr(landing_module, "_fs", shuffled_fs)
    summary, _ = ingest(spark, landing, schema, max_files_per_batch=2)
    assert any(len(names) > 1 and names != sorted(names) for names in returned), returned
    assert summary.balanced and summary.batches == in_order_summary.batches
    assert _landed(spark, schema) == expected


def test_a_backlog_lands_in_batches_of_bounded_size(spark, landing, schema):
    """A batch takes new files up to the byte limit (at least one, so a file larger than the limit
    lands alone); the landed rows are those of one unlimited batch."""
    for name in ("0001", "0002", "0003"):
        shutil.copy(FIXTURE, landing / "src" / f"{name}.jsonl")
    size = FIXTURE.stat().st_size
    files = [LandingFile("src", f"f{i}", s, 0) for i, s in enumerate([size, size, 3 * size, size])]
    assert [f.path for f in plan.within_bytes(files, 2 * size)] == ["f0", "f1"]
    assert [f.path for f in plan.within_bytes(files[2:], size)] == ["f2"]
    assert [f.path for f in plan.within_bytes(files, 10 * size)] == ["f0", "f1", "f2", "f3"]
    assert cli.parse_args(["--landing", "x"]).max_batch_size == plan.DEFAULT_MAX_BATCH_BYTES
    assert cli.parse_args(["--landing", "x", "--max-batch-size", "2g"]).max_batch_size == 2 * 2**30

    unlimited = f"{schema}_unlimited"
    one, _ = ingest(spark, landing, unlimited, max_bytes_per_batch=None)
    summary, out = ingest(spark, landing, schema, max_bytes_per_batch=2 * size)
    assert (one.batches, summary.batches) == (1, 2) and "batch 2: 1 files" in out
    assert summary.balanced and summary.landed == one.landed == 45
    assert _positions(spark, schema) == _positions(spark, unlimited)


def _one_transaction(files: int, changes_per_file: int) -> list[list[str]]:
    """One wal2json transaction (its ``B`` in the first file, its ``C`` in the last) of inserts into
    ``public.items``, cut into ``files`` files of the same size (the first and the last are larger by
    their ``B`` and ``C``, which are as long as each other)."""
    head = '"xid":900,"timestamp":"2026-11-21 23:24:38.5+00"'
    changes = [
        f'{{"action":"I",{head},"lsn":"0/{0x2000000 + n:X}","schema":"public","table":"items",'
        f'"columns":[{{"name":"id","type":"bigint","value":{1000 + n}}}],'
        f'"pk":[{{"name":"id","type":"bigint"}}]}}\n'
        for n in range(files * changes_per_file)
    ]
    ends = f'{head},"lsn":"0/3000000","nextlsn":"0/3000030"}}\n'
    parts = [changes[i * changes_per_file : (i + 1) * changes_per_file] for i in range(files)]
    parts[0].insert(0, '{"action":"B",' + ends)
    parts[-1].append('{"action":"C",' + ends)
    return parts


def test_a_transaction_over_many_files_is_read_again_in_growing_batches(spark, landing, schema):
    """A batch that reads pending tails again takes at least as many new bytes as it re-reads: a
    transaction over 4 files lands in 3 batches that read 1, 2 and 4 files, not 4 batches of 1 to 4
    files (a transaction over k files would be read k/2 times over)."""
    parts = _one_transaction(4, 40)
    for no, lines in enumerate(parts, 1):
        write(landing / "src" / f"{no:04d}.jsonl", lines)
    largest = max(path.stat().st_size for path in (landing / "src").iterdir())

    summary, out = ingest(spark, landing, schema, max_bytes_per_batch=largest)
    assert [int(n) for n in re.findall(r"^batch \d+: (\d+) files", out, re.M)] == [1, 2, 4], out
    assert summary.balanced and summary.landed == 160 and summary.pending_end == 0
    # each batch read again every line of the transaction that the batches before it had read
    assert summary.reread == sum(len(lines) for n in (1, 2) for lines in parts[:n])
    events = rows(spark, schema, EVENTS)
    assert {e["commit_lsn"] for e in events} == {0x3000000}
    assert sorted((e["commit_idx"], e["record_pk"]) for e in events) == [
        (n, json.dumps([str(1000 + n)])) for n in range(160)
    ]


def test_a_large_batch_uses_more_shuffle_partitions_for_itself_only(spark, landing, schema, monkeypatch):
    """A batch raises spark.sql.shuffle.partitions with its size (so a 10M-change batch does not put
    gigabytes in one task) and sets it back; the landed rows do not depend on the partitioning."""
    session_value = spark.conf.get("spark.sql.shuffle.partitions")

    def sized(*sizes: int) -> list[PlannedFile]:
        return [PlannedFile("src", f"f{i}", "wal2json", 1, size, None) for i, size in enumerate(sizes)]

    sizes = sized(10 * job.BATCH_PARTITION_BYTES + 1, job.BATCH_PARTITION_BYTES)
    assert job._batch_partitions(spark, sizes) == (session_value, max(int(session_value), 12))
    assert job._batch_partitions(spark, sized(10)) == (session_value, int(session_value))

    shutil.copy(FIXTURE, landing / "src" / "0001.jsonl")
    shutil.copy(FIXTURE, landing / "src" / "0002.jsonl")
    ingest(spark, landing, schema)
    expected = _positions(spark, schema)
    seen: list[str] = []
    real_load = job.load

    def spying_load(*args, **kwargs):
        seen.append(spark.conf.get("spark.sql.shuffle.partitions"))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(job, "load", spying_load)
    monkeypatch.setattr(job, "BATCH_PARTITION_BYTES", 2048)  # 2 x 16 kB of fixture: 17 partitions
    ingest(spark, landing, schema + "_many")
    assert len(seen) == 1 and int(seen[0]) == max(int(session_value), 17)
    assert spark.conf.get("spark.sql.shuffle.partitions") == session_value
    assert _positions(spark, schema + "_many") == expected


def test_a_small_wal2json_batch_runs_without_adaptive_execution(spark, landing, schema, monkeypatch):
    """A batch of a few megabytes of wal2json plans its stages once, with adaptive execution off, and
    puts the session's setting back; a larger batch, or one with a Debezium file, keeps it. The
    landed rows do not depend on it."""

    def planned(fmt: str, size: int) -> PlannedFile:
        return PlannedFile("src", f"f-{fmt}-{size}", fmt, 1, size, None)

    small, large = 2**20, job.STATIC_PLAN_BYTES + 1
    assert job._plans_statically([planned("wal2json", small), planned("wal2json", small)])
    assert not job._plans_statically([planned("wal2json", large)])
    assert not job._plans_statically([planned("wal2json", small), planned("debezium", small)])

    key = "spark.sql.adaptive.enabled"
    session_value = spark.conf.get(key)
    shutil.copy(FIXTURE, landing / "src" / "0001.jsonl")
    seen: list[str] = []
    real_load = job.load

    def spying_load(*args, **kwargs):
        seen.append(spark.conf.get(key))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(job, "load", spying_load)
    ingest(spark, landing, schema)
    assert seen == ["false"] and spark.conf.get(key) == session_value
    expected = _positions(spark, schema)

    monkeypatch.setattr(job, "STATIC_PLAN_BYTES", 0)  # the fixture is then too large to plan statically
    ingest(spark, landing, schema + "_adaptive")
    assert seen == ["false", session_value] and spark.conf.get(key) == session_value
    assert _positions(spark, schema + "_adaptive") == expected


def test_a_large_batch_holds_its_framing_as_checkpoints_and_lands_the_same_rows(
    spark, landing, schema, monkeypatch
):
    """A batch above ``CHECKPOINT_BYTES`` computes its framing rows and classified lines into local
    checkpoints instead of caches; what it lands, rejects and records in its ledger is the same."""
    # Complete transactions and a malformed line: events, a reject, control lines.
    write(landing / "src" / "0001.jsonl", [*FIXTURE_LINES[:11], "{oops\n", *FIXTURE_LINES[11:16]])
    checkpointed: list[int] = []
    real_checkpoint = job._checkpoint

    def counting_checkpoint(df):
        checkpointed.append(df.count())
        return real_checkpoint(df)

    monkeypatch.setattr(job, "_checkpoint", counting_checkpoint)
    cached, _ = ingest(spark, landing, schema)
    assert checkpointed == []  # a small batch caches
    expected = _landed(spark, schema)

    monkeypatch.setattr(job, "CHECKPOINT_BYTES", 0)
    summary, _ = ingest(spark, landing, schema + "_checkpointed")
    # The framing rows, then the classified lines: one row per line of the file each.
    assert checkpointed == [17, 17]
    assert summary.overall == cached.overall
    assert summary.landed > 0 and summary.rejected == 1
    assert _landed(spark, schema + "_checkpointed") == expected


def test_any_legal_path_lands(spark, tmp_path, schema):
    """Spark names a file URL-encoded (land%20ing, 50%25, a%23b) where the listing names it as it is:
    the lines must still be matched to their planned file, whatever the path holds."""
    root = tmp_path / "land ing"
    sources = ("50%", "a#b", "données", "sq[1]{x}")
    for source in sources:
        (root / source).mkdir(parents=True)
        write(root / source / "0001 a+b.jsonl", FIXTURE_LINES[:4])
    summary, _ = ingest(spark, root, schema)
    assert (summary.files, summary.landed, summary.control) == (4, 8, 8) and summary.balanced
    events = rows(spark, schema, EVENTS)
    assert sorted({e["landing_file"] for e in events}) == sorted(
        f"file:{root / source / '0001 a+b.jsonl'}" for source in sources
    )
    assert {e["source_id"] for e in events} == set(sources)


def test_a_file_read_in_blocks_keeps_every_line_once_with_its_number(spark, tmp_path):
    """Spark reads a large file in blocks, one task each: every line is read once (none lost or doubled
    at a block's edge) and keeps its 1-based number in its file; ``\\r\\n`` loses its ``\\r``, an empty
    line keeps its place, a trailing newline adds no line; a gzip file (one block) from its from_line."""
    from python_jobs.ingest.landing import read_lines

    texts = [f'{{"n": {i}, "pad": "{"x" * (i * 37 % 300)}"}}' for i in range(1, 400)]
    texts[10] = ""
    big = tmp_path / "big.jsonl"
    big.write_bytes(("\n".join(texts[:200]) + "\r\n" + "\n".join(texts[200:]) + "\n").encode())
    small = tmp_path / "small.jsonl.gz"
    small.write_bytes(gzip.compress("\n".join(texts[:50]).encode()))
    paths = [f"file:{big}", f"file:{small}"]
    plan_df = spark.createDataFrame(
        [(paths[0], 0, "a", "wal2json", 1), (paths[1], 1, "b", "wal2json", 7)],
        "landing_file string, file_no int, source_id string, source_format string, from_line bigint",
    )
    previous = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes", "4096")
    try:
        blocks = spark.read.text(paths).select("_metadata.file_block_start").distinct().count()
        read, counted = read_lines(spark, plan_df, paths)
        got = sorted((r.landing_file, r.landing_line, r.line) for r in read.collect())
    finally:
        spark.conf.set("spark.sql.files.maxPartitionBytes", previous)
    assert blocks > 10  # the big file was really split
    # every line of each file counted, from_line or not: what the batch's outcomes must reach
    assert counted == {paths[0]: len(texts), paths[1]: 50}
    expected = [(paths[0], n, text) for n, text in enumerate(texts, start=1)]
    expected += [(paths[1], n, text) for n, text in enumerate(texts[:50], start=1) if n >= 7]
    assert got == sorted(expected)


def test_a_file_with_bytes_but_no_line_read_is_not_marked_done(spark, tmp_path, schema, monkeypatch):
    from python_jobs.ingest import landing as landing_module

    root = tmp_path / "land ing"
    (root / "src").mkdir(parents=True)
    write(root / "src" / "0001.jsonl", FIXTURE_LINES[:4])
    # Lines that never meet their planned file (as Spark's URL-encoded names once did).
    monkeypatch.setattr(landing_module, "_landing_path", lambda url: landing_module.F.lit("elsewhere"))
    with pytest.raises(job.IngestError, match=r"0001.jsonl has \d+ bytes but no line of it was read"):
        ingest(spark, root, schema)
    assert rows(spark, schema, FILES) == [] and rows(spark, schema, EVENTS) == []


def test_a_late_middle_file_of_a_split_transaction_lands_every_change_once(spark, landing, schema):
    """File 1 ends inside a transaction, file 3 lands, file 2 (the middle) arrives later. What follows
    the gap waits, pending, until file 2 is there; then every change lands once at its position."""
    (landing / "other").mkdir()
    (landing / "replayed").mkdir()
    # src: file 3 starts with the tail of a transaction whose begin is in file 2.
    write(landing / "src" / "0001.jsonl", FIXTURE_LINES[:6])
    write(landing / "src" / "0003.jsonl", FIXTURE_LINES[14:])
    # other: file 3 starts with the begin of a transaction committed after the open one.
    write(landing / "other" / "0001.jsonl", FIXTURE_LINES[:6])
    write(landing / "other" / "0003.jsonl", FIXTURE_LINES[9:])
    # replayed: a restarted capture sends the open transaction again from its begin: no gap.
    write(landing / "replayed" / "0001.jsonl", FIXTURE_LINES[:6])
    write(landing / "replayed" / "0002.jsonl", FIXTURE_LINES[4:])
    first, _ = ingest(spark, landing, schema)
    assert first.balanced and first.rejected == 2  # the replayed source's interrupted begin and insert
    landed = rows(spark, schema, EVENTS)
    assert sorted((e["source_id"], e["xid"]) for e in landed if e["source_id"] != "replayed") == [
        ("other", 725),
        ("other", 725),
        ("src", 725),
        ("src", 725),
    ]
    assert (first.pending_end, frontier(spark, schema)) == (2 + 15 + 2 + 20, 0x152DAC8)
    assert ingest(spark, landing, schema)[0].batches == 0  # nothing new: the gap still waits

    write(landing / "src" / "0002.jsonl", FIXTURE_LINES[6:14])
    write(landing / "other" / "0002.jsonl", FIXTURE_LINES[6:9])
    second, _ = ingest(spark, landing, schema)
    assert second.balanced and (second.rejected, second.pending_end) == (0, 0)
    events = rows(spark, schema, EVENTS)
    whole = sorted(
        (e["commit_lsn"], e["commit_idx"], e["record_pk"]) for e in events if e["source_id"] == "replayed"
    )
    for source in ("src", "other"):
        assert (
            sorted(
                (e["commit_lsn"], e["commit_idx"], e["record_pk"]) for e in events if e["source_id"] == source
            )
            == whole
        )
    assert len(whole) == 15 and frontier(spark, schema) == LAST_COMMIT
    overall = totals(Ledger(spark, schema).file_rows())
    assert overall == {"landed": 45, "rejected": 2, "control": 42, "pending": 0, "lines": 89}


def test_a_landed_table_of_an_earlier_version_gains_the_columns_added_since(spark, landing, schema):
    from delta.tables import DeltaTable

    from python_jobs.ingest.ledger import SCHEMAS

    spark.sql(f"create schema {schema}")
    earlier = [f for f in SCHEMAS[EVENTS].fields if f.name != "old_identity"]
    DeltaTable.create(spark).tableName(f"{schema}.{EVENTS}").addColumns(earlier).execute()
    shutil.copy(FIXTURE, landing / "src" / "0001.jsonl")
    summary, _ = ingest(spark, landing, schema)
    assert summary.landed == 15
    events = rows(spark, schema, EVENTS)
    assert len(events) == 15 and all(e["old_identity"] is None and e["xid"] for e in events)


def test_the_ledger_creates_the_tables_it_misses_and_a_failed_creation_leaves_the_others(
    spark, schema, monkeypatch
):
    from python_jobs.ingest.ledger import SCHEMAS, STATS_COLUMNS

    def created() -> set[str]:
        return {r.tableName for r in spark.sql(f"show tables in {schema}").collect() if not r.isTemporary}

    # The session's temporary views (dbt's, in a suite) are listed beside any schema's tables.
    spark.range(1).createOrReplaceTempView("some_model__dbt_tmp")
    ledger = Ledger(spark, schema)
    assert ledger.ensure_tables() is True  # all created: the ledger is known to be empty
    assert created() == {*SCHEMAS, FRONTIER}  # the four tables and the frontier's view over wal_files
    for table, columns in STATS_COLUMNS.items():
        properties = {r.key: r.value for r in spark.sql(f"show tblproperties {schema}.{table}").collect()}
        assert properties["delta.dataSkippingStatsColumns"] == ",".join(columns)
    for table, fields in SCHEMAS.items():
        assert spark.table(f"{schema}.{table}").columns == [f.name for f in fields]

    spark.sql(f"drop table {schema}.{REJECTS}")
    spark.sql(f"drop table {schema}.{FILES}")
    original = Ledger._create

    def create(self, table):
        if table == REJECTS:  # the first of the two to create
            raise RuntimeError("metastore unavailable")
        original(self, table)

    monkeypatch.setattr(Ledger, "_create", create)
    with pytest.raises(RuntimeError, match="metastore unavailable"):
        ledger.ensure_tables()
    assert created() == {*SCHEMAS, FRONTIER} - {REJECTS}  # the other missing table was created all the same
    monkeypatch.setattr(Ledger, "_create", original)
    assert ledger.ensure_tables() is False  # some were there: the ledger must be read
    assert created() == {*SCHEMAS, FRONTIER}
    spark.catalog.dropTempView("some_model__dbt_tmp")


def test_a_ledger_dropped_beside_kept_events_numbers_its_batches_above_theirs(spark, landing, schema):
    # Only a ledger this run created from nothing is taken as empty without being read: with
    # wal_events kept, the next batch id must still come from the batches it holds, or Delta would
    # skip the new batch's events write as one it has already committed.
    shutil.copy(FIXTURE, landing / "src" / "0001.jsonl")
    ingest(spark, landing, schema)
    spark.sql(f"drop view {schema}.{FRONTIER}")
    for table in (REJECTS, FILES, BATCHES):
        spark.sql(f"drop table {schema}.{table}")
    summary, out = ingest(spark, landing, schema)
    assert "batch 2: 1 files, 29 lines" in out
    assert summary.landed == 15 and summary.balanced
    events = rows(spark, schema, EVENTS)
    assert sorted(e["batch_id"] for e in events) == [1] * 15 + [2] * 15


def test_events_are_counted_from_their_commit_unless_a_line_fails_its_full_parse(
    spark, landing, schema, monkeypatch
):
    counted_back = []
    original = Ledger.batch_events
    monkeypatch.setattr(Ledger, "batch_events", lambda self, b: counted_back.append(b) or original(self, b))
    last_commit = parse_lsn(json.loads(FIXTURE_LINES[8])["lsn"])

    # A clean batch: its events' own Delta commit says how many landed; wal_events is not read back.
    write(landing / "src" / "0001.jsonl", FIXTURE_LINES[:9])
    summary, _ = ingest(spark, landing, schema)
    assert counted_back == [] and (summary.landed, summary.control) == (5, 4) and summary.balanced
    history = spark.sql(f"describe history {schema}.{EVENTS} limit 1").first()
    assert history.userMetadata.startswith("wal_lake ingest batch 1, run ")
    assert frontier(spark, schema) == last_commit

    # A line that frames as an event but whose key is missing once parsed in full: fewer rows are
    # committed than the outcomes land, so the batch counts wal_events and finds the late reject.
    keyless = FIXTURE_LINES[1].replace('{"name":"id",', '{"name":"other",', 1)
    write(landing / "src" / "0002.jsonl", [FIXTURE_LINES[0], keyless, *FIXTURE_LINES[2:9]])
    summary, _ = ingest(spark, landing, schema)
    assert counted_back == [2] and (summary.landed, summary.rejected) == (4, 1) and summary.balanced
    [reject] = rows(spark, schema, REJECTS)
    assert (reject["landing_line"], reject["batch_id"]) == (2, 2) and "key" in reject["reason"]
    assert frontier(spark, schema) == last_commit


def test_a_plan_is_checked_by_its_own_commit_and_read_back_when_another_run_planned_the_batch(
    spark, schema, monkeypatch
):
    ours, theirs = Ledger(spark, schema), Ledger(spark, schema)
    ours.ensure_tables()
    read_back = []
    original = Ledger.plan_of
    monkeypatch.setattr(Ledger, "plan_of", lambda self, b: read_back.append(b) or original(self, b))
    planned = PlannedFile("src", "file:/a.jsonl", "wal2json", 1, 10, None)
    other = PlannedFile("src", "file:/b.jsonl", "wal2json", 1, 10, None)
    when = datetime(2026, 1, 1, tzinfo=UTC)

    plan.write_plan(ours, 1, when, [planned])  # this run's commit: nothing to read back
    assert read_back == []
    # Another run planning batch 1 again: Delta skips its append; the plan read back is not its own.
    with pytest.raises(job.IngestError, match="batch 1 was planned by another ingestion run"):
        plan.write_plan(theirs, 1, when, [other])
    assert read_back == [1]
    # The same plan written again (a run that planned it in the same way) passes, once read back.
    plan.write_plan(theirs, 1, when, [planned])
    assert read_back == [1, 1]
    assert len(rows(spark, schema, BATCHES)) == 1


@pytest.mark.postgres
def test_a_snapshot_split_over_files_lands_every_row_once(spark, postgres, tmp_path, schema):
    """The capture's snapshot of a table, split over many files (one ``B`` in the first, one ``C`` in
    the last): while only some of its files have landed, nothing of it lands (its transaction is
    open); once all have, every row lands once, at one commit position."""
    import psycopg

    from python_jobs import capture

    dsn = postgres.create_database("ingest_snapshot_split")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create table items (id bigint primary key, payload text)")
        conn.execute("insert into items select n, repeat('x', 200) || n from generate_series(1, 3000) n")
    landing = tmp_path / "landing"
    argv = ["--dsn", dsn, "--slot", "ingest_snapshot_split", "--landing", str(landing), "--source-id", "src"]
    argv += ["--once", "--snapshot", "--snapshot-file-mb", "0.1", "--quiet"]
    try:
        assert capture.main(argv) == 0
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("select pg_drop_replication_slot('ingest_snapshot_split')")
    # The snapshot's files. A stream file may follow them, holding one empty transaction: seen once in
    # CI while the suite's other worker was creating its database (a commit to the shared catalogs,
    # which a slot of any database may decode). It lands nothing and stays visible below.
    files = sorted(p for p in (landing / "src").glob("*.jsonl") if capture.is_snapshot_file(p.name))
    assert len(files) > 3
    later = files[len(files) // 2 :]
    for path in later:  # not landed yet: hidden names are skipped
        path.rename(path.with_name(f".{path.name}"))
    first, _ = ingest(spark, landing, schema)
    assert first.landed == 0 and first.pending_end > 0
    assert rows(spark, schema, EVENTS) == []

    for path in later:
        path.with_name(f".{path.name}").rename(path)
    second, _ = ingest(spark, landing, schema)
    assert second.landed == 3000 and second.pending_end == 0
    events = rows(spark, schema, EVENTS)
    assert len(events) == 3000
    assert len({e["commit_lsn"] for e in events}) == 1
    assert sorted(e["commit_idx"] for e in events) == list(range(3000))
    assert len({e["record_pk"] for e in events}) == 3000
    assert {e["landing_file"].rsplit("/", 1)[-1] for e in events} == {path.name for path in files}
