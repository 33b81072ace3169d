"""``python -m python_jobs.status``: how far each source has come, read from the tables alone.

Per source: the greatest ``seq`` numbered in ``sequin_events``; the newest change visible in
``consumer_records`` and in the source's typed mirrors (its ``seq``, commit LSN and commit time); the
frontier (``wal_frontier``: everything at or below it has landed); the lines waiting in
``pending`` (a transaction whose commit has not landed yet); the rejected lines and the
``sequin_violations``.

"Visible" is exact, deletes included: ``consumer_records`` and each mirror stamp the ``seq`` they
applied up to on their own Delta commit (``macros/stamp_consumed_seq.sql``), and the newest change
visible of a source is its ``sequin_events`` row with the greatest ``seq`` at or below that stamp.
A source whose visible commit LSN equals its frontier, with nothing pending, has every landed change
built; how far the source database itself has moved on since, only the capture knows (the follower's
status line: ``python -m python_jobs.follow``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from python_jobs.ingest.ledger import DEFAULT_SCHEMA as DEFAULT_RAW_SCHEMA
from python_jobs.lsn import format_lsn

STAMP_PREFIX = "wal_lake.consumed_seq="


@dataclass(frozen=True)
class Position:
    """One change of ``sequin_events``: where a table has got to."""

    seq: int
    commit_lsn: int
    committed_at: datetime | None

    def as_json(self) -> dict:
        return {
            "seq": self.seq,
            "commit_lsn": format_lsn(self.commit_lsn),
            "committed_at": _iso(self.committed_at),
        }


@dataclass(frozen=True)
class SourceStatus:
    source_id: str
    last_seq: int | None  # the greatest seq sequin_events numbered for the source
    consumer_records: Position | None  # the newest change visible in consumer_records
    mirrors: Position | None  # the newest change visible in every one of the source's mirrors
    mirror_count: int
    frontier_lsn: int | None
    pending: int  # lines waiting for their transaction's commit (wal_files, each file's latest)
    rejects: int
    violations: int | None  # None: sequin_violations not built

    def as_json(self) -> dict:
        data = asdict(self)
        data["consumer_records"] = self.consumer_records.as_json() if self.consumer_records else None
        data["mirrors"] = self.mirrors.as_json() if self.mirrors else None
        data["frontier_lsn"] = format_lsn(self.frontier_lsn) if self.frontier_lsn is not None else None
        return data

    @property
    def built(self) -> bool:
        """Every landed change of the source is visible in consumer_records."""
        seen = self.consumer_records.commit_lsn if self.consumer_records else None
        return self.pending == 0 and (self.frontier_lsn is None or seen == self.frontier_lsn)


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:  # Spark returns the session's time zone (UTC) as naive datetimes
        value = value.replace(tzinfo=UTC)
    return value.isoformat().replace("+00:00", "Z")


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _exists(spark, name: str) -> bool:
    return bool(spark.catalog.tableExists(name))


def consumed_seq(spark, relation: str) -> int | None:
    """The seq a consumer model (consumer_records, a mirror) applied up to: the stamp on its latest
    stamped Delta commit among the last 50 (as ``macros/consumer_stamp.sql`` reads it); None when it
    has none."""
    if not _exists(spark, relation):
        return None
    history = spark.sql(f"describe history {relation} limit 50").select("version", "userMetadata").collect()
    for row in sorted(history, key=lambda r: r.version, reverse=True):
        metadata = row.userMetadata or ""
        if metadata.startswith(STAMP_PREFIX):
            return int(metadata.removeprefix(STAMP_PREFIX).split(",", 1)[0])
    return None


def _per_source(spark, table: str, sql: str) -> dict[str, tuple]:
    if not _exists(spark, table):
        return {}
    return {row[0]: tuple(row[1:]) for row in spark.sql(sql).collect()}


def _mirror_stamps(spark, schema: str) -> dict[str, list[int]]:
    """Per source, the seq each of its mirrors applied up to (0 for a mirror not built yet)."""
    catalog = _per_source(
        spark,
        f"{schema}.mirror_tables",
        f"select source_id, collect_set(mirror_relation) from {schema}.mirror_tables group by source_id",
    )
    relations = sorted({r for (names,) in catalog.values() for r in names})
    with ThreadPoolExecutor(max_workers=min(8, len(relations) or 1)) as pool:
        stamps = dict(zip(relations, pool.map(lambda r: consumed_seq(spark, r) or 0, relations), strict=True))
    return {source: [stamps[r] for r in sorted(names)] for source, (names,) in catalog.items()}


@dataclass(frozen=True)
class LedgerFigures:
    """Per source, what the ingestion ledger's tables say, as a process that is their one writer
    knows it without reading them (the follower: ``python_jobs.ingest.job.Carry``)."""

    frontier: dict[str, int | None]  # the frontier (wal_frontier's latest)
    pending: dict[str, int]  # lines pending (each file's latest wal_files row)
    rejects: dict[str, int]  # lines rejected (wal_rejects' rows)


def source_status(
    spark,
    raw_schema: str,
    schema: str,
    ledger: LedgerFigures | None = None,
    since: list[SourceStatus] | None = None,
) -> list[SourceStatus]:
    """Every source the warehouse knows (landed or numbered), in source_id order.

    The reads that do not depend on one another run at once, in threads: each is a short Spark job
    that mostly waits (on Delta's log, on scheduling), so together they take about the time of the
    longest. Then one pass over sequin_events, which needs the stamps they read.

    ``ledger``: the ledger's figures when the caller knows them (its three tables are then not
    read). ``since``: an earlier status of the same warehouse; the pass over sequin_events then
    reads each source's changes above the seq that status had seen visible, and reads them all
    again only when that finds less than the earlier status had."""
    raw, audit = raw_schema, f"{schema}_audit"
    reads = {
        "frontier": lambda: _per_source(
            spark,
            f"{raw}.wal_frontier",
            f"select source_id, max_by(frontier_lsn, batch_id) from {raw}.wal_frontier group by source_id",
        ),
        "pending": lambda: _per_source(
            spark,
            f"{raw}.wal_files",
            f"""select latest.source_id, sum(latest.pending) from (
                    select max_by(struct(source_id, pending), batch_id) as latest
                    from {raw}.wal_files group by landing_file
                ) group by latest.source_id""",
        ),
        "rejects": lambda: _per_source(
            spark,
            f"{raw}.wal_rejects",
            f"select source_id, count(*) from {raw}.wal_rejects group by source_id",
        ),
        "violations": lambda: (
            _exists(spark, f"{audit}.sequin_violations"),
            _per_source(
                spark,
                f"{audit}.sequin_violations",
                f"select source_id, count(*) from {audit}.sequin_violations group by source_id",
            ),
        ),
        "consumer_seq": lambda: consumed_seq(spark, f"{schema}.consumer_records"),
        "mirror_stamps": lambda: _mirror_stamps(spark, schema),
    }
    if ledger is not None:
        for name in ("frontier", "pending", "rejects"):
            del reads[name]
    with ThreadPoolExecutor(max_workers=len(reads)) as pool:
        futures = {name: pool.submit(read) for name, read in reads.items()}
        read = {name: future.result() for name, future in futures.items()}
    if ledger is not None:
        read["frontier"] = {source: (lsn,) for source, lsn in ledger.frontier.items()}
        read["pending"] = {source: (n,) for source, n in ledger.pending.items()}
        read["rejects"] = {source: (n,) for source, n in ledger.rejects.items() if n}
    frontier, pending, rejects = read["frontier"], read["pending"], read["rejects"]
    violations_built, violations = read["violations"]
    consumer_seq, mirror_stamps = read["consumer_seq"], read["mirror_stamps"]
    # One pass over sequin_events: each source's last seq, and its newest change at or below the
    # consumer's stamp and at or below the least of its mirrors' stamps.
    mirror_upto = " ".join(
        f"when {_literal(source)} then {min(stamps)}" for source, stamps in mirror_stamps.items()
    )
    mirror_case = f"case source_id {mirror_upto} else -1 end" if mirror_upto else "-1"
    positions_sql = f"""select source_id, max(seq),
                max_by(struct(seq, commit_lsn, committed_at), seq)
                    filter (where seq <= {consumer_seq if consumer_seq is not None else -1}),
                max_by(struct(seq, commit_lsn, committed_at), seq) filter (where seq <= {mirror_case})
            from {schema}.sequin_events WHERE_ROWS group by source_id"""
    positions = None
    # From the least seq each source had visible: the maxima over those rows are the maxima over
    # all, whenever a source has a row there for each of them (a rebuilt log may not: read them all).
    floors = {
        s.source_id: min(s.consumer_records.seq, s.mirrors.seq if s.mirrors else s.consumer_records.seq) - 1
        for s in since or []
        if s.consumer_records is not None
    }
    if floors:
        bounded = " or ".join(
            f"(source_id = {_literal(source)} and seq > {seq})" for source, seq in floors.items()
        )
        unbounded = " and ".join(f"source_id != {_literal(source)}" for source in floors)
        positions = _per_source(
            spark,
            f"{schema}.sequin_events",
            positions_sql.replace("WHERE_ROWS", f"where {bounded} or ({unbounded})"),
        )
        earlier = {s.source_id: s for s in since or []}
        if any(
            None in positions.get(source, (None, None, None))[:2]
            or (earlier[source].mirrors is not None and positions[source][2] is None)
            for source in floors
        ):
            positions = None
    if positions is None:
        positions = _per_source(spark, f"{schema}.sequin_events", positions_sql.replace("WHERE_ROWS", ""))
    sources = sorted(set(frontier) | set(pending) | set(positions))
    result = []
    for source in sources:
        last_seq, visible, mirrored = positions.get(source, (None, None, None))
        result.append(
            SourceStatus(
                source_id=source,
                last_seq=last_seq,
                consumer_records=Position(*visible) if visible else None,
                mirrors=Position(*mirrored) if mirrored else None,
                mirror_count=len(mirror_stamps.get(source, [])),
                frontier_lsn=frontier.get(source, (None,))[0],
                pending=int(pending.get(source, (0,))[0] or 0),
                rejects=int(rejects.get(source, (0,))[0]),
                violations=int(violations.get(source, (0,))[0]) if violations_built else None,
            )
        )
    return result


def _cell(value) -> str:
    return "-" if value is None else str(value)


def table_text(statuses: list[SourceStatus]) -> str:
    """The statuses as an aligned text table, one row per source."""
    header = (
        "source",
        "last seq",
        "consumer_records: seq",
        "commit lsn",
        "committed at",
        "mirrors: committed at",
        "frontier",
        "pending",
        "rejects",
        "violations",
    )
    rows = [header]
    for s in statuses:
        c, m = s.consumer_records, s.mirrors
        rows.append(
            (
                s.source_id,
                _cell(s.last_seq),
                _cell(c.seq if c else None),
                _cell(format_lsn(c.commit_lsn) if c else None),
                _cell(_iso(c.committed_at) if c else None),
                _cell(_iso(m.committed_at) if m else None) if s.mirror_count else "no mirrors",
                _cell(format_lsn(s.frontier_lsn) if s.frontier_lsn is not None else None),
                str(s.pending),
                str(s.rejects),
                _cell(s.violations),
            )
        )
    if len(rows) == 1:
        return "no source has landed anything yet"
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def as_json(statuses: list[SourceStatus], now: datetime | None = None) -> dict:
    return {
        "generated_at": _iso(now or datetime.now(UTC)),
        "sources": [s.as_json() for s in statuses],
    }


def add_schema_options(parser: argparse.ArgumentParser) -> None:
    """--raw-schema and --schema, from the environment when not given (the follower has them too)."""
    env = os.environ
    parser.add_argument(
        "--raw-schema",
        default=env.get("WAL_LAKE_RAW_SCHEMA", DEFAULT_RAW_SCHEMA),
        help=f"schema of the landed tables (env WAL_LAKE_RAW_SCHEMA; default {DEFAULT_RAW_SCHEMA})",
    )
    parser.add_argument(
        "--schema",
        default=env.get("WAL_LAKE_SCHEMA", "wal_lake"),
        help="schema of the dbt models (env WAL_LAKE_SCHEMA; default wal_lake)",
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m python_jobs.status",
        description="Per source, from the tables alone: last seq, the newest change visible in "
        "consumer_records and the mirrors, frontier, pending lines, rejects, violations. On the local "
        "target it opens the warehouse itself: while a follower runs, read its --status-file instead.",
    )
    add_schema_options(parser)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a text table")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from python_jobs.spark_session import SparkSetupError, get_spark

    try:
        spark = get_spark("wal_lake_status")
    except SparkSetupError as exc:
        print(f"status: error: {exc}", file=sys.stderr)
        return 2
    statuses = source_status(spark, args.raw_schema, args.schema)
    if args.json:
        print(json.dumps(as_json(statuses), indent=2))
    else:
        print(table_text(statuses))
    return 0


if __name__ == "__main__":
    sys.exit(main())
