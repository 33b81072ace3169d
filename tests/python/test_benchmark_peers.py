"""The benchmark's generator is deterministic and its hand-written PySpark peer computes the same
state as a pure-Python replay of a tiny generated zone. No timings here: the figures come from
``python -m benchmarks.run`` (BENCHMARKS.md), which also checks the peers' row counts against wal_lake."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from benchmarks import generate as gen
from benchmarks import peer_pyspark

KNOBS = gen.Knobs(
    changes=600,
    tables=2,
    keys=60,
    touches_per_txn=4,
    lines_per_file=300,
    replay_ratio=0.5,
    key_move_ratio=0.2,
)


def _digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*.jsonl"))
    }


def test_generator_is_deterministic(tmp_path):
    a = gen.generate(tmp_path / "a", KNOBS, progress=False)
    gen.generate(tmp_path / "b", KNOBS, progress=False)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    assert a.copies and a.deletes and a.omitted and a.key_moves and a.changes == KNOBS.changes
    c = gen.generate(tmp_path / "c", gen.Knobs(**{**KNOBS.__dict__, "seed": KNOBS.seed + 1}), progress=False)
    assert _digest(tmp_path / "c") != _digest(tmp_path / "a")
    assert c.changes == a.changes


def _replay(zone: gen.Zone) -> dict[tuple, dict]:
    """The zone's final state in pure Python: files in name order, each change once (by its LSNs)."""
    seen: set[tuple[str, str]] = set()
    state: dict[tuple, dict] = {}
    pending: list[dict] = []
    for path in zone.history_files():
        for line in Path(path).read_text().splitlines():
            rec = json.loads(line, parse_float=str, parse_int=str)
            if rec["action"] != "C":
                pending += [rec] if rec["action"] in "IUD" else []
                continue
            for ch in pending:
                if (rec["lsn"], ch["lsn"]) in seen:
                    continue
                seen.add((rec["lsn"], ch["lsn"]))
                values = {c["name"]: c["value"] for c in ch.get("columns") or ch["identity"]}
                key = (ch["schema"], ch["table"], json.dumps([values["id"]]))
                if ch["action"] == "D":
                    state.pop(key, None)
                else:
                    # An update's identity holds the old key: a key move carries the row over.
                    old = [c["value"] for c in ch.get("identity") or []]
                    state[key] = {**state.pop((*key[:2], json.dumps(old)), {}), **values}
            pending = []
    return state


def test_peer_pyspark_state_equals_replay(spark, tmp_path):
    """The peer's flattening (delete wins, omitted columns kept, replays once) on a tiny zone. The
    benchmark itself checks the peer's row count against wal_lake's consumer_records."""
    zone = gen.generate(tmp_path / "zone", KNOBS, progress=False)
    log = peer_pyspark.change_log(spark, zone.history_files())
    assert log.count() == zone.changes
    peer = {
        (r.schema, r.table, r.record_pk): dict(r.record) for r in peer_pyspark.current_state(log).collect()
    }
    expected = _replay(zone)
    assert len(expected) == zone.live
    assert peer == expected
