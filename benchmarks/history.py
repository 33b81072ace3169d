"""wal_lake's stages on one history, then on its held-back increment: the incremental cost.

Each history runs in schemas of its own (``bench_<size>_raw``, ``bench_<size>``): the ingestion
job, then one ``dbt run`` of the marts (``sequin_events``, then the state step: ``source_records``
and ``consumer_records``), as a user schedules them, with each mart's own seconds taken from that
run's nodes; then, unless ``--skip-mirrors``, the typed mirrors. The seed and the staging and
intermediate views are a one-off outside the timed runs, except the touches view, which reads
``sequin_events`` and is built in the history's first run of the marts. Then the increment is
released into the landing zone and each stage runs again.

Then what a user schedules (``_scheduled``): the plain build the README names (``dbt build
--selector scheduled``: every seed and model, the snapshot, the data tests but those of the
history, which run daily) once to build the rest; with nothing new to land, one ingestion and
one ``dbt run`` of the marts, then the plain build again; then a second increment, as one
ingestion and one plain build.

Checks: the marts hold as many rows as the zone says, before and after each increment, and every
mirror holds its table's live records.
"""

from __future__ import annotations

import os

from benchmarks import generate as gen
from benchmarks.bench import Bench
from benchmarks.results import (
    MARTS,
    MARTS_RUN_STAGE,
    MARTS_STAGE,
    MIRROR_MODELS,
    MIRROR_STAGE,
    PLAIN_BUILD,
    PLAIN_BUILD_STAGE,
    SEQ_MODEL_STAGE,
    STATE_MODELS,
    STATE_MODELS_STAGE,
    Stage,
    short,
)

# The touches view the state step reads: it reads sequin_events, so a history's first run builds it.
TOUCHES_VIEW = "int_record_touches"


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
    released = _on_increment(bench, zone, history, raw, schema)
    if len(zone.increments) > 1:
        _scheduled(bench, zone, history, raw, schema)
    return released


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
    _run_marts(bench, f"[{tag}]", history, TOUCHES_VIEW)
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
    _run_marts(bench, f"[{tag}] +{short(inc)}", inc)
    if not bench.args.skip_mirrors:
        bench.measure(
            f"[{tag}] +{short(inc)} {MIRROR_STAGE}",
            inc,
            lambda: bench.dbt("run", "-s", *MIRROR_MODELS),
        )
        check_mirrors(bench, schema, tag)
    _check_marts(bench, schema, f"[{tag}] +increment", history + inc, zone.live_after_increments[0])
    return released


def _run_marts(bench: Bench, prefix: str, changes: int, *more: str) -> None:
    """One dbt run of the marts (and ``more`` models), timed; then, derived from its nodes, what
    sequin_events and the state step's two models took in it."""
    bench.measure(f"{prefix} {MARTS_RUN_STAGE}", changes, lambda: bench.dbt("run", "-s", *MARTS, *more))
    nodes = bench.node_seconds
    for name, models in ((SEQ_MODEL_STAGE, ("sequin_events",)), (STATE_MODELS_STAGE, STATE_MODELS)):
        seconds = sum(nodes[m] for m in models)
        bench.results.stages.append(Stage(f"{prefix} {name}", seconds, changes, model_seconds=seconds))


def _scheduled(bench: Bench, zone: gen.Zone, history: int, raw: str, schema: str) -> None:
    """The plain build once (the rest of the models, the snapshot and the tests, built on the whole
    history: untimed for the goals); with nothing new, the marts' run and the plain build; then the
    second increment as one ingestion and one plain build."""
    tag, inc = short(history), zone.increment_changes
    bench.measure(f"[{tag}] first {PLAIN_BUILD_STAGE}", 0, lambda: bench.dbt(*PLAIN_BUILD))
    bench.measure(
        f"[{tag}] nothing new: {MARTS_STAGE}",
        0,
        lambda: (_land(bench, zone, raw), bench.dbt("run", "-s", *MARTS))[1],
    )
    bench.measure(f"[{tag}] nothing new: {PLAIN_BUILD_STAGE}", 0, lambda: bench.dbt(*PLAIN_BUILD))
    released = gen.release_increment(zone, 2)
    bench.log(f"[{tag}] second increment: {inc:,} changes in {len(released)} new file(s)")
    bench.measure(f"[{tag}] +{short(inc)} then ingest", inc, lambda: _land(bench, zone, raw))
    bench.measure(f"[{tag}] +{short(inc)} then {PLAIN_BUILD_STAGE}", inc, lambda: bench.dbt(*PLAIN_BUILD))
    _check_marts(
        bench, schema, f"[{tag}] +second increment", history + 2 * inc, zone.live_after_increments[1]
    )


def _check_marts(bench: Bench, schema: str, what: str, changes: int, live: int) -> None:
    """sequin_events holds every change landed so far, consumer_records every live record."""
    seq_rows = bench.count(f"{schema}.sequin_events")
    records = bench.count(f"{schema}.consumer_records")
    bench.check(f"{what} sequin_events rows", seq_rows == changes, f"{seq_rows:,}, expected {changes:,}")
    bench.check(f"{what} consumer_records rows", records == live, f"{records:,}, expected {live:,}")


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
