"""Bad input through the whole ingestion job: each line ends landed or rejected with a reason, the
accounting identity holds, and text is stored as data, never executed. (Malformed JSON, unknown
actions, missing LSN or xid, a commit without a begin and interrupted transactions are covered in
test_ingest_wal2json.py and test_ingest_job.py.)"""

from __future__ import annotations

import io
import json
from pathlib import Path

from python_jobs.ingest import job
from python_jobs.ingest.ledger import EVENTS, REJECTS

HOSTILE = "a'b\"c`d;e'); DROP TABLE wal_events; --"


def _txn(xid: int, lsn: int, changes: list[dict]) -> list[str]:
    def at(n: int) -> str:
        return f"0/{n:X}"

    lines = [{"action": "B", "xid": xid, "lsn": at(lsn), "timestamp": "2026-01-01 00:00:00+00"}]
    for i, change in enumerate(changes):
        lines.append({"xid": xid, "lsn": at(lsn + i + 1), **change})
    lines.append({"action": "C", "xid": xid, "lsn": at(lsn + 100), "timestamp": "2026-01-01 00:00:00+00"})
    return [json.dumps(line) + "\n" for line in lines]


def _insert(schema: str, table: str, key: str, value: str) -> dict:
    return {
        "action": "I",
        "schema": schema,
        "table": table,
        "columns": [
            {"name": key, "type": "text", "value": "k1"},
            {"name": "v", "type": "text", "value": value},
        ],
        "pk": [{"name": key, "type": "text"}],
    }


def _run(spark, landing: Path, schema: str) -> job.RunSummary:
    summary = job.run(spark, str(landing), schema=schema, out=io.StringIO())
    assert summary.balanced, summary.line()
    return summary


def test_bad_inputs_are_landed_verbatim_or_rejected_with_a_reason(spark, tmp_path):
    src = tmp_path / "landing" / "src"
    src.mkdir(parents=True)
    schema = "bad_input_test"
    huge = "x" * 5_000_000
    (src / "0001.jsonl").write_bytes(b"")  # an empty file: nothing to land, no error
    (src / "0002.jsonl").write_text(
        "".join(
            _txn(10, 0x100, [_insert(HOSTILE, HOSTILE, HOSTILE, HOSTILE)])
            + _txn(11, 0x300, [_insert("public", "big", "id", huge)])
        )
    )
    # Bytes that are not UTF-8 inside a change, then a line cut off mid-JSON inside a transaction.
    bad = _txn(12, 0x500, [_insert("public", "t", "id", "PLACEHOLDER")])
    raw = "".join(bad).encode().replace(b"PLACEHOLDER", b"caf\xe9 \xff")
    truncated = "".join(_txn(13, 0x700, [_insert("public", "t", "id", "ok")]))
    cut = truncated.splitlines(keepends=True)
    cut[1] = cut[1][:25] + "\n"
    (src / "0003.jsonl").write_bytes(raw + "".join(cut).encode())

    summary = _run(spark, tmp_path / "landing", schema)
    assert summary.files == 3 and summary.lines_read == 12
    events = {
        (e["source_table"], e["landing_line"]): e
        for e in (r.asDict() for r in spark.table(f"{schema}.{EVENTS}").collect())
    }
    rejects = [r.asDict() for r in spark.table(f"{schema}.{REJECTS}").collect()]

    hostile = events[(HOSTILE, 2)]
    assert hostile["source_schema"] == HOSTILE
    assert hostile["record"] == {HOSTILE: "k1", "v": HOSTILE}
    assert hostile["key_columns"] == [HOSTILE]
    assert len(events[("big", 5)]["record"]["v"]) == len(huge)
    # The table named in the SQL text still exists and holds every landed change.
    assert spark.table(f"{schema}.{EVENTS}").count() == summary.landed

    # Undecodable bytes: Spark reads the text as UTF-8 with replacement characters; the change lands
    # with them (its other columns intact) rather than being dropped.
    assert events[("t", 2)]["record"]["v"].startswith("caf")
    # The cut line is rejected with its reason and its raw text, and its transaction's other lines are
    # accounted for (the identity above).
    assert [
        (r["landing_line"], r["reason"]) for r in rejects if r["landing_file"].endswith("0003.jsonl")
    ] == [(5, "malformed JSON")]
    assert rejects[0]["raw_line"] == cut[1].rstrip("\n")
