"""The physical reference: the history's files read as text and parsed, one aggregate, nothing kept.

What reading and parsing the main zone costs on this machine, with the ingestion job's own line
schema; the report gives every stage on the whole main zone as a multiple of it ("vs parse"). Its
check: it
parsed every line of the history (the held-back increments' lines left out).
"""

from __future__ import annotations

from benchmarks import generate as gen
from benchmarks.bench import Bench
from benchmarks.results import RAW_PARSE


def raw_parse(bench: Bench, zone: gen.Zone, history: int) -> None:
    """The main zone's history parsed and aggregated, timed as one stage."""
    from pyspark.sql import functions as F

    files = zone.history_files()

    def parse() -> None:
        row = (
            bench.parsed(files)
            .agg(
                F.count("r.action").alias("n"),
                F.max("r.lsn").alias("lsn"),
                F.sum(F.size("r.columns") + F.size("r.identity") + F.size("r.pk")).alias("cols"),
                F.max("r.table").alias("t"),
            )
            .collect()[0]
        )
        bench.check(
            "raw parse line count", row.n == zone.lines - zone.held_back_lines, f"{row.n:,} parsed lines"
        )

    bench.measure(RAW_PARSE, history, parse, note=f"{len(files)} files")
