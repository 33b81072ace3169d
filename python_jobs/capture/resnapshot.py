"""Re-snapshot one table while the stream runs (``--resnapshot schema.table``): DBLog's watermarks.

1. **Reset.** A transactional logical message ``{"kind": "reset", …}`` (prefix ``wal_lake.resnapshot``)
   is written into the WAL. When the capture decodes it, it adds a ``T`` (truncate) line for the
   table right after the message, inside the message's transaction: the ingestion lands it as the
   table's truncate, which voids every earlier touch of the table. The line is added whenever such a
   message of this slot is decoded, so a replay of it is the same line at the same position.
2. **Chunks.** The table is read in primary-key order, ``--resnapshot-chunk-rows`` rows at a time,
   each read between a low and a high watermark message written into the WAL (each its own
   transaction). The chunk's rows wait in memory while the stream is decoded up to the high
   watermark; a row whose key a change of the table touched between the two watermarks is dropped
   (the stream holds that change, which is as new as the read or newer), and so is the whole chunk
   when the table was truncated in between. The others are added as ``R`` (read) lines inside the
   high watermark's transaction, after its message: they land at its position, after every change
   committed before it and before every change committed after.
3. **State.** ``.resnapshot-state.json`` beside the landing files (hidden) holds the tables still to
   do, whether each was reset and the last key of its last landed chunk. A rerun (with or without
   ``--resnapshot``) resumes there, without a second reset; a chunk read but not landed is read again.

docs/capture.md ("Re-snapshot one table") is the contract.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql

from python_jobs.capture.files import read_json_file, sync_directory, write_durably
from python_jobs.capture.session import CaptureError
from python_jobs.capture.slot import settled_lsn
from python_jobs.capture.snapshot import (
    PROGRESS_SECONDS,
    TableShape,
    read_line_sql,
    render_value_sql,
    user_tables,
)
from python_jobs.lsn import format_lsn

PREFIX = "wal_lake.resnapshot"
STATE_FILE = ".resnapshot-state.json"
DEFAULT_CHUNK_ROWS = 10000
# The R lines are rendered by Postgres before their transaction exists: this head is replaced by the
# high watermark's xid, time and position when they are added to it.
_HEAD_MARK = '"xid":0,"lsn":"0/0"'
_TEMPLATE_START = '{"action":"R",' + _HEAD_MARK
_ROW_ACTIONS = ('{"action":"I"', '{"action":"U"', '{"action":"D"', '{"action":"T"')


# One part of a qualified name: "a quoted name" (a quote inside doubled), or a name without dots
# and quotes, taken as Postgres stores it.
_NAME_PART = re.compile(r'"((?:[^"]|"")+)"|([^."]+)')


def parse_table(name: str) -> tuple[str, str]:
    """``schema.table`` -> (schema, table). A part without dots or quotes is a name as Postgres
    stores it (``public.Orders`` is the table created as ``"Orders"``); a part in double quotes is
    the name inside them, a doubled quote standing for one: ``"Sales Dept"."Order.Lines"``."""
    parts, position = [], 0
    while (found := _NAME_PART.match(name, position)) is not None:
        quoted, bare = found.groups()
        parts.append(quoted.replace('""', '"') if quoted is not None else bare)
        position = found.end()
        if position == len(name) or name[position] != ".":
            break
        position += 1
    if len(parts) != 2 or position != len(name):
        raise CaptureError(
            f"--resnapshot {name!r}: give the table as schema.table; a name with a dot or a quote in "
            'double quotes, a quote in it doubled ("Sales Dept"."Order.Lines")'
        )
    return parts[0], parts[1]


def resolve(conn: psycopg.Connection, name: str) -> TableShape:
    """The table's shape, or an error naming it and why it cannot be re-snapshotted."""
    schema, table = parse_table(name)
    shape = next((s for s in user_tables(conn) if (s.schema, s.table) == (schema, table)), None)
    if shape is None:
        raise CaptureError(
            f"--resnapshot {name}: no such table (an ordinary table; re-snapshot a partitioned "
            "table's partitions one by one)"
        )
    if shape.unlogged:
        raise CaptureError(f"--resnapshot {name}: the table is unlogged, no slot streams it")
    if not shape.pk:
        raise CaptureError(
            f"--resnapshot {name}: the table has no primary key; a re-snapshot reads by key and tells "
            "the stream's changes apart by key (add one, or capture the database again as a new "
            "source with --snapshot)"
        )
    identity = conn.execute(
        "select c.relreplident from pg_class c join pg_namespace n on n.oid = c.relnamespace"
        " where n.nspname = %s and c.relname = %s",
        (schema, table),
    ).fetchone()[0]
    if identity not in ("d", "f"):
        what = "NOTHING" if identity == "n" else "USING INDEX"
        raise CaptureError(
            f"--resnapshot {name}: the table has REPLICA IDENTITY {what}, so its updates and deletes "
            "do not carry the primary key a re-snapshot needs to see which rows changed while it "
            "read (alter table … replica identity default)"
        )
    return shape


# --- the watcher: what the capture adds to the stream ---------------------------------------------


@dataclass
class Chunk:
    """A chunk read between its watermarks, waiting for the high one to be decoded."""

    run: str
    number: int
    shape: TableShape
    lines: list[str] = field(default_factory=list)
    keys: list[tuple] = field(default_factory=list)
    open: bool = False
    changed: set[tuple] = field(default_factory=set)
    truncated: bool = False
    landed: int | None = None

    @property
    def dropped(self) -> int:
        return len(self.lines) - (self.landed or 0)


def _json(value) -> str:
    return json.dumps(value, ensure_ascii=False)


def _values(columns: list[dict] | None) -> dict:
    return {column["name"]: column.get("value") for column in columns or []}


def row_key(values: dict, key_columns: list[str]) -> tuple | None:
    if not all(name in values for name in key_columns):
        return None
    return tuple(values[name] for name in key_columns)


# Values compared as the text wal2json wrote them (the R lines render them the same way).
_DECODER = json.JSONDecoder(parse_float=str, parse_int=str)


def _loads(line: str):
    return _DECODER.decode(line)


def key_value(rendered: str):
    """A key value as a chunk's query renders it, as ``_loads`` gives the stream's: a number's text
    is itself (the hot path: no parse)."""
    return _loads(rendered) if rendered[:1] in ('"', "t", "f", "n") else rendered


class Watcher:
    """Rewrites the capture's batches (whole transactions, in WAL order) before they are written:
    a ``T`` line after each reset message of this slot, the current chunk's rows after its high
    watermark."""

    def __init__(self, slot: str) -> None:
        self.slot = slot
        self.chunk: Chunk | None = None
        self.resets: list[tuple[str, str]] = []  # (table, position) of each reset this process wrote out

    def __call__(self, lines: list[str]) -> list[str]:
        out: list[str] = []
        begin: dict | None = None
        chunk = self.chunk
        for line in lines:
            out.append(line)
            if line.startswith('{"action":"B"'):
                begin = json.loads(line)
            elif line.startswith('{"action":"M"'):
                self._message(json.loads(line), begin, out)
            elif chunk is not None and chunk.open and line.startswith(_ROW_ACTIONS):
                self._change(_loads(line), chunk)
        return out

    def _change(self, record: dict, chunk: Chunk) -> None:
        if (record.get("schema"), record.get("table")) != (chunk.shape.schema, chunk.shape.table):
            return
        if record["action"] == "T":
            chunk.truncated = True
            return
        names = [name for name, _type in chunk.shape.pk]
        for values in (_values(record.get("columns")), _values(record.get("identity"))):
            key = row_key(values, names)
            if key is not None:
                chunk.changed.add(key)

    def _message(self, record: dict, begin: dict | None, out: list[str]) -> None:
        if record.get("prefix") != PREFIX or not record.get("transactional") or begin is None:
            return
        try:
            content = json.loads(record.get("content") or "")
        except ValueError:
            return
        if not isinstance(content, dict) or content.get("slot") != self.slot:
            return
        kind = content.get("kind")
        stamp = _json(begin.get("timestamp"))
        head = f'"xid":{_json(record["xid"])},"timestamp":{stamp},"lsn":{_json(record["lsn"])}'
        if kind == "reset":
            out.append(
                '{"action":"T",' + head + f',"schema":{_json(content.get("schema"))},'
                f'"table":{_json(content.get("table"))},"resnapshot":true}}'
            )
            self.resets.append((f"{content.get('schema')}.{content.get('table')}", record["lsn"]))
            return
        chunk = self.chunk
        if chunk is None or (content.get("run"), content.get("chunk")) != (chunk.run, chunk.number):
            return  # a watermark of a run that stopped: its rows are gone with it
        if kind == "low":
            chunk.open = True
        elif kind == "high" and chunk.open:
            chunk.open = False
            kept = 0
            if not chunk.truncated:
                start = '{"action":"R",' + head
                for line, key in zip(chunk.lines, chunk.keys, strict=True):
                    if key not in chunk.changed:
                        out.append(start + line[len(_TEMPLATE_START) :])
                        kept += 1
            chunk.landed = kept


# --- the state file -------------------------------------------------------------------------------


def read_state(landing_dir: Path) -> dict | None:
    return read_json_file(landing_dir / STATE_FILE, "the re-snapshot's state file")


def write_state(landing_dir: Path, state: dict) -> None:
    if state["queue"]:
        write_durably(landing_dir, STATE_FILE, [json.dumps(state)])
    elif (landing_dir / STATE_FILE).exists():
        (landing_dir / STATE_FILE).unlink()
        sync_directory(landing_dir)


def pending_queue(landing_dir: Path, slot: str, requested: list[str]) -> dict:
    """The state: tables left unfinished by an earlier run first (resumed), then the ones asked now."""
    state = read_state(landing_dir) or {"slot": slot, "queue": []}
    if state.get("slot") != slot:
        raise CaptureError(
            f"{landing_dir / STATE_FILE} belongs to an unfinished re-snapshot of slot "
            f"'{state.get('slot')}', not '{slot}'; rerun with --slot {state.get('slot')}, or remove it"
        )
    queued = {entry["table"] for entry in state["queue"]}
    for name in requested:
        if name not in queued:
            state["queue"].append({"table": name, "reset_lsn": None, "after": None, "chunks": 0, "rows": 0})
            queued.add(name)
    return state


# --- running it -----------------------------------------------------------------------------------


@dataclass
class Resnapshot:
    """What a re-snapshot needs from the capture: its session (which holds the slot), the slot,
    the watcher installed on every drain, and ``drain(upto_lsn)``, which lands the stream up to a
    position (True unless stopped)."""

    conn: psycopg.Connection
    slot: str
    landing_dir: Path
    watcher: Watcher
    drain: Callable[[int], None]
    stop: threading.Event
    log: Callable[[str], None]
    chunk_rows: int = DEFAULT_CHUNK_ROWS

    def run(self, requested: list[str]) -> int:
        """Re-snapshot the tables asked for, after any an earlier run left unfinished; the rows landed
        (0 when stopped before any)."""
        shapes = {name: resolve(self.conn, name) for name in requested}
        state = pending_queue(self.landing_dir, self.slot, requested)
        if not state["queue"]:
            return 0
        for entry in state["queue"]:
            if entry["table"] not in shapes:
                try:
                    shapes[entry["table"]] = resolve(self.conn, entry["table"])
                except CaptureError as exc:
                    raise CaptureError(
                        f"an unfinished re-snapshot in {self.landing_dir / STATE_FILE} cannot go on: {exc}; "
                        "remove the file to give it up (the table stays reset up to its last chunk)"
                    ) from exc
        write_state(self.landing_dir, state)
        rows = 0
        while state["queue"] and not self.stop.is_set():
            entry = state["queue"][0]
            rows += self.table(shapes[entry["table"]], entry, state)
            if entry.get("done"):
                state["queue"].pop(0)
                write_state(self.landing_dir, state)
        return rows

    def emit(self, content: dict) -> None:
        self.conn.execute(
            "select pg_logical_emit_message(true, %s, %s)",
            (PREFIX, json.dumps({"slot": self.slot, **content}, ensure_ascii=False)),
        )

    def table(self, shape: TableShape, entry: dict, state: dict) -> int:
        name = shape.name
        started = time.monotonic()
        if entry["reset_lsn"] is None:
            resets = len(self.watcher.resets)
            self.emit({"kind": "reset", "schema": shape.schema, "table": shape.table})
            upto = settled_lsn(self.conn)
            self.drain(upto)
            if self.stop.is_set() and len(self.watcher.resets) == resets:
                return 0  # the reset lands with the next run; this one asks again (harmless)
            landed = [lsn for table, lsn in self.watcher.resets[resets:] if table == name]
            if not landed:
                raise CaptureError(
                    f"--resnapshot {name}: the reset message was not decoded up to {format_lsn(upto)}"
                )
            entry["reset_lsn"] = landed[-1]
            write_state(self.landing_dir, state)
            self.log(f"resnapshot: {name}: reset at {entry['reset_lsn']}")
        else:
            self.log(
                f"resnapshot: {name}: resuming after {entry['chunks']} chunks ({entry['rows']:,} rows), "
                f"reset at {entry['reset_lsn']}"
            )
        run = uuid.uuid4().hex
        rows_now = dropped = 0
        next_report = started + PROGRESS_SECONDS
        while not self.stop.is_set():
            chunk = Chunk(run, entry["chunks"] + 1, shape)
            self.watcher.chunk = chunk
            self.emit({"kind": "low", "run": run, "chunk": chunk.number, "table": name})
            selected = self.conn.execute(self.chunk_query(shape, entry["after"])).fetchall()
            self.emit({"kind": "high", "run": run, "chunk": chunk.number, "table": name})
            width = len(shape.pk)
            for line, *rendered in selected:
                chunk.lines.append(line)
                chunk.keys.append(tuple(key_value(value) for value in rendered[:width]))
            self.drain(settled_lsn(self.conn))
            self.watcher.chunk = None
            if chunk.landed is None:
                if self.stop.is_set():
                    break  # read again by the next run
                raise CaptureError(
                    f"--resnapshot {name}: chunk {chunk.number}'s high watermark was not decoded"
                )
            rows_now += chunk.landed
            dropped += chunk.dropped
            entry["chunks"] = chunk.number
            entry["rows"] += chunk.landed
            if selected:
                entry["after"] = list(selected[-1][1 + width :])
            if len(selected) < self.chunk_rows:
                entry["done"] = True
            write_state(self.landing_dir, state)
            if entry.get("done"):
                seconds = time.monotonic() - started
                self.log(
                    f"resnapshot: {name}: {entry['rows']:,} rows in {entry['chunks']} chunks"
                    f" ({dropped:,} dropped as changed by the stream meanwhile) in {seconds:.1f} s"
                    f" ({rows_now / max(seconds, 1e-9):,.0f} rows/s), reset at {entry['reset_lsn']}"
                )
                break
            if time.monotonic() >= next_report:
                self.log(
                    progress_line(name, entry, shape.estimated_rows, rows_now, time.monotonic() - started)
                )
                next_report += PROGRESS_SECONDS
        return rows_now

    def chunk_query(self, shape: TableShape, after: list[str] | None) -> sql.Composed:
        """The next chunk, in key order after the key ``after`` (the texts of the last chunk's last
        key): each row's ``R`` line (its head a placeholder), its key values as the line renders them
        (to compare with the stream's), and its key's text (for the next chunk's ``after``). Every
        value is a literal: the query holds ``%s`` of its own (``format('%s', …)``), so it is sent
        without parameters."""
        keys = [sql.Identifier(column) for column, _type in shape.pk]
        oids = {name: oid for name, _type, oid in shape.columns}
        rendered = sql.SQL(", ").join(
            sql.SQL("{} as {}").format(
                render_value_sql(sql.Identifier(column), oids[column]), sql.Identifier(f"_wal_lake_value_{n}")
            )
            for n, (column, _type) in enumerate(shape.pk)
        )
        key_list = sql.SQL(", ").join(keys)
        where = sql.SQL("")
        if after is not None:
            typed = sql.SQL(", ").join(
                sql.SQL("{}::{}").format(sql.Literal(text), sql.SQL(type_name))
                for text, (_column, type_name) in zip(after, shape.pk, strict=True)
            )
            where = sql.SQL(" where ({}) > ({})").format(key_list, typed)
        # Aliased: an output column named like a key column would be what ``order by`` sorts (as text).
        texts = sql.SQL(", ").join(
            sql.SQL("{}::text as {}").format(key, sql.Identifier(f"_wal_lake_key_{n}"))
            for n, key in enumerate(keys)
        )
        return sql.SQL("select {}, {}, {} from only {}.{}{} order by {} limit {}").format(
            read_line_sql(shape, _HEAD_MARK),
            rendered,
            texts,
            sql.Identifier(shape.schema),
            sql.Identifier(shape.table),
            where,
            key_list,
            sql.Literal(self.chunk_rows),
        )


def progress_line(name: str, entry: dict, estimated: int, rows_now: int, seconds: float) -> str:
    rate = rows_now / max(seconds, 1e-9)
    line = (
        f"resnapshot: {name}: {entry['chunks']} chunks, {entry['rows']:,} rows"
        f" in {seconds:.0f} s ({rate:,.0f} rows/s)"
    )
    if estimated > entry["rows"] and rate > 0:
        line += f"; about {estimated:,} rows in all, {(estimated - entry['rows']) / rate:.0f} s left"
    return line
