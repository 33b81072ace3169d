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
  type maps to, whichever format carried it), except the values the contract rejects (BC dates,
  `infinity`, arrays of more than one dimension): null in the mirror and each in mirror_rejects
  with its reason and the value Postgres holds, and nothing else rejected;
- every seed has the workload's edge tables (a schema, table and columns named with a space, a dot
  and quotes; BC and infinite dates; jsonb[] of objects; arrays with NULLs and of more dimensions),
  one of whose columns is altered from numeric(12,2) to numeric(12,4), one added and widened from
  integer to bigint and one renamed, right after the snapshot: consumer_records and the mirrors are
  compared as the contract's DDL section says (a renamed column's value is coalesce(new, old)),
  column_registry holds each type a column was sent with, in order, unannounced_ddl reports the
  rename and nothing else, and the dbt tests of the edge tables' mirrors pass;
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
# told apart in Debezium's lines and collapse into one position (README, known limits). A date's
# infinity and arrays of more than one dimension have no Debezium rendering (workload.TEXT_ONLY_TABLES).
DEBEZIUM_SKIPPED = KEYLESS | frozenset(workload.TEXT_ONLY_TABLES)
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
    "integer[]": "array<int>",
    "text[]": "array<string>",
    "jsonb[]": "array<variant>",
}
# A column sent with several types (workload.SCHEMA_CHANGES) has the Spark type that holds them all:
# numeric(12,2) then numeric(12,4) is decimal(14,4) (docs/contract.md, typed mirrors' schema changes).
MIRROR_TYPES_AFTER_DDL = {
    (workload.ODD_TABLE, "unit.price"): "decimal(14,4)",
    (workload.ODD_TABLE, "Added Col"): "bigint",
}
# Why the mirror lists a value instead of holding it (docs/contract.md, "Exact or rejected").
BC_DATE = "a BC date: the mirror holds dates from the year 1 on"
INFINITE = "{} has no date or timestamp value: not moved to one"
DIMENSIONS = "a multi-dimensional array or one with explicit bounds: {} holds one dimension"
# The sources whose tables get typed mirrors: a mirror per table is a dbt step per table (about 2 s
# each in the suite, 10 tables a source, 8 for Debezium), so four wal2json seeds (one with a copied
# file, the one with a late file) and the two Debezium renderings; every table of the workload is
# among them.
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
    "public.accounts": "id",
    "public.tags": "code",
    "public.memberships": "team,account_id",
    "public.documents": "id",
    "public.devices": "id",
    "public.gauges": "id",
    workload.ODD_TABLE: "Order Id",
    "public.edge_values": "id",
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
    rows = [
        f'{source_id},{schema},{table},"{keys}"'
        for (schema, table), keys in ((oracle.split_name(name), keys) for name, keys in TABLE_KEYS.items())
    ]
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
    " from {schema}.column_registry order by first_commit_lsn, first_commit_idx"
)


DDL_ROWS = (
    "select source_id, source_schema, source_table, change_kind, before_value, after_value"
    " from {schema}.unannounced_ddl"
)


def ddl_problems(rows: list) -> list[str]:
    """unannounced_ddl (a source's ``rows`` of DDL_ROWS) reports the one DDL it can see in the data,
    the rename of workload.SCHEMA_CHANGES (the altered type and the added column are not renames),
    and nothing else."""
    found = sorted(
        (f"{r.source_schema}.{r.source_table}", r.change_kind, r.before_value, r.after_value) for r in rows
    )
    expected = [
        (table, "column renamed or replaced", old, new)
        for table, changes in workload.SCHEMA_CHANGES.items()
        for new, old in changes["renamed"].items()
    ]
    return [] if found == expected else [f"unannounced_ddl: {found} != {expected}"]


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
    history: dict[str, dict[str, list[str]]] = {}  # tables with DDL: every type, first sent first
    for r in rows:
        table = f"{r.source_schema}.{r.source_table}"
        if table in workload.SCHEMA_CHANGES:
            history.setdefault(table, {}).setdefault(r.column_name, []).append(r.source_type)
            continue
        columns = found.setdefault(table, {})
        if r.column_name in columns:
            problems.append(f"column_registry: {r.source_table}.{r.column_name} has two types")
        columns[r.column_name] = r.source_type
    for table, columns in sorted(found.items()):
        expected = {column: sent(pg_type) for column, pg_type in t["types"].get(table, {}).items()}
        if columns != expected:
            problems.append(f"column_registry: {table}: {columns} != {expected}")
    for table, changes in workload.SCHEMA_CHANGES.items():
        expected = {column: [sent(s) for s in types] for column, types in changes["types_sent"].items()}
        if history.get(table) != expected:
            problems.append(f"column_registry: {table}: {history.get(table)} != {expected}")
    found |= history
    # A table with rows at the end sent them (a snapshot read or an insert), with their types.
    holding_rows = {table for table, rows in t["state"].items() if rows}
    problems += [f"column_registry: nothing for {table}" for table in sorted(holding_rows - set(found))]
    return problems


def reject_reason(pg_type: str, value) -> str | None:
    """Why a typed mirror must list ``value`` (``to_jsonb``'s, of a column of ``pg_type``) in
    mirror_rejects instead of holding it; None when it must hold it."""
    kind = oracle.base_type(pg_type)
    if kind == "date" and value in ("infinity", "-infinity"):
        return INFINITE.format(value)
    if kind == "date" and str(value).endswith(" BC"):
        return BC_DATE
    dimensions = kind.endswith("[]") and kind[:-2] not in ("json", "jsonb")  # a JSON element may be a list
    if dimensions and isinstance(value, list) and any(isinstance(item, list) for item in value):
        return DIMENSIONS.format(MIRROR_TYPES[pg_type])
    return None


def typed_key(types: dict[str, str], key_columns: list[str], row, typed) -> tuple:
    return tuple(repr(typed(types[column], row[column])) for column in key_columns)


def mirror_problems(spark, schema: str, source_id: str, t: dict) -> list[str]:
    """Every keyed table's typed mirror equals `select * from t`, value for value and typed, with the
    Spark types MIRROR_TYPES gives, except the values the contract rejects (``reject_reason``): those
    are null in the mirror, and mirror_rejects lists each with its reason and the value Postgres holds;
    nothing else is rejected. After DDL the stream does not carry (workload.SCHEMA_CHANGES), a mirror
    is compared as the contract describes it (``oracle.as_table_rows``), a renamed column's old name
    kept beside the new one."""
    relations = {
        f"{r.source_schema}.{r.source_table}": r.mirror_relation
        for r in spark.sql(
            f"select distinct source_schema, source_table, mirror_relation from {schema}.mirror_tables"
            f" where source_id = '{source_id}'"
        ).collect()
    }
    rejected: dict[str, dict[tuple[str, str], tuple[str, str]]] = {}
    for r in spark.sql(f"select * from {schema}.mirror_rejects where source_id = '{source_id}'").collect():
        table = f"{r.source_schema}.{r.source_table}"
        rejected.setdefault(table, {})[(r.record_pk, r.column_name)] = (r.reason, r.raw_value)
    problems = []
    for table in sorted(set(rejected) - set(t["state"])):
        problems += [f"mirror_rejects: {table}: {len(rejected[table])} rows of a table not compared"]
    for table, rows in sorted(t["state"].items()):
        if table not in relations:
            problems += [f"mirror: none for {table}"] if rows else []
            continue
        types = t["types"][table]
        changes = workload.SCHEMA_CHANGES.get(table, {})
        old_names = {old: types[new] for new, old in changes.get("renamed", {}).items()}
        mirror = spark.table(relations[table])
        found = {f.name: f.dataType.simpleString() for f in mirror.schema.fields}
        for column, pg_type in (types | old_names).items():
            wanted = MIRROR_TYPES_AFTER_DDL.get((table, column), MIRROR_TYPES.get(pg_type, "no expectation"))
            if found.get(column) != wanted:
                problems.append(f"mirror {table}.{column} ({pg_type}): {found.get(column)}")
        columns = [*types, *old_names]
        try:
            collected = mirror.collect()
        except ValueError as exc:  # PySpark's dates and timestamps start at the year 1
            problems.append(f"mirror {table}: a value Python cannot read (a date before the year 1?): {exc}")
            continue
        mirrored = oracle.as_table_rows(
            [{c: row[c] for c in columns if c in found} for row in collected], changes
        )
        if table in KEYLESS:  # no key, no record (README, known limits)
            problems += [f"mirror {table}: {len(mirrored)} rows of a keyless table"] if mirrored else []
            continue
        key_columns = t["keys"][table]
        # mirror_rejects names a record by record_pk, the mirror's rows carry theirs: the typed key.
        record_keys = {
            row["_wal_lake_record_pk"]: typed_key(types, key_columns, row, oracle.typed_spark_value)
            for row in collected
        }
        listed = {
            (record_keys.get(pk, pk), column): found
            for (pk, column), found in rejected.get(table, {}).items()
        }
        expected = [dict(row) for row in rows]
        for row in expected:
            key = typed_key(types, key_columns, row, oracle.typed_value)
            for column, pg_type in types.items():
                reason = reject_reason(pg_type, row.get(column))
                if reason is None:
                    continue
                reject = listed.pop((key, column), None)
                held = oracle.typed_value(pg_type, row[column])
                if reject is None:
                    problems.append(f"mirror_rejects {table} {key} {column}: missing ({reason}, {held!r})")
                elif reject[0] != reason or oracle.typed_value(pg_type, reject[1]) != held:
                    problems.append(
                        f"mirror_rejects {table} {key} {column}: {reject} for ({reason}, {held!r})"
                    )
                row[column] = None  # the mirror holds null where it lists the value
        problems += [
            f"mirror_rejects {table} {key} {column}: {raw!r} rejected: {reason}"
            for (key, column), (reason, raw) in listed.items()
        ]
        problems += oracle.compare_mirror(table, key_columns, expected, mirrored, t["types"])
    return problems


def consumer_problems(actual: dict[str, list[dict]], t: dict) -> list[str]:
    """A source's consumer_records (``actual``, as python_jobs.demo's ``consumer_states`` gives them)
    against Postgres'."""
    expected = {table: rows for table, rows in t["state"].items() if table not in KEYLESS}
    problems = [f"{table}: {len(actual[table])} records, a keyless table" for table in KEYLESS & set(actual)]
    actual = {table: rows for table, rows in actual.items() if table not in KEYLESS}
    # After DDL the stream does not carry, the records as the contract describes them.
    for table, changes in workload.SCHEMA_CHANGES.items():
        if table in actual:
            actual[table] = oracle.as_table_rows(actual[table], changes)
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
    generated = mirrors.generate(spark, schemas.raw, sources=MIRRORED)
    dbt("run", "-s", *MIRROR_MODELS, "key_column_spans", "unannounced_ddl")
    # The edge tables' mirrors are tested too (as dbt build would: their keys unique and not null),
    # and unannounced_ddl, whose emptiness test warns (the rename) and fails nothing.
    edge_mirrors = {
        mirrors.base_name(source, *oracle.split_name(table))
        for source in MIRRORED
        for table in workload.EDGE_TABLES
        if not (source.startswith("debezium") and table in DEBEZIUM_SKIPPED)
    }
    assert edge_mirrors <= set(generated), sorted(edge_mirrors - set(generated))
    tests = ("sequin_events", "source_records", "consumer_records", "sequin_violations", "column_registry")
    tests += (*sorted(edge_mirrors), "key_column_spans", "unannounced_ddl")
    tested = dbt("test", "-s", *tests, "--exclude", "test_type:unit", expect_success=False)
    if not tested.success:
        failing = [r.node.name for r in (tested.result or []) if r.status in ("fail", "error")]
        problems.append(f"dbt test failed: {failing or tested.exception}")

    consumers = consumer_states(spark_query(spark), schemas.models)
    sequins = by_source(spark, SEQUIN_ROWS.format(schema=schemas.models))
    registry = by_source(spark, REGISTRY_ROWS.format(schema=schemas.models))
    reported = by_source(spark, DDL_ROWS.format(schema=schemas.audit))
    for source_id, t in sorted(truth.items()):
        found = consumer_problems(consumers.get(source_id, {}), t)
        found += sequin_problems(sequins.get(source_id, []), t)
        found += registry_problems(registry.get(source_id, []), t)
        found += ddl_problems(reported.get(source_id, []))
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


def test_debezium_day_numbers_and_the_oracle_agree_on_bc_dates():
    """The rendering's day numbers (proleptic Gregorian, year 0 being 1 BC) read back as the date
    Postgres writes, before the year 1 too."""
    assert debezium_rendering.epoch_days("1970-01-02") == 1
    assert debezium_rendering.epoch_days("0001-01-01") == -719162
    assert debezium_rendering.epoch_days("0001-12-31 BC") == -719163
    for text in ("0044-03-15 BC", "0001-01-01 BC", "0100-03-01 BC", "0005-02-29 BC", "2026-02-28"):
        days = debezium_rendering.epoch_days(text)
        assert oracle.typed_value("date", str(days)) == oracle.typed_value("date", text), text
    assert debezium_rendering.debezium_value("integer[]", "{1,NULL,3}") == [1, None, 3]
    with pytest.raises(ValueError, match="more than one dimension"):
        debezium_rendering.debezium_value("integer[]", "{{1,2},{3,4}}")
    assert connect_schema.connect_type("integer[]") == "array<int32> (_INT4)"
    assert connect_schema.connect_type("jsonb[]") == "array<io.debezium.data.Json> (_JSONB)"
    # A Debezium record holds an array as JSON; Postgres' text has its own form, bounds included.
    assert oracle.typed_value("integer[]", "[1,null]") == oracle.typed_value("integer[]", "{1,NULL}")
    assert oracle.typed_value("integer[]", "[0:1]={7,8}") == [7, 8]


def test_rows_after_ddl_the_stream_does_not_carry_read_as_the_contract_says():
    """A row not sent since the rename holds the old name only, one sent since holds both (the old
    one with its value from before): the value is coalesce(new, old); a column added after a row was
    last sent is null."""
    changes = workload.SCHEMA_CHANGES[workload.ODD_TABLE]
    not_sent_since = {"Order Id": "2", 'Qty "x"': "6", "unit.price": "0.01"}
    sent_since = {"Order Id": "1", 'Qty "x"': "5", 'Qty "y"': "101", "unit.price": "3.1416", "Added Col": "7"}
    assert oracle.as_table_rows([not_sent_since, sent_since], changes) == [
        {"Order Id": "2", 'Qty "y"': "6", "unit.price": "0.01", "Added Col": None},
        {"Order Id": "1", 'Qty "y"': "101", "unit.price": "3.1416", "Added Col": "7"},
    ]
    assert oracle.as_table_rows([not_sent_since], None) == [not_sent_since]


def test_values_a_mirror_must_list_instead_of_holding():
    assert reject_reason("date", "infinity") == INFINITE.format("infinity")
    assert reject_reason("date", "-infinity") == INFINITE.format("-infinity")
    assert reject_reason("date", "0044-03-15 BC") == BC_DATE
    assert reject_reason("integer[]", [[1, 2], [3, 4]]) == DIMENSIONS.format("array<int>")
    assert reject_reason("integer[]", [1, None]) is None
    assert reject_reason("jsonb[]", [{"a": [1, 2]}, [3]]) is None
    assert reject_reason("date", "2026-01-01") is None
    assert reject_reason("text", "infinity") is None
