"""The oracle: what the tables of a captured database hold, and a reference replay of its WAL.

``postgres_state`` reads the truth from Postgres (``to_jsonb`` of every row); ``replay_wal2json``
rebuilds the same state from captured wal2json lines with the flattening rules of the data contract
(last touch wins, a delete removes, a primary-key change moves the row, a truncate clears the table,
a column the update left out keeps its previous value); ``compare_states`` says, row by row and
value by value, where two states differ. The Spark models are checked against the same comparison.

How values are compared
-----------------------
The two sides render values differently: ``to_jsonb`` writes a timestamptz as
``2026-01-01T00:00:00+00:00`` and a numeric as the JSON number ``10.50``; wal2json writes
``2026-01-01 00:00:00+00`` and ``10.50``; ``consumer_records.record`` holds the text of either.
Every value is therefore turned into a Python value by the column's Postgres type (``format_type``
text, from the catalog) before comparing, never compared as text:

- SQL NULL (JSON ``null``, a map entry whose value is null) is ``None``.
- ``smallint``/``integer``/``bigint``/``oid`` -> ``int``; ``numeric`` -> ``Decimal`` compared by
  value (``10.50 == 10.5``); ``real``/``double precision`` -> ``float`` (both sides print shortest
  round-trip digits). NaN and infinities stay their text (``NaN``, ``Infinity``, ``-Infinity``),
  as ``to_jsonb`` and the capture's snapshot write them. wal2json's stream writes them as ``null``
  (as SQL NULL), so the streaming workload does not produce them.
- ``boolean`` -> ``bool`` (``true``/``t``).
- ``timestamp with time zone`` -> an aware ``datetime`` in UTC; ``timestamp`` -> a naive
  ``datetime``; ``date``, ``time`` -> ``date``, ``time`` (a date given as a whole number is
  Debezium's days since 1970). ``infinity`` stays text.
- ``json``/``jsonb`` -> the parsed JSON document (numbers as ``int``/``Decimal``): ``to_jsonb`` nests
  it as an object, wal2json and the landed map carry its text.
- ``bytea`` -> ``bytes`` (``to_jsonb``: ``\\x0102``; wal2json: ``0102``).
- arrays -> lists of their elements typed by the element type (``to_jsonb``: a JSON array;
  wal2json: Postgres's array text ``{1,NULL,3}``).
- ``uuid`` -> lower-case text; every other type (text, varchar, char, interval, inet, enums, money,
  ...) -> its text as Postgres prints it, compared exactly (``to_jsonb`` uses the same text).

A row's identity is its primary key (typed values in key order); rows of tables without one are
compared as a multiset.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import struct
from collections.abc import Iterable, Mapping
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation

from psycopg import sql
from pyspark.sql.types import VariantVal

from python_jobs.lsn import parse_lsn

INTEGER_TYPES = frozenset({"smallint", "integer", "bigint", "oid"})
# Text on both sides (to_jsonb, the snapshot, landed maps); NaN as a number would equal nothing.
SPECIAL_NUMBERS = frozenset({"NaN", "Infinity", "-Infinity"})
FLOAT_TYPES = frozenset({"real", "double precision"})
_TYPMOD = re.compile(r"\([^)]*\)")
# A JSON array (``[1, null]``, ``[]``), not Postgres' explicit bounds (``[0:1]={7,8}``).
_JSON_ARRAY = re.compile(r"\[(?![-0-9]+:[-0-9]+\]=)")
EPOCH_DAY = date(1970, 1, 1)

State = dict[str, list[dict]]  # "schema.table" -> rows (column -> value)
Types = dict[str, dict[str, str]]  # "schema.table" -> column -> format_type text
Keys = dict[str, list[str]]  # "schema.table" -> primary-key columns


# --- typed values --------------------------------------------------------------------------------


def base_type(pg_type: str) -> str:
    """``numeric(12,2)`` -> ``numeric``; ``timestamp(3) with time zone`` -> ``timestamp with time zone``."""
    return " ".join(_TYPMOD.sub("", pg_type).split())


def _parse_timestamp(text: str) -> datetime | str:
    # Python 3.11 reads both "2026-01-01T00:00:00+00:00" and Postgres's "2026-01-01 00:00:00+00".
    if text in ("infinity", "-infinity"):
        return text
    return datetime.fromisoformat(text)


def typed_value(pg_type: str, value):
    """``value`` (a JSON value from ``to_jsonb`` or wal2json, or the text a landed map holds) typed by
    the column's Postgres type; see the module docstring for the rule."""
    if value is None:
        return None
    kind = base_type(pg_type)
    if kind.endswith("[]"):
        element_type = kind[:-2]
        items = value
        if isinstance(value, str):  # Postgres' text, or the JSON array a Debezium record holds
            items = json.loads(value) if _JSON_ARRAY.match(value) else parse_pg_array(value)
        return _typed_items(element_type, items)
    if kind in INTEGER_TYPES:
        return int(str(value))
    if (kind == "numeric" or kind in FLOAT_TYPES) and str(value) in SPECIAL_NUMBERS:
        return str(value)
    if kind == "numeric":
        try:
            return Decimal(str(value))
        except InvalidOperation:
            return str(value)
    if kind in FLOAT_TYPES:
        return float(value)
    if kind == "boolean":
        if isinstance(value, bool):
            return value
        return str(value).lower() in ("true", "t")
    if kind == "timestamp with time zone":
        parsed = _parse_timestamp(str(value))
        return parsed.astimezone(UTC) if isinstance(parsed, datetime) else parsed
    if kind == "timestamp without time zone":
        return _parse_timestamp(str(value))
    if kind == "date":
        if value in ("infinity", "-infinity") or str(value).endswith(" BC"):
            return value
        if re.fullmatch(r"-?[0-9]+", str(value)):  # Debezium's io.debezium.time.Date: days since 1970
            return _epoch_date(int(value))
        return date.fromisoformat(str(value))
    if kind == "time without time zone":
        return time.fromisoformat(str(value))
    if kind in ("json", "jsonb"):
        if isinstance(value, str):
            return json.loads(value, parse_float=Decimal)
        return _decimals(value)
    if kind == "bytea":
        text = str(value)
        return bytes.fromhex(text[2:] if text.startswith("\\x") else text)
    if kind == "uuid":
        return str(value).lower()
    return value if isinstance(value, str) else json.dumps(value)


def _epoch_date(days: int) -> date | str:
    """Debezium's day number as a date; before the year 1 (which Python's dates do not reach) as
    Postgres writes it, ``0044-03-15 BC``: the proleptic Gregorian calendar, year 0 being 1 BC."""
    if days >= (date(1, 1, 1) - EPOCH_DAY).days:
        return EPOCH_DAY + timedelta(days=days)
    # Howard Hinnant's civil_from_days.
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (month <= 2)
    return f"{1 - year:04d}-{month:02d}-{day:02d} BC"


def _typed_items(element_type: str, items):
    if isinstance(items, list):
        return [_typed_items(element_type, item) for item in items]
    return typed_value(element_type, items)


def parse_pg_array(text: str) -> list:
    """Postgres's array text (``{1,NULL,"a b"}``, nested for more dimensions) as nested lists of
    element texts, ``None`` for NULL."""
    if text.startswith("["):  # explicit bounds, "[0:1]={...}"
        text = text[text.index("=") + 1 :]
    position = 0

    def parse_list() -> list:
        nonlocal position
        assert text[position] == "{", text
        position += 1
        items: list = []
        while position < len(text):
            char = text[position]
            if char == "}":
                position += 1
                return items
            if char == ",":
                position += 1
            elif char == "{":
                items.append(parse_list())
            elif char == '"':
                position += 1
                chunk = []
                while text[position] != '"':
                    if text[position] == "\\":
                        position += 1
                    chunk.append(text[position])
                    position += 1
                position += 1
                items.append("".join(chunk))
            else:
                end = position
                while text[end] not in ",}":
                    end += 1
                token = text[position:end].strip()
                items.append(None if token.upper() == "NULL" else token)
                position = end
        raise ValueError(f"unterminated array literal: {text!r}")

    return parse_list()


def _decimals(value):
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, list):
        return [_decimals(item) for item in value]
    if isinstance(value, dict):
        return {key: _decimals(item) for key, item in value.items()}
    return value


def typed_row(row: Mapping, types: Mapping[str, str]) -> dict:
    """A row (to_jsonb object, replayed wal2json columns) with every value typed."""
    return {column: typed_value(types.get(column, "text"), value) for column, value in row.items()}


def typed_record(record: Mapping[str, str | None], types: Mapping[str, str]) -> dict:
    """A ``consumer_records.record`` map (column -> value text as landed from wal2json) typed.

    The landed text of a number or boolean is its JSON text (``10.50``, ``true``), of anything else
    its content; an absent column stays absent (the comparison reports it)."""
    return typed_row(record, types)


# --- Postgres: the truth -------------------------------------------------------------------------


def split_name(name: str) -> tuple[str, str]:
    """``schema.table``: the schema's name holds no dot (the workload's do not), a table's may."""
    schema, dot, table = name.partition(".")
    return (schema, table) if dot else ("public", name)


def postgres_state(conn, tables: Iterable[str]) -> State:
    """``{"schema.table": [to_jsonb of each row]}``; numbers keep their digits (``Decimal``). Each
    table's own rows only (``only``): Postgres reports a child table's changes under the child."""
    state: State = {}
    for name in tables:
        schema, table = split_name(name)
        # A column named like the alias would shadow the row: the alias is one no table uses.
        query = sql.SQL(
            "select to_jsonb(wal_lake_oracle_row)::text from only {}.{} as wal_lake_oracle_row"
        ).format(sql.Identifier(schema), sql.Identifier(table))
        state[f"{schema}.{table}"] = [json.loads(row[0], parse_float=Decimal) for row in conn.execute(query)]
    return state


def table_types(conn, tables: Iterable[str]) -> tuple[Types, Keys]:
    """Column types (``format_type``) and primary-key columns (key order) of ``tables``."""
    types: Types = {}
    keys: Keys = {}
    for name in tables:
        schema, table = split_name(name)
        qualified = f"{schema}.{table}"
        rows = conn.execute(
            """
            select a.attname, format_type(a.atttypid, a.atttypmod)
            from pg_attribute a
            where a.attrelid = (quote_ident(%s) || '.' || quote_ident(%s))::regclass
              and a.attnum > 0 and not a.attisdropped
            order by a.attnum
            """,
            (schema, table),
        ).fetchall()
        types[qualified] = dict(rows)
        keys[qualified] = [
            row[0]
            for row in conn.execute(
                """
                select a.attname
                from pg_index i
                cross join lateral unnest(i.indkey) with ordinality as k(attnum, ord)
                join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
                where i.indrelid = (quote_ident(%s) || '.' || quote_ident(%s))::regclass and i.indisprimary
                order by k.ord
                """,
                (schema, table),
            )
        ]
    return types, keys


def user_tables(conn) -> list[str]:
    """Every ordinary logged table outside the system schemas, as ``schema.table`` (an unlogged
    table writes no WAL: nothing captures it)."""
    rows = conn.execute(
        """
        select n.nspname || '.' || c.relname
        from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where c.relkind = 'r' and c.relpersistence = 'p'
          and n.nspname not in ('pg_catalog', 'information_schema')
          and n.nspname not like 'pg\\_%%'
        order by 1
        """
    ).fetchall()
    return [row[0] for row in rows]


def as_table_rows(rows: Iterable[Mapping], changes: Mapping | None) -> list[dict]:
    """Rows as the contract leaves them after DDL the stream does not carry (a record, a replayed
    row, a mirror's row), in the table's shape of today, for comparing with ``select * from t``.

    ``changes`` (``workload.SCHEMA_CHANGES`` of the table) names the columns ``added`` after rows
    were written and the columns ``renamed`` (new name -> old name). A row not sent since a column was
    added lacks it (the table holds null there); a row sent since a rename holds the new name, and
    still the old one with its value from before, while a row not sent since holds the old name only:
    the value is ``coalesce(new, old)`` (the contract's DDL section), and the old name goes."""
    if not changes:
        return [dict(row) for row in rows]
    shaped = []
    for row in rows:
        row = dict(row)
        for new, old in changes.get("renamed", {}).items():
            previous = row.pop(old, None)
            if row.get(new) is None:
                row[new] = previous
        for column in changes.get("added", ()):
            row.setdefault(column, None)
        shaped.append(row)
    return shaped


# --- comparing -----------------------------------------------------------------------------------


def _freeze(value):
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def _sort_key(value):
    return repr(_freeze(value))


def compare_states(expected: State, actual: State, types: Types, keys: Keys | None = None) -> list[str]:
    """Human-readable differences between two states, values typed by ``types`` (empty: equal).

    ``expected`` and ``actual`` map ``schema.table`` to rows whose values are JSON values or landed
    text; ``keys`` (primary-key columns per table) lets rows be matched by key for precise messages.
    """
    problems: list[str] = []
    for table in sorted(set(expected) | set(actual)):
        column_types = types.get(table, {})
        exp_rows = [typed_row(row, column_types) for row in expected.get(table, [])]
        act_rows = [typed_row(row, column_types) for row in actual.get(table, [])]
        key_columns = (keys or {}).get(table) or []
        if key_columns:
            problems.extend(_compare_keyed(table, key_columns, exp_rows, act_rows))
        else:
            problems.extend(_compare_multiset(table, exp_rows, act_rows))
    return problems


def _float32(value: float) -> float:
    """A ``real`` as Spark's float holds it, written with the fewest digits that read back the same
    float32: the number Postgres prints for it."""
    packed = struct.pack("f", value)
    for digits in range(1, 10):
        shortest = float(f"{value:.{digits}g}")
        if struct.pack("f", shortest) == packed:
            return shortest
    return value


def typed_spark_value(pg_type: str, value):
    """A value of a typed mirror (as PySpark returns it) in the form ``typed_value`` gives the same
    column's Postgres value, so the two compare as values: text columns (the types a mirror keeps as
    text: time, interval, uuid, unconstrained numeric, ...) are typed from their text; a variant
    (json, jsonb) is read back as JSON; numbers, booleans, dates, timestamps (UTC), binaries and
    arrays are compared as Spark holds them."""
    if value is None:
        return None
    kind = base_type(pg_type)
    if isinstance(value, str):
        return typed_value(pg_type, value)
    if isinstance(value, VariantVal):  # json, jsonb
        return json.loads(value.toJson(), parse_float=Decimal)
    if isinstance(value, list):
        return [typed_spark_value(kind[:-2], item) for item in value]
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return _float32(value) if kind == "real" else value
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, datetime) and kind == "timestamp with time zone":
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value


def compare_mirror(
    table: str, key_columns: list[str], expected: list[dict], mirror: list[dict], types: Types
) -> list[str]:
    """Differences between a table's rows in Postgres (``postgres_state``) and its typed mirror's rows
    (PySpark row dicts of the table's columns), each side typed by the column's Postgres type."""
    column_types = types.get(table, {})
    exp_rows = [typed_row(row, column_types) for row in expected]
    act_rows = [
        {column: typed_spark_value(column_types.get(column, "text"), value) for column, value in row.items()}
        for row in mirror
    ]
    return _compare_keyed(table, key_columns, exp_rows, act_rows)


def _short(value, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


def _index(table: str, key_columns: list[str], rows: list[dict], side: str, problems: list[str]) -> dict:
    index: dict = {}
    for row in rows:
        key = tuple(_freeze(row.get(column)) for column in key_columns)
        if key in index:
            problems.append(f"{table}: key {key} appears more than once in {side}")
        index[key] = row
    return index


def _compare_keyed(table: str, key_columns: list[str], exp_rows, act_rows) -> list[str]:
    problems: list[str] = []
    exp = _index(table, key_columns, exp_rows, "expected", problems)
    act = _index(table, key_columns, act_rows, "actual", problems)
    label = ",".join(key_columns)
    for key in sorted(set(exp) - set(act), key=_sort_key):
        problems.append(f"{table} ({label})={key}: missing (expected {_short(exp[key])})")
    for key in sorted(set(act) - set(exp), key=_sort_key):
        problems.append(f"{table} ({label})={key}: unexpected row {_short(act[key])}")
    for key in sorted(set(exp) & set(act), key=_sort_key):
        for column in sorted(set(exp[key]) | set(act[key])):
            if column not in act[key]:
                problems.append(
                    f"{table} ({label})={key}: column {column} missing (expected {_short(exp[key][column])})"
                )
            elif column not in exp[key]:
                problems.append(f"{table} ({label})={key}: unexpected column {column}")
            elif _freeze(exp[key][column]) != _freeze(act[key][column]):
                problems.append(
                    f"{table} ({label})={key}: {column} expected {_short(exp[key][column])}, "
                    f"got {_short(act[key][column])}"
                )
    return problems


def _compare_multiset(table: str, exp_rows, act_rows) -> list[str]:
    remaining: dict = {}
    for row in act_rows:
        remaining.setdefault(_freeze(row), []).append(row)
    problems: list[str] = []
    for row in exp_rows:
        frozen = _freeze(row)
        if remaining.get(frozen):
            remaining[frozen].pop()
        else:
            problems.append(f"{table}: missing row {_short(row)}")
    for rows in remaining.values():
        for row in rows:
            problems.append(f"{table}: unexpected row {_short(row)}")
    return problems


# --- the reference replay ------------------------------------------------------------------------


def _transactions(lines: Iterable[str]):
    """Group wal2json lines into ``(commit_lsn, is_snapshot, changes)``; incomplete tails are dropped."""
    current: list[dict] | None = None
    snapshot = False
    for line in lines:
        if not line.strip():
            continue
        record = json.loads(line, parse_float=Decimal)
        action = record.get("action")
        if action == "B":
            current, snapshot = [], bool(record.get("snapshot"))
        elif action == "C":
            if current is not None:
                yield parse_lsn(record["lsn"]), snapshot, current
            current = None
        elif current is not None:
            current.append(record)
        # A non-transactional message changes no table: nothing to replay.


def replay_wal2json(lines: Iterable[str]) -> State:
    """The tables' rows after applying captured wal2json lines, by the contract's flattening rules.

    Transactions are applied once each in commit-LSN order (a snapshot before a streamed commit at
    the same LSN), so replayed and duplicated lines change nothing. Row values stay as wal2json wrote
    them (JSON values); type them with ``typed_row`` or compare with ``compare_states``.
    """
    unique: dict[tuple[int, int], list[dict]] = {}
    for commit_lsn, snapshot, changes in _transactions(lines):
        unique.setdefault((commit_lsn, 0 if snapshot else 1), changes)
    tables: dict[str, dict[tuple, dict]] = {}
    for _position, changes in sorted(unique.items()):
        for change in changes:
            _apply(tables, change)
    return {name: list(rows.values()) for name, rows in sorted(tables.items())}


def _apply(tables: dict[str, dict[tuple, dict]], change: dict) -> None:
    action = change["action"]
    if action not in ("I", "U", "D", "T", "R"):
        return  # transactional logical message
    table = f"{change['schema']}.{change['table']}"
    rows = tables.setdefault(table, {})
    if action == "T":
        rows.clear()
        return
    pk = [column["name"] for column in change.get("pk", [])]
    new = {column["name"]: column["value"] for column in change.get("columns", [])}
    old = {column["name"]: column["value"] for column in change.get("identity", [])}
    if action in ("U", "D"):
        # Unchanged TOASTed columns are absent from an update: they keep their previous value.
        previous = rows.pop(_identified(rows, pk, old or new), {})
        if action == "D":
            return
        new = {**previous, **new}
    # A table without a key may hold equal rows: each gets a place of its own.
    rows[tuple(_freeze(new[column]) for column in pk) if pk else ("row", next(_row_numbers))] = new


_row_numbers = itertools.count()


def _identified(rows: dict[tuple, dict], pk: list[str], identity: dict):
    """The place of the row an update's or delete's identity names (None when there is none).

    The identity holds the primary key (REPLICA IDENTITY DEFAULT, FULL), or only an index's columns
    (USING INDEX: the row is the one whose values match them), or, without a key, the whole old row
    (FULL: any one of the equal rows)."""
    if pk and all(column in identity for column in pk):
        return tuple(_freeze(identity[column]) for column in pk)
    wanted = {column: _freeze(value) for column, value in identity.items()}
    for place, row in rows.items():
        if all(_freeze(row.get(column)) == value for column, value in wanted.items()):
            return place
    return None


# --- the expected change log ---------------------------------------------------------------------

Change = tuple[int | None, str, str | None, str | None]  # commit_lsn (None: unknown), action, schema, table
ACTION_NAMES = {"I": "insert", "U": "update", "D": "delete", "T": "truncate", "M": "message", "R": "read"}


def expected_changes(snapshot_lines: list[str], decoded: list[str]) -> list[tuple[tuple, Change]]:
    """``(group, change)`` for every change ``sequin_events`` must hold, in the order it must hold them.

    Taken from what Postgres decoded, not from any rule about positions: the snapshot's reads in file
    order, then every change a slot created at the snapshot's point decodes, in decode order (``decoded``
    is a slot's ``pg_logical_slot_peek_changes`` from before that point). A transaction's changes carry
    its commit LSN; a non-transactional message carries none, as its position is the ingestion's to
    choose so long as it orders where Postgres decoded it. wal2json orders every change: each is a
    group of its own."""
    snapshot = [json.loads(line) for line in snapshot_lines]
    snapshot_lsn = parse_lsn(snapshot[0]["lsn"])
    changes: list[tuple[tuple, Change]] = [
        (("read", n), (snapshot_lsn, "read", r["schema"], r["table"])) for n, r in enumerate(snapshot[1:-1])
    ]
    current: list[dict] | None = None
    for line in decoded:
        record = json.loads(line)
        action = record["action"]
        if action == "B":
            current = []
        elif action == "C":
            commit_lsn = parse_lsn(record["lsn"])
            # The slot starts at the snapshot's point, just above the snapshot's own position.
            if commit_lsn > snapshot_lsn:
                changes.extend(
                    (("change", commit_lsn, idx), (commit_lsn, ACTION_NAMES[r["action"]], *_table_of(r)))
                    for idx, r in enumerate(current or [])
                )
            current = None
        elif current is not None:
            current.append(record)
        elif action == "M" and parse_lsn(record["lsn"]) > snapshot_lsn + 1:
            # Reported at the end of its record: ending at the slot's start, it began before it.
            changes.append((("message", record["lsn"]), (None, "message", None, None)))
    return changes


def _table_of(record: dict) -> tuple[str | None, str | None]:
    return (record.get("schema"), record.get("table")) if record["action"] != "M" else (None, None)


def compare_sequences(expected: list[tuple[tuple, Change]], actual: list[Change]) -> list[str]:
    """Where ``actual`` (``sequin_events`` in ``seq`` order) departs from ``expected``: consecutive
    expected changes of one group may come in any order among themselves, nothing else may."""
    problems: list[str] = []
    position = 0
    for group, members in itertools.groupby(expected, key=lambda pair: pair[0]):
        wanted = sorted((change for _group, change in members), key=repr)
        got = sorted(actual[position : position + len(wanted)], key=repr)
        if got != wanted:
            problems.append(
                f"change {position}: expected {_short(wanted, 200)}, got {_short(got, 200)} (group {group})"
            )
            return problems  # everything after a shift differs too
        position += len(wanted)
    if position != len(actual):
        problems.append(f"{len(actual) - position} changes beyond the expected: {_short(actual[position:])}")
    return problems
