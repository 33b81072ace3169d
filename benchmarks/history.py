"""wal_lake's stages on one history, then on its held-back increment: the incremental cost.

Each history runs in schemas of its own (``bench_<size>_raw``, ``bench_<size>``): the ingestion
job, ``dbt run -s sequin_events``, the state step (``source_records`` and ``consumer_records`` in
one dbt run) and, unless ``--skip-mirrors``, the typed mirrors; the seed and the staging and
intermediate views are a one-off outside the timed runs. Then the increment is released into the
landing zone and each stage runs again. Checks: the marts hold as many rows as the zone says, before
and after the increment, and every mirror holds its table's live records.
"""

from __future__ import annotations

import os

from benchmarks import generate as gen
from benchmarks.bench import Bench
from benchmarks.results import MIRROR_MODELS, MIRROR_STAGE, STATE_MODELS, STATE_STAGE, short


def history_stages(bench: Bench, zone: gen.Zone, history: int) -> list[str]:
    """wal_lake's stages on the history, then on its increment; return the increment's files as
    released into the landing zone (none when the zone holds no increment)."""
    tag = short(history)
    raw, schema = f"bench_{tag}_raw", f"bench_{tag}"
    os.environ["WAL_LAKE_RAW_SCHEMA"] = raw
    os.environ["WAL_LAKE_SCHEMA"] = schema
    bench.log(f"history {tag}: schemas {raw}, {schema}")
    _on_history(bench, zone, history, raw, schema)
    if not zone.increment_files:
        return []
    return _on_increment(bench, zone, history, raw, schema)


def _land(bench: Bench, zone: gen.Zone, raw: str) -> None:
    """The ingestion job over what the landing zone holds; the run stops if its accounting does not
    balance."""
    from python_jobs.ingest import job as ingest

    summary = ingest.run(bench.spark, zone.root, schema=raw)
    bench.log(summary.line())
    if not summary.balanced:
        raise RuntimeError("ingestion accounting does not balance")


def _on_history(bench: Bench, zone: gen.Zone, history: int, raw: str, schema: str) -> None:
    from python_jobs import mirrors

    tag = short(history)
    bench.measure(f"[{tag}] ingest", history, lambda: _land(bench, zone, raw))
    # The views need the landed tables; the seed and views are a one-off, outside the timed runs.
    bench.measure(
        f"[{tag}] setup: dbt seed + staging/intermediate views",
        0,
        lambda: (
            bench.dbt("seed")
            + bench.dbt("run", "-s", "staging", "intermediate", "--exclude", "int_record_touches")
        ),
    )
    bench.measure(f"[{tag}] dbt run sequin_events", history, lambda: bench.dbt("run", "-s", "sequin_events"))
    # The touches view (int_record_touches) reads sequin_events: a one-off once that exists.
    bench.dbt("run", "-s", "int_record_touches")
    bench.measure(f"[{tag}] {STATE_STAGE}", history, lambda: bench.dbt("run", "-s", *STATE_MODELS))
    if not bench.args.skip_mirrors:
        mirrors.generate(bench.spark, raw)
        bench.measure(f"[{tag}] {MIRROR_STAGE}", history, lambda: bench.dbt("run", "-s", *MIRROR_MODELS))
    seq_rows = bench.count(f"{schema}.sequin_events")
    live = bench.count(f"{schema}.consumer_records")
    bench.check(f"[{tag}] sequin_events rows", seq_rows == history, f"{seq_rows:,}, expected {history:,}")
    expected_live = zone.live_before_increment
    bench.check(
        f"[{tag}] consumer_records rows", live == expected_live, f"{live:,}, expected {expected_live:,}"
    )
    bench.results.generated[f"live_{tag}"] = live


def _on_increment(bench: Bench, zone: gen.Zone, history: int, raw: str, schema: str) -> list[str]:
    tag = short(history)
    inc = zone.increment_changes
    released = gen.release_increment(zone)
    bench.log(f"[{tag}] increment: {inc:,} changes in {len(zone.increment_files)} new file(s)")
    bench.measure(f"[{tag}] +{short(inc)} ingest", inc, lambda: _land(bench, zone, raw))
    bench.measure(
        f"[{tag}] +{short(inc)} dbt run sequin_events",
        inc,
        lambda: bench.dbt("run", "-s", "sequin_events"),
    )
    bench.measure(
        f"[{tag}] +{short(inc)} {STATE_STAGE}",
        inc,
        lambda: bench.dbt("run", "-s", *STATE_MODELS),
    )
    if not bench.args.skip_mirrors:
        bench.measure(
            f"[{tag}] +{short(inc)} {MIRROR_STAGE}",
            inc,
            lambda: bench.dbt("run", "-s", *MIRROR_MODELS),
        )
        check_mirrors(bench, schema, tag)
    seq_rows = bench.count(f"{schema}.sequin_events")
    live = bench.count(f"{schema}.consumer_records")
    bench.check(f"[{tag}] +increment sequin_events rows", seq_rows == history + inc, f"{seq_rows:,}")
    bench.check(
        f"[{tag}] +increment consumer_records rows",
        live == zone.live,
        f"{live:,}, expected {zone.live:,}",
    )
    return released


def check_mirrors(bench: Bench, schema: str, tag: str) -> None:
    """Every mirror holds its table's live records: those of consumer_records (one consumer)."""
    live = {
        (r.source_table, r.n)
        for r in bench.spark.sql(
            f"select source_table, count(*) as n from {schema}.consumer_records group by source_table"
        ).collect()
    }
    catalog = f"select distinct source_table, mirror_relation from {schema}.mirror_tables"
    rows = bench.spark.sql(catalog).collect()
    mirrored = {(r.source_table, bench.count(r.mirror_relation)) for r in rows}
    bench.check(f"[{tag}] +increment mirrors rows", mirrored == live, f"{sorted(mirrored)} vs {sorted(live)}")
