"""What a Debezium 2.x Postgres connector would have written for the changes a wal2json slot decoded.

The end-to-end oracle lands the same live workload a second time in Debezium's form, so that both
formats meet one truth (the tables in Postgres). Each decoded change becomes the event Debezium emits
for it (JSON converter, ``decimal.handling.mode=string``, default ``time.precision.mode``):

- insert ``c``; update ``u`` (``before`` is the old row under REPLICA IDENTITY FULL, else null); a
  primary-key change a delete of the old key and a create of the new one at the same LSN, and so is
  an update whose old row holds an index's columns without the key (REPLICA IDENTITY USING INDEX:
  the old key's values are null, so it differs from the new key); delete ``d`` (``before`` holds the
  identity, other columns null, and so may the key); one truncate ``t`` per table; logical
  messages ``m`` (content base64, ``source.txId`` null outside a transaction); snapshot reads ``r``
  (``source.snapshot`` first/true/last) at the snapshot's LSN.
- An unchanged TOASTed column (absent from wal2json's update) is ``__debezium_unavailable_value``.
- ``source.sequence`` is ``[<previous commit's LSN>, <event LSN>]``; a message outside a transaction
  counts as a commit at its own LSN ``L`` (``[L, L]``, and the next transaction names ``L``), its
  record's start, which one below wal2json's (its record's end) stands for.
- Values: integers and floats as JSON numbers (NaN and infinities quoted), numeric as its text, timestamptz as
  ``io.debezium.time.ZonedTimestamp`` (ISO-8601 in UTC, ``Z``), date as ``io.debezium.time.Date``
  (days since the epoch in the proleptic Gregorian calendar, as ``LocalDate.toEpochDay``: a BC date
  is a day before 0001-01-01), json/jsonb and text as strings, a one-dimensional array as a JSON array
  of its elements so rendered. Not rendered (the oracle leaves their table out): a date's
  ``infinity`` and arrays of more than one dimension.
- Each event's row schema is the table's columns as the change sent them: a change that names a
  column the table did not have, or a column with another type, follows DDL the stream does not
  carry (a column added, altered or renamed), and from then on the table's events have that change's
  columns (the workload's tables that get such DDL have no TOASTed columns, so every insert and
  update names each column).

Every key and value is in the JSON converter's schema wrapper (``schemas.enable=true``): a row's
Connect schema names each column's Connect type and, as ``column.propagate.source.type=.*`` sets,
the Postgres type it was read as (``connect_field``).

``keyed`` lines carry the Kafka key beside the value (``{"key": …, "value": …}``; a keyless table's
key is null) and transaction metadata (``transaction.total_order``); their first streamed
transaction names no previous commit (null, as after a fresh snapshot). Bare lines are the value
alone, their keys declared in a table-keys file, and their first streamed transaction names the
snapshot's LSN as its previous commit: a tie with the snapshot's position. Each rendering is cut
into files with a connector restart in the middle of a transaction (the next file starts again at
that transaction's first event) and a snapshot whose reads span two files, the second also holding
the first streamed transaction.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from python_jobs.lsn import parse_lsn
from testkit.connect_schema import connect_field
from testkit.oracle import FLOAT_TYPES, INTEGER_TYPES, SPECIAL_NUMBERS, base_type, parse_pg_array

UNAVAILABLE = "__debezium_unavailable_value"
VERSION = "2.7.3.Final"
SNAPSHOT_TXID = 1


@dataclass(frozen=True)
class Event:
    """One rendered event and its place: ``group`` names the events whose relative order the format
    does not carry (bare lines: events of one transaction at one LSN, and a snapshot's reads)."""

    group: tuple
    action: str
    schema: str | None
    table: str | None
    value: dict
    key: dict | None
    columns: dict | None = None  # a row event's columns and Postgres types, as the change sent them


def debezium_value(pg_type: str, value):
    if value is None:
        return None
    kind = base_type(pg_type)
    if str(value) in SPECIAL_NUMBERS:
        return str(value)  # the JSON converter quotes NaN and infinities
    if kind in INTEGER_TYPES:
        return int(value)
    if kind in FLOAT_TYPES:
        return float(value)
    if kind == "numeric":
        return str(value)
    if kind == "boolean":
        return bool(value)
    if kind == "timestamp with time zone":
        moment = datetime.fromisoformat(str(value)).astimezone(UTC)
        return moment.isoformat().replace("+00:00", "Z")
    if kind == "date":
        return epoch_days(str(value))
    if kind.endswith("[]"):
        items = parse_pg_array(value)
        if any(isinstance(item, list) for item in items) or str(value).startswith("["):
            raise ValueError(f"no Debezium rendering for an array of more than one dimension: {value}")
        return [debezium_value(kind[:-2], item) for item in items]
    return value if isinstance(value, str) else json.dumps(value)


def epoch_days(text: str) -> int:
    """A Postgres date's text (``2026-01-01``, ``0044-03-15 BC``) as days since 1970-01-01 in the
    proleptic Gregorian calendar (Howard Hinnant's days_from_civil; year 0 is 1 BC)."""
    if text in ("infinity", "-infinity"):
        raise ValueError(f"no Debezium rendering for the date {text}")
    bc = text.endswith(" BC")
    year, month, day = (int(part) for part in text.removesuffix(" BC").split("-"))
    if bc:
        year = 1 - year
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _columns(change: dict, field: str) -> dict[str, tuple[str, object]]:
    return {c["name"]: (c["type"], c["value"]) for c in change.get(field, [])}


class Renderer:
    """Turns decoded units into events, in decode order; ``skip`` names tables left out."""

    def __init__(self, types: dict[str, dict[str, str]], keyed: bool, skip: frozenset[str] = frozenset()):
        self.types = types
        self.keyed = keyed  # and with transaction metadata, which orders a transaction's events
        self.skip = skip
        self.previous_commit: int | None = None
        self.events: list[Event] = []
        self.columns: dict[str, dict[str, str]] = {}  # each table's columns as last sent

    def _columns_now(self, table: str, change: dict) -> dict[str, str]:
        """The table's columns and types at ``change``: the ones before, unless the change names a
        column they lack or one with another type (DDL came between): then the change's."""
        sent = {c["name"]: c["type"] for c in change.get("columns", [])}
        columns = self.columns.setdefault(table, dict(self.types[table]))
        if any(columns.get(name) != pg_type for name, pg_type in sent.items()):
            columns = self.columns[table] = sent
        return columns

    def _source(self, schema, table, lsn: int, txid, ts_ms: int, snapshot: str = "false") -> dict:
        previous = None if self.previous_commit is None else str(self.previous_commit)
        return {
            "version": VERSION,
            "connector": "postgresql",
            "name": "oracle",
            "ts_ms": ts_ms,
            "snapshot": snapshot,
            "db": "oracle",
            "sequence": json.dumps([previous, str(lsn)]),
            "schema": schema,
            "table": table,
            "txId": txid,
            "lsn": lsn,
            "xmin": None,
        }

    def _row(self, columns: dict[str, str], values: dict[str, tuple[str, object]], fill: bool) -> dict:
        """All the table's ``columns``: the ones given rendered, the others null (``fill``) or unavailable."""
        row = {}
        for name in columns:
            if name in values:
                row[name] = debezium_value(values[name][0], values[name][1])
            else:
                row[name] = None if fill else UNAVAILABLE
        return row

    def _key(self, pk: list[str], row: dict) -> dict | None:
        return {name: row[name] for name in pk} if pk else None

    def _add(self, group, action, schema, table, value, key, transaction=None, columns=None) -> None:
        value = {**value, "transaction": transaction if self.keyed else None}
        self.events.append(Event(group, action, schema, table, value, key, columns))

    def snapshot(self, lsn: int, ts_ms: int, reads: list[dict]) -> None:
        reads = [r for r in reads if f"{r['schema']}.{r['table']}" not in self.skip]
        for n, read in enumerate(reads):
            table = f"{read['schema']}.{read['table']}"
            flag = "first" if n == 0 else "last" if n == len(reads) - 1 else "true"
            columns = self._columns_now(table, read)
            after = self._row(columns, _columns(read, "columns"), fill=True)
            source = self._source(read["schema"], read["table"], lsn, SNAPSHOT_TXID, ts_ms, flag)
            pk = [c["name"] for c in read.get("pk", [])]
            value = {"before": None, "after": after, "source": source, "op": "r", "ts_ms": ts_ms}
            key = self._key(pk, after)
            self._add(("snapshot", lsn), "read", read["schema"], read["table"], value, key, None, columns)
        self.previous_commit = None if self.keyed else lsn

    def message(self, record: dict, ts_ms: int, txid=None, group=None, transaction=None) -> None:
        lsn = parse_lsn(record["lsn"])
        if txid is None:
            # Debezium takes a message outside a transaction for a commit of its own: its sequence is
            # [L, L] and the transaction after it names L as its previous commit. L is where the
            # message's record starts; wal2json gives where it ends, which the next commit record may
            # share, and two transactions would then name one previous commit. One below stands in.
            lsn -= 1
            self.previous_commit = lsn
        source = self._source(None, None, lsn, txid, ts_ms)
        content = base64.b64encode(record["content"].encode()).decode()
        value = {
            "source": source,
            "op": "m",
            "ts_ms": ts_ms,
            "message": {"prefix": record["prefix"], "content": content},
        }
        self._add(group or ("message", lsn), "message", None, None, value, None, transaction)

    def transaction(self, xid: int, commit_lsn: int, ts_ms: int, changes: list[dict]) -> None:
        order = 0
        for change in changes:
            lsn = parse_lsn(change["lsn"])
            # Without metadata, events of a transaction at one LSN carry no order of their own.
            group = ("transaction", commit_lsn, order if self.keyed else lsn)
            if change["action"] == "M":
                order += 1
                self.message(change, ts_ms, xid, group, self._metadata(xid, commit_lsn, order))
                continue
            table = f"{change['schema']}.{change['table']}"
            if table in self.skip:
                continue
            source = self._source(change["schema"], change["table"], lsn, xid, ts_ms)
            columns = self._columns_now(table, change)
            for action, value, key in self._row_events(change, columns, source):
                order += 1
                if self.keyed:
                    group = ("transaction", commit_lsn, order)
                metadata = self._metadata(xid, commit_lsn, order)
                value = {**value, "ts_ms": ts_ms}
                self._add(group, action, change["schema"], change["table"], value, key, metadata, columns)
        self.previous_commit = commit_lsn

    @staticmethod
    def _metadata(xid: int, commit_lsn: int, order: int) -> dict:
        return {"id": f"{xid}:{commit_lsn}", "total_order": order, "data_collection_order": order}

    def _row_events(self, change: dict, columns: dict[str, str], source: dict):
        action = change["action"]
        if action == "T":
            return [("truncate", {"before": None, "after": None, "source": source, "op": "t"}, None)]
        pk = [c["name"] for c in change.get("pk", [])]
        identity = _columns(change, "identity")
        full_identity = set(identity) == set(columns)
        before = self._row(columns, identity, fill=True) if identity else None
        if action == "D":
            key = self._key(pk, before)
            return [("delete", {"before": before, "after": None, "source": source, "op": "d"}, key)]
        after = self._row(columns, _columns(change, "columns"), fill=action == "I")
        key = self._key(pk, after)
        if action == "I":
            return [("insert", {"before": None, "after": after, "source": source, "op": "c"}, key)]
        # Debezium takes the old key from the old row: under REPLICA IDENTITY USING INDEX on other
        # columns it holds the index's columns only, so the key's values are null there, the keys
        # differ, and the update is written as a delete (before: the index's columns) and a create.
        old_key = self._key(pk, before) if before else key
        if old_key != key:
            delete = {"before": before, "after": None, "source": source, "op": "d"}
            create = {"before": None, "after": after, "source": source, "op": "c"}
            return [("delete", delete, old_key), ("insert", create, key)]
        shown = before if full_identity else None
        return [("update", {"before": shown, "after": after, "source": source, "op": "u"}, key)]

    def _row_schema(
        self, table: str, types: dict[str, str], columns: list[str] | None = None, optional: bool = True
    ) -> dict:
        fields = [connect_field(c, types[c], optional) for c in (columns or types)]
        return {"type": "struct", "optional": optional, "name": f"oracle.{table}.Value", "fields": fields}

    def _value_schema(self, event: Event) -> dict:
        """The envelope's Connect schema (abridged to what a reader needs: the row's fields)."""
        fields = [{"type": "string", "optional": False, "field": "op"}]
        if event.schema is not None and event.action != "truncate":
            row = self._row_schema(f"{event.schema}.{event.table}", event.columns)
            fields = [{**row, "field": "before"}, {**row, "field": "after"}, *fields]
        name = (
            f"oracle.{event.schema}.{event.table}.Envelope"
            if event.schema
            else "io.debezium.connector.Message"
        )
        return {"type": "struct", "optional": False, "name": name, "fields": fields}

    def line(self, event: Event) -> str:
        value = {"schema": self._value_schema(event), "payload": event.value}
        if self.keyed:
            key = None
            if event.key is not None:
                table = f"{event.schema}.{event.table}"
                key = {
                    "schema": self._row_schema(table, event.columns, list(event.key), optional=False),
                    "payload": event.key,
                }
            return json.dumps({"key": key, "value": value}, separators=(",", ":"))
        return json.dumps(value, separators=(",", ":"))


def _ts_ms(record: dict) -> int:
    stamp = record.get("timestamp")
    return int(datetime.fromisoformat(stamp).timestamp() * 1000) if stamp else 0


def render(snapshot_lines: list[str], decoded: list[str], renderer: Renderer) -> list[Event]:
    """The snapshot, then every unit (transaction, non-transactional message) ``decoded`` after the
    snapshot's point, in decode order (``oracle.expected_changes`` draws the same line)."""
    records = [json.loads(line, parse_float=Decimal) for line in snapshot_lines]
    snapshot_lsn = parse_lsn(records[0]["lsn"])
    renderer.snapshot(snapshot_lsn, _ts_ms(records[0]), records[1:-1])
    current: list[dict] | None = None
    for line in decoded:
        record = json.loads(line, parse_float=Decimal)
        if record["action"] == "B":
            current = []
        elif record["action"] == "C":
            commit_lsn = parse_lsn(record["lsn"])
            if commit_lsn > snapshot_lsn:
                renderer.transaction(record["xid"], commit_lsn, _ts_ms(record), current or [])
            current = None
        elif current is not None:
            current.append(record)
        elif record["action"] == "M" and parse_lsn(record["lsn"]) > snapshot_lsn + 1:
            renderer.message(record, 0)
    return renderer.events


def write_files(directory: Path, renderer: Renderer, events: list[Event], per_file: int) -> list[Path]:
    """The events as files of about ``per_file`` lines, named in order.

    One cut falls in the middle of the snapshot's reads, one in the middle of the first streamed
    transaction of several events; a cut inside a transaction starts the next file again at that
    transaction's first event (a connector restarted from its last committed offset)."""
    directory.mkdir(parents=True, exist_ok=True)
    reads = sum(1 for e in events if e.action == "read")
    cuts = {max(1, reads // 2), *range(reads + per_file, len(events), per_file)}
    for index in range(reads + 1, len(events)):
        if _same_tx(events[index - 1], events[index]):
            cuts.add(index)  # between the first two events of a transaction
            break
    files, start = [], 0
    for cut in [*sorted(cuts), len(events)]:
        if cut <= start:
            continue
        path = directory / f"part-{len(files):06d}.jsonl"
        path.write_text("".join(renderer.line(e) + "\n" for e in events[start:cut]))
        files.append(path)
        start = cut
        while 0 < start < len(events) and _same_tx(events[start - 1], events[cut]):
            start -= 1  # replay the interrupted transaction from its first event
    return files


def _same_tx(a: Event, b: Event) -> bool:
    return a.group[0] == b.group[0] == "transaction" and a.group[1] == b.group[1]
