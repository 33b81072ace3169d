"""The comparisons of a faulted run's dumps with the reference's, and the summary of them all.

After every round the faulted warehouse must equal the reference, table by table and row for row
(``compare``: every row missing counts as lost, every row too many as duplicated). After the whole
landing zone is replayed under new names (``check_replay``): the models and audit tables equal the
reference's; the raw tables' rows of the reference's batches equal the reference's; the later
batches hold only copies of landed events from replayed files, and every replayed line is
accounted for (landed, rejected, control, or pending behind a transaction not yet proven complete).
``Report`` gathers the kills, the runs at once and the comparisons into one summary line.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

from testkit.faults.pipeline import RAW_SCHEMA
from testkit.faults.plan import Kill


@dataclass
class Report:
    kills: list[Kill] = field(default_factory=list)
    concurrent_exit_codes: list[int] = field(default_factory=list)
    concurrent_errors: list[str] = field(default_factory=list)
    comparisons: list[str] = field(default_factory=list)  # "<phase>: equal" or the differences
    rows_lost: int = 0
    rows_duplicated: int = 0
    rows_compared: int = 0
    replayed_lines: int = 0

    @property
    def injected(self) -> int:
        return sum(k.happened for k in self.kills)

    @property
    def ok(self) -> bool:
        return (
            self.rows_lost == 0
            and self.rows_duplicated == 0
            and all(c.endswith(": equal") for c in self.comparisons)
        )

    def line(self) -> str:
        verdict = "ok" if self.ok else "FAILED"
        return (
            f"faults: {self.injected} kills injected ({len(self.kills) - self.injected} runs ended "
            f"before their kill point), 2 concurrent runs (exit codes {self.concurrent_exit_codes}), "
            f"{self.replayed_lines:,} lines replayed; {len(self.comparisons)} comparisons of "
            f"{self.rows_compared:,} rows: {self.rows_lost} lost, {self.rows_duplicated} duplicated "
            f"[{verdict}]"
        )


def compare(phase: str, expected: dict[str, list[str]], found: dict[str, list[str]], report: Report) -> None:
    """Row-for-row comparison of two dumps; counts rows lost and rows duplicated."""
    differences = []
    for table in sorted(expected):
        want, got = Counter(expected[table]), Counter(found.get(table, []))
        lost, extra = sum((want - got).values()), sum((got - want).values())
        report.rows_compared += len(expected[table])
        report.rows_lost += lost
        report.rows_duplicated += extra
        if lost or extra:
            sample = next(iter((want - got) or (got - want)))
            differences.append(f"{table}: {lost} lost, {extra} extra (e.g. {sample[:200]})")
    report.comparisons.append(f"{phase}: " + ("; ".join(differences) if differences else "equal"))


def _is_replay(row: dict) -> bool:
    return "/replay/" in row.get("landing_file", "")


def check_replay(
    phase: str, expected: dict[str, list[str]], found: dict[str, list[str]], report: Report
) -> None:
    """After replaying every file the models (and audit tables) must equal the reference; the raw
    tables' rows of the reference's batches must equal the reference's, row for row; later batches
    (the replay's) may hold only copies of landed events from replayed files, each replayed line
    accounted for (landed, rejected, control, or pending behind a transaction not yet proven
    complete)."""
    raw = {t for t in expected if t.startswith(f"{RAW_SCHEMA}.")}
    models = {t: v for t, v in expected.items() if t not in raw}
    compare(f"{phase}: the models", models, {t: found[t] for t in models}, report)

    problems = []
    batches = {json.loads(r)["batch_id"] for r in expected[f"{RAW_SCHEMA}.wal_batches"]}
    rows = {t: [(text, json.loads(text)) for text in found[t]] for t in raw}
    kept = {t: [text for text, r in rows[t] if r["batch_id"] in batches] for t in raw}
    before = Report()
    compare("raw rows of the reference's batches", {t: expected[t] for t in raw}, kept, before)
    if not before.comparisons[-1].endswith(": equal"):
        problems.append(before.comparisons[-1])
        report.rows_lost += before.rows_lost
        report.rows_duplicated += before.rows_duplicated
    report.rows_compared += before.rows_compared
    later = {t: [r for _, r in rows[t] if r["batch_id"] not in batches] for t in raw}

    def payload(row: dict) -> str:
        return json.dumps(
            {k: v for k, v in row.items() if k not in ("landing_file", "landing_line", "batch_id")}
        )

    events = f"{RAW_SCHEMA}.wal_events"
    known = {payload(json.loads(r)) for r in expected[events]}
    copies = later[events]
    invented = [r for r in copies if not _is_replay(r) or payload(r) not in known]
    if invented:
        problems.append(f"{len(invented)} events of the replay's batches are not copies of landed ones")
        report.rows_duplicated += len(invented)
    stray = [r for r in later[f"{RAW_SCHEMA}.wal_rejects"] if not _is_replay(r)]
    if stray:
        problems.append(f"{len(stray)} rejects of the replay's batches are not from replayed files")
        report.rows_duplicated += len(stray)
    accounted = {"landed": 0, "rejected": 0, "control": 0, "pending": 0, "lines": 0}
    last: dict[str, dict] = {}
    for row in later[f"{RAW_SCHEMA}.wal_files"]:
        if not _is_replay(row):
            # An earlier file's pending tail, read again: still waiting for its transaction's end.
            if row["landed"] or row["rejected"]:
                problems.append(f"{row['landing_file']} landed rows again in batch {row['batch_id']}")
            continue
        accounted["landed"] += row["landed"]
        if row["batch_id"] >= last.get(row["landing_file"], {}).get("batch_id", -1):
            last[row["landing_file"]] = row
    for row in last.values():
        for key in ("rejected", "control", "pending"):
            accounted[key] += row[key]
        accounted["lines"] += row["to_line"]
    if accounted["landed"] != len(copies):
        problems.append(
            f"wal_files counts {accounted['landed']} replayed events landed, wal_events holds {len(copies)}"
        )
    if accounted["lines"] != report.replayed_lines:
        problems.append(f"{accounted['lines']} of {report.replayed_lines} replayed lines were read")
        report.rows_lost += report.replayed_lines - accounted["lines"]
    verdict = "equal" if not problems else "; ".join(problems)
    report.comparisons.append(
        f"{phase}: raw tables keep the reference's batches, {len(copies):,} replayed events landed as "
        f"copies, {accounted['pending']:,} lines pending behind an unfinished transaction: {verdict}"
    )
