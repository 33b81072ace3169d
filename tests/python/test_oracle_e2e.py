"""The oracle, end to end: a real Postgres, live capture, ingestion, dbt; models equal Postgres.

Twenty seeded random workloads (testkit/workload.py: key chains and swaps over TOASTed rows, a
REPLICA IDENTITY USING INDEX table, a keyless table, truncates of several tables, messages inside
transactions and heartbeats right before commits), each in its own database and slot (its own
source_id), run on one throwaway server (testkit/soak.py: concurrent sessions, an initial snapshot
taken while they write, a capture killed with SIGKILL, a capture that dies before advancing its slot
so its files are replayed). Some files are also copied under a second name; one seed's landing has a
pair of transactions split across three files whose middle one arrives after the third; two seeds are landed
again as Debezium events (testkit/debezium_rendering.py), one with Kafka keys and transaction
metadata, one bare with its keys declared in a table-keys file, each with a connector restart
inside a transaction and a snapshot spanning two files. The landing zone's root has a space in its
name. It is ingested and built in two rounds (ten seeds, then ten more, the late file, and a rerun
over everything), incrementally. Then for every source:

- consumer_records equals `select * from t` value for value, for every table with a key; a keyless
  table has no record there;
- column_registry holds every column with the type its capture sent: the Postgres type (wal2json),
  the Connect type with the propagated Postgres type (Debezium, in the schema wrapper);
- for four of the wal2json seeds and both Debezium renderings (MIRRORED), every keyed table's typed
  mirror equals `select * from t` too, compared typed (each column in the Spark type its Postgres
  type maps to, whichever format carried it), with nothing in mirror_rejects;
- sequin_events holds exactly the changes Postgres decoded, once each, in decode order (taken from a
  slot that nothing advanced, not from any rule about positions), at distinct positions, with a
  null record_pk for a keyless table's changes and a key for every other row change.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
from pathlib import Path

import psycopg
import pytest

from python_jobs import capture, mirrors
from python_jobs.ingest import job as ingest
from python_jobs.lsn import format_lsn, parse_lsn
from testkit import connect_schema, debezium_rendering, oracle, soak, workload
from testkit.warehouse import consumer_states, spark_query

SEEDS = range(1, 21)
LATE_SEED = 14  # its split transaction's middle file arrives late
DEBEZIUM_KEYED_SEED = 2
DEBEZIUM_BARE_SEED = 12
KEYLESS = frozenset(f"public.{table}" for table in workload.KEYLESS_TABLES)
# Identical rows of a keyless table at one LSN (a snapshot's reads, one statement's rows) cannot be
# told apart in Debezium's lines and collapse into one position (README, known limits).
DEBEZIUM_SKIPPED = KEYLESS
PROBLEMS_PER_SOURCE = 4  # enough to see what differs, short enough to see every source
# The Spark type each Postgres type of the workload's tables must have in a typed mirror.
MIRROR_TYPES = {
    "bigint": "bigint",
    "integer": "int",
    "text": "string",
    "numeric(12,2)": "decimal(12,2)",
    "numeric": "string",
    "boolean": "boolean",
    "timestamp with time zone": "timestamp",
    "jsonb": "variant",
    "double precision": "double",
    "real": "float",
    "date": "date",
}
# The sources whose tables get typed mirrors: a mirror per table is a dbt step per table (about 2 s
# each in the suite, 7 tables a source), so four wal2json seeds (one with a copied file, the one with a
# late file) and the two Debezium renderings; every table of the workload is among them.
# WAL_LAKE_ORACLE_MIRRORS=all mirrors every source (docs/testing.md: about 2.5 minutes more).
MIRRORED = tuple(f"soak_{seed}.soak_{seed}" for seed in (1, 3, 14, 20)) + (  # wal2json_source(seed)
    f"debezium_keyed.soak_{DEBEZIUM_KEYED_SEED}",
    f"debezium_bare.soak_{DEBEZIUM_BARE_SEED}",
)
if os.environ.get("WAL_LAKE_ORACLE_MIRRORS") == "all":
    MIRRORED += tuple(
        f"soak_{seed}.soak_{seed}" for seed in SEEDS if f"soak_{seed}.soak_{seed}" not in MIRRORED
    )
# What builds the typed mirrors (python_jobs.mirrors writes their models first).
# source_records is built with consumer_records.
MIRROR_MODELS = ("tag:mirror", "mirror_tables", "mirror_rejects")
TABLE_KEYS = {
    "accounts": "id",
    "tags": "code",
    "memberships": "team,account_id",
    "documents": "id",
    "devices": "id",
    "gauges": "id",
}


def wal2json_source(seed: int) -> str:
    return f"soak_{seed}.soak_{seed}"


def reference_slot(seed: int) -> str:
    return f"soak_{seed}_reference"


def recording_peeks(monkeypatch) -> dict[str, list[str]]:
    """What every reference slot decoded: soak peeks it (through ``capture.peek``) before dropping it."""
    decoded: dict[str, list[str]] = {}
    original = capture.peek

    def peek(conn, slot, upto_lsn, upto_nchanges):
        rows = original(conn, slot, upto_lsn, upto_nchanges)
        decoded[slot] = [data for _lsn, data in rows]
        return rows

    monkeypatch.setattr(capture, "peek", peek)
    return decoded


def split_late(files: list[Path], holding: Path) -> tuple[Path, Path]:
    """Split the first streamed file holding two transactions of two changes or more in a row into three
    files, cut inside each of them; move the middle one (the first's end, the second's start) to
    ``holding``. Returns (held, where it belongs).

    Cut so, the third file starts inside a transaction that no earlier file opened: the gap shows. A
    middle file cut out of one transaction, between two files of that same transaction, would not
    (docs/contract.md, "A file missing from inside one transaction")."""
    for path in files[1:]:
        lines = path.read_text().splitlines()
        actions = [json.loads(line)["action"] for line in lines]
        spans = [(n, actions.index("C", n)) for n, a in enumerate(actions) if a == "B"]
        for (begin, end), (next_begin, next_end) in zip(spans, spans[1:], strict=False):
            if end - begin > 2 and next_end - next_begin > 2:
                cuts = (begin + 2, next_begin + 2)
                parts = (lines[: cuts[0]], lines[cuts[0] : cuts[1]], lines[cuts[1] :])
                names = [path.with_name(f"{path.stem}-{n}.jsonl") for n in (1, 2, 3)]
                for name, part in zip(names, parts, strict=True):
                    name.write_text("\n".join(part) + "\n")
                path.unlink()
                holding.mkdir(parents=True, exist_ok=True)
                held = holding / names[1].name
                shutil.move(names[1], held)
                return held, names[1]
    raise AssertionError("no two transactions of two changes or more in a row to split")


def render_debezium(
    landing: Path, seed: int, keyed: bool, truth: dict, snapshot_lines, decoded
) -> tuple[str, dict]:
    skipped = DEBEZIUM_SKIPPED
    renderer = debezium_rendering.Renderer(truth["types"], keyed=keyed, skip=skipped)
    events = debezium_rendering.render(snapshot_lines, decoded, renderer)
    # A running connector's heartbeat after the workload: without transaction metadata's END record,
    # only a later event proves the last transaction complete (until then it waits, as it must).
    last = max(parse_lsn(json.loads(line)["lsn"]) for line in decoded)
    renderer.message({"lsn": format_lsn(last + 0x100), "prefix": "heartbeat", "content": "after"}, 0)
    events = renderer.events
    source_id = f"debezium_{'keyed' if keyed else 'bare'}.soak_{seed}"
    files = debezium_rendering.write_files(landing / source_id, renderer, events, per_file=150)
    assert len(files) > 3
    expected = [(e.group, (None, e.action, e.schema, e.table)) for e in events]
    kept = {table: rows for table, rows in truth["state"].items() if table not in skipped}
    return source_id, {**truth, "state": kept, "expected": expected, "debezium": True}


def run_seeds(dsn: str, seeds, landing: Path, decoded: dict, holding: Path) -> tuple[dict, list]:
    # Fewer than the soak's default: the workload's transactions now touch seven tables, send
    # messages and move keys, and the test keeps to its time with twenty seeds.
    args = argparse.Namespace(transactions=90, sessions=3)
    truth, late = {}, []
    for seed in seeds:
        problems, summary = soak.run_seed(dsn, seed, args, landing)
        assert not problems, problems[:5]
        source_id = wal2json_source(seed)
        files = sorted((landing / source_id).glob("*.jsonl"))
        snapshot_lines = files[0].read_text().splitlines()
        if seed % 3 == 0 and len(files) > 2:  # a file copied twice, under a name that sorts after it
            shutil.copy(files[1], files[1].with_name(files[1].stem + "_copy.jsonl"))
        if seed == LATE_SEED:
            late.append(split_late(files, holding))
        with psycopg.connect(soak.with_dbname(dsn, f"soak_{seed}")) as conn:
            tables = oracle.user_tables(conn)
            types, keys = oracle.table_types(conn, tables)
            state = oracle.postgres_state(conn, tables)
        seed_decoded = decoded[reference_slot(seed)]
        truth[source_id] = {
            "state": state,
            "types": types,
            "keys": keys,
            "expected": oracle.expected_changes(snapshot_lines, seed_decoded),
            "debezium": False,
        }
        if seed in (DEBEZIUM_KEYED_SEED, DEBEZIUM_BARE_SEED):
            dbz_source, dbz_truth = render_debezium(
                landing, seed, seed == DEBEZIUM_KEYED_SEED, truth[source_id], snapshot_lines, seed_decoded
            )
            truth[dbz_source] = dbz_truth
    return truth, late


def write_table_keys(path: Path) -> Path:
    source_id = f"debezium_bare.soak_{DEBEZIUM_BARE_SEED}"
    rows = [f'{source_id},public,{table},"{keys}"' for table, keys in TABLE_KEYS.items()]
    path.write_text("source_id,source_schema,source_table,key_columns\n" + "\n".join(rows) + "\n")
    return path


def by_source(spark, sql: str) -> dict[str, list]:
    """The rows of one query over every source (its first column the source_id), per source in the
    query's order: one query for all sources instead of one per source."""
    rows: dict[str, list] = {}
    for row in spark.sql(sql).collect():
        rows.setdefault(row.source_id, []).append(row)
    return rows


SEQUIN_ROWS = (
    "select source_id, commit_lsn, commit_idx, action, source_schema, source_table, record_pk,"
    " record['transactional'] as transactional from {schema}.sequin_events order by seq"
)
REGISTRY_ROWS = (
    "select source_id, source_schema, source_table, column_name, source_type, spark_type"
    " from {schema}.column_registry"
)


def sequin_problems(rows: list, t: dict) -> list[str]:
    """A source's sequin_events (``rows`` of SEQUIN_ROWS, in seq order) against the changes Postgres
    decoded."""
    actual = [
        (
            None if t["debezium"] or r.transactional == "false" else r.commit_lsn,
            r.action,
            r.source_schema,
            r.source_table,
        )
        for r in rows
    ]
    problems = oracle.compare_sequences(t["expected"], actual)
    positions = {(r.commit_lsn, r.commit_idx) for r in rows}
    if len(positions) != len(rows):
        problems.append(f"{len(rows) - len(positions)} positions held by more than one change")
    for r in rows:
        table = f"{r.source_schema}.{r.source_table}"
        if r.action in ("insert", "update", "delete", "read") and (r.record_pk is None) != (table in KEYLESS):
            problems.append(f"{table} {r.action} at {r.commit_lsn}/{r.commit_idx}: record_pk {r.record_pk!r}")
            break
    return problems


def ingest_problems(label: str, summary) -> list[str]:
    """An unbalanced or rejecting run: reported with the other differences rather than stopping the
    comparison of everything else."""
    if summary.balanced and not summary.rejected:
        return []
    return [f"ingest {label}: {summary.line()}"]


def reject_reasons(spark, schema: str) -> list[str]:
    rows = spark.sql(
        f"select source_id, reason, count(*) as n, min(raw_line) as example from {schema}.wal_rejects"
        " group by source_id, reason order by source_id, reason"
    ).collect()
    return [f"{r.source_id}: {r.n} rejected: {r.reason}: {r.example[:300]}" for r in rows]


def registry_problems(rows: list, t: dict) -> list[str]:
    """column_registry (a source's ``rows`` of REGISTRY_ROWS) holds every column of every table the
    stream touched, with the type its capture sends (Postgres' format_type from wal2json; the Connect
    type the Debezium rendering gives it) and a Spark type."""
    sent = connect_schema.connect_type if t["debezium"] else str
    found: dict[str, dict[str, str]] = {}
    problems = [
        f"column_registry: {r.column_name} ({r.source_type}): no Spark type" for r in rows if not r.spark_type
    ]
    for r in rows:
        columns = found.setdefault(f"{r.source_schema}.{r.source_table}", {})
        if r.column_name in columns:
            problems.append(f"column_registry: {r.source_table}.{r.column_name} has two types")
        columns[r.column_name] = r.source_type
    for table, columns in sorted(found.items()):
        expected = {column: sent(pg_type) for column, pg_type in t["types"].get(table, {}).items()}
        if columns != expected:
            problems.append(f"column_registry: {table}: {columns} != {expected}")
    # A table with rows at the end sent them (a snapshot read or an insert), with their types.
    holding_rows = {table for table, rows in t["state"].items() if rows}
    problems += [f"column_registry: nothing for {table}" for table in sorted(holding_rows - set(found))]
    return problems


def mirror_problems(spark, schema: str, source_id: str, t: dict) -> list[str]:
    """Every keyed table's typed mirror equals `select * from t`, value for value and typed, with the
    Spark types MIRROR_TYPES gives; nothing rejected."""
    relations = {
        f"{r.source_schema}.{r.source_table}": r.mirror_relation
        for r in spark.sql(
            f"select distinct source_schema, source_table, mirror_relation from {schema}.mirror_tables"
            f" where source_id = '{source_id}'"
        ).collect()
    }
    problems = [
        f"mirror_rejects: {r.source_table}.{r.column_name} {r.raw_value!r}: {r.reason}"
        for r in spark.sql(f"select * from {schema}.mirror_rejects where source_id = '{source_id}'").collect()
    ]
    for table, rows in sorted(t["state"].items()):
        if table not in relations:
            problems += [f"mirror: none for {table}"] if rows else []
            continue
        mirror = spark.table(relations[table])
        found = {f.name: f.dataType.simpleString() for f in mirror.schema.fields}
        for column, pg_type in t["types"][table].items():
            if found.get(column) != MIRROR_TYPES.get(pg_type, "no expectation"):
                problems.append(f"mirror {table}.{column} ({pg_type}): {found.get(column)}")
        columns = list(t["types"][table])
        mirrored = [{c: row[c] for c in columns if c in found} for row in mirror.collect()]
        if table in KEYLESS:  # no key, no record (README, known limits)
            problems += [f"mirror {table}: {len(mirrored)} rows of a keyless table"] if mirrored else []
            continue
        problems += oracle.compare_mirror(table, t["keys"][table], rows, mirrored, t["types"])
    return problems


def consumer_problems(actual: dict[str, list[dict]], t: dict) -> list[str]:
    """A source's consumer_records (``actual``, as python_jobs.demo's ``consumer_states`` gives them)
    against Postgres'."""
    expected = {table: rows for table, rows in t["state"].items() if table not in KEYLESS}
    problems = [f"{table}: {len(actual[table])} records, a keyless table" for table in KEYLESS & set(actual)]
    actual = {table: rows for table, rows in actual.items() if table not in KEYLESS}
    for table in expected:
        actual.setdefault(table, [])
    return problems + oracle.compare_states(expected, actual, t["types"], t["keys"])


@pytest.mark.postgres
def test_models_equal_postgres_after_live_capture(postgres, spark, dbt, schemas, tmp_path, monkeypatch):
    landing = tmp_path / "landing zone"
    holding = tmp_path / "late"
    table_keys = str(write_table_keys(tmp_path / "table_keys.csv"))
    land = functools.partial(ingest.run, spark, str(landing), schema=schemas.raw, table_keys_file=table_keys)
    decoded = recording_peeks(monkeypatch)
    truth, _ = run_seeds(postgres.dsn(), SEEDS[:10], landing, decoded, holding)
    first = land()
    problems = ingest_problems("first", first)
    dbt("seed")
    build = ("+consumer_records", "+sequin_violations", "column_registry")
    dbt("run", "--full-refresh", "-s", *build)

    more, late = run_seeds(postgres.dsn(), SEEDS[10:], landing, decoded, holding)
    truth |= more
    second = land()
    for held, destination in late:  # the middle of a split transaction, after the file behind it
        shutil.move(held, destination)
    after_late = land()
    again = land()
    problems += ingest_problems("second", second) + ingest_problems("after the late file", after_late)
    if first.rejected or second.rejected or after_late.rejected:
        problems += reject_reasons(spark, schemas.raw)
    if again.files or again.landed:
        problems.append(f"a rerun over landed files read or landed something: {again.line()}")
    dbt("run", "-s", *build)
    dbt("run", "-s", *build)  # a rerun with nothing new
    # The typed mirrors, built once at the end (MIRRORED): their incremental runs and schema changes
    # are test_mirrors' and test_mirrors_live's.
    mirrors.generate(spark, schemas.raw, sources=MIRRORED)
    dbt("run", "-s", *MIRROR_MODELS)
    tests = ("sequin_events", "source_records", "consumer_records", "sequin_violations", "column_registry")
    tested = dbt("test", "-s", *tests, "--exclude", "test_type:unit", expect_success=False)
    if not tested.success:
        failing = [r.node.name for r in (tested.result or []) if r.status in ("fail", "error")]
        problems.append(f"dbt test failed: {failing or tested.exception}")

    consumers = consumer_states(spark_query(spark), schemas.models)
    sequins = by_source(spark, SEQUIN_ROWS.format(schema=schemas.models))
    registry = by_source(spark, REGISTRY_ROWS.format(schema=schemas.models))
    for source_id, t in sorted(truth.items()):
        found = consumer_problems(consumers.get(source_id, {}), t)
        found += sequin_problems(sequins.get(source_id, []), t)
        found += registry_problems(registry.get(source_id, []), t)
        if source_id in MIRRORED:
            found += mirror_problems(spark, schemas.models, source_id, t)
        problems += [f"{source_id}: {p}" for p in found[:PROBLEMS_PER_SOURCE]]
        if len(found) > PROBLEMS_PER_SOURCE:
            problems.append(f"{source_id}: {len(found) - PROBLEMS_PER_SOURCE} more differences")
    assert not problems, "\n".join(problems)
    assert len(truth) == len(SEEDS) + 2


def test_expected_changes_follow_decode_order_not_positions():
    """A heartbeat decoded right before a commit at its own LSN comes first, takes no change's place
    and carries no commit LSN; a transaction decoded before the snapshot's point is not expected."""
    snapshot = [
        '{"action":"B","xid":0,"lsn":"0/F","snapshot":true}',
        '{"action":"R","xid":0,"lsn":"0/F","schema":"public","table":"t"}',
        '{"action":"C","xid":0,"lsn":"0/F","snapshot":true}',
    ]
    decoded = [
        '{"action":"B","xid":1,"lsn":"0/8"}',
        '{"action":"I","xid":1,"lsn":"0/7","schema":"public","table":"t"}',
        '{"action":"C","xid":1,"lsn":"0/8"}',
        '{"action":"M","xid":null,"lsn":"0/20","transactional":false,"prefix":"p","content":"x"}',
        '{"action":"B","xid":2,"lsn":"0/20"}',
        '{"action":"I","xid":2,"lsn":"0/18","schema":"public","table":"t"}',
        '{"action":"M","xid":2,"lsn":"0/19","transactional":true,"prefix":"p","content":"y"}',
        '{"action":"C","xid":2,"lsn":"0/20"}',
    ]
    expected = oracle.expected_changes(snapshot, decoded)
    assert [change for _group, change in expected] == [
        (15, "read", "public", "t"),
        (None, "message", None, None),
        (32, "insert", "public", "t"),
        (32, "message", None, None),
    ]
    actual = [change for _group, change in expected]
    assert oracle.compare_sequences(expected, actual) == []
    # The message ordered after the transaction at its LSN (a position rule's mistake) is caught.
    swapped = [actual[0], actual[2], actual[3], actual[1]]
    assert oracle.compare_sequences(expected, swapped) != []
    assert oracle.compare_sequences(expected, actual[:-1]) != []
