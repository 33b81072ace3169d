"""Re-snapshot one table while the stream runs (``--resnapshot``): the capture side, checked on the
landing zone (its replay by the oracle equals ``select * from t``).

The watcher's rules are checked on hand-written lines first (no server); the live tests reuse the
helpers of test_capture.py.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest
from test_capture import (
    PROJECT_DIR,
    assert_replay_matches,
    fresh_database,
    landed_files,
    landed_lines,
    run_capture,
    slot_name,
    source_id,
)

from python_jobs.capture.resnapshot import PREFIX, STATE_FILE, Chunk, Resnapshot, Watcher
from python_jobs.capture.session import CaptureError
from python_jobs.capture.snapshot import TableShape
from testkit.soak import wait_until_released

SLOT = "s"
ITEMS = "create table items (id bigint primary key, v text, n integer)"


# --- the watcher, on hand-written lines -------------------------------------------------------------


def _message(xid: int, lsn: str, content: dict, slot: str = SLOT) -> list[str]:
    body = json.dumps({"slot": slot, **content})
    head = f'"xid":{xid},"timestamp":"2026-11-27 10:00:00+00","lsn":"{lsn}"'
    return [
        '{"action":"B",' + head + "}",
        '{"action":"M",'
        + head
        + ',"transactional":true,"prefix":"'
        + PREFIX
        + '","content":'
        + json.dumps(body)
        + "}",
        '{"action":"C",' + head + "}",
    ]


def _change(action: str, xid: int, key: int, old_key: int | None = None, table: str = "items") -> list[str]:
    head = f'"xid":{xid},"timestamp":"2026-11-27 10:00:00+00","lsn":"0/{xid:X}"'
    columns = f'"columns":[{{"name":"id","type":"bigint","value":{key}}}]'
    identity = (
        f',"identity":[{{"name":"id","type":"bigint","value":{old_key}}}]' if old_key is not None else ""
    )
    body = columns if action != "D" else f'"identity":[{{"name":"id","type":"bigint","value":{key}}}]'
    change = (
        f'{{"action":"{action}",{head},"schema":"public","table":"{table}",{body}{identity},'
        '"pk":[{"name":"id","type":"bigint"}]}'
    )
    return ['{"action":"B",' + head + "}", change, '{"action":"C",' + head + "}"]


def _chunk(keys: list[int]) -> Chunk:
    shape = TableShape("public", "items", [("id", "bigint", 20)], [("id", "bigint")])
    chunk = Chunk("run1", 1, shape)
    for key in keys:
        chunk.lines.append(
            '{"action":"R","xid":0,"lsn":"0/0","schema":"public","table":"items",'
            f'"columns":[{{"name":"id","type":"bigint","value":{key}}}],"pk":[{{"name":"id","type":"bigint"}}]}}'
        )
        chunk.keys.append((str(key),))
    return chunk


def test_watcher_drops_the_rows_the_stream_changed_between_the_watermarks():
    """Keys inserted, updated, deleted or moved (old and new key) between the low and the high
    watermark are left to the stream; a change before the low watermark, of another table or after
    the high one drops nothing; the rows kept land inside the high watermark's transaction, after its
    message, with its xid and position."""
    watcher = Watcher(SLOT)
    watcher.chunk = _chunk([1, 2, 3, 4, 5, 6, 7, 8])
    lines = (
        _change("U", 10, 1)  # before the low watermark: the read is newer
        + _message(11, "0/B0", {"kind": "low", "run": "run1", "chunk": 1})
        + _change("I", 12, 2)
        + _change("U", 13, 4, old_key=3)  # a key move touches both keys
        + _change("D", 14, 5)
        + _change("U", 15, 6, table="others")
        + _message(16, "0/F0", {"kind": "high", "run": "run1", "chunk": 1})
        + _change("D", 17, 7)  # after the high watermark: lands after the read
    )
    out = watcher(lines)
    reads = [json.loads(line) for line in out if line.startswith('{"action":"R"')]
    assert [r["columns"][0]["value"] for r in reads] == [1, 6, 7, 8]
    assert {(r["xid"], r["lsn"]) for r in reads} == {(16, "0/F0")}
    high = out.index(lines[lines.index(_message(16, "0/F0", {"kind": "high", "run": "run1", "chunk": 1})[1])])
    assert [json.loads(line)["action"] for line in out[high : high + 6]] == ["M", "R", "R", "R", "R", "C"]
    assert watcher.chunk.landed == 4 and watcher.chunk.dropped == 4
    assert len(out) == len(lines) + 4


def test_watcher_drops_a_chunk_truncated_between_its_watermarks_and_ignores_other_runs_and_slots():
    watcher = Watcher(SLOT)
    watcher.chunk = _chunk([1, 2])
    truncate = '{"action":"T","xid":12,"lsn":"0/C","schema":"public","table":"items"}'
    lines = (
        _message(11, "0/B0", {"kind": "low", "run": "run1", "chunk": 1})
        + ['{"action":"B","xid":12,"lsn":"0/C"}', truncate, '{"action":"C","xid":12,"lsn":"0/C"}']
        + _message(13, "0/D0", {"kind": "high", "run": "old-run", "chunk": 1})  # a stopped run's
        + _message(14, "0/E0", {"kind": "high", "run": "run1", "chunk": 1}, slot="another")
        + _message(15, "0/F0", {"kind": "high", "run": "run1", "chunk": 1})
    )
    out = watcher(lines)
    assert out == lines and watcher.chunk.landed == 0


def test_watcher_adds_a_truncate_after_each_reset_of_its_slot_only():
    """Every reset message of this slot, replays included, gets the same ``T`` line; another slot's
    reset is left alone (it resets that capture's landing zone, not this one's)."""
    watcher = Watcher(SLOT)
    reset = _message(20, "0/A0", {"kind": "reset", "schema": "public", "table": "items"})
    other = _message(21, "0/B0", {"kind": "reset", "schema": "public", "table": "items"}, slot="x")
    out = watcher(reset + other)
    first = watcher(reset)
    assert out[:4] == first and out[4:] == other
    truncate = json.loads(out[2])
    assert truncate == {
        "action": "T",
        "xid": 20,
        "timestamp": "2026-11-27 10:00:00+00",
        "lsn": "0/A0",
        "schema": "public",
        "table": "items",
        "resnapshot": True,
    }


# --- live -------------------------------------------------------------------------------------------


def _records(files: list[Path]) -> list[dict]:
    return [json.loads(line) for line in landed_lines(files)]


def _resets(records: list[dict], table: str = "items") -> list[dict]:
    return [r for r in records if r["action"] == "T" and r.get("resnapshot") and r["table"] == table]


def _churn(dsn: str, stop: threading.Event, seed: int, errors: list) -> None:
    """Inserts, updates, deletes and key changes of ``items`` until ``stop``, a few rows a transaction."""
    rng = random.Random(seed)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not stop.is_set():
                with conn.transaction():
                    for _ in range(rng.randint(1, 4)):
                        key = rng.randint(1, 1400)
                        op = rng.random()
                        if op < 0.3:
                            conn.execute(
                                "insert into items values (%s, %s, %s) on conflict (id) do nothing",
                                (key, f"new {key}", rng.randint(0, 9)),
                            )
                        elif op < 0.6:
                            conn.execute("update items set v = v || '+', n = n + 1 where id = %s", (key,))
                        elif op < 0.8:
                            conn.execute("delete from items where id = %s", (key,))
                        else:
                            conn.execute(
                                "update items set id = %s where id = %s and not exists "
                                "(select 1 from items where id = %s)",
                                (key + 1000, key, key + 1000),
                            )
                time.sleep(0.002)
    except BaseException as exc:  # surfaced by the test
        errors.append(exc)


def _fill(dsn: str, rows: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(ITEMS)
        conn.execute(
            "insert into items select n, 'row ' || n, n %% 10 from generate_series(1, %s) n", (rows,)
        )
        conn.execute("analyze items")


def _race_each_high_watermark(monkeypatch, dsn: str) -> list[int]:
    """Before each high watermark, another session changes rows of the chunk just read (an update, a
    delete, a key move): the read is older than those changes, which the stream holds. The keys
    changed are returned."""
    changed: list[int] = []
    real_emit = Resnapshot.emit

    def emit(self, content: dict) -> None:
        if content["kind"] == "high" and self.watcher.chunk is not None:
            first = 40 * (content["chunk"] - 1)
            with psycopg.connect(dsn, autocommit=True) as other:
                for key, sql_text in [
                    (first + 3, "update items set v = 'raced' where id = %s"),
                    (first + 5, "delete from items where id = %s"),
                    (first + 7, "update items set id = id + 5000 where id = %s"),
                ]:
                    other.execute(sql_text, (key,))
                    changed.append(key)
        real_emit(self, content)

    monkeypatch.setattr(Resnapshot, "emit", emit)
    return changed


@pytest.mark.postgres
def test_resnapshot_under_concurrent_changes_equals_the_table(postgres, tmp_path, monkeypatch):
    """The slot is created after the table was filled, so the landing zone lacks its rows; a
    re-snapshot in chunks of 40 while another session inserts, updates, deletes and moves keys
    restores them: the replay equals the table, one reset. Each chunk also races a change of its own
    rows between the read and its high watermark (without the rule that drops them, the replay
    differs)."""
    dsn = fresh_database(postgres, "resnap")
    _fill(dsn, 600)
    raced = _race_each_high_watermark(monkeypatch, dsn)
    assert run_capture(dsn, tmp_path, "--once") == 0  # creates the slot: the 600 rows are not landed
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("update items set v = 'before' where id <= 5")
    stop, errors = threading.Event(), []
    writer = threading.Thread(target=_churn, args=(dsn, stop, 1, errors))
    writer.start()
    try:
        time.sleep(0.2)
        args = ("--once", "--resnapshot", "public.items", "--resnapshot-chunk-rows", "40")
        assert run_capture(dsn, tmp_path, *args) == 0
    finally:
        stop.set()
        writer.join()
    assert errors == []
    assert run_capture(dsn, tmp_path, "--once") == 0
    source = tmp_path / source_id(dsn)
    records = _records(landed_files(tmp_path, source.name))
    assert len(_resets(records)) == 1
    reads = [r for r in records if r["action"] == "R"]
    assert len(reads) > 500 and len(raced) > 30
    assert not (source / STATE_FILE).exists()
    assert_replay_matches(dsn, landed_lines(landed_files(tmp_path, source.name)))


@pytest.mark.postgres
def test_resnapshot_refuses_a_table_without_a_key_or_with_identity_nothing(postgres, tmp_path, capsys):
    dsn = fresh_database(postgres, "resnap_refuse")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create table logs (at text, line text)")
        conn.execute("create table quiet (id int primary key)")
        conn.execute("alter table quiet replica identity nothing")
    assert run_capture(dsn, tmp_path, "--once") == 0
    capsys.readouterr()
    for table, expected in [
        ("public.logs", "--resnapshot public.logs: the table has no primary key"),
        ("public.quiet", "--resnapshot public.quiet: the table has REPLICA IDENTITY NOTHING"),
        ("public.nope", "--resnapshot public.nope: no such table"),
        ("nope", "--resnapshot 'nope': give the table as schema.table"),
    ]:
        assert run_capture(dsn, tmp_path, "--once", "--resnapshot", table) == 1
        assert expected in capsys.readouterr().err
    source = tmp_path / source_id(dsn)
    assert not (source / STATE_FILE).exists(), "a refused table leaves nothing to resume"
    assert not _resets(_records(landed_files(tmp_path, source.name)), "logs")

    # An unfinished re-snapshot whose table is gone stops the run, naming the state file.
    source.mkdir(parents=True, exist_ok=True)
    entry = {"table": "public.gone", "reset_lsn": "0/1", "after": ["7"], "chunks": 1, "rows": 7}
    (source / STATE_FILE).write_text(json.dumps({"slot": slot_name(dsn), "queue": [entry]}))
    assert run_capture(dsn, tmp_path, "--once") == 1
    err = capsys.readouterr().err
    assert f"an unfinished re-snapshot in {source / STATE_FILE} cannot go on" in err
    assert "--resnapshot public.gone: no such table" in err


def test_a_table_name_with_dots_spaces_and_quotes_is_given_in_double_quotes():
    from python_jobs.capture.resnapshot import parse_table

    assert parse_table("public.items") == ("public", "items")
    assert parse_table('"Sales Dept"."Order.Lines"') == ("Sales Dept", "Order.Lines")
    assert parse_table('app."Qty ""x"""') == ("app", 'Qty "x"')
    assert parse_table("public.Orders") == ("public", "Orders")  # as stored: no case folding
    for wrong in ("items", "a.b.c", "a.", '"a.b', 'a.""', "a..b"):
        with pytest.raises(CaptureError, match="give the table as schema.table"):
            parse_table(wrong)


@pytest.mark.postgres
def test_resnapshot_of_a_table_whose_names_hold_dots_spaces_and_quotes(postgres, tmp_path):
    """Fails first: any name with a dot was refused."""
    dsn = fresh_database(postgres, "resnap_names")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute('create schema "Sales Dept"')
        conn.execute('create table "Sales Dept"."Order.Lines" ("Order Id" int primary key, "Qty ""x""" int)')
        conn.execute('insert into "Sales Dept"."Order.Lines" select n, n * 2 from generate_series(1, 30) n')
    assert run_capture(dsn, tmp_path, "--once") == 0  # the slot is created after the rows
    args = ("--once", "--resnapshot", '"Sales Dept"."Order.Lines"', "--resnapshot-chunk-rows", "8")
    assert run_capture(dsn, tmp_path, *args) == 0
    source = tmp_path / source_id(dsn)
    records = [r for r in _records(landed_files(tmp_path, source.name)) if r.get("schema") == "Sales Dept"]
    assert len(_resets(records, "Order.Lines")) == 1
    reads = {
        tuple(c["value"] for c in r["columns"])
        for r in records
        if r["action"] == "R" and r["table"] == "Order.Lines"
    }
    assert reads == {(n, n * 2) for n in range(1, 31)}
    assert not (source / STATE_FILE).exists()


@pytest.mark.postgres
def test_a_killed_resnapshot_resumes_without_a_second_reset(postgres, tmp_path):
    """Killed (-9) after some chunks landed, the rerun (without --resnapshot) goes on after the last
    chunk it recorded: one reset in all, the chunks numbered on from where it stopped, and the replay
    equals the table."""
    dsn = fresh_database(postgres, "resnap_kill")
    _fill(dsn, 3000)
    assert run_capture(dsn, tmp_path, "--once") == 0
    source = tmp_path / source_id(dsn)
    state = source / STATE_FILE
    command = [sys.executable, "-m", "python_jobs.capture", "--dsn", dsn, "--slot", slot_name(dsn)]
    command += ["--landing", str(tmp_path), "--once", "--quiet"]
    command += ["--resnapshot", "public.items", "--resnapshot-chunk-rows", "20"]
    child = subprocess.Popen(command, cwd=PROJECT_DIR)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if state.exists() and json.loads(state.read_text())["queue"][0]["chunks"] >= 3:
                break
            time.sleep(0.01)
        child.send_signal(signal.SIGSTOP)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    # Until the server notices the killed client, its backend still holds the slot.
    wait_until_released(dsn, slot_name(dsn))
    killed_at = json.loads(state.read_text())["queue"][0]
    assert 3 <= killed_at["chunks"] < 150 and killed_at["reset_lsn"], killed_at
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("update items set v = 'meanwhile' where id % 7 = 0")
        conn.execute("delete from items where id % 11 = 0")
        conn.execute("update items set id = id + 10000 where id % 13 = 0")
    assert run_capture(dsn, tmp_path, "--once", "--resnapshot-chunk-rows", "500") == 0
    assert not state.exists()
    records = _records(landed_files(tmp_path, source.name))
    assert len(_resets(records)) == 1, "resumed, not started over"
    highs = [
        json.loads(r["content"])
        for r in records
        if r["action"] == "M" and r.get("prefix") == PREFIX and json.loads(r["content"])["kind"] == "high"
    ]
    runs = list(dict.fromkeys(h["run"] for h in highs))
    assert len(runs) == 2
    resumed = [h["chunk"] for h in highs if h["run"] == runs[1]]
    assert resumed[0] == killed_at["chunks"] + 1
    assert_replay_matches(dsn, landed_lines(landed_files(tmp_path, source.name)))


@pytest.mark.postgres
def test_resnapshot_when_following(postgres, tmp_path):
    """Following (no --once), the re-snapshot runs first, then the job follows: a change made after
    it still lands, after the reads."""
    dsn = fresh_database(postgres, "resnap_follow")
    _fill(dsn, 120)
    assert run_capture(dsn, tmp_path, "--once") == 0
    source = tmp_path / source_id(dsn)
    stop = threading.Event()
    follower = threading.Thread(
        target=run_capture,
        args=(dsn, tmp_path, "--poll-interval", "0.05", "--resnapshot", "public.items"),
        kwargs={"stop": stop},
    )
    follower.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            records = _records(landed_files(tmp_path, source.name))
            if sum(r["action"] == "R" for r in records) == 120:
                break
            time.sleep(0.05)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("update items set v = 'after' where id = 1")
        while time.monotonic() < deadline:
            records = _records(landed_files(tmp_path, source.name))
            if any(r["action"] == "U" for r in records):
                break
            time.sleep(0.05)
    finally:
        stop.set()
        follower.join()
    assert len(_resets(records)) == 1 and sum(r["action"] == "R" for r in records) == 120
    assert not (source / STATE_FILE).exists()
    assert_replay_matches(dsn, landed_lines(landed_files(tmp_path, source.name)))
