"""The Debezium writer: a transaction as Debezium 2.x Postgres change events, Kafka key beside value."""

from __future__ import annotations

import json

from testkit.connect_schema import connect_field
from testkit.sample.model import (
    NUMERIC,
    SCHEMA,
    TABLES,
    TEXT,
    TIMESTAMPTZ,
    W_DELETE,
    W_INSERT,
    W_TRUNCATE,
    Change,
    Model,
    Transaction,
    fraction,
    numeric_text,
    whole_seconds,
)
from testkit.sample.sink import CHANGE

DEBEZIUM = "debezium"
DEBEZIUM_VERSION = "2.7.3.Final"
DBZ_CREATE, DBZ_UPDATE, DBZ_DELETE, DBZ_READ, DBZ_TRUNCATE = "c", "u", "d", "r", "t"
DBZ_UNAVAILABLE = "__debezium_unavailable_value"


def debezium_timestamptz(micros: int) -> str:
    """Debezium's ``io.debezium.time.ZonedTimestamp`` (ISO-8601, UTC as ``Z``)."""
    return whole_seconds(micros).strftime("%Y-%m-%dT%H:%M:%S") + fraction(micros) + "Z"


def _debezium_value(kind: str, value) -> str:
    if value is None:
        return "null"
    if kind == TEXT:
        return '"' + value + '"'
    if kind == NUMERIC:  # decimal.handling.mode=string
        return '"' + numeric_text(value) + '"'
    if kind == TIMESTAMPTZ:
        return '"' + debezium_timestamptz(value) + '"'
    return str(value)


class DebeziumFormat:
    """Debezium 2.x Postgres connector, JSON converter with schemas, key and value per line.

    Connector settings this mimics: ``decimal.handling.mode=string``, default ``time.precision.mode``
    (timestamptz as ``ZonedTimestamp``), ``column.propagate.source.type=.*`` (testkit.connect_schema),
    REPLICA IDENTITY DEFAULT (no ``before`` on updates; a
    delete's ``before`` holds the key, other columns null), no transaction metadata topic, and a
    primary-key change emitted as a delete of the old key and a create of the new one (the tombstone
    between them is dropped by the sink).
    """

    def __init__(self, server: str = "shop", db: str = "shop"):
        self.server = server
        self.db = db
        self.last_commit_lsn: int | None = None  # null until the first commit after a snapshot
        self.key_schemas = {t: self._schema(t, "Key", key_only=True) for t in TABLES}
        self.value_schemas = {t: self._schema(t, "Envelope") for t in TABLES}

    def _schema(self, table: str, kind: str, key_only: bool = False) -> str:
        """A table's key schema, or its value envelope's (abridged to the row's fields and op), as JSON."""
        cols, key_cols = TABLES[table]
        name = f"{self.server}.{SCHEMA}.{table}"
        fields = [
            connect_field(c, t, optional=c not in key_cols) for c, t in cols if not key_only or c in key_cols
        ]
        row = {"type": "struct", "optional": not key_only, "name": f"{name}.{'Key' if key_only else 'Value'}"}
        if not key_only:
            op = {"type": "string", "optional": False, "field": "op"}
            envelope = [
                {**row, "fields": fields, "field": "before"},
                {**row, "fields": fields, "field": "after"},
                op,
            ]
            row = {"type": "struct", "optional": False, "name": f"{name}.{kind}", "fields": envelope}
        else:
            row["fields"] = fields
        return json.dumps(row, separators=(",", ":"))

    @staticmethod
    def _row(table: str, row: dict, unsent: frozenset = frozenset()) -> str:
        parts = []
        for name, kind in TABLES[table][0]:
            value = f'"{DBZ_UNAVAILABLE}"' if name in unsent else _debezium_value(kind, row[name])
            parts.append(f'"{name}":{value}')
        return "{" + ",".join(parts) + "}"

    @staticmethod
    def _key(table: str, key: tuple) -> str:
        cols, key_cols = TABLES[table]
        kinds = dict(cols)
        inner = ",".join(f'"{c}":{_debezium_value(kinds[c], v)}' for c, v in zip(key_cols, key, strict=True))
        return "{" + inner + "}"

    def _key_only_row(self, table: str, key: tuple) -> str:
        cols, key_cols = TABLES[table]
        values = dict(zip(key_cols, key, strict=True))
        return self._row(table, {c: values.get(c) for c, _ in cols})

    def _source(self, table: str, lsn: int, txid: int, ts_ms: int, snapshot: str, last_commit) -> str:
        seq0 = "null" if last_commit is None else f'\\"{last_commit}\\"'
        return (
            f'{{"version":"{DEBEZIUM_VERSION}","connector":"postgresql","name":"{self.server}",'
            f'"ts_ms":{ts_ms},"snapshot":"{snapshot}","db":"{self.db}",'
            f'"sequence":"[{seq0},\\"{lsn}\\"]","ts_us":{ts_ms * 1000},"ts_ns":{ts_ms * 1_000_000},'
            f'"schema":"{SCHEMA}","table":"{table}","txId":{txid},"lsn":{lsn},"xmin":null}}'
        )

    def _line(self, table: str, key: str, before: str, after: str, source: str, op: str, ts_ms: int) -> str:
        """Key and value, each in the schema wrapper (a truncate's key is null)."""
        wrapped_key = "null" if key == "null" else f'{{"schema":{self.key_schemas[table]},"payload":{key}}}'
        return (
            f'{{"key":{wrapped_key},"value":{{"schema":{self.value_schemas[table]},"payload":'
            f'{{"before":{before},"after":{after},"source":{source},'
            f'"transaction":null,"op":"{op}","ts_ms":{ts_ms},"ts_us":{ts_ms * 1000},'
            f'"ts_ns":{ts_ms * 1_000_000}}}}}}}'
        )

    def snapshot(self, model: Model, lsn: int, txid: int, micros: int) -> list[tuple[int, str, str]]:
        """The initial snapshot: every row of every table read at one LSN, ``op = r``."""
        rows = [(t, key, row) for t in TABLES for key, row in sorted(model.rows[t].items())]
        ts_ms = micros // 1000
        out = []
        for n, (table, key, row) in enumerate(rows):
            flag = "first" if n == 0 else "last" if n == len(rows) - 1 else "true"
            source = self._source(table, lsn, txid, ts_ms, flag, None)
            line = self._line(
                table, self._key(table, key), "null", self._row(table, row), source, DBZ_READ, ts_ms + 5
            )
            out.append((lsn, line, CHANGE))
        return out

    def render(self, txn: Transaction) -> list[tuple[int, str, str]]:
        """The transaction's change events as ``(lsn, line, kind)``; Debezium writes no B or C."""
        ts_ms = txn.commit_micros // 1000
        out = []
        for ch in txn.changes:
            source = self._source(ch.table, ch.lsn, txn.xid, ts_ms, "false", self.last_commit_lsn)
            out.extend((ch.lsn, line, CHANGE) for line in self._events(ch, source, ts_ms + 3))
        self.last_commit_lsn = txn.commit_lsn
        return out

    def _events(self, ch: Change, source: str, emitted: int) -> list[str]:
        if ch.action == W_TRUNCATE:
            return [self._line(ch.table, "null", "null", "null", source, DBZ_TRUNCATE, emitted)]
        if ch.action == W_DELETE:
            return [self._delete(ch.table, ch.old_key, source, emitted)]
        new_key = Model.key_of(ch.table, ch.row)
        key, after = self._key(ch.table, new_key), self._row(ch.table, ch.row, ch.unsent)
        if ch.action == W_INSERT:
            return [self._line(ch.table, key, "null", after, source, DBZ_CREATE, emitted)]
        if new_key != ch.old_key:
            delete = self._delete(ch.table, ch.old_key, source, emitted)
            return [delete, self._line(ch.table, key, "null", after, source, DBZ_CREATE, emitted)]
        return [self._line(ch.table, key, "null", after, source, DBZ_UPDATE, emitted)]

    def _delete(self, table: str, key: tuple, source: str, emitted: int) -> str:
        before = self._key_only_row(table, key)
        return self._line(table, self._key(table, key), before, "null", source, DBZ_DELETE, emitted)

    def malformed(self, txn: Transaction) -> list[str]:
        """The transaction's first event cut short, and stray braces. Rendering it here must not
        advance ``last_commit_lsn``: the transaction itself is rendered next."""
        saved = self.last_commit_lsn
        full = self.render(txn)[0][1]
        self.last_commit_lsn = saved
        return [full[: len(full) // 3], "}{"]
