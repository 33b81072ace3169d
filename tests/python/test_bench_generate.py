"""The benchmark's expected counts cannot drift from the lines it writes: a plain Python replay of a
small generated zone (key moves, deletes, TOAST-omitted columns, replayed files, the held-back
increments) finds exactly the live records ``Zone`` promises. No Spark: the row-count checks of
``python -m benchmarks.run`` compare wal_lake and its peers against these same counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import generate as gen

KNOBS = gen.Knobs(
    changes=3000,
    tables=3,
    keys=300,
    touches_per_txn=4,
    lines_per_file=500,
    replay_ratio=0.3,
    key_move_ratio=0.15,
    holdback=200,
)


class Replay:
    """The state of every record, applying each change once (by its commit and change LSN), in file
    name order; asserts the changes are what Postgres could have sent for that state."""

    def __init__(self) -> None:
        self.seen: set[tuple[str, str]] = set()
        self.state: dict[tuple[str, int], dict] = {}
        self.moves = 0
        self.moves_without_doc = 0

    def apply_files(self, files: list[str]) -> None:
        pending: list[dict] = []
        for path in sorted(files, key=lambda p: Path(p).name):
            for line in Path(path).read_text().splitlines():
                rec = json.loads(line, parse_float=str)
                if rec["action"] in "IUD":
                    pending.append(rec)
                elif rec["action"] == "C":
                    for ch in pending:
                        if (rec["lsn"], ch["lsn"]) not in self.seen:
                            self.seen.add((rec["lsn"], ch["lsn"]))
                            self._apply(ch)
                    pending = []
        assert not pending, "a transaction without its commit"

    def _apply(self, ch: dict) -> None:
        assert ch["pk"] == [{"name": "id", "type": "bigint"}]
        table = ch["table"]
        if ch["action"] == "I":
            values = {c["name"]: c["value"] for c in ch["columns"]}
            key = (table, values["id"])
            assert key not in self.state, f"insert of a live key {key}"
            self.state[key] = values
            return
        (old,) = ch["identity"]
        old_key = (table, old["value"])
        assert old_key in self.state, f"{ch['action']} of a key not live {old_key}"
        if ch["action"] == "D":
            del self.state[old_key]
            return
        values = {c["name"]: c["value"] for c in ch["columns"]}
        new_key = (table, values["id"])
        if new_key != old_key:
            assert new_key not in self.state, f"a move onto a live key {new_key}"
            self.moves += 1
            self.moves_without_doc += "doc" not in values
        # Columns the update left out keep the row's values, across a move too.
        self.state[new_key] = {**self.state.pop(old_key), **values}


@pytest.mark.parametrize(
    ("wide", "increments"), [(False, 1), (True, 1), (False, 2)], ids=["narrow", "wide", "two-increments"]
)
def test_zone_live_matches_a_replay_of_its_lines(tmp_path, wide, increments):
    knobs = gen.Knobs(**{**KNOBS.__dict__, "wide": wide, "increments": increments})
    zone = gen.generate(tmp_path / "zone", knobs, progress=False)
    assert zone.copies and zone.deletes and zone.omitted
    assert zone.key_moves >= 20, "the zone is meant to exercise key moves"
    assert zone.increment_changes == KNOBS.holdback
    assert len(zone.increments) == increments

    history_lines = sum(len(Path(p).read_text().splitlines()) for p in zone.history_files())
    assert history_lines == zone.lines - zone.held_back_lines  # what the raw parse must count

    replay = Replay()
    replay.apply_files(zone.history_files())
    assert len(replay.seen) == zone.changes - increments * zone.increment_changes
    assert len(replay.state) == zone.live_before_increment

    # Each increment lands after the one before it (its files sort after theirs), changes of its own.
    for n in range(1, increments + 1):
        released = gen.release_increment(zone, n)
        assert sorted(zone.landed_files())[-len(released) :] == sorted(released)
        replay.apply_files(zone.landed_files())
        assert len(replay.seen) == zone.changes - (increments - n) * zone.increment_changes
        assert len(replay.state) == zone.live_after_increments[n - 1]
        assert set(zone.history_files()).isdisjoint(released)
    assert replay.moves == zone.key_moves
    assert replay.moves_without_doc, "a move that leaves the TOASTed column out carries it from the old key"
    assert set(replay.state) == zone.live_records
    assert len(replay.state) == zone.live
    # Every live record has every column: the insert sent them all, later touches carried them.
    columns = {name for name, _ in (gen.WIDE_COLUMNS if wide else gen.COLUMNS)}
    assert all(set(row) == columns for row in replay.state.values())


def test_wide_rows():
    """40 columns of the five types plus the TOAST-able text, about 2 KB of values per row."""
    assert len(gen.WIDE_COLUMNS) == 40
    assert {kind for _, kind in gen.WIDE_COLUMNS} == {
        "bigint",
        "text",
        "integer",
        "numeric",
        "timestamp with time zone",
        "boolean",
    }


def test_wide_row_size(tmp_path):
    zone = gen.generate(
        tmp_path / "zone",
        gen.Knobs(changes=200, keys=50, tables=1, wide=True, replay_ratio=0),
        progress=False,
    )
    inserts = [
        json.loads(line)
        for path in zone.files
        for line in Path(path).read_text().splitlines()
        if line.startswith('{"action":"I"')
    ]
    assert inserts
    for rec in inserts:
        assert len(rec["columns"]) == 40
        size = sum(len(str(c["value"])) for c in rec["columns"])
        assert 1900 <= size <= 2200, size


def test_duckdb_peer_moves_rows_like_the_replay(tmp_path):
    """The DuckDB peer's state on a zone with key moves (chains, omitted columns) equals the replay's."""
    pytest.importorskip("duckdb")
    from benchmarks import peer_duckdb

    knobs = gen.Knobs(**{**KNOBS.__dict__, "holdback": 0})
    zone = gen.generate(tmp_path / "zone", knobs, progress=False)
    out = tmp_path / "duckdb"
    out.mkdir()
    result = peer_duckdb.run(zone.history_files(), str(out), threads=1, memory_limit="1GB")
    replay = Replay()
    replay.apply_files(zone.history_files())
    assert result.log_rows == zone.changes
    assert result.state_rows == zone.live
    state = {(t, json.loads(k)[0]): r for _, t, k, r in peer_duckdb.state_rows(str(out))}
    assert set(state) == {(t, str(k)) for t, k in replay.state}
    # DuckDB reads numbers as doubles: compare the texts it keeps whole.
    for (table, key), row in replay.state.items():
        got = state[(table, str(key))]
        assert (got["id"], got["doc"], got["name"]) == (str(row["id"]), row["doc"], row["name"])
