"""The wal2json framing against a line-by-line restatement of its rules, on sample landing zones cut
into files mid-transaction, with files missing (gaps, then landed late) and lines dropped, repeated,
broken or given another xid.

The framing (``wal2json_framing``) numbers transactions with windows per file and per-file
summaries, so that no task reads a whole source; the reference here walks each source's lines in
order, as the rules in docs/ingestion.md state them. Both start from the same per-line fields
(``parse_framing``); every line's (kind, reason) and every event's position must agree.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from test_ingest_wal2json import SCENARIOS, TWO_FILES

from python_jobs.ingest.changeset import (
    KIND_CONTROL,
    KIND_EVENT,
    KIND_PENDING,
    KIND_REJECT,
    LINES_SCHEMA,
    file_names,
    number_files,
)
from python_jobs.ingest.wal2json import STANDALONE_IDX, _classified
from python_jobs.ingest.wal2json_framing import (
    REASON_COMMIT_WITHOUT_BEGIN,
    REASON_INTERRUPTED,
    REASON_OUTSIDE,
    number_in_files,
)
from python_jobs.ingest.wal2json_records import CHANGE_CODES, CODE_BEGIN, CODE_COMMIT
from testkit.sample.generate import generate
from testkit.sample.wal2json import WAL2JSON


@dataclass(frozen=True)
class Line:
    """A line's framing fields, as ``parse_framing`` reads them."""

    file: str
    line: int
    code: str | None
    action: str | None
    xid: int | None
    lsn: int | None
    timestamp: datetime | None  # the line's own, parsed
    non_tx: bool
    error: str | None


def reference(lines: list[Line]) -> dict[tuple[str, int], tuple]:
    """One source's lines -> (file, line) -> (kind, reason, commit_lsn, commit_idx, commit_ts), the last
    three for events only (as the transform's outcomes give them), by walking the lines in order."""
    lines = sorted(lines, key=lambda x: (x.file, x.line))
    txn_of, txns = [], {}  # per line its transaction's number; per number its lines
    txn = 0
    for x in lines:
        txn += x.code == CODE_BEGIN
        txn_of.append(txn)
        txns.setdefault(txn, []).append(x)
    held = _held_from(lines)
    out, commits, changes = {}, Counter(), Counter()
    for x, t in zip(lines, txn_of, strict=True):
        members = txns[t]
        begin = next((m for m in members if m.code == CODE_BEGIN), None)
        commit = next((m for m in members if m.code == CODE_COMMIT), None)
        is_commit = x.code == CODE_COMMIT
        commits[t] += is_commit
        in_txn = t > 0 and (commits[t] == 0 or (is_commit and commits[t] == 1))
        changes[t] += in_txn and x.action in CHANGE_CODES and not x.non_tx
        if (held and (x.file, x.line) >= held[x.file]) or (t > 0 and t == txn and commit is None):
            kind, reason = KIND_PENDING, None
        else:
            reason = _reason(x, in_txn, begin, commit)
            kind = (
                KIND_REJECT
                if reason is not None
                else KIND_CONTROL
                if x.code in (CODE_BEGIN, CODE_COMMIT)
                else KIND_EVENT
            )
        position = (None, None, None)
        if kind == KIND_EVENT:  # a message decoded outside any transaction: at its own lsn
            lsn, idx = (x.lsn, STANDALONE_IDX) if x.non_tx else (commit.lsn, changes[t] - 1)
            position = (lsn, idx, commit.timestamp if commit else None)
        out[(x.file, x.line)] = (kind, reason, *position)
    return out


def _reason(x: Line, in_txn: bool, begin: Line | None, commit: Line | None) -> str | None:
    """Why a line that is not pending is rejected, in the order the rules are checked; None if it is not."""
    if x.error is not None:
        return x.error
    if x.non_tx:
        return None
    if not in_txn:
        return REASON_COMMIT_WITHOUT_BEGIN if x.code == CODE_COMMIT else REASON_OUTSIDE
    if commit is None:
        return REASON_INTERRUPTED
    begin_xid = begin.xid if begin else None
    if begin_xid != commit.xid:
        return f"xid mismatch: begin {_text(begin_xid)}, commit {_text(commit.xid)}"
    if x.code in CHANGE_CODES and None not in (x.xid, begin_xid) and x.xid != begin_xid:
        return f"xid mismatch: change xid {x.xid} inside transaction {begin_xid}"
    return None


def _text(xid: int | None) -> str:
    return "?" if xid is None else str(xid)


def _held_from(lines: list[Line]) -> dict[str, tuple[str, int]] | None:
    """Per file, the first (file, line) held back by a missing earlier file; None when none is."""
    by_file: dict[str, list[Line]] = {}
    for x in lines:  # in (file, line) order
        by_file.setdefault(x.file, []).append(x)
    files = sorted(by_file)
    gap = None
    open_at = None  # the last B or C before the file, when it is a B
    for f in files:
        mine = by_file[f]
        first = next((x for x in mine if x.code is not None), None)
        if first is not None:
            mid = first.code in (CODE_COMMIT, *CHANGE_CODES) and not first.non_tx
            if open_at is not None:
                goes_on = mid and first.xid is not None and first.xid == open_at.xid
                restarts = (first.code == CODE_BEGIN or first.non_tx) and (
                    first.lsn is not None and open_at.lsn is not None and first.lsn <= open_at.lsn
                )
                if not goes_on and not restarts:
                    gap = min(gap or (open_at.file, open_at.line), (open_at.file, open_at.line))
            elif mid:
                gap = min(gap or (f, 1), (f, 1))
        boundaries = [x for x in mine if x.code in (CODE_BEGIN, CODE_COMMIT)]
        if boundaries:
            open_at = boundaries[-1] if boundaries[-1].code == CODE_BEGIN else None
    if gap is None:
        return None
    return {f: (f, 1) if f > gap[0] else gap if f == gap[0] else (f, 1 << 62) for f in files}


def _cut(lines: list[str], rnd: random.Random, files: int) -> list[tuple[str, list[str]]]:
    cuts = sorted(rnd.sample(range(1, len(lines)), files - 1))
    bounds = zip([0, *cuts], [*cuts, len(lines)], strict=True)
    return [(f"f{n:03d}.jsonl", lines[a:b]) for n, (a, b) in enumerate(bounds)]


def _mutated(lines: list[str], rnd: random.Random, edits: int) -> list[str]:
    """``lines`` with lines dropped, repeated, broken, given another xid, a second commit or a
    heartbeat message decoded before them."""
    out = list(lines)
    for _ in range(edits):
        i = rnd.randrange(len(out))
        try:
            record = json.loads(out[i])
        except json.JSONDecodeError:
            continue
        edit = rnd.randrange(6)
        if edit == 0:
            del out[i]
        elif edit == 1 and "xid" in record:
            out[i] = json.dumps({**record, "xid": record["xid"] + 1})
        elif edit == 2:
            heartbeat = {"action": "M", "transactional": False, "prefix": "hb", "content": ""}
            out.insert(i, json.dumps({**heartbeat, "lsn": record.get("lsn", "0/1")}))
        elif edit == 3:
            out.insert(i, out[i])
        elif edit == 4:
            out[i] = out[i][:20]
        elif edit == 5 and record.get("action") == CODE_COMMIT:
            out.insert(i + 1, out[i])
    return out


def _zones(tmp: Path) -> dict[str, list[tuple[str, list[str]]]]:
    """source -> its files (name, lines): the transform's scenarios, then sample zones of three seeds
    as written (files end between transactions), cut anew inside transactions, with files missing,
    and mutated."""
    zones = {name: [("file-1.jsonl", lines)] for name, lines in SCENARIOS.items()}
    zones |= {name: [(f"file-{n}.jsonl", f) for n, f in enumerate(fs, 1)] for name, fs in TWO_FILES.items()}
    rnd = random.Random(5)
    for seed in (3, 7, 11):
        generate(tmp / str(seed), seed=seed, transactions=200, formats=(WAL2JSON,), lines_per_file=37)
        folder = next(p for p in (tmp / str(seed)).iterdir() if p.is_dir())
        files = [(p.name, p.read_text().splitlines()) for p in sorted(folder.glob("*.jsonl"))]
        zones[f"s{seed}"] = files
        every_line = [line for _, lines in files for line in lines]
        cut = _cut(every_line, rnd, 12)
        zones[f"s{seed}_cut"] = cut
        zones[f"s{seed}_gap"] = cut[:3] + cut[4:]
        zones[f"s{seed}_gaps"] = cut[:5] + cut[7:9] + cut[10:]
        for m in range(3):
            edited = _cut(_mutated(every_line, rnd, 25), rnd, 12)
            zones[f"s{seed}_edited{m}"] = edited[:6] + edited[7:] if m % 2 else edited
    return zones


@pytest.fixture(scope="module")
def framed(spark, tmp_path_factory):
    """(the framing's outcome, the reference's), per (source, file, line)."""
    zones = _zones(tmp_path_factory.mktemp("framing"))
    rows = [
        (source, name, n, line)
        for source, files in zones.items()
        for name, lines in files
        for n, line in enumerate(lines, start=1)
    ]
    lines = number_files(spark.createDataFrame(rows, LINES_SCHEMA))
    files = file_names(lines).cache()
    numbered = number_in_files(lines).cache()
    classified = _classified(numbered, files)
    fields = (
        numbered.join(files, on="file_no")
        .select(
            "source_id",
            "landing_file",
            "landing_line",
            "code",
            "r.action",
            "xid_value",
            "lsn_value",
            # A transaction's commit time comes parsed with its position: the reference parses it alike.
            F.try_to_timestamp(F.col("r.timestamp")).alias("timestamp"),
            "non_tx_message",
            "line_error",
        )
        .collect()
    )
    by_source: dict[str, list[Line]] = {}
    for r in fields:
        by_source.setdefault(r[0], []).append(Line(*r[1:]))
    expected = {
        (source, *key): value
        for source, lines in by_source.items()
        for key, value in reference(lines).items()
    }
    got = {
        (r[0], r[1], r[2]): tuple(r[3:])
        for r in classified.select(
            "source_id",
            "landing_file",
            "landing_line",
            "kind",
            "reason",
            "commit_lsn",
            "commit_idx",
            "commit_ts",
        ).collect()
    }
    numbered.unpersist()
    files.unpersist()
    return got, expected


def test_every_line_is_framed_as_the_rules_walked_in_order_frame_it(framed):
    got, expected = framed
    assert got.keys() == expected.keys()
    differ = [(key, got[key], expected[key]) for key in sorted(got) if got[key] != expected[key]]
    assert differ == [], f"{len(differ)} lines differ, the first: {differ[:5]}"


def test_the_zones_hold_every_outcome_the_framing_decides(framed):
    """The comparison above is only as good as the cases it meets: every kind and every reason the
    framing gives, events of transactions split across files, and lines held by a gap."""
    _, expected = framed
    kinds = Counter(v[0] for v in expected.values())
    reasons = {v[1].split(":")[0] for v in expected.values() if v[1]}
    assert all(kinds[k] > 0 for k in (KIND_EVENT, KIND_REJECT, KIND_CONTROL, KIND_PENDING)), kinds
    assert {REASON_OUTSIDE, REASON_COMMIT_WITHOUT_BEGIN, REASON_INTERRUPTED, "xid mismatch"} <= reasons
    held = {source for (source, _, _), v in expected.items() if v[0] == KIND_PENDING and "_gap" in source}
    assert len(held) >= 3
    files_of_commit: dict[tuple[str, int], set[str]] = {}
    for (source, file, _), v in expected.items():
        if v[0] == KIND_EVENT and v[3] != STANDALONE_IDX:
            files_of_commit.setdefault((source, v[2]), set()).add(file)
    assert sum(len(files) > 1 for files in files_of_commit.values()) >= 20
