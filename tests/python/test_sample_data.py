"""The sample landing zone: deterministic, self-consistent, and its expected state is what the WAL says.

No Spark here: the wal2json files are replayed in pure Python, independently of the generator's own
model, and the result must equal the expected state the generator wrote.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from testkit import sample

SOURCE_W2J = "shop_wal2json"
SOURCE_DBZ = "shop_debezium"


@pytest.fixture(scope="module")
def zone(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("landing")
    sample.main(["--out", str(out), "--seed", "11", "--transactions", "120", "--format", "both"])
    return out


def _read_lines(folder: Path) -> list[tuple[str, str]]:
    """(file name, line) for every line of a source, files in name order (= WAL order)."""
    lines = []
    for path in sorted(p for p in folder.iterdir() if p.name.endswith((".jsonl", ".jsonl.gz"))):
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt") as fh:
            lines.extend((path.name, line.rstrip("\n")) for line in fh)
    return lines


def _parse(line: str):
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        return None


def _typed(column: dict):
    """A wal2json value as to_jsonb gives it: timestamptz in ISO form, the rest as JSON parses it."""
    value = column["value"]
    if column["type"] == "timestamp with time zone" and value is not None:
        return value.replace(" ", "T", 1) + ":00"
    return value


def replay_wal2json(folder: Path) -> tuple[dict, dict]:
    """Apply each committed transaction once, in file order; returns (state, counts)."""
    tables: dict[str, dict[tuple, dict]] = {}
    seen_commits: set[int] = set()
    positions: set[tuple[str, int]] = set()
    counts = {"lines": 0, "control": 0, "changes": 0, "malformed": 0}
    buffer: list[dict] = []
    for _, line in _read_lines(folder):
        counts["lines"] += 1
        rec = _parse(line)
        if rec is None:
            counts["malformed"] += 1
            continue
        if rec["action"] == "B":
            counts["control"] += 1
            buffer = []
            continue
        if rec["action"] != "C":
            counts["changes"] += 1
            buffer.append(rec)
            continue
        counts["control"] += 1
        if rec["lsn"] in seen_commits:  # a replayed or copied transaction
            continue
        seen_commits.add(rec["lsn"])
        for idx, change in enumerate(buffer):
            positions.add((rec["lsn"], idx))
            rows = tables.setdefault(f"{change['schema']}.{change['table']}", {})
            if change["action"] == "T":
                rows.clear()
                continue
            pk = [c["name"] for c in change["pk"]]
            old_key = None
            if "identity" in change:
                old = {c["name"]: c["value"] for c in change["identity"]}
                old_key = tuple(old[c] for c in pk)
            if change["action"] == "D":
                del rows[old_key]
                continue
            new = {c["name"]: _typed(c) for c in change["columns"]}
            previous = rows.pop(old_key) if change["action"] == "U" else {}
            rows[tuple(new[c] for c in pk)] = {**previous, **new}  # an unsent column keeps its value
    counts["distinct_positions"] = len(positions)
    return tables, counts


def _by_key(rows: list[dict], key: list[str]) -> dict[tuple, dict]:
    return {tuple(r[c] for c in key): r for r in rows}


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    args = ["--seed", "3", "--transactions", "40", "--format", "both", "--lines-per-file", "60"]
    sample.main(["--out", str(tmp_path / "a"), *args])
    sample.main(["--out", str(tmp_path / "b"), *args])
    sample.main(["--out", str(tmp_path / "c"), *args[:1], "4", *args[2:]])

    def contents(root: Path) -> dict[str, bytes]:
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}

    assert contents(tmp_path / "a") == contents(tmp_path / "b")
    assert contents(tmp_path / "a") != contents(tmp_path / "c")


def test_expected_state_equals_replaying_the_wal2json_changes(zone):
    replayed, _ = replay_wal2json(zone / SOURCE_W2J)
    expected = json.loads((zone / SOURCE_W2J / sample.EXPECTED_STATE).read_text())
    assert set(expected) == {"public.customers", "public.orders", "public.order_items"}
    for table, rows in expected.items():
        key = sample.TABLES[table.split(".")[1]][1]
        assert rows, f"{table} ends empty: the sample would not test much"
        assert _by_key(rows, key) == replayed.get(table, {}), table


def test_expected_state_has_the_fixture_value_forms(zone):
    customers = json.loads((zone / SOURCE_W2J / sample.EXPECTED_STATE).read_text())["public.customers"]
    row = customers[0]
    assert list(row) == ["id", "bio", "name", "email", "updated_at"]  # jsonb key order
    assert row["updated_at"].endswith("+00:00") and "T" in row["updated_at"]
    orders = json.loads((zone / SOURCE_W2J / sample.EXPECTED_STATE).read_text())["public.orders"]
    assert all(isinstance(o["total"], float) for o in orders)


def test_manifest_counts_add_up(zone):
    manifest = json.loads((zone / "manifest.json").read_text())
    w2j, dbz = manifest["sources"][SOURCE_W2J], manifest["sources"][SOURCE_DBZ]
    _, counts = replay_wal2json(zone / SOURCE_W2J)
    assert (
        w2j["lines"]
        == counts["lines"]
        == w2j["changes_written"] + w2j["control_lines"] + w2j["malformed_lines"]
    )
    assert w2j["changes_written"] == counts["changes"]
    assert w2j["control_lines"] == counts["control"]
    assert w2j["malformed_lines"] == counts["malformed"] == w2j["expected_rejects"] >= 2
    assert w2j["distinct_positions"] == counts["distinct_positions"]
    assert w2j["changes_written"] == w2j["distinct_positions"] + w2j["duplicate_change_lines"]
    assert w2j["duplicate_change_lines"] > 0
    assert set(w2j["anomalies"]) >= {"split_transaction", "replayed_transactions", "copied_file"}
    assert sorted(w2j["files"]) == w2j["files"]

    dbz_lines = _read_lines(zone / SOURCE_DBZ)
    malformed = sum(_parse(line) is None for _, line in dbz_lines)
    assert dbz["lines"] == len(dbz_lines) == dbz["changes_written"] + dbz["malformed_lines"]
    assert dbz["malformed_lines"] == malformed == dbz["expected_rejects"]
    assert dbz["control_lines"] == 0 and dbz["pending_lines"] > 0
    assert set(dbz["anomalies"]) >= {"snapshot", "split_transaction", "replayed_transactions", "copied_file"}
    for source in (w2j, dbz):
        assert (zone / source["expected_state"]).is_file()


def test_the_workload_holds_every_special_case(zone):
    records = [r for _, line in _read_lines(zone / SOURCE_W2J) if (r := _parse(line)) and "table" in r]
    actions = {r["action"] for r in records}
    assert actions == {"I", "U", "D", "T"}
    unsent_bio = [
        r
        for r in records
        if r["action"] == "U" and r["table"] == "customers" and "bio" not in {c["name"] for c in r["columns"]}
    ]
    assert unsent_bio, "an update that leaves the TOASTed bio out"
    key_changes = [
        r
        for r in records
        if r["action"] == "U"
        and r["columns"][0]["value"] != r["identity"][0]["value"]
        and r["table"] == "customers"
    ]
    assert key_changes, "a primary-key change"
    by_xid: dict[int, list[dict]] = {}
    for r in records:
        by_xid.setdefault(r["xid"], []).append(r)
    touched_then_deleted = [
        rs
        for rs in by_xid.values()
        if len([r for r in rs if r["table"] == "customers"]) >= 3 and rs[-1]["action"] == "D"
    ]
    assert touched_then_deleted, "several touches of one row in one transaction ending in a delete"

    dbz = [json.loads(line) for _, line in _read_lines(zone / SOURCE_DBZ) if _parse(line)]
    # Key and value in the schema wrapper, the value's schema naming each column's Connect type.
    assert all(set(d["value"]) == {"schema", "payload"} for d in dbz)
    assert all(d["key"] is None or set(d["key"]) == {"schema", "payload"} for d in dbz)
    values = [d["value"]["payload"] for d in dbz]
    assert {v["op"] for v in values} == {"r", "c", "u", "d", "t"}
    orders = next(d["value"]["schema"] for d in dbz if d["value"]["payload"]["source"]["table"] == "orders")
    after = {f["field"]: f for f in next(f for f in orders["fields"] if f["field"] == "after")["fields"]}
    assert after["total"]["parameters"]["__debezium.source.column.length"] == "12"
    assert after["placed_at"]["name"] == "io.debezium.time.ZonedTimestamp"
    assert any(
        v["after"] and v["after"].get("bio") == sample.DBZ_UNAVAILABLE for v in values if v["op"] == "u"
    )
    snapshot_flags = [v["source"]["snapshot"] for v in values if v["op"] == "r"]
    assert snapshot_flags[0] == "first" and snapshot_flags[-1] == "last"


def test_gzip_and_rotation(tmp_path):
    sample.main(
        ["--out", str(tmp_path), "--seed", "5", "--transactions", "30", "--format", "wal2json", "--gzip"]
        + ["--lines-per-file", "40"]
    )
    files = sorted(p.name for p in (tmp_path / SOURCE_W2J).glob("*.jsonl.gz"))
    assert len(files) >= 4
    replayed, _ = replay_wal2json(tmp_path / SOURCE_W2J)
    expected = json.loads((tmp_path / SOURCE_W2J / sample.EXPECTED_STATE).read_text())
    for table, rows in expected.items():
        assert _by_key(rows, sample.TABLES[table.split(".")[1]][1]) == replayed.get(table, {})
