"""The initial snapshot (``--snapshot``): every user table's rows as one wal2json-shaped transaction.

The slot is created through a replication connection with ``EXPORT_SNAPSHOT``; the tables are read
inside that snapshot and landed as ``R`` (read) records at the slot's consistent point, in a file
whose name sorts before every streamed file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import errors, sql
from psycopg.types.string import TextLoader

from python_jobs.capture.files import has_snapshot, publish, snapshot_file_name, write_temporary
from python_jobs.capture.session import CaptureError, connect, first_line, pin_settings
from python_jobs.capture.slot import (
    PLUGIN,
    SLOT_ATTEMPTS,
    explain_plugin_error,
    validate_or_drop,
)
from python_jobs.lsn import format_lsn, parse_lsn

# wal2json prints these types as bare JSON numbers, booleans as true/false, bytea as hex without the
# \x prefix, and every other type as its text output. It prints NaN and infinities as null, which
# loses them; the snapshot keeps them as their text instead ("NaN", "Infinity", "-Infinity").
NUMBER_TYPE_OIDS = frozenset({20, 21, 23, 26, 700, 701, 1700})  # int8 int2 int4 oid float4 float8 numeric
BOOL_TYPE_OID = 16
BYTEA_TYPE_OID = 17
READ_ATTEMPTS = 5


@dataclass
class TableShape:
    schema: str
    table: str
    columns: list[tuple[str, str, int]]  # name, format_type, type oid; in attnum order
    pk: list[tuple[str, str]]  # name, format_type; in attnum order, as wal2json lists them


def snapshot_unless_landed(dsn: str, slot: str, slot_exists: bool, landing_dir: Path, log) -> int:
    """Take the snapshot when ``slot`` is new; when it is not, the earlier run's snapshot must be in
    ``landing_dir`` for the stream to continue it. The rows landed now (0 when none)."""
    if not slot_exists:
        return take_snapshot(dsn, slot, landing_dir, log)
    if not has_snapshot(landing_dir):
        raise CaptureError(
            f"--snapshot: slot '{slot}' already exists but no snapshot was landed in "
            f"{landing_dir}; drop the slot (select pg_drop_replication_slot(...)) to start over, "
            "or run without --snapshot"
        )
    log(f"snapshot already landed in {landing_dir}; streaming from slot '{slot}'")
    return 0


def take_snapshot(dsn: str, slot: str, landing_dir: Path, log) -> int:
    """Create ``slot`` with an exported snapshot and land every table's rows as of its start.

    The snapshot file is published only once the new slot has decoded past every transaction that
    was open when it was created (see ``validate_new_slot``); a slot that cannot is dropped and the
    snapshot taken again."""
    for attempt in range(1, SLOT_ATTEMPTS + 1):
        temporary, consistent_point, rows_read = _snapshot_once(dsn, slot, landing_dir)
        try:
            with connect(dsn) as conn:
                pin_settings(conn)
                if validate_or_drop(conn, slot, log):
                    path = publish(temporary, snapshot_file_name(consistent_point))
                    log(f"snapshot: {rows_read} rows at {format_lsn(consistent_point)} -> {path.name}")
                    return rows_read
        finally:
            temporary.unlink(missing_ok=True)
        log(
            f"snapshot attempt {attempt} of {SLOT_ATTEMPTS}: dropped slot '{slot}', taking the snapshot again"
        )
    raise CaptureError(f"slot '{slot}' could not decode its first transactions in {SLOT_ATTEMPTS} attempts")


def _snapshot_once(dsn: str, slot: str, landing_dir: Path) -> tuple[Path, int, int]:
    """Create ``slot`` exporting a snapshot, and write the snapshot to an unpublished temporary file."""
    try:
        repl = psycopg.connect(dsn, autocommit=True, replication="database")
    except psycopg.OperationalError as exc:
        raise CaptureError(f"cannot open a replication connection: {first_line(exc)}") from exc
    try:
        consistent_point, snapshot_name = _create_exporting_slot(repl, slot)
        # The exported snapshot lives while the replication connection stays idle and open.
        reader = connect(dsn)
        try:
            pin_settings(reader)
            reader.autocommit = False
            lines, rows_read = _read_snapshot(reader, snapshot_name, consistent_point)
        finally:
            reader.close()
    finally:
        repl.close()
    return write_temporary(landing_dir, lines), consistent_point, rows_read


def _read_snapshot(reader: psycopg.Connection, snapshot_name: str, lsn: int) -> tuple[list[str], int]:
    """The snapshot's lines, read inside the exported snapshot.

    The tables are read one by one and each stays locked (shared) until the end: a transaction that
    locks them exclusively in another order (``truncate b, a``) can deadlock with the read, and
    Postgres may cancel the read to break it. The exported snapshot outlives the cancelled
    transaction, so the read starts again inside it."""
    attempt = 1
    while True:
        try:
            reader.execute("set transaction isolation level repeatable read, read only")
            reader.execute(sql.SQL("set transaction snapshot {}").format(sql.Literal(snapshot_name)))
            timestamp = reader.execute("select now()::text").fetchone()[0]
            result = snapshot_lines(reader, lsn, timestamp)
            reader.rollback()
            return result
        except errors.DeadlockDetected as exc:
            reader.rollback()
            if attempt == READ_ATTEMPTS:
                message = f"snapshot: reading the tables deadlocked {attempt} times: {first_line(exc)}"
                raise CaptureError(message) from exc
            attempt += 1


def _create_exporting_slot(repl: psycopg.Connection, slot: str) -> tuple[int, str]:
    """The snapshot's position and the exported snapshot's name."""
    try:
        row = repl.execute(
            sql.SQL("CREATE_REPLICATION_SLOT {} LOGICAL {} EXPORT_SNAPSHOT").format(
                sql.Identifier(slot), sql.Identifier(PLUGIN)
            )
        ).fetchone()
    except psycopg.Error as exc:
        raise (
            explain_plugin_error(exc) or CaptureError(f"cannot create slot '{slot}': {first_line(exc)}")
        ) from exc
    # The snapshot holds what committed before the consistent point, and a streamed transaction
    # may commit exactly at it: the snapshot takes the position just below, so the two positions
    # never collide and the snapshot orders first.
    return parse_lsn(row[1]) - 1, row[2]


def user_tables(conn: psycopg.Connection) -> list[TableShape]:
    """Every ordinary table the slot decodes, with its columns and primary key from the catalog."""
    rows = conn.execute(
        """
        select n.nspname, c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.atttypid::int,
               coalesce(a.attnum = any(i.indkey), false)
        from pg_class c
        join pg_namespace n on n.oid = c.relnamespace
        join pg_attribute a on a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped
        left join pg_index i on i.indrelid = c.oid and i.indisprimary
        where c.relkind = 'r'
          and n.nspname not in ('pg_catalog', 'information_schema')
          and n.nspname not like 'pg\\_%%'
        order by n.nspname, c.relname, a.attnum
        """
    ).fetchall()
    shapes: dict[tuple[str, str], TableShape] = {}
    for schema, table, column, type_name, type_oid, in_pk in rows:
        shape = shapes.setdefault((schema, table), TableShape(schema, table, [], []))
        shape.columns.append((column, type_name, type_oid))
        if in_pk:
            shape.pk.append((column, type_name))
    return list(shapes.values())


def render_value(text: str | None, type_oid: int) -> str:
    """A column value as wal2json 2.5 writes it (see pg_decode_write_value), except that NaN and
    infinities, which wal2json turns into null, stay their text."""
    if text is None:
        return "null"
    if type_oid in NUMBER_TYPE_OIDS:
        if text.lower().lstrip("-") in ("nan", "infinity"):
            return json.dumps(text)
        return text
    if type_oid == BOOL_TYPE_OID:
        return "true" if text in ("t", "true") else "false"
    if type_oid == BYTEA_TYPE_OID:
        return json.dumps(text[2:], ensure_ascii=False)
    return json.dumps(text, ensure_ascii=False)


def _json(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def snapshot_lines(conn: psycopg.Connection, lsn: int, timestamp: str) -> tuple[list[str], int]:
    """The snapshot as one wal2json-shaped transaction; ``conn`` is inside the exported snapshot."""
    head = f'"xid":0,"timestamp":{_json(timestamp)},"lsn":{_json(format_lsn(lsn))}'
    lines = ['{"action":"B",' + head + ',"snapshot":true}']
    for shape in user_tables(conn):
        lines.extend(_read_lines(conn, shape, head))
    lines.append('{"action":"C",' + head + ',"snapshot":true}')
    return lines, len(lines) - 2


def _read_lines(conn: psycopg.Connection, shape: TableShape, head: str) -> list[str]:
    """One ``R`` line per row of the table, its columns rendered as wal2json renders an insert's."""
    columns = sql.SQL(", ").join(sql.Identifier(name) for name, _type, _oid in shape.columns)
    query = sql.SQL("select {} from {}.{}").format(
        columns, sql.Identifier(shape.schema), sql.Identifier(shape.table)
    )
    pk = ",".join(f'{{"name":{_json(name)},"type":{_json(type_name)}}}' for name, type_name in shape.pk)
    prefix = (
        '{"action":"R",' + head + f',"schema":{_json(shape.schema)},"table":{_json(shape.table)},"columns":['
    )
    # As wal2json: "pk": [] for a table without a key (an absent "pk" means include-pk was off).
    suffix = f'],"pk":[{pk}]}}'
    cursor = conn.cursor()
    # Fetch every column as the text its output function produces, as wal2json does.
    for _name, _type, oid in shape.columns:
        cursor.adapters.register_loader(oid, TextLoader)
    lines = []
    for values in cursor.execute(query):
        rendered = ",".join(
            f'{{"name":{_json(name)},"type":{_json(type_name)},"value":{render_value(value, oid)}}}'
            for (name, type_name, oid), value in zip(shape.columns, values, strict=True)
        )
        lines.append(prefix + rendered + suffix)
    return lines
