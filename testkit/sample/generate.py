"""The driver: one workload through each format's writer into its sink, then the manifest.

``manifest.json`` (at ``out``): ``{"seed", "transactions", "version", "sources": {source_id: {...}}}``
(``version``: ``SAMPLE_VERSION``, what the writers wrote) where
each source has ``format``, ``path``, ``files`` (names in order), ``lines`` (all lines written),
``changes_written`` (change lines, duplicates included), ``distinct_positions`` (changes once each),
``duplicate_change_lines``, ``control_lines`` (wal2json ``B``/``C``), ``malformed_lines`` and
``expected_rejects`` (copies of a malformed line count again), ``pending_lines`` (Debezium's
trailing transaction, which no later event proves complete), ``expected_state`` (path of
``_expected.json`` relative to ``out``), ``expected_rows`` per table and ``anomalies`` (which
file holds the split, the replay, the copy, the snapshot). For every source
``lines = changes_written + control_lines + malformed_lines``. The Debezium expected state is the
state before the trailing transaction, i.e. as of the frontier.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from python_jobs.lsn import format_lsn
from testkit.sample.debezium import DEBEZIUM, DebeziumFormat
from testkit.sample.model import Transaction
from testkit.sample.sink import Sink
from testkit.sample.wal2json import WAL2JSON, Wal2JsonFormat
from testkit.sample.workload import Workload

# What the writers write, as a number a landing zone's manifest records: 2 since the Debezium lines
# carry their Connect schemas (a sample of version 1 gets no Debezium mirrors).
SAMPLE_VERSION = 2

EXPECTED_STATE = "_expected.json"
MALFORMED_AT = (0.35, 0.65)  # where in the run, as fractions, each source gets malformed lines


@dataclass
class _Source:
    """One source folder: its format's writer, its sink, and what the manifest says of its end."""

    format: str
    writer: Wal2JsonFormat | DebeziumFormat
    sink: Sink
    expected_state: dict | None = None
    pending_lines: int = 0


def generate(
    out: Path,
    seed: int = 7,
    transactions: int = 80,
    formats: tuple[str, ...] = (WAL2JSON, DEBEZIUM),
    lines_per_file: int = 100,
    compress: bool = False,
    source_prefix: str = "shop",
    progress: bool = False,
) -> dict:
    """Write the landing zone under ``out`` and return the manifest (also ``out/manifest.json``)."""
    out.mkdir(parents=True, exist_ok=True)
    workload = Workload(seed, transactions)
    writers = {WAL2JSON: Wal2JsonFormat(), DEBEZIUM: DebeziumFormat(server=source_prefix)}
    sources = [
        _Source(f, writers[f], Sink(out / f"{source_prefix}_{f}", lines_per_file, compress)) for f in formats
    ]
    malformed_at = {int(transactions * f) for f in MALFORMED_AT}
    started = time.monotonic()
    for n, txn in enumerate(workload):
        for source in sources:
            _write_transaction(source, n, txn, workload, n in malformed_at)
        if progress and n and n % 100_000 == 0:
            rate = n / (time.monotonic() - started)
            print(f"  {n:,} / {transactions:,} transactions ({rate:,.0f}/s)", file=sys.stderr, flush=True)
    manifest: dict = {"seed": seed, "transactions": transactions, "version": SAMPLE_VERSION, "sources": {}}
    for source in sources:
        if source.format == WAL2JSON:
            source.expected_state = workload.model.expected_state()
        manifest["sources"][source.sink.folder.name] = _finish(source)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _write_transaction(
    source: _Source, n: int, txn: Transaction, workload: Workload, malformed: bool
) -> None:
    """Transaction ``n`` into one source: Debezium's begin with its snapshot, and its last stays pending."""
    if source.format == DEBEZIUM:
        if n < workload.seed_transactions:
            return  # before the connector's snapshot
        if n == workload.seed_transactions:
            _write_snapshot(source, txn, workload)
        if n == workload.transactions - 1:
            # Without an END marker, Debezium's trailing transaction stays pending (nothing after it
            # proves it complete), so its expected state is the one before that transaction.
            source.expected_state = workload.model.before(txn).expected_state()
    if malformed:
        source.sink.write_malformed(txn.changes[0].lsn, source.writer.malformed(txn))
    lines = source.writer.render(txn)
    source.sink.write_transaction(lines)
    if source.format == DEBEZIUM and n == workload.transactions - 1:
        source.pending_lines = len(lines)


def _write_snapshot(source: _Source, txn: Transaction, workload: Workload) -> None:
    """The connector's initial snapshot, read just before ``txn`` (already applied to the model)."""
    snapshot_lsn = txn.changes[0].lsn - 0x10
    state = workload.model.before(txn)
    source.sink.write_transaction(source.writer.snapshot(state, snapshot_lsn, txn.xid - 1, txn.commit_micros))
    source.sink.stats.anomalies["snapshot"] = f"initial snapshot at LSN {format_lsn(snapshot_lsn)}"


def _finish(source: _Source) -> dict:
    """Close the source's last file, write its expected state, and return its manifest entry."""
    sink, state = source.sink, source.expected_state
    sink.close()
    sink.stats.pending_lines = source.pending_lines
    _write_state(sink.folder / EXPECTED_STATE, state)
    s = sink.stats
    return {
        "format": source.format,
        "path": sink.folder.name,
        "files": sorted(s.files),
        "lines": s.lines,
        "changes_written": s.changes_written,
        "distinct_positions": s.distinct_positions,
        "duplicate_change_lines": s.duplicate_change_lines,
        "control_lines": s.control_lines,
        "malformed_lines": s.malformed_lines,
        "expected_rejects": s.malformed_lines,
        "pending_lines": s.pending_lines,
        "expected_state": f"{sink.folder.name}/{EXPECTED_STATE}",
        "expected_rows": {t: len(rows) for t, rows in state.items()},
        "anomalies": s.anomalies,
    }


def _write_state(path: Path, state: dict[str, list[dict]]) -> None:
    """One row per line: readable, and written by the C encoder (``indent`` is pure Python)."""
    with open(path, "w") as fh:
        fh.write("{\n")
        for n, (table, rows) in enumerate(state.items()):
            fh.write(f" {json.dumps(table)}: [")
            fh.write(",".join("\n  " + json.dumps(row) for row in rows))
            fh.write("\n ]" + ("," if n < len(state) - 1 else "") + "\n")
        fh.write("}\n")
